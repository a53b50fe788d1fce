/* HOST:PORT strings and listening sockets, for the worker's listeners (route
 * forwarding, health checks). */
#ifndef SBX_NETADDR_H
#define SBX_NETADDR_H

#include <stdbool.h>
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

/* Longest text of a CIDR: a v6 address, "/", three digits. */
#define NETADDR_CIDR_MAX 64

/* Parses "ADDR/LEN" or a bare ADDR (/32 or /128), IPv4 or IPv6, into
 * out, canonical: the network address ("10.1.2.3/8" gives "10.0.0.0/8")
 * and the prefix. *ret_v6 says the family. Returns 0, or SBX_EINVAL with
 * why filled (what is wrong with it). */
int netaddr_cidr_parse(const char *s, char out[NETADDR_CIDR_MAX], bool *ret_v6, char *why, size_t whylen);

#endif
