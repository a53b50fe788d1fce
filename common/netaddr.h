/* HOST:PORT strings and listening sockets, for the worker's listeners (route
 * forwarding, health checks). */
#ifndef SBX_NETADDR_H
#define SBX_NETADDR_H

#include <stddef.h>
#include <sys/socket.h>

/* Splits "host:port" or "[v6]:port" into host (brackets removed, may be
 * empty) and a port 0..65535. Returns 0 or SBX_EINVAL. */
int netaddr_split(const char *hostport, char *host, size_t hostlen, long *ret_port);

/* "a.b.c.d:port" or "[v6]:port" of sa into out ("?" for other families). */
void netaddr_format(const struct sockaddr *sa, char *out, size_t outlen);

/* Resolves HOST:PORT for bind (an empty host: every address). Returns 0;
 * SBX_EINVAL when it is not HOST:PORT; SBX_EUNAVAIL when the host does not
 * resolve (err says why). */
int netaddr_resolve_bind(const char *hostport, struct sockaddr_storage *ret, socklen_t *ret_len, char *err,
                         size_t errlen);

/* A non-blocking, close-on-exec listening socket bound to addr (with
 * SO_REUSEADDR); the address really bound (port 0 picks one) goes to
 * bound. Returns the descriptor, or -1 with errno set. */
int netaddr_listen(const struct sockaddr_storage *addr, socklen_t len, int backlog, char *bound, size_t boundlen);

#endif
