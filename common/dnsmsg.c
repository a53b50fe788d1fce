/* DNS messages for the egress filter's resolver (dnsmsg.h). */
#include "dnsmsg.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define HDR 12

static int fail(char *why, size_t whylen, const char *fmt, ...)
{
    if (why && whylen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static unsigned u16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }
static uint32_t u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static bool host_char(uint8_t c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

int dnsmsg_query_parse(const uint8_t *p, size_t n, dnsmsg_query_t *q, char *why, size_t whylen)
{
    memset(q, 0, sizeof *q);
    if (n < HDR)
        return fail(why, whylen, "shorter than a DNS header");
    q->id = (uint16_t)u16(p);
    unsigned flags = u16(p + 2);
    if (flags & 0x8000)
        return fail(why, whylen, "a response, not a query");
    if ((flags >> 11 & 0xf) != 0)
        return fail(why, whylen, "opcode %u, not a standard query", flags >> 11 & 0xf);
    if (u16(p + 4) != 1)
        return fail(why, whylen, "%u questions, not one", u16(p + 4));
    if (u16(p + 6) != 0 || u16(p + 8) != 0 || u16(p + 10) > 1)
        return fail(why, whylen, "records beside the question");
    size_t at = HDR, len = 0;
    for (;;) {
        if (at >= n)
            return fail(why, whylen, "a truncated name");
        unsigned l = p[at++];
        if (l == 0)
            break;
        if (l > 63)
            return fail(why, whylen, "a compressed or over-long label");
        if (at + l > n)
            return fail(why, whylen, "a truncated name");
        if (len + l + 1 > EGRESS_DOMAIN_MAX + 1)
            return fail(why, whylen, "a name over %d characters", EGRESS_DOMAIN_MAX);
        if (len)
            q->name[len++] = '.';
        for (unsigned i = 0; i < l; i++) {
            uint8_t c = p[at + i];
            if (!host_char(c))
                return fail(why, whylen, "a name with byte 0x%02x", c);
            q->name[len++] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
        }
        at += l;
    }
    q->name[len] = '\0';
    if (at + 4 > n)
        return fail(why, whylen, "a truncated question");
    q->qtype = (uint16_t)u16(p + at);
    q->qclass = (uint16_t)u16(p + at + 2);
    q->question_end = at + 4;
    return 0;
}

size_t dnsmsg_reply(const uint8_t *query, size_t question_end, unsigned rcode, uint8_t *out, size_t cap)
{
    if (question_end < HDR || question_end > cap)
        return 0;
    memcpy(out, query, question_end);
    unsigned rd = query[2] & 0x01;
    out[2] = (uint8_t)(0x80 | rd);      /* QR, opcode 0, RD copied */
    out[3] = (uint8_t)(0x80 | (rcode & 0xf)); /* RA, rcode */
    out[4] = 0, out[5] = 1;             /* one question */
    memset(out + 6, 0, 6);              /* no records */
    return question_end;
}

/* Skips a (possibly compressed) name at *at. */
static bool skip_name(const uint8_t *p, size_t n, size_t *at)
{
    size_t i = *at;
    for (int labels = 0; labels < 128; labels++) {
        if (i >= n)
            return false;
        unsigned l = p[i];
        if (l == 0) {
            *at = i + 1;
            return true;
        }
        if ((l & 0xc0) == 0xc0) {
            if (i + 2 > n)
                return false;
            *at = i + 2;
            return true;
        }
        if (l > 63 || i + 1 + l > n)
            return false;
        i += 1 + l;
    }
    return false;
}

int dnsmsg_answer_addrs(const uint8_t *p, size_t n, dnsmsg_addr_t *out, int max, unsigned *ret_rcode)
{
    if (n < HDR || !(p[2] & 0x80))
        return -1;
    if (ret_rcode)
        *ret_rcode = p[3] & 0xf;
    unsigned qd = u16(p + 4), an = u16(p + 6);
    size_t at = HDR;
    for (unsigned i = 0; i < qd; i++) {
        if (!skip_name(p, n, &at) || at + 4 > n)
            return -1;
        at += 4;
    }
    int k = 0;
    for (unsigned i = 0; i < an; i++) {
        if (!skip_name(p, n, &at) || at + 10 > n)
            return -1;
        unsigned type = u16(p + at), cls = u16(p + at + 2);
        uint32_t ttl = u32(p + at + 4);
        size_t rdl = u16(p + at + 8);
        at += 10;
        if (at + rdl > n)
            return -1;
        if (cls == 1 && k < max &&
            ((type == DNSMSG_TYPE_A && rdl == 4) || (type == DNSMSG_TYPE_AAAA && rdl == 16))) {
            out[k].family = type == DNSMSG_TYPE_A ? AF_INET : AF_INET6;
            memset(out[k].addr, 0, sizeof out[k].addr);
            memcpy(out[k].addr, p + at, rdl);
            out[k].ttl = ttl;
            k++;
        }
        at += rdl;
    }
    return k;
}

size_t dnsmsg_query_build(uint16_t id, const char *name, uint16_t qtype, uint8_t *out, size_t cap)
{
    size_t nl = strlen(name);
    if (nl > EGRESS_DOMAIN_MAX || HDR + nl + 2 + 4 > cap)
        return 0;
    memset(out, 0, HDR);
    out[0] = (uint8_t)(id >> 8), out[1] = (uint8_t)id;
    out[2] = 0x01; /* RD */
    out[5] = 1;
    size_t at = HDR;
    const char *s = name;
    while (*s) {
        const char *dot = strchr(s, '.');
        size_t l = dot ? (size_t)(dot - s) : strlen(s);
        if (l == 0 || l > 63)
            return 0;
        out[at++] = (uint8_t)l;
        memcpy(out + at, s, l);
        at += l;
        s += l + (dot ? 1 : 0);
    }
    out[at++] = 0;
    out[at++] = (uint8_t)(qtype >> 8), out[at++] = (uint8_t)qtype;
    out[at++] = 0, out[at++] = 1;
    return at;
}
