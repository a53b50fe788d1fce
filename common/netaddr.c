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

int netaddr_cidr_parse(const char *s, char out[NETADDR_CIDR_MAX], bool *ret_v6, char *why, size_t whylen)
{
    char addr[INET6_ADDRSTRLEN + 1];
    unsigned char bytes[16];
    out[0] = '\0';
    size_t len = s ? strlen(s) : 0;
    const char *slash = s ? strchr(s, '/') : NULL;
    size_t alen = slash ? (size_t)(slash - s) : len;
    if (!s || len == 0 || alen == 0 || alen >= sizeof addr) {
        snprintf(why, whylen, "is not an address or ADDRESS/PREFIX");
        return SBX_EINVAL;
    }
    memcpy(addr, s, alen);
    addr[alen] = '\0';
    bool v6 = strchr(addr, ':') != NULL;
    if (inet_pton(v6 ? AF_INET6 : AF_INET, addr, bytes) != 1) {
        snprintf(why, whylen, "%s is not an IPv4 or IPv6 address", addr);
        return SBX_EINVAL;
    }
    long max = v6 ? 128 : 32, prefix = max;
    if (slash) {
        const char *p = slash + 1;
        char *end = NULL;
        errno = 0;
        prefix = (*p >= '0' && *p <= '9' && strlen(p) <= 3) ? strtol(p, &end, 10) : -1;
        if (prefix < 0 || errno || !end || *end || prefix > max) {
            snprintf(why, whylen, "the prefix length must be a number from 0 to %ld", max);
            return SBX_EINVAL;
        }
    }
    /* the network address: host bits cleared */
    size_t nbytes = v6 ? 16 : 4;
    for (size_t i = 0; i < nbytes; i++) {
        long bit0 = (long)i * 8;
        if (bit0 >= prefix)
            bytes[i] = 0;
        else if (bit0 + 8 > prefix)
            bytes[i] &= (unsigned char)(0xffu << (8 - (prefix - bit0)));
    }
    char net[INET6_ADDRSTRLEN];
    if (!inet_ntop(v6 ? AF_INET6 : AF_INET, bytes, net, sizeof net)) {
        snprintf(why, whylen, "cannot format %s", addr);
        return SBX_EINVAL;
    }
    snprintf(out, NETADDR_CIDR_MAX, "%s/%ld", net, prefix);
    *ret_v6 = v6;
    return 0;
}
