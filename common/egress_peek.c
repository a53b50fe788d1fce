/* The name in a connection's first bytes: TLS ClientHello SNI or HTTP/1
 * Host (egress_peek.h). */
#include "egress_peek.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static egress_peek_t bad(char *why, size_t whylen, const char *fmt, ...)
{
    if (why && whylen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
    }
    return EGRESS_PEEK_BAD;
}

/* A host name as a client sent it (len bytes) into name, canonical; an
 * address, a wildcard or a malformed name is BAD. */
static egress_peek_t take_name(const char *s, size_t len, char name[EGRESS_DOMAIN_MAX + 1], egress_peek_t kind,
                               char *why, size_t whylen)
{
    char raw[EGRESS_DOMAIN_MAX + 2], w[160];
    if (len == 0)
        return bad(why, whylen, "an empty name");
    if (len > EGRESS_DOMAIN_MAX + 1)
        return bad(why, whylen, "a name longer than %d bytes", EGRESS_DOMAIN_MAX);
    memcpy(raw, s, len);
    raw[len] = '\0';
    if (memchr(s, '*', len) || memchr(s, '\0', len))
        return bad(why, whylen, "a name that is not a host name");
    if (egress_domain_canon(raw, name, w, sizeof w) < 0)
        return bad(why, whylen, "%s", w);
    return kind;
}

/* ---- TLS ---- */

#define TLS_HANDSHAKE       22
#define TLS_CLIENT_HELLO    1
#define TLS_EXT_SERVER_NAME 0

/* A reader over a byte range that never reads past it. */
typedef struct rd {
    const unsigned char *p;
    size_t n, at;
    bool short_;
} rd_t;

static unsigned get(rd_t *r, size_t width)
{
    unsigned v = 0;
    if (r->at + width > r->n) {
        r->short_ = true;
        r->at = r->n;
        return 0;
    }
    for (size_t i = 0; i < width; i++)
        v = v << 8 | r->p[r->at + i];
    r->at += width;
    return v;
}

static void skip(rd_t *r, size_t k)
{
    if (r->at + k > r->n) {
        r->short_ = true;
        r->at = r->n;
        return;
    }
    r->at += k;
}

static egress_peek_t peek_tls(const unsigned char *p, size_t n, char name[EGRESS_DOMAIN_MAX + 1], char *why,
                              size_t whylen)
{
    /* the handshake message, gathered from the records that carry it */
    unsigned char hs[EGRESS_PEEK_MAX];
    size_t hn = 0, at = 0, need = 0;
    bool have_len = false;
    while (!have_len || hn < need) {
        if (n - at < 5)
            return EGRESS_PEEK_MORE;
        if (p[at] != TLS_HANDSHAKE)
            return bad(why, whylen, "TLS: a record of type %u before the ClientHello ended", p[at]);
        if (p[at + 1] != 3)
            return bad(why, whylen, "TLS: record version %u.%u", p[at + 1], p[at + 2]);
        size_t rl = (size_t)p[at + 3] << 8 | p[at + 4];
        if (rl == 0 || rl > EGRESS_PEEK_MAX)
            return bad(why, whylen, "TLS: a record of %zu bytes", rl);
        if (n - at - 5 < rl)
            return EGRESS_PEEK_MORE;
        if (hn + rl > sizeof hs)
            return bad(why, whylen, "TLS: a ClientHello over %d bytes", EGRESS_PEEK_MAX);
        memcpy(hs + hn, p + at + 5, rl);
        hn += rl;
        at += 5 + rl;
        if (!have_len && hn >= 4) {
            if (hs[0] != TLS_CLIENT_HELLO)
                return bad(why, whylen, "TLS: handshake type %u, not a ClientHello", hs[0]);
            need = 4 + ((size_t)hs[1] << 16 | (size_t)hs[2] << 8 | hs[3]);
            if (need > sizeof hs)
                return bad(why, whylen, "TLS: a ClientHello over %d bytes", EGRESS_PEEK_MAX);
            have_len = true;
        }
    }
    rd_t r = { hs + 4, need - 4, 0, false };
    skip(&r, 2 + 32);            /* client_version, random */
    skip(&r, get(&r, 1));        /* session_id */
    skip(&r, get(&r, 2));        /* cipher_suites */
    skip(&r, get(&r, 1));        /* compression_methods */
    if (r.short_)
        return bad(why, whylen, "TLS: a truncated ClientHello");
    if (r.at == r.n)
        return bad(why, whylen, "TLS without a server name (no extensions)");
    size_t ext_len = get(&r, 2);
    if (r.short_ || ext_len > r.n - r.at)
        return bad(why, whylen, "TLS: extensions past the ClientHello");
    rd_t e = { r.p + r.at, ext_len, 0, false };
    bool seen = false;
    while (e.at < e.n) {
        unsigned type = get(&e, 2);
        size_t len = get(&e, 2);
        if (e.short_ || len > e.n - e.at)
            return bad(why, whylen, "TLS: an extension past the extensions");
        if (type != TLS_EXT_SERVER_NAME) {
            skip(&e, len);
            continue;
        }
        if (seen)
            return bad(why, whylen, "TLS: two server_name extensions");
        seen = true;
        rd_t s = { e.p + e.at, len, 0, false };
        size_t list = get(&s, 2);
        if (s.short_ || list != s.n - s.at)
            return bad(why, whylen, "TLS: a malformed server_name extension");
        const unsigned char *host = NULL;
        size_t host_len = 0;
        while (s.at < s.n) {
            unsigned nt = get(&s, 1);
            size_t nl = get(&s, 2);
            if (s.short_ || nl > s.n - s.at)
                return bad(why, whylen, "TLS: a malformed server_name extension");
            if (nt == 0) {
                if (host)
                    return bad(why, whylen, "TLS: two host names in server_name");
                host = s.p + s.at;
                host_len = nl;
            }
            skip(&s, nl);
        }
        if (!host)
            return bad(why, whylen, "TLS without a server name (no host_name)");
        egress_peek_t k = take_name((const char *)host, host_len, name, EGRESS_PEEK_TLS, why, whylen);
        if (k != EGRESS_PEEK_TLS)
            return k;
        skip(&e, len);
    }
    return seen ? EGRESS_PEEK_TLS : bad(why, whylen, "TLS without a server name");
}

/* ---- HTTP/1 ---- */

static bool is_token_char(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || strchr("!#$%&'*+-.^_`|~", c);
}

/* The host of an authority "host[:port]" (no userinfo, IPv6 literals are
 * addresses, not names). */
static egress_peek_t authority_host(const char *a, size_t len, char name[EGRESS_DOMAIN_MAX + 1], char *why,
                                    size_t whylen)
{
    if (len > 0 && a[0] == '[')
        return bad(why, whylen, "an address, not a name");
    if (memchr(a, '@', len))
        return bad(why, whylen, "a Host with user information");
    const char *colon = memchr(a, ':', len);
    size_t hl = colon ? (size_t)(colon - a) : len;
    if (colon) {
        size_t pl = len - hl - 1;
        if (pl == 0 || pl > 5)
            return bad(why, whylen, "a Host with a bad port");
        for (size_t i = hl + 1; i < len; i++)
            if (a[i] < '0' || a[i] > '9')
                return bad(why, whylen, "a Host with a bad port");
    }
    return take_name(a, hl, name, EGRESS_PEEK_HTTP, why, whylen);
}

static egress_peek_t peek_http(const unsigned char *p, size_t n, char name[EGRESS_DOMAIN_MAX + 1], char *why,
                               size_t whylen)
{
    const char *s = (const char *)p;
    /* request line: METHOD SP target SP HTTP/1.x CRLF */
    size_t i = 0;
    while (i < n && is_token_char(p[i]))
        i++;
    if (i == n)
        return i > 32 ? bad(why, whylen, "not TLS or HTTP") : EGRESS_PEEK_MORE;
    if (i == 0 || p[i] != ' ')
        return bad(why, whylen, "not TLS or HTTP");
    if (i == 7 && memcmp(s, "CONNECT", 7) == 0)
        return bad(why, whylen, "HTTP CONNECT (connect to the host itself, not through a proxy)");
    size_t t0 = ++i;
    while (i < n && p[i] != ' ' && p[i] != '\r' && p[i] != '\n')
        i++;
    if (i == n)
        return EGRESS_PEEK_MORE;
    size_t t1 = i;
    if (p[i] != ' ')
        return bad(why, whylen, "not an HTTP/1 request line");
    const char *eol = memchr(s + i, '\n', n - i);
    if (!eol)
        return EGRESS_PEEK_MORE;
    size_t vl = (size_t)(eol - (s + i + 1));
    if (vl > 0 && s[i + vl] == '\r')
        vl--;
    if (vl != 8 || memcmp(s + i + 1, "HTTP/1.", 7) != 0)
        return bad(why, whylen, "not an HTTP/1 request line");
    /* an absolute-form target names its host too: it must be the Host */
    char target_host[EGRESS_DOMAIN_MAX + 1] = "";
    bool absolute = false;
    if (t1 - t0 > 7 && strncasecmp(s + t0, "http://", 7) == 0) {
        const char *h = s + t0 + 7, *end = s + t1;
        const char *slash = memchr(h, '/', (size_t)(end - h));
        if (slash)
            end = slash;
        if (authority_host(h, (size_t)(end - h), target_host, why, whylen) != EGRESS_PEEK_HTTP)
            return EGRESS_PEEK_BAD;
        absolute = true;
    }
    /* header fields until the empty line; exactly one Host */
    size_t at = (size_t)(eol - s) + 1;
    bool have = false;
    for (;;) {
        const char *nl = memchr(s + at, '\n', n - at);
        if (!nl)
            return EGRESS_PEEK_MORE;
        size_t ll = (size_t)(nl - (s + at));
        if (ll > 0 && s[at + ll - 1] == '\r')
            ll--;
        if (ll == 0)
            break;
        if (s[at] == ' ' || s[at] == '\t')
            return bad(why, whylen, "a folded HTTP header");
        const char *colon = memchr(s + at, ':', ll);
        if (!colon)
            return bad(why, whylen, "an HTTP header without a colon");
        size_t kl = (size_t)(colon - (s + at));
        if (kl == 4 && strncasecmp(s + at, "host", 4) == 0) {
            if (have)
                return bad(why, whylen, "two Host headers");
            const char *v = colon + 1, *ve = s + at + ll;
            while (v < ve && (*v == ' ' || *v == '\t'))
                v++;
            while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
            if (authority_host(v, (size_t)(ve - v), name, why, whylen) != EGRESS_PEEK_HTTP)
                return EGRESS_PEEK_BAD;
            have = true;
        }
        at = (size_t)(nl - s) + 1;
    }
    if (!have)
        return bad(why, whylen, "an HTTP request without a Host header");
    if (absolute && strcmp(target_host, name) != 0)
        return bad(why, whylen, "the request's target names %s, its Host %s", target_host, name);
    return EGRESS_PEEK_HTTP;
}

bool egress_header_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64)
        return false;
    for (const char *c = s; *c; c++)
        if (!is_token_char((unsigned char)*c))
            return false;
    static const char *const reserved[] = { "host", "connection", "keep-alive", "proxy-connection", "upgrade", "te",
                                            "content-length", "transfer-encoding", NULL };
    for (int i = 0; reserved[i]; i++)
        if (strcasecmp(s, reserved[i]) == 0)
            return false;
    return true;
}

/* Whether the header line l[0..ll) is named as one of those dropped. */
static bool header_dropped(const char *l, size_t ll, const egress_header_t *add, size_t nadd)
{
    static const char *const hop[] = { "connection", "keep-alive", "proxy-connection", "upgrade", "te", NULL };
    const char *colon = memchr(l, ':', ll);
    size_t kl = colon ? (size_t)(colon - l) : ll;
    for (int i = 0; hop[i]; i++)
        if (kl == strlen(hop[i]) && strncasecmp(l, hop[i], kl) == 0)
            return true;
    for (size_t i = 0; i < nadd; i++)
        if (kl == strlen(add[i].name) && strncasecmp(l, add[i].name, kl) == 0)
            return true;
    return false;
}

egress_peek_t egress_http_inject(const unsigned char *p, size_t n, const char *host, const egress_header_t *add,
                                 size_t nadd, char *out, size_t outcap, size_t *ret_head, size_t *ret_outlen,
                                 char *why, size_t whylen)
{
    char name[EGRESS_DOMAIN_MAX + 1];
    *ret_head = *ret_outlen = 0;
    if (why && whylen)
        why[0] = '\0';
    if (n > EGRESS_PEEK_MAX)
        n = EGRESS_PEEK_MAX;
    if (n == 0)
        return EGRESS_PEEK_MORE;
    if (p[0] == TLS_HANDSHAKE)
        return bad(why, whylen, "not an HTTP/1 request");
    egress_peek_t k = peek_http(p, n, name, why, whylen);
    if (k == EGRESS_PEEK_MORE && n >= EGRESS_PEEK_MAX)
        return bad(why, whylen, "no request head in the first %d bytes", EGRESS_PEEK_MAX);
    if (k != EGRESS_PEEK_HTTP)
        return k;
    if (strcmp(name, host) != 0)
        return bad(why, whylen, "the request's Host %s is not its TLS server name %s", name, host);
    /* peek_http saw the whole head: copy it line by line */
    const char *s = (const char *)p;
    size_t at = 0, o = 0;
    for (bool first = true;; first = false) {
        const char *nl = memchr(s + at, '\n', n - at);
        size_t ll = (size_t)(nl - (s + at)), next = (size_t)(nl - s) + 1;
        if (ll > 0 && s[at + ll - 1] == '\r')
            ll--;
        if (ll == 0) {
            *ret_head = next;
            break;
        }
        if (first || !header_dropped(s + at, ll, add, nadd)) {
            if (o + ll + 2 > outcap)
                return bad(why, whylen, "the request head is too large");
            memcpy(out + o, s + at, ll);
            o += ll;
            out[o++] = '\r';
            out[o++] = '\n';
        }
        at = next;
    }
    int w = snprintf(out + o, outcap - o, "Connection: close\r\n");
    if (w < 0 || (size_t)w >= outcap - o)
        return bad(why, whylen, "the request head is too large");
    o += (size_t)w;
    for (size_t i = 0; i < nadd; i++) {
        w = snprintf(out + o, outcap - o, "%s: %s\r\n", add[i].name, add[i].value);
        if (w < 0 || (size_t)w >= outcap - o)
            return bad(why, whylen, "the request head is too large");
        o += (size_t)w;
    }
    if (o + 2 > outcap)
        return bad(why, whylen, "the request head is too large");
    out[o++] = '\r';
    out[o++] = '\n';
    *ret_outlen = o;
    return EGRESS_PEEK_HTTP;
}

egress_peek_t egress_peek(const unsigned char *p, size_t n, char name[EGRESS_DOMAIN_MAX + 1], char *why,
                          size_t whylen)
{
    name[0] = '\0';
    if (why && whylen)
        why[0] = '\0';
    if (n == 0)
        return EGRESS_PEEK_MORE;
    if (n > EGRESS_PEEK_MAX)
        n = EGRESS_PEEK_MAX;
    egress_peek_t k = p[0] == TLS_HANDSHAKE ? peek_tls(p, n, name, why, whylen) : peek_http(p, n, name, why, whylen);
    if (k == EGRESS_PEEK_MORE && n >= EGRESS_PEEK_MAX)
        return bad(why, whylen, "no verdict in the first %d bytes", EGRESS_PEEK_MAX);
    if (k != EGRESS_PEEK_TLS && k != EGRESS_PEEK_HTTP)
        name[0] = '\0';
    return k;
}
