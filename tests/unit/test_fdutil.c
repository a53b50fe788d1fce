/* Unit tests for descriptors that never cross into a child (common/fdutil.c). */
#include "check_util.h"
#include <curl/curl.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fdutil.h"

extern char **environ;

static bool cloexec(int fd)
{
    int f = fcntl(fd, F_GETFD);
    ck_assert_int_ge(f, 0);
    return (f & FD_CLOEXEC) != 0;
}

START_TEST(test_fd_dup_cloexec_copies_close_on_exec)
{
    int s = socket(AF_INET, SOCK_STREAM, 0); /* not close-on-exec itself */
    ck_assert_int_ge(s, 0);
    ck_assert(!cloexec(s));
    int plain = dup(s);
    ck_assert(!cloexec(plain)); /* what a dup() does: the leak this module exists for */
    int c = fd_dup_cloexec(s);
    ck_assert_int_gt(c, 2);
    ck_assert(cloexec(c));
    close(plain);
    close(c);
    close(s);
}
END_TEST

/* A child that closed from 3 up sees none of the parent's descriptors. */
START_TEST(test_fd_close_from_leaves_stdio_only)
{
    int keep = open("/dev/null", O_RDONLY); /* inheritable */
    ck_assert_int_gt(keep, 2);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        fd_close_from(3);
        _exit(fcntl(keep, F_GETFD) < 0 && fcntl(2, F_GETFD) >= 0 ? 0 : 1);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 0);
    close(keep);
}
END_TEST

/* posix_spawn with the close action: the child's /proc/self/fd lists 0, 1,
 * 2 and the directory ls reads, nothing of ours. */
START_TEST(test_fd_spawn_close_from_leaves_stdio_only)
{
    int keep = open("/dev/null", O_RDONLY);
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    posix_spawn_file_actions_t fa;
    ck_assert_int_eq(posix_spawn_file_actions_init(&fa), 0);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    ck_assert_int_eq(fd_spawn_close_from(&fa, 3), 0);
    char *argv[] = { "/bin/ls", "/proc/self/fd", NULL };
    pid_t pid;
    ck_assert_int_eq(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    char out[256] = "";
    size_t n = 0;
    ssize_t k;
    while (n + 1 < sizeof out && (k = read(p[0], out + n, sizeof out - 1 - n)) > 0)
        n += (size_t)k;
    out[n] = '\0';
    close(p[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    int fds = 0;
    long highest = -1;
    for (char *t = out; *t;) {
        char *end = NULL;
        long fd = strtol(t, &end, 10);
        ck_assert_msg(end != t && *end == '\n', "ls printed [%s]", out);
        fds++;
        if (fd > highest)
            highest = fd;
        t = end + 1;
    }
    /* 0 1 2 and ls's own directory descriptor (3) */
    ck_assert_msg(fds == 4 && highest == 3, "the child had %d descriptors, the highest %ld", fds, highest);
    close(keep);
}
END_TEST

/* libcurl's socket to a loopback listener is close-on-exec from birth. */
static int seen_fd = -1;
static int sockopt_cb(void *ud, curl_socket_t fd, curlsocktype purpose)
{
    (void)ud;
    (void)purpose;
    seen_fd = fd;
    return CURL_SOCKOPT_OK;
}

START_TEST(test_fd_curl_cloexec_sockets)
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t al = sizeof a;
    ck_assert_int_eq(bind(l, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(l, 1), 0);
    ck_assert_int_eq(getsockname(l, (struct sockaddr *)&a, &al), 0);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", ntohs(a.sin_port));
    CURL *h = curl_easy_init();
    ck_assert_ptr_nonnull(h);
    ck_assert_int_eq(fd_curl_cloexec(h), 0);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CONNECT_ONLY, 1L);
    curl_easy_setopt(h, CURLOPT_SOCKOPTFUNCTION, sockopt_cb);
    ck_assert_int_eq(curl_easy_perform(h), CURLE_OK);
    ck_assert_int_ge(seen_fd, 0);
    ck_assert(cloexec(seen_fd));
    curl_easy_cleanup(h);
    close(l);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("fdutil");
    unit_tcase_add(s, "fdutil", UNIT_TESTS(test_fd_dup_cloexec_copies_close_on_exec, test_fd_close_from_leaves_stdio_only,
                                           test_fd_spawn_close_from_leaves_stdio_only, test_fd_curl_cloexec_sockets, ));
    return s;
}
