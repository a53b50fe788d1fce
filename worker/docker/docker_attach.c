/* The Docker backend's hijacked connection: an Engine request upgraded to a
 * raw two-way stream (POST /exec/{id}/start with Upgrade: tcp), the only
 * way the Engine takes a command's stdin. libcurl cannot hand over an
 * upgraded HTTP/1.1 connection, so this speaks HTTP on the socket itself. */
#include "docker_internal.h"
#include "timeutil.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* Connects to the Engine socket: a close-on-exec, nonblocking descriptor. */
static int docker_hijack_connect(const docker_runtime_t *rt, int *ret_fd, api_error_t *err)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    if (strlen(rt->socket_path) >= sizeof sa.sun_path)
        return api_error_set(err, API_RUNTIME_ERROR, "docker socket path too long");
    memcpy(sa.sun_path, rt->socket_path, strlen(rt->socket_path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return api_error_set(err, API_RUNTIME_ERROR, "cannot reach docker: socket: %s", strerror(errno));
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        int e = errno;
        close(fd);
        return api_error_set(err, API_RUNTIME_ERROR, "cannot reach docker at %s: %s", rt->socket_path, strerror(e));
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    *ret_fd = fd;
    return 0;
}

/* Waits for events on fd until deadline_ms: 0 when they came, else an
 * API_RUNTIME_ERROR (timeout, or the worker is shutting down). */
static int docker_hijack_wait(const docker_runtime_t *rt, int fd, short events, int64_t deadline_ms,
                              api_error_t *err)
{
    for (;;) {
        if (docker_cancelled(rt))
            return api_error_set(err, API_CANCELLED, "the worker is shutting down");
        int left = time_left_ms(deadline_ms);
        if (left == 0)
            return api_error_set(err, API_RUNTIME_ERROR, "docker did not answer the exec start in time");
        struct pollfd p = { .fd = fd, .events = events };
        int n = poll(&p, 1, left < 200 ? left : 200);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return api_error_set(err, API_RUNTIME_ERROR, "poll on the docker socket: %s", strerror(errno));
    }
}

/* Writes all n bytes at p to fd before deadline_ms. */
static int docker_hijack_send_all(const docker_runtime_t *rt, int fd, const char *p, size_t n, int64_t deadline_ms,
                                  api_error_t *err)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return api_error_set(err, API_RUNTIME_ERROR, "writing to docker: %s", strerror(errno));
        int r = docker_hijack_wait(rt, fd, POLLOUT, deadline_ms, err);
        if (r < 0)
            return r;
    }
    return 0;
}

/* The status code of a response head "HTTP/1.x NNN ...", or 0. */
static long docker_hijack_status(const char *head)
{
    if (strncmp(head, "HTTP/1.", 7) != 0 || !head[7] || head[8] != ' ')
        return 0;
    char *end = NULL;
    long s = strtol(head + 9, &end, 10);
    return end == head + 12 && s >= 100 && s <= 599 ? s : 0;
}

/* The Content-Length of a response head, or -1 when it has none. */
static long docker_hijack_content_length(const char *head)
{
    for (const char *l = strstr(head, "\r\n"); l; l = strstr(l + 2, "\r\n")) {
        static const char name[] = "content-length:";
        if (strncasecmp(l + 2, name, sizeof name - 1) == 0) {
            char *end = NULL;
            long v = strtol(l + 2 + sizeof name - 1, &end, 10);
            return end && v >= 0 ? v : -1;
        }
    }
    return -1;
}

int docker_hijack_open(const docker_runtime_t *rt, const char *path, const char *body, size_t body_len,
                       long timeout_ms, docker_hijack_t *ret, api_error_t *err)
{
    int r = 0, fd = -1;
    char req[512];
    memset(ret, 0, sizeof *ret);
    ret->fd = -1;
    sbuf_init(&ret->early, SBX_MAX_DOCKER_REPLY_BYTES);
    int64_t deadline = time_deadline_ms(timeout_ms);
    int n = snprintf(req, sizeof req,
                     "POST /v1.41%s HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n",
                     path, body_len);
    if (n < 0 || (size_t)n >= sizeof req)
        return api_error_set(err, API_INTERNAL, "docker request path too long");
    if ((r = docker_hijack_connect(rt, &fd, err)) < 0)
        goto cleanup;
    if ((r = docker_hijack_send_all(rt, fd, req, (size_t)n, deadline, err)) < 0 ||
        (r = docker_hijack_send_all(rt, fd, body, body_len, deadline, err)) < 0)
        goto cleanup;
    /* The head, then (101) the first stream bytes or (any other) the body. */
    size_t head_len = 0;
    long want_body = -1;
    for (;;) {
        char buf[4096];
        ssize_t got = recv(fd, buf, sizeof buf, 0);
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            if (head_len && ret->status == 101)
                break;
            if ((r = docker_hijack_wait(rt, fd, POLLIN, deadline, err)) < 0)
                goto cleanup;
            continue;
        }
        if (got < 0) {
            r = api_error_set(err, API_RUNTIME_ERROR, "reading from docker: %s", strerror(errno));
            goto cleanup;
        }
        if (got == 0) {
            if (!head_len) {
                r = api_error_set(err, API_RUNTIME_ERROR, "docker closed the exec start without an answer");
                goto cleanup;
            }
            break;
        }
        if (sbuf_append_bounded(&ret->early, buf, (size_t)got) < 0) {
            r = api_error_set(err, API_INTERNAL, "out of memory");
            goto cleanup;
        }
        if (!head_len) {
            const char *s = sbuf_cstr(&ret->early);
            const char *e = memmem(s, ret->early.len, "\r\n\r\n", 4);
            if (!e) {
                if (ret->early.truncated) {
                    r = api_error_set(err, API_RUNTIME_ERROR, "docker's answer to the exec start has no end of head");
                    goto cleanup;
                }
                continue;
            }
            head_len = (size_t)(e - s) + 4;
            ret->status = docker_hijack_status(s);
            want_body = docker_hijack_content_length(s);
            if (ret->status == 0) {
                r = api_error_set(err, API_RUNTIME_ERROR, "docker's answer to the exec start is not HTTP");
                goto cleanup;
            }
            /* Drop the head: early keeps only what follows it. */
            memmove(ret->early.data, ret->early.data + head_len, ret->early.len - head_len);
            ret->early.len -= head_len;
            ret->early.data[ret->early.len] = '\0';
            if (ret->status == 101)
                break;
        }
        if (ret->status != 101 && want_body >= 0 && ret->early.len >= (size_t)want_body)
            break;
        if (ret->early.truncated)
            break;
    }
    ret->fd = fd;
    fd = -1;
cleanup:
    if (fd >= 0)
        close(fd);
    if (r < 0)
        docker_hijack_close(ret);
    return r;
}

void docker_hijack_close(docker_hijack_t *h)
{
    if (!h)
        return;
    if (h->fd >= 0)
        close(h->fd);
    h->fd = -1;
    sbuf_release(&h->early);
}
