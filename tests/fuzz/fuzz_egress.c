/* libFuzzer harness: what a sandbox sends the egress filter (issue 33):
 * a connection's first bytes (egress_peek: TLS ClientHello SNI, HTTP/1
 * Host), read whole and in every prefix a growing buffer gives, and a DNS
 * message read as a sandbox's query and as an upstream's answer. Checks
 * that a verdict names a canonical name and never reads past the input. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dnsmsg.h"
#include "egress_peek.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > EGRESS_PEEK_MAX + 16)
        return 0;
    /* an exact-size copy, so a read past the input is caught */
    uint8_t *p = malloc(size ? size : 1);
    if (!p)
        return 0;
    memcpy(p, data, size);
    char name[EGRESS_DOMAIN_MAX + 1], why[160];
    egress_peek_t k = egress_peek(p, size, name, why, sizeof why);
    if ((k == EGRESS_PEEK_TLS || k == EGRESS_PEEK_HTTP) && (name[0] == '\0' || strlen(name) > EGRESS_DOMAIN_MAX))
        abort();
    for (const char *c = name; *c; c++)
        if (*c >= 'A' && *c <= 'Z')
            abort();
    /* a decided verdict stays decided as more bytes come */
    if (k != EGRESS_PEEK_MORE && size > 1) {
        char name2[EGRESS_DOMAIN_MAX + 1];
        egress_peek_t k2 = egress_peek(p, size - 1, name2, why, sizeof why);
        if (k2 != EGRESS_PEEK_MORE && k2 != k && k != EGRESS_PEEK_BAD)
            abort();
    }
    /* the same bytes as a decrypted request whose head gets a header */
    static char out[EGRESS_PEEK_MAX + 2048];
    static const egress_header_t add[] = { { "Authorization", "Bearer x" } };
#define TAIL "\r\nAuthorization: Bearer x\r\n\r\n"
    size_t head = 0, olen = 0;
    egress_peek_t h = egress_http_inject(p, size, "api.example.com", add, 1, out, sizeof out, &head, &olen, why,
                                         sizeof why);
    if (h == EGRESS_PEEK_HTTP && (head == 0 || head > size || olen == 0 || olen > sizeof out ||
                                  !memmem(out, olen, TAIL, sizeof TAIL - 1)))
        abort();
    dnsmsg_query_t q;
    if (dnsmsg_query_parse(p, size, &q, why, sizeof why) == 0) {
        uint8_t out[DNSMSG_UDP_MAX];
        if (q.question_end > size || strlen(q.name) > EGRESS_DOMAIN_MAX)
            abort();
        size_t n = dnsmsg_reply(p, q.question_end, DNSMSG_RCODE_NXDOMAIN, out, sizeof out);
        if (n && dnsmsg_query_parse(out, n, &q, why, sizeof why) == 0)
            abort(); /* a reply is never a query */
    }
    dnsmsg_addr_t a[8];
    unsigned rcode;
    int na = dnsmsg_answer_addrs(p, size, a, 8, &rcode);
    if (na > 8)
        abort();
    free(p);
    return 0;
}
