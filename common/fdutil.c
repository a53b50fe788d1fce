/* Descriptors that never cross into a child by accident (see fdutil.h). */
#include "fdutil.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

int fd_dup_cloexec(int fd) { return fcntl(fd, F_DUPFD_CLOEXEC, 0); }

void fd_close_from(int lowfd)
{
    if (close_range((unsigned)lowfd, ~0U, 0) == 0)
        return;
    struct rlimit rl;
    long max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (long)rl.rlim_cur : 65536;
    for (long fd = lowfd; fd < max; fd++)
        close((int)fd);
}

int fd_spawn_close_from(posix_spawn_file_actions_t *fa, int lowfd)
{
    return posix_spawn_file_actions_addclosefrom_np(fa, lowfd);
}

static curl_socket_t fd_curl_open(void *ud, curlsocktype purpose, struct curl_sockaddr *a)
{
    (void)ud;
    (void)purpose;
    int fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
    return fd < 0 ? CURL_SOCKET_BAD : fd;
}

void fd_close_reset(int fd)
{
    struct linger l = { .l_onoff = 1, .l_linger = 0 };
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close(fd);
}

int fd_curl_cloexec(CURL *h)
{
    return (int)curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, fd_curl_open);
}
