/* HOST:PORT parsing and formatting, bind resolution, listening sockets. */
#include "netaddr.h"
#include "errors.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int netaddr_split(const char *hostport, char *host, size_t hostlen, long *ret_port)
{
    const char *colon = hostport ? strrchr(hostport, ':') : NULL;
    if (!colon || colon[1] < '0' || colon[1] > '9')
        return SBX_EINVAL;
    char *end = NULL;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (errno || *end || port < 0 || port > 65535)
        return SBX_EINVAL;
    const char *h = hostport;
    size_t hl = (size_t)(colon - hostport);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    } else if (memchr(h, ':', hl)) {
        return SBX_EINVAL; /* a v6 address needs its brackets */
    }
    if (hl >= hostlen)
        return SBX_EINVAL;
    memcpy(host, h, hl);
    host[hl] = '\0';
    *ret_port = port;
    return 0;
}

void netaddr_format(const struct sockaddr *sa, char *out, size_t outlen)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
        snprintf(out, outlen, "%s:%d", ip, ntohs(in->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof ip);
        snprintf(out, outlen, "[%s]:%d", ip, ntohs(in6->sin6_port));
    } else {
        snprintf(out, outlen, "?");
    }
}

int netaddr_resolve_bind(const char *hostport, struct sockaddr_storage *ret, socklen_t *ret_len, char *err,
                         size_t errlen)
{
    char host[256];
    long port = 0;
    if (netaddr_split(hostport, host, sizeof host, &port) < 0) {
        snprintf(err, errlen, "not HOST:PORT or [V6]:PORT");
        return SBX_EINVAL;
    }
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
    struct addrinfo *ai = NULL;
    char portstr[8];
    snprintf(portstr, sizeof portstr, "%ld", port);
    int gr = getaddrinfo(*host ? host : NULL, portstr, &hints, &ai);
    if (gr != 0 || !ai || ai->ai_addrlen > sizeof *ret) {
        snprintf(err, errlen, "cannot resolve %.100s: %s", hostport, gr ? gai_strerror(gr) : "no address");
        if (ai)
            freeaddrinfo(ai);
        return SBX_EUNAVAIL;
    }
    memset(ret, 0, sizeof *ret);
    memcpy(ret, ai->ai_addr, ai->ai_addrlen);
    *ret_len = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

int netaddr_listen(const struct sockaddr_storage *addr, socklen_t len, int backlog, char *bound, size_t boundlen)
{
    int one = 1;
    int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (bind(fd, (const struct sockaddr *)addr, len) < 0 || listen(fd, backlog) < 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    netaddr_format((struct sockaddr *)&ss, bound, boundlen);
    return fd;
}
