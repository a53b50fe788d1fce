/* The name a sandbox's outbound TCP connection asks for, read from its
 * first bytes (issue 33, docs/network.md): the server_name of a TLS
 * ClientHello, or the Host header of an HTTP/1 request. Pure and bounded:
 * the egress filter feeds it what it has read so far, and fuzz_egress
 * feeds it anything. */
#ifndef SBX_EGRESS_PEEK_H
#define SBX_EGRESS_PEEK_H

#include <stdbool.h>
#include <stddef.h>

#include "egress.h"

/* What is read before a verdict at most: a ClientHello (even a large
 * post-quantum one, over several records) or a request's head fits. */
#define EGRESS_PEEK_MAX 16384

typedef enum {
    EGRESS_PEEK_MORE = 0, /* not decided yet: read more (up to EGRESS_PEEK_MAX) */
    EGRESS_PEEK_TLS,      /* a ClientHello naming *name (SNI host_name) */
    EGRESS_PEEK_HTTP,     /* an HTTP/1 request for *name (its Host, port left out) */
    EGRESS_PEEK_BAD,      /* neither, or one that names nothing usable: why says which */
} egress_peek_t;

/* Looks at the first n bytes a client sent. name gets a canonical DNS name
 * (lowercase, no final dot) for TLS and HTTP; why a short reason for BAD
 * ("TLS without a server name", "two Host headers", "not TLS or HTTP", …).
 * At EGRESS_PEEK_MAX bytes without a verdict it answers BAD. */
egress_peek_t egress_peek(const unsigned char *p, size_t n, char name[EGRESS_DOMAIN_MAX + 1], char *why,
                          size_t whylen);

/* A header the egress filter adds to a request (a secret bound to its
 * host, docs/network.md#secrets-at-egress). */
typedef struct egress_header {
    const char *name, *value;   /* a token; printable, no CR or LF */
} egress_header_t;

/* A header name a secret may carry: an HTTP token of 1 to 64 characters,
 * not one egress_http_inject sets or drops itself (Host, Connection,
 * Keep-Alive, Proxy-Connection, Upgrade, TE) nor the body's framing
 * (Content-Length, Transfer-Encoding). */
bool egress_header_name_ok(const char *s);

/* The first request of a decrypted HTTP/1 stream p[0..n), rewritten for
 * its way out: its Host must be host (the TLS server name, canonical);
 * every header named as one of add, and Connection, Keep-Alive,
 * Proxy-Connection, Upgrade and TE are left out; "Connection: close" and
 * add are put last. The connection then carries that one request (the
 * server closes after it, RFC 9112 9.6). Returns EGRESS_PEEK_MORE (its
 * head is not whole yet), EGRESS_PEEK_HTTP with *ret_head (the head's
 * bytes in p) and out[0..*ret_outlen) (the new head; out at least
 * EGRESS_PEEK_MAX + 1024 + the added headers' sizes), or EGRESS_PEEK_BAD
 * with why (not an HTTP/1 request, another Host, too large). */
egress_peek_t egress_http_inject(const unsigned char *p, size_t n, const char *host, const egress_header_t *add,
                                 size_t nadd, char *out, size_t outcap, size_t *ret_head, size_t *ret_outlen,
                                 char *why, size_t whylen);

#endif
