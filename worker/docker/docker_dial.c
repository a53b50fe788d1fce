/* The Docker backend's dial: a connection to a port of a sandbox, made in
 * the network namespace of its container (the route forwarder's upstream). */
#include "docker_internal.h"
#include "jsonx.h"
#include "log.h"
#include "timeutil.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define DOCKER_DIAL_COMPONENT "worker"

/* The network namespace of sandbox_id's container, as an open descriptor
 * (close-on-exec) in *ret_netns_fd: the container must be this worker's
 * and running, else API_NOT_FOUND; a gVisor sandbox is
 * API_ISOLATION_UNAVAILABLE (its network stack is inside the sandbox, not a
 * namespace of the host); a namespace the worker cannot open (not root) is
 * API_UNAVAILABLE; a failing runtime API_RUNTIME_ERROR. */
static int docker_route_netns(docker_runtime_t *rt, const char *sandbox_id, const char *worker_name,
                              int *ret_netns_fd, api_error_t *err)
{
    int r = 0, fd = -1;
    json_object *o = NULL;
    const char *id = NULL;
    r = docker_sandbox_inspect(rt, sandbox_id, worker_name, "does not run on this worker", &o, &id, err);
    if (r < 0)
        goto cleanup;
    json_object *state = jsonx_get_obj(o, "State");
    bool running = false, paused = false, restarting = false;
    int64_t pid = 0;
    jsonx_get_bool(state, "Running", &running);
    jsonx_get_bool(state, "Paused", &paused);
    jsonx_get_bool(state, "Restarting", &restarting);
    jsonx_get_int(state, "Pid", &pid);
    if (!running || paused || restarting || pid <= 1) {
        r = api_error_set(err, API_NOT_FOUND, "sandbox %s is not running", sandbox_id);
        goto cleanup;
    }
    const char *runtime = jsonx_get_str(jsonx_get_obj(o, "HostConfig"), "Runtime");
    if (rt->gvisor_runtime[0] && runtime && strcmp(runtime, rt->gvisor_runtime) == 0) {
        r = api_error_set(err, API_ISOLATION_UNAVAILABLE, "routes into gVisor sandboxes are not supported: their "
                          "network stack is inside the sandbox");
        goto cleanup;
    }
    char ns[64];
    snprintf(ns, sizeof ns, "/proc/%lld/ns/net", (long long)pid);
    fd = open(ns, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT || e == ESRCH)
            r = api_error_set(err, API_NOT_FOUND, "sandbox %s is not running", sandbox_id);
        else
            r = api_error_set(err, API_UNAVAILABLE, "cannot enter the sandbox's network namespace: %s", strerror(e));
        goto cleanup;
    }
    /* The pid is still the container's now that the namespace is held (it
     * could have exited and the number been reused since the inspect). */
    if (!docker_pid_in_container((pid_t)pid, id)) {
        r = api_error_set(err, API_NOT_FOUND, "sandbox %s is not running", sandbox_id);
        goto cleanup;
    }
    /* Never the worker's own namespace: its loopback is the host's. */
    struct stat a, b;
    if (fstat(fd, &a) < 0 || stat("/proc/thread-self/ns/net", &b) < 0 ||
        (a.st_dev == b.st_dev && a.st_ino == b.st_ino)) {
        r = api_error_set(err, API_UNAVAILABLE, "sandbox %s has no network namespace of its own", sandbox_id);
        goto cleanup;
    }
    *ret_netns_fd = fd;
    fd = -1;
cleanup:
    if (fd >= 0)
        close(fd);
    if (o)
        json_object_put(o);
    return r;
}

/* A nonblocking TCP socket made inside the network namespace netns_fd: the
 * thread enters the namespace for the socket() call only (a socket stays in
 * the namespace it was made in, whatever thread uses it later). SBX_EIO
 * with errno set when it cannot. */
static int docker_socket_in(int netns_fd, int *ret_fd)
{
    int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (self < 0)
        return SBX_EIO;
    if (setns(netns_fd, CLONE_NEWNET) < 0) {
        int e = errno;
        close(self);
        errno = e;
        return SBX_EIO;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int e = errno;
    if (setns(self, CLONE_NEWNET) < 0) {
        /* Going on would run this thread, and whatever it does next, in
         * the sandbox's network namespace. */
        log_error(DOCKER_DIAL_COMPONENT, "cannot return to the worker's network namespace: %s", strerror(errno));
        abort();
    }
    close(self);
    if (fd < 0) {
        errno = e;
        return SBX_EIO;
    }
    *ret_fd = fd;
    return 0;
}

/* Waits up to timeout_ms for fd to become writable (a connect ending).
 * Returns > 0 then, 0 on timeout, -1 once req->stop_fd is readable. */
static int docker_dial_wait(const runtime_dial_req_t *req, int fd, int64_t timeout_ms)
{
    int64_t deadline = time_deadline_ms(timeout_ms);
    for (;;) {
        struct pollfd p[2] = { { .fd = fd, .events = POLLOUT }, { .fd = req->stop_fd, .events = POLLIN } };
        int n = poll(p, 2, time_left_ms(deadline));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || p[1].revents)
            return -1;
        return n == 0 ? 0 : 1;
    }
}

/* Connects a socket made in netns_fd to 127.0.0.1:req->port there. */
static int docker_dial_in(const runtime_dial_req_t *req, int netns_fd, int *ret_fd, api_error_t *err)
{
    int fd = -1, e = 0;
    if (docker_socket_in(netns_fd, &fd) < 0)
        return api_error_set(err, API_UNAVAILABLE, "cannot enter the sandbox's network namespace: %s",
                             strerror(errno));
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)req->port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        e = errno;
        if (e == EINPROGRESS) {
            int w = docker_dial_wait(req, fd, req->timeout_ms);
            socklen_t el = sizeof e;
            if (w < 0) {
                close(fd);
                return api_error_set(err, API_CANCELLED, "the worker is shutting down");
            }
            if (w == 0)
                e = ETIMEDOUT;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0)
                e = errno;
        }
    }
    if (e) {
        close(fd);
        if (e == ECONNREFUSED || e == ETIMEDOUT)
            return api_error_set(err, API_UNAVAILABLE, "nothing accepts connections on port %d in the sandbox",
                                 req->port);
        return api_error_set(err, API_UNAVAILABLE, "cannot connect to port %d in the sandbox: %s", req->port,
                             strerror(e));
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    *ret_fd = fd;
    return 0;
}

int docker_rt_dial(runtime_t *base, const runtime_dial_req_t *req, int *ret_fd, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    int netns = -1;
    int r = docker_route_netns(rt, req->sandbox_id, req->worker_name, &netns, err);
    if (r < 0)
        return r;
    r = docker_dial_in(req, netns, ret_fd, err);
    close(netns);
    return r;
}
