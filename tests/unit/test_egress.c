/* Unit tests for egress rules by name (common/egress.c). */
#include "check_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnsmsg.h"
#include "egress.h"
#include "egress_peek.h"
#include "jsonx.h"

static int parse(const char *js, egress_rules_t *r, api_error_t *err)
{
    json_object *o = NULL;
    ck_assert_int_eq(jsonx_parse(js, strlen(js), &o, NULL), 0);
    int rc = egress_rules_from_json(o, "egress", r, err);
    json_object_put(o);
    return rc;
}

START_TEST(test_egress_domains_are_canonical_or_refused)
{
    char out[EGRESS_DOMAIN_MAX + 1], why[128];
    ck_assert_int_eq(egress_domain_canon("PyPI.org.", out, why, sizeof why), 0);
    ck_assert_str_eq(out, "pypi.org");
    ck_assert_int_eq(egress_domain_canon("*.GitHub.com", out, why, sizeof why), 0);
    ck_assert_str_eq(out, "*.github.com");
    const char *const bad[] = { "", ".", "1.2.3.4", "::1", "a..b", "-a.com", "a-.com", "a*.com", "*.*.com",
                                "x.*", "a_b.com", "*", "*." };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(egress_domain_canon(bad[i], out, why, sizeof why) == SBX_EINVAL, "%s accepted", bad[i]);
    ck_assert_int_eq(egress_domain_canon("1.2.3.4", out, why, sizeof why), SBX_EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "egress_allow"));
    char label[80], long_name[300];
    memset(label, 'a', 64);
    label[64] = '\0';
    snprintf(long_name, sizeof long_name, "%s.com", label);
    ck_assert_int_eq(egress_domain_canon(long_name, out, why, sizeof why), SBX_EINVAL);
}
END_TEST

START_TEST(test_egress_deny_wins_and_wildcards_cover_below_only)
{
    egress_rules_t r;
    api_error_t err;
    ck_assert_int_eq(parse("{\"allow\":[\"*.example.com\",\"pypi.org\"],\"deny\":[\"evil.example.com\"]}", &r, &err),
                     0);
    const char *rule = NULL;
    ck_assert(egress_allowed(&r, "a.example.com", &rule));
    ck_assert_str_eq(rule, "*.example.com");
    ck_assert(egress_allowed(&r, "x.y.EXAMPLE.com.", NULL));
    ck_assert(!egress_allowed(&r, "example.com", &rule)); /* the wildcard is below it only */
    ck_assert_str_eq(rule, "default");
    ck_assert(!egress_allowed(&r, "evil.example.com", &rule));
    ck_assert_str_eq(rule, "evil.example.com");
    ck_assert(egress_allowed(&r, "pypi.org", NULL));
    ck_assert(!egress_allowed(&r, "files.pypi.org", NULL));
    ck_assert(!egress_allowed(&r, "notexample.com", NULL));
    ck_assert(!egress_allowed(&r, "1.2.3.4", &rule)); /* an address is never a name */
    ck_assert(!egress_allowed(&r, "*.example.com", NULL));
    /* the canonical JSON reads back the same */
    json_object *j = egress_rules_to_json(&r), *j2;
    egress_rules_t back;
    ck_assert_int_eq(egress_rules_from_json(j, "egress", &back, &err), 0);
    j2 = egress_rules_to_json(&back);
    ck_assert_str_eq(json_object_to_json_string(j), json_object_to_json_string(j2));
    json_object_put(j);
    json_object_put(j2);
    egress_rules_release(&back);
    egress_rules_release(&r);
    /* unset: everything; default allow: all but the denied */
    egress_rules_t none = { 0 };
    ck_assert(egress_allowed(&none, "anything.test", NULL));
    ck_assert_int_eq(parse("{\"deny\":[\"*.onion.example\"],\"default\":\"allow\"}", &r, &err), 0);
    ck_assert(egress_allowed(&r, "a.test", NULL));
    ck_assert(!egress_allowed(&r, "x.onion.example", NULL));
    egress_rules_release(&r);
    /* no default: only denies mean all but those; an allow, or nothing
     * at all, means deny the rest */
    ck_assert_int_eq(parse("{\"deny\":[\"*.onion.example\"]}", &r, &err), 0);
    ck_assert(r.default_allow);
    ck_assert(egress_allowed(&r, "a.test", NULL));
    egress_rules_release(&r);
    ck_assert_int_eq(parse("{\"allow\":[\"a.test\"],\"deny\":[\"b.test\"]}", &r, &err), 0);
    ck_assert(!r.default_allow);
    egress_rules_release(&r);
    ck_assert_int_eq(parse("{}", &r, &err), 0);
    ck_assert(r.set && !r.default_allow);
    ck_assert(!egress_allowed(&r, "a.test", NULL));
    egress_rules_release(&r);
}
END_TEST

START_TEST(test_egress_bad_rules_are_named)
{
    egress_rules_t r;
    api_error_t err;
    ck_assert_int_eq(parse("{\"allow\":[\"ok.com\",\"1.2.3.4\"]}", &r, &err), SBX_EINVAL);
    ck_assert_msg(strstr(err.message, "egress.allow[1] (1.2.3.4)"), "%s", err.message);
    ck_assert_int_eq(parse("{\"deny\":[7]}", &r, &err), SBX_EINVAL);
    ck_assert_msg(strstr(err.message, "egress.deny[0]"), "%s", err.message);
    ck_assert_int_eq(parse("{\"default\":\"maybe\"}", &r, &err), SBX_EINVAL);
    ck_assert_msg(strstr(err.message, "egress.default"), "%s", err.message);
    ck_assert_int_eq(parse("{\"alow\":[]}", &r, &err), SBX_EINVAL);
    ck_assert_msg(strstr(err.message, "egress.alow"), "%s", err.message);
    /* a list over the bound */
    char *js = malloc(16 * (EGRESS_ENTRIES_MAX + 2) + 32);
    strcpy(js, "{\"allow\":[");
    for (int i = 0; i <= EGRESS_ENTRIES_MAX; i++)
        sprintf(js + strlen(js), "%s\"d%d.com\"", i ? "," : "", i);
    strcat(js, "]}");
    ck_assert_int_eq(parse(js, &r, &err), SBX_EINVAL);
    free(js);
}
END_TEST

START_TEST(test_egress_request_stays_within_its_tenant)
{
    egress_rules_t t, q, out;
    api_error_t err;
    ck_assert_int_eq(parse("{\"allow\":[\"*.corp.example\",\"pypi.org\"],\"deny\":[\"leak.corp.example\"]}", &t,
                           &err), 0);
    /* narrower: kept, with the tenant's deny */
    ck_assert_int_eq(parse("{\"allow\":[\"git.corp.example\",\"*.dev.corp.example\"]}", &q, &err), 0);
    ck_assert_int_eq(egress_rules_within(&t, &q, "egress", &out, &err), 0);
    ck_assert(egress_allowed(&out, "git.corp.example", NULL));
    ck_assert(!egress_allowed(&out, "pypi.org", NULL)); /* the request asked less */
    ck_assert(!egress_allowed(&out, "leak.corp.example", NULL));
    egress_rules_release(&out);
    egress_rules_release(&q);
    /* wider: refused naming the entry */
    ck_assert_int_eq(parse("{\"allow\":[\"pypi.org\",\"evil.test\"]}", &q, &err), 0);
    ck_assert_int_eq(egress_rules_within(&t, &q, "egress", &out, &err), SBX_EINVAL);
    ck_assert_int_eq(err.code, API_POLICY_DENIED);
    ck_assert_msg(strstr(err.message, "egress.allow[1] (evil.test)"), "%s", err.message);
    egress_rules_release(&q);
    ck_assert_int_eq(parse("{\"allow\":[\"*.example\"]}", &q, &err), 0);
    ck_assert_int_eq(egress_rules_within(&t, &q, "egress", &out, &err), SBX_EINVAL);
    egress_rules_release(&q);
    ck_assert_int_eq(parse("{\"allow\":[\"leak.corp.example\"]}", &q, &err), 0);
    ck_assert_int_eq(egress_rules_within(&t, &q, "egress", &out, &err), SBX_EINVAL);
    ck_assert_msg(strstr(err.message, "rule leak.corp.example"), "%s", err.message);
    egress_rules_release(&q);
    ck_assert_int_eq(parse("{\"default\":\"allow\"}", &q, &err), 0);
    ck_assert_int_eq(egress_rules_within(&t, &q, "egress", &out, &err), SBX_EINVAL);
    ck_assert_msg(strstr(err.message, "egress.default"), "%s", err.message);
    egress_rules_release(&q);
    /* no request rules: the tenant's */
    egress_rules_t unset = { 0 };
    ck_assert_int_eq(egress_rules_within(&t, &unset, "egress", &out, &err), 0);
    ck_assert(egress_allowed(&out, "pypi.org", NULL));
    egress_rules_release(&out);
    egress_rules_release(&t);
}
END_TEST

START_TEST(test_egress_udp_ports_are_checked_sorted_and_within_the_tenant)
{
    egress_rules_t r, t, out;
    api_error_t err;
    /* none unless listed; listed ports come back sorted, each once */
    ck_assert_int_eq(parse("{\"allow\":[\"a.test\"]}", &r, &err), 0);
    ck_assert(!egress_udp_allowed(&r, 443));
    json_object *j = egress_rules_to_json(&r);
    ck_assert(!json_object_object_get_ex(j, "udp", NULL));
    json_object_put(j);
    egress_rules_release(&r);
    ck_assert_int_eq(parse("{\"allow\":[\"a.test\"],\"udp\":[3478,443,3478]}", &r, &err), 0);
    ck_assert(egress_udp_allowed(&r, 443) && egress_udp_allowed(&r, 3478) && !egress_udp_allowed(&r, 444));
    j = egress_rules_to_json(&r);
    ck_assert_str_eq(json_object_to_json_string_ext(jsonx_get_arr(j, "udp"), JSON_C_TO_STRING_PLAIN), "[443,3478]");
    json_object_put(j);
    ck_assert(!egress_udp_allowed(NULL, 443));
    /* bad ports are named; 53 is the resolver's */
    static const char *const bad[] = { "[0]", "[65536]", "[\"443\"]", "[53]", "[1.5]", "443" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char js[96];
        egress_rules_t x;
        snprintf(js, sizeof js, "{\"udp\":%s}", bad[i]);
        ck_assert_int_eq(parse(js, &x, &err), SBX_EINVAL);
        ck_assert_msg(strstr(err.message, "egress.udp"), "%s: %s", js, err.message);
    }
    char js[400] = "{\"udp\":[";
    for (int i = 0; i <= EGRESS_UDP_MAX; i++)
        sprintf(js + strlen(js), "%s%d", i ? "," : "", 1000 + i);
    strcat(js, "]}");
    egress_rules_t x;
    ck_assert_int_eq(parse(js, &x, &err), SBX_EINVAL);
    /* a request's ports must be its tenant's too */
    ck_assert_int_eq(parse("{\"allow\":[\"*.test\"],\"udp\":[443]}", &t, &err), 0);
    ck_assert_int_eq(egress_rules_within(&t, &r, "egress", &out, &err), SBX_EINVAL);
    ck_assert_int_eq(err.code, API_POLICY_DENIED);
    ck_assert_msg(strstr(err.message, "egress.udp[1] (3478)"), "%s", err.message);
    egress_rules_release(&r);
    ck_assert_int_eq(parse("{\"allow\":[\"a.test\"],\"udp\":[443]}", &r, &err), 0);
    ck_assert_int_eq(egress_rules_within(&t, &r, "egress", &out, &err), 0);
    ck_assert(egress_udp_allowed(&out, 443));
    egress_rules_release(&out);
    egress_rules_release(&r);
    /* no request rules: the tenant's ports */
    egress_rules_t unset = { 0 };
    ck_assert_int_eq(egress_rules_within(&t, &unset, "egress", &out, &err), 0);
    ck_assert(egress_udp_allowed(&out, 443));
    egress_rules_release(&out);
    egress_rules_release(&t);
}
END_TEST

/* ---- egress_peek: the name in a connection's first bytes ---- */

/* A TLS 1.2-style ClientHello naming sni (NULL: no server_name) into out,
 * in records of at most rec bytes: its length. */
static size_t client_hello(const char *sni, size_t rec, unsigned char *out)
{
    unsigned char hs[1024];
    size_t n = 4;
    hs[n++] = 3, hs[n++] = 3;
    memset(hs + n, 0xab, 32), n += 32;
    hs[n++] = 0;                                   /* session id */
    hs[n++] = 0, hs[n++] = 2, hs[n++] = 0x13, hs[n++] = 0x01; /* one suite */
    hs[n++] = 1, hs[n++] = 0;                      /* null compression */
    size_t ext_at = n;
    n += 2;
    /* an extension before it: supported_versions */
    hs[n++] = 0, hs[n++] = 43, hs[n++] = 0, hs[n++] = 3, hs[n++] = 2, hs[n++] = 3, hs[n++] = 4;
    if (sni) {
        size_t l = strlen(sni);
        hs[n++] = 0, hs[n++] = 0;
        hs[n++] = (unsigned char)((l + 5) >> 8), hs[n++] = (unsigned char)(l + 5);
        hs[n++] = (unsigned char)((l + 3) >> 8), hs[n++] = (unsigned char)(l + 3);
        hs[n++] = 0;
        hs[n++] = (unsigned char)(l >> 8), hs[n++] = (unsigned char)l;
        memcpy(hs + n, sni, l), n += l;
    }
    size_t el = n - ext_at - 2;
    hs[ext_at] = (unsigned char)(el >> 8), hs[ext_at + 1] = (unsigned char)el;
    hs[0] = 1, hs[1] = 0, hs[2] = (unsigned char)((n - 4) >> 8), hs[3] = (unsigned char)(n - 4);
    size_t o = 0;
    for (size_t at = 0; at < n; at += rec) {
        size_t k = n - at < rec ? n - at : rec;
        out[o++] = 22, out[o++] = 3, out[o++] = 1, out[o++] = (unsigned char)(k >> 8), out[o++] = (unsigned char)k;
        memcpy(out + o, hs + at, k), o += k;
    }
    return o;
}

static egress_peek_t peek_str(const char *s, char *name, char *why)
{
    return egress_peek((const unsigned char *)s, strlen(s), name, why, 160);
}

START_TEST(test_egress_peek_reads_sni_and_host)
{
    unsigned char buf[2048];
    char name[EGRESS_DOMAIN_MAX + 1], why[160];
    size_t n = client_hello("Api.Example.Test", 4096, buf);
    ck_assert_int_eq(egress_peek(buf, n, name, why, sizeof why), EGRESS_PEEK_TLS);
    ck_assert_str_eq(name, "api.example.test");
    /* every shorter prefix: read more */
    for (size_t k = 1; k < n; k++)
        ck_assert_int_eq(egress_peek(buf, k, name, why, sizeof why), EGRESS_PEEK_MORE);
    /* the same handshake over records of 7 bytes */
    n = client_hello("api.example.test", 7, buf);
    ck_assert_int_eq(egress_peek(buf, n, name, why, sizeof why), EGRESS_PEEK_TLS);
    ck_assert_str_eq(name, "api.example.test");
    /* no server name, an address, a wildcard: refused, saying why */
    n = client_hello(NULL, 4096, buf);
    ck_assert_int_eq(egress_peek(buf, n, name, why, sizeof why), EGRESS_PEEK_BAD);
    ck_assert_msg(strstr(why, "without a server name"), "%s", why);
    n = client_hello("10.1.2.3", 4096, buf);
    ck_assert_int_eq(egress_peek(buf, n, name, why, sizeof why), EGRESS_PEEK_BAD);
    ck_assert_str_eq(name, "");
    n = client_hello("*.example.test", 4096, buf);
    ck_assert_int_eq(egress_peek(buf, n, name, why, sizeof why), EGRESS_PEEK_BAD);
    /* a truncated extension list */
    n = client_hello("a.test", 4096, buf);
    buf[n - 3] = 0x7f;
    ck_assert_int_eq(egress_peek(buf, n, name, why, sizeof why), EGRESS_PEEK_BAD);

    /* HTTP/1 */
    ck_assert_int_eq(peek_str("GET / HTTP/1.1\r\nUser-Agent: x\r\nhost:  Pkg.Test:8080 \r\n\r\n", name, why),
                     EGRESS_PEEK_HTTP);
    ck_assert_str_eq(name, "pkg.test");
    ck_assert_int_eq(peek_str("GET / HTTP/1.1\r\nHost: pkg.test\r\n", name, why), EGRESS_PEEK_MORE);
    ck_assert_int_eq(peek_str("GET / HT", name, why), EGRESS_PEEK_MORE);
    ck_assert_int_eq(peek_str("GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", name, why), EGRESS_PEEK_BAD);
    ck_assert_msg(strstr(why, "without a Host"), "%s", why);
    ck_assert_int_eq(peek_str("GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n", name, why),
                     EGRESS_PEEK_BAD);
    ck_assert_msg(strstr(why, "two Host"), "%s", why);
    ck_assert_int_eq(peek_str("GET http://b.test/x HTTP/1.1\r\nHost: a.test\r\n\r\n", name, why), EGRESS_PEEK_BAD);
    ck_assert_int_eq(peek_str("GET http://a.test/x HTTP/1.1\r\nHost: a.test\r\n\r\n", name, why),
                     EGRESS_PEEK_HTTP);
    ck_assert_int_eq(peek_str("GET / HTTP/1.1\r\nHost: 192.0.2.1\r\n\r\n", name, why), EGRESS_PEEK_BAD);
    ck_assert_int_eq(peek_str("GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n", name, why), EGRESS_PEEK_BAD);
    ck_assert_int_eq(peek_str("CONNECT a.test:443 HTTP/1.1\r\nHost: a.test\r\n\r\n", name, why), EGRESS_PEEK_BAD);
    ck_assert_int_eq(peek_str("SSH-2.0-OpenSSH_9.2\r\n", name, why), EGRESS_PEEK_BAD);
    ck_assert_int_eq(peek_str("\x01\x02garbage", name, why), EGRESS_PEEK_BAD);
    /* nothing decided within the bound: refused */
    char *big = malloc(EGRESS_PEEK_MAX + 64);
    strcpy(big, "GET / HTTP/1.1\r\nX: ");
    memset(big + strlen(big), 'a', EGRESS_PEEK_MAX);
    big[EGRESS_PEEK_MAX + 20] = '\0';
    ck_assert_int_eq(peek_str(big, name, why), EGRESS_PEEK_BAD);
    free(big);
}
END_TEST

START_TEST(test_dnsmsg_query_reply_and_answers)
{
    uint8_t q[512], r[512];
    char why[160];
    size_t n = dnsmsg_query_build(0x1234, "x1.Denied.test", DNSMSG_TYPE_A, q, sizeof q);
    ck_assert_uint_gt(n, 12);
    dnsmsg_query_t dq;
    ck_assert_int_eq(dnsmsg_query_parse(q, n, &dq, why, sizeof why), 0);
    ck_assert_uint_eq(dq.id, 0x1234);
    ck_assert_uint_eq(dq.qtype, DNSMSG_TYPE_A);
    ck_assert_str_eq(dq.name, "x1.denied.test");
    ck_assert_uint_eq(dq.question_end, n);
    /* every truncation is refused, never read past */
    for (size_t k = 0; k < n; k++)
        ck_assert_int_eq(dnsmsg_query_parse(q, k, &dq, why, sizeof why), -1);
    size_t rn = dnsmsg_reply(q, n, DNSMSG_RCODE_NXDOMAIN, r, sizeof r);
    ck_assert_uint_eq(rn, n);
    ck_assert_uint_eq(r[3] & 0xf, DNSMSG_RCODE_NXDOMAIN);
    ck_assert(r[2] & 0x80);
    unsigned rcode = 0;
    ck_assert_int_eq(dnsmsg_answer_addrs(r, rn, NULL, 0, &rcode), 0);
    ck_assert_uint_eq(rcode, DNSMSG_RCODE_NXDOMAIN);
    /* a response is not a query; a name with a byte no host has is refused */
    ck_assert_int_eq(dnsmsg_query_parse(r, rn, &dq, why, sizeof why), -1);
    q[13] = '/';
    ck_assert_int_eq(dnsmsg_query_parse(q, n, &dq, why, sizeof why), -1);
    /* an answer: a CNAME to another name (compressed), then its A and AAAA */
    static const uint8_t ans[] = {
        0x12, 0x34, 0x81, 0x80, 0, 1, 0, 3, 0, 0, 0, 0,
        3, 'w', 'w', 'w', 1, 'a', 4, 't', 'e', 's', 't', 0, 0, 1, 0, 1,
        0xc0, 12, 0, 5, 0, 1, 0, 0, 0, 60, 0, 4, 1, 'b', 0xc0, 18,
        0xc0, 40, 0, 1, 0, 1, 0, 0, 1, 0, 0, 4, 10, 80, 0, 7,
        0xc0, 40, 0, 28, 0, 1, 0, 0, 0, 30, 0, 16, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9,
    };
    dnsmsg_addr_t a[4];
    ck_assert_int_eq(dnsmsg_answer_addrs(ans, sizeof ans, a, 4, &rcode), 2);
    ck_assert_int_eq(a[0].family, AF_INET);
    ck_assert_uint_eq(a[0].addr[0], 10);
    ck_assert_uint_eq(a[0].addr[3], 7);
    ck_assert_uint_eq(a[0].ttl, 256);
    ck_assert_int_eq(a[1].family, AF_INET6);
    ck_assert_uint_eq(a[1].addr[15], 9);
    for (size_t k = 12; k < sizeof ans; k++)
        ck_assert_int_le(dnsmsg_answer_addrs(ans, k, a, 4, &rcode), 2);
    ck_assert_int_eq(dnsmsg_answer_addrs(ans, sizeof ans - 1, a, 4, &rcode), -1);
}
END_TEST

START_TEST(test_egress_http_inject_adds_the_header_once_and_checks_the_host)
{
    static const egress_header_t add[] = { { "Authorization", "Bearer s3cret" } };
    char out[EGRESS_PEEK_MAX + 2048], why[160];
    size_t head = 0, len = 0;
    const char *req = "POST /v1/x HTTP/1.1\r\nHost: API.example.com:443\r\nauthorization: Bearer forged\r\n"
                      "Connection: keep-alive\r\nContent-Length: 2\r\n\r\nhiGET / HTTP/1.1\r\n";
    ck_assert_int_eq(egress_http_inject((const unsigned char *)req, strlen(req), "api.example.com", add, 1, out,
                                        sizeof out, &head, &len, why, sizeof why), EGRESS_PEEK_HTTP);
    ck_assert_uint_eq(head, (size_t)(strstr(req, "hi") - req));
    out[len] = '\0';
    ck_assert_str_eq(out, "POST /v1/x HTTP/1.1\r\nHost: API.example.com:443\r\nContent-Length: 2\r\n"
                          "Connection: close\r\nAuthorization: Bearer s3cret\r\n\r\n");
    /* every prefix of the head: not yet */
    for (size_t k = 1; k < head; k++)
        ck_assert_int_eq(egress_http_inject((const unsigned char *)req, k, "api.example.com", add, 1, out, sizeof out,
                                            &head, &len, why, sizeof why), EGRESS_PEEK_MORE);
    /* another Host than the TLS server name; two Hosts; TLS inside TLS; a head too large for out */
    const char *other = "GET / HTTP/1.1\r\nHost: evil.example.org\r\n\r\n";
    ck_assert_int_eq(egress_http_inject((const unsigned char *)other, strlen(other), "api.example.com", add, 1, out,
                                        sizeof out, &head, &len, why, sizeof why), EGRESS_PEEK_BAD);
    ck_assert_msg(strstr(why, "evil.example.org") && strstr(why, "api.example.com"), "%s", why);
    const char *two = "GET / HTTP/1.1\r\nHost: api.example.com\r\nHost: evil.example.org\r\n\r\n";
    ck_assert_int_eq(egress_http_inject((const unsigned char *)two, strlen(two), "api.example.com", add, 1, out,
                                        sizeof out, &head, &len, why, sizeof why), EGRESS_PEEK_BAD);
    const unsigned char tls[] = { 0x16, 0x03, 0x01, 0x00, 0x05 };
    ck_assert_int_eq(egress_http_inject(tls, sizeof tls, "api.example.com", add, 1, out, sizeof out, &head, &len, why,
                                        sizeof why), EGRESS_PEEK_BAD);
    const char *plain = "GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n";
    ck_assert_int_eq(egress_http_inject((const unsigned char *)plain, strlen(plain), "api.example.com", add, 1, out,
                                        40, &head, &len, why, sizeof why), EGRESS_PEEK_BAD);
    ck_assert_msg(strstr(why, "too large"), "%s", why);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("egress");
    unit_tcase_add(s, "egress", UNIT_TESTS(
        test_egress_domains_are_canonical_or_refused,
        test_egress_deny_wins_and_wildcards_cover_below_only,
        test_egress_bad_rules_are_named,
        test_egress_request_stays_within_its_tenant,
        test_egress_udp_ports_are_checked_sorted_and_within_the_tenant,
    ));
    unit_tcase_add(s, "peek", UNIT_TESTS(
        test_egress_peek_reads_sni_and_host,
        test_dnsmsg_query_reply_and_answers,
        test_egress_http_inject_adds_the_header_once_and_checks_the_host,
    ));
    return s;
}
