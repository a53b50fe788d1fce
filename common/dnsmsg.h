/* DNS messages as the egress filter's resolver needs them (RFC 1035; issue
 * 33, docs/network.md): a sandbox's query read strictly, a refusal or
 * NXDOMAIN made from it, and the addresses of an upstream's answer. Pure
 * and bounded; fuzz_egress feeds it anything. */
#ifndef SBX_DNSMSG_H
#define SBX_DNSMSG_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

#include "egress.h"

#define DNSMSG_UDP_MAX  1232 /* what we read or answer over UDP (the EDNS default of DNS Flag Day 2020) */
#define DNSMSG_TYPE_A    1
#define DNSMSG_TYPE_AAAA 28
#define DNSMSG_RCODE_SERVFAIL 2
#define DNSMSG_RCODE_NXDOMAIN 3
#define DNSMSG_RCODE_REFUSED  5

typedef struct dnsmsg_query {
    uint16_t id;
    uint16_t qtype, qclass;
    char name[EGRESS_DOMAIN_MAX + 1]; /* lowercase, no final dot; "" for the root */
    size_t question_end;              /* bytes of header and question */
} dnsmsg_query_t;

/* A standard query with one question (an OPT record may follow): 0, or -1
 * with why (a response, another opcode, several questions, a compressed
 * or malformed name, a name with bytes a host name never has). */
int dnsmsg_query_parse(const uint8_t *p, size_t n, dnsmsg_query_t *q, char *why, size_t whylen);

/* The answer to query (its first question_end bytes) with rcode and no
 * records, into out (cap bytes): its length, or 0 when it does not fit. */
size_t dnsmsg_reply(const uint8_t *query, size_t question_end, unsigned rcode, uint8_t *out, size_t cap);

/* One address of an answer. */
typedef struct dnsmsg_addr {
    int family;                       /* AF_INET or AF_INET6 */
    uint8_t addr[16];
    uint32_t ttl;
} dnsmsg_addr_t;

/* The A and AAAA records of a response's answer section (whatever their
 * owner: a CNAME chain's last name has them), at most max: how many, or
 * -1 when it is not a well-formed response. *ret_rcode gets its rcode. */
int dnsmsg_answer_addrs(const uint8_t *p, size_t n, dnsmsg_addr_t *out, int max, unsigned *ret_rcode);

/* A query for name of qtype with id into out: its length, or 0. */
size_t dnsmsg_query_build(uint16_t id, const char *name, uint16_t qtype, uint8_t *out, size_t cap);

#endif
