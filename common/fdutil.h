/* Descriptors that never cross into a child by accident: close-on-exec
 * copies, the close of everything above stdio in a child before it execs,
 * and libcurl's sockets made close-on-exec at birth (docs/security.md
 * "Descriptors"). */
#ifndef SBX_FDUTIL_H
#define SBX_FDUTIL_H

#include <curl/curl.h>
#include <spawn.h>

/* dup() that is close-on-exec from birth (F_DUPFD_CLOEXEC): the copy,
 * or -1 with errno. */
int fd_dup_cloexec(int fd);

/* In a child after fork(), before exec: closes every descriptor from
 * lowfd up (close_range; a loop to the open files limit where the kernel
 * has no close_range). Async-signal-safe. */
void fd_close_from(int lowfd);

/* posix_spawn's file actions: every descriptor from lowfd up closed in the
 * child after the actions before it ran. 0, or an errno value. */
int fd_spawn_close_from(posix_spawn_file_actions_t *fa, int lowfd);

/* Closes socket fd with a reset (SO_LINGER 0), so the peer sees an error,
 * not the end of a stream it might take as whole. */
void fd_close_reset(int fd);

/* Makes every socket of libcurl handle h close-on-exec at birth
 * (CURLOPT_OPENSOCKETFUNCTION with SOCK_CLOEXEC). 0, or a CURLcode. */
int fd_curl_cloexec(CURL *h);

#endif
