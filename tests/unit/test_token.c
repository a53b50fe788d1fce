/* Unit tests for API tokens (common/token.c) and prefixed ids (common/ids.c). */
#include "check_util.h"
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "errors.h"
#include "ids.h"
#include "grant.h"
#include "token.h"

static const char B32[] = "abcdefghijklmnopqrstuvwxyz234567";
static const char B64URL[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* A well-formed token built from fixed parts. */
#define ID26 "abcdefghijklmnopqrstuvwxyz"
#define SECRET43 "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghij0123456"

static void setup(void)
{
    ck_assert_int_ge(sodium_init(), 0);
}

/* ---- ids ---- */

START_TEST(test_ids_new_has_prefix_and_26_base32_chars)
{
    static const char *prefixes[] = { "sbx", "op", "wrk", "tok", "tnt" };
    for (size_t p = 0; p < sizeof prefixes / sizeof *prefixes; p++) {
        char id[SBX_ID_MAX];
        ids_new(prefixes[p], id);
        size_t pl = strlen(prefixes[p]);
        ck_assert_uint_eq(strlen(id), pl + 1 + 26);
        ck_assert_int_eq(strncmp(id, prefixes[p], pl), 0);
        ck_assert_int_eq(id[pl], '_');
        ck_assert_uint_eq(strspn(id + pl + 1, B32), 26);
        ck_assert(ids_valid(prefixes[p], id));
    }
}
END_TEST

START_TEST(test_ids_new_gives_distinct_ids)
{
    char a[SBX_ID_MAX], b[SBX_ID_MAX];
    ids_new("sbx", a);
    ids_new("sbx", b);
    ck_assert_str_ne(a, b);
}
END_TEST

START_TEST(test_ids_valid_rejects_malformed_ids)
{
    ck_assert(ids_valid("sbx", "sbx_" ID26));
    ck_assert(!ids_valid("sbx", NULL));
    ck_assert(!ids_valid("sbx", ""));
    ck_assert(!ids_valid("sbx", "op_" ID26));               /* other prefix */
    ck_assert(!ids_valid("op", "opx_" ID26));               /* prefix not followed by _ */
    ck_assert(!ids_valid("sbx", "sbx" ID26));               /* no separator */
    ck_assert(!ids_valid("sbx", "sbx-" ID26));
    ck_assert(!ids_valid("sbx", "sbx_" "abcdefghijklmnopqrstuvwxy"));   /* 25 chars */
    ck_assert(!ids_valid("sbx", "sbx_" ID26 "a"));                      /* 27 chars */
    ck_assert(!ids_valid("sbx", "sbx_" "Abcdefghijklmnopqrstuvwxyz"));  /* uppercase */
    ck_assert(!ids_valid("sbx", "sbx_" "abcdefghijklmnopqrstuvwxy1"));  /* 1 is not base32 */
    ck_assert(!ids_valid("sbx", "sbx_" "abcdefghijklmnopqrstuvwxy8"));  /* 8 is not base32 */
    ck_assert(!ids_valid("sbx", "sbx_" "abcdefghijklmnopqrstuvwxy_"));
    ck_assert(!ids_valid("sbx", "sbx_" "abcdefghijklm/opqrstuvwxyz"));
}
END_TEST

START_TEST(test_ids_base32_matches_rfc4648_vectors)
{
    /* RFC 4648 §10, lowercase, no padding. */
    static const struct { const char *in, *out; } v[] = {
        { "", "" }, { "f", "my" }, { "fo", "mzxq" }, { "foo", "mzxw6" },
        { "foob", "mzxw6yq" }, { "fooba", "mzxw6ytb" }, { "foobar", "mzxw6ytboi" },
    };
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        char out[32];
        size_t n = ids_base32((const unsigned char *)v[i].in, strlen(v[i].in), out);
        ck_assert_str_eq(out, v[i].out);
        ck_assert_uint_eq(n, strlen(v[i].out));
    }
    unsigned char sixteen[16];
    memset(sixteen, 0xFF, sizeof sixteen);
    char out[32];
    ck_assert_uint_eq(ids_base32(sixteen, sizeof sixteen, out), 26);
}
END_TEST

/* ---- tokens ---- */

START_TEST(test_generated_token_parses_to_its_id)
{
    char id[SBX_ID_MAX], secret[SBX_TOKEN_MAX];
    token_generate(id, secret);
    ck_assert(ids_valid("tok", id));
    ck_assert_uint_eq(strlen(secret), 4 + 26 + 1 + 43);
    ck_assert_int_eq(strncmp(secret, "sbt_", 4), 0);
    ck_assert_int_eq(strncmp(secret + 4, id + 4, 26), 0);
    ck_assert_int_eq(secret[30], '_');
    ck_assert_uint_eq(strspn(secret + 31, B64URL), 43);

    char parsed[SBX_ID_MAX];
    ck_assert_int_eq(token_parse_id(secret, parsed), 0);
    ck_assert_str_eq(parsed, id);
}
END_TEST

START_TEST(test_generated_tokens_are_distinct)
{
    char id1[SBX_ID_MAX], s1[SBX_TOKEN_MAX], id2[SBX_ID_MAX], s2[SBX_TOKEN_MAX];
    token_generate(id1, s1);
    token_generate(id2, s2);
    ck_assert_str_ne(id1, id2);
    ck_assert_str_ne(s1 + 31, s2 + 31);
}
END_TEST

START_TEST(test_hash_is_lowercase_hex_and_verifies)
{
    char id[SBX_ID_MAX], secret[SBX_TOKEN_MAX], hex[TOKEN_HASH_HEX];
    token_generate(id, secret);
    token_hash_hex(secret, hex);
    ck_assert_uint_eq(strlen(hex), 64);
    ck_assert_uint_eq(strspn(hex, "0123456789abcdef"), 64);
    ck_assert(token_verify(secret, hex));
    char again[TOKEN_HASH_HEX];
    token_hash_hex(secret, again);
    ck_assert_str_eq(again, hex);
}
END_TEST

START_TEST(test_hash_matches_known_blake2b_256)
{
    /* BLAKE2b-256("abc"), unkeyed. */
    char hex[TOKEN_HASH_HEX];
    token_hash_hex("abc", hex);
    ck_assert_str_eq(hex, "bddd813c634239723171ef3fee98579b94964e3bb1cb3e427262c8c068d52319");
}
END_TEST

START_TEST(test_changed_character_fails_verification)
{
    char id[SBX_ID_MAX], secret[SBX_TOKEN_MAX], hex[TOKEN_HASH_HEX];
    token_generate(id, secret);
    token_hash_hex(secret, hex);
    size_t len = strlen(secret);
    for (size_t i = 0; i < len; i++) {
        char t[SBX_TOKEN_MAX];
        memcpy(t, secret, len + 1);
        t[i] = t[i] == 'A' ? 'B' : 'A';
        ck_assert_msg(!token_verify(t, hex), "token changed at byte %zu still verifies", i);
    }
    /* Prefix and extension fail too. */
    char shorter[SBX_TOKEN_MAX];
    snprintf(shorter, sizeof shorter, "%.*s", (int)(len - 1), secret);
    ck_assert(!token_verify(shorter, hex));
    char longer[SBX_TOKEN_MAX + 1];
    snprintf(longer, sizeof longer, "%sx", secret);
    ck_assert(!token_verify(longer, hex));
}
END_TEST

START_TEST(test_verify_with_bad_stored_hex_fails)
{
    char id[SBX_ID_MAX], secret[SBX_TOKEN_MAX], hex[TOKEN_HASH_HEX];
    token_generate(id, secret);
    token_hash_hex(secret, hex);

    ck_assert(!token_verify(secret, ""));
    ck_assert(!token_verify(secret, NULL));
    ck_assert(!token_verify(NULL, hex));

    char bad[TOKEN_HASH_HEX + 2];
    /* One hex digit short (odd length). */
    snprintf(bad, sizeof bad, "%.63s", hex);
    ck_assert(!token_verify(secret, bad));
    /* One byte short. */
    snprintf(bad, sizeof bad, "%.62s", hex);
    ck_assert(!token_verify(secret, bad));
    /* Too long. */
    snprintf(bad, sizeof bad, "%s00", hex);
    ck_assert(!token_verify(secret, bad));
    /* Non-hex character. */
    snprintf(bad, sizeof bad, "%s", hex);
    bad[10] = 'g';
    ck_assert(!token_verify(secret, bad));
    /* Right length, wrong hash. */
    snprintf(bad, sizeof bad, "%s", hex);
    bad[0] = bad[0] == '0' ? '1' : '0';
    ck_assert(!token_verify(secret, bad));
}
END_TEST

START_TEST(test_parse_id_accepts_well_formed_token)
{
    char id[SBX_ID_MAX];
    ck_assert_int_eq(token_parse_id("sbt_" ID26 "_" SECRET43, id), 0);
    ck_assert_str_eq(id, "tok_" ID26);
    /* The secret is base64url and may itself contain '_' and '-'. */
    ck_assert_int_eq(token_parse_id("sbt_" ID26 "_" "_-" "CDEFGHIJKLMNOPQRSTUVWXYZabcdefghij0123456", id), 0);
    ck_assert_str_eq(id, "tok_" ID26);
}
END_TEST

START_TEST(test_parse_id_rejects_malformed_tokens)
{
    static const char *bad[] = {
        "",
        "sbt_",
        "sbt",
        "sbx_" ID26 "_" SECRET43,                              /* wrong prefix */
        "SBT_" ID26 "_" SECRET43,
        "tok_" ID26 "_" SECRET43,
        "Bearer sbt_" ID26 "_" SECRET43,
        " sbt_" ID26 "_" SECRET43,
        "sbt" ID26 "_" SECRET43,                               /* no separator */
        "sbt_" ID26 SECRET43,                                  /* no second separator */
        "sbt_" "abcdefghijklmnopqrstuvwxy" "_" SECRET43,       /* id 25 chars */
        "sbt_" ID26 "a" "_" SECRET43,                          /* id 27 chars */
        "sbt_" ID26 "_" "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghij012345",   /* secret 42 */
        "sbt_" ID26 "_" SECRET43 "7",                          /* secret 44 */
        "sbt_" ID26 "_",                                       /* empty secret */
        "sbt_" "ABCDEFGHIJKLMNOPQRSTUVWXYZ" "_" SECRET43,      /* uppercase id */
        "sbt_" "abcdefghijklmnopqrstuvwxy1" "_" SECRET43,      /* '1' not base32 */
        "sbt_" "abcdefghijklmnopqrstuvwx-z" "_" SECRET43,
        "sbt_" "abcdefghijklm opqrstuvwxyz" "_" SECRET43,
        "sbt__" ID26 SECRET43,
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char id[SBX_ID_MAX] = "untouched";
        ck_assert_msg(token_parse_id(bad[i], id) == SBX_EINVAL, "accepted \"%s\"", bad[i]);
        ck_assert_str_eq(id, "untouched");
    }
    char id[SBX_ID_MAX];
    ck_assert_int_eq(token_parse_id(NULL, id), SBX_EINVAL);
}
END_TEST

/* Route grants: the worker derives the controller's key from its token. */
START_TEST(test_grant_round_trip_with_key_from_token_and_from_hash)
{
    char id[SBX_ID_MAX], tok[SBX_TOKEN_MAX], hex[TOKEN_HASH_HEX];
    token_generate(id, tok);
    token_hash_hex(tok, hex);
    unsigned char kc[GRANT_KEY_BYTES], kw[GRANT_KEY_BYTES];
    ck_assert_int_eq(grant_key_from_hash_hex(hex, kc), 0);
    grant_key_from_token(tok, kw);
    ck_assert_mem_eq(kc, kw, GRANT_KEY_BYTES);
    grant_t g = { .worker_id = "wrk_abc", .sandbox_id = "sbx_def", .port = 8080, .expires_unix = 2000 };
    char text[GRANT_MAX];
    ck_assert_int_eq(grant_sign(kc, &g, text), 0);
    ck_assert(strncmp(text, "v1.wrk_abc.sbx_def.8080.2000.", 29) == 0);
    grant_t out;
    ck_assert_int_eq(grant_verify(kw, text, 1999, &out), 0);
    ck_assert_str_eq(out.worker_id, "wrk_abc");
    ck_assert_str_eq(out.sandbox_id, "sbx_def");
    ck_assert_int_eq(out.port, 8080);
    ck_assert_int_eq(out.expires_unix, 2000);
}
END_TEST

/* A logs grant carries its purpose and parameters inside the signed text,
 * and neither kind of grant passes for the other. */
START_TEST(test_logs_grant_round_trip_and_purposes_do_not_mix)
{
    unsigned char k[GRANT_KEY_BYTES];
    grant_key_from_token("sbt_logs", k);
    grant_t g = { .worker_id = "wrk_abc", .sandbox_id = "sbx_def", .expires_unix = 2000, .purpose = GRANT_LOGS,
                  .logs_tail = 25, .logs_follow = true };
    char text[GRANT_MAX];
    ck_assert_int_eq(grant_sign(k, &g, text), 0);
    ck_assert_msg(strncmp(text, "v1.wrk_abc.sbx_def.logs-25-1.2000.", 34) == 0, "got [%s]", text);
    grant_t out;
    ck_assert_int_eq(grant_verify(k, text, 1999, &out), 0);
    ck_assert_int_eq(out.purpose, GRANT_LOGS);
    ck_assert_int_eq(out.logs_tail, 25);
    ck_assert(out.logs_follow);
    ck_assert_int_eq(out.port, 0);
    ck_assert_int_eq(grant_verify_purpose(k, text, 1999, GRANT_LOGS, &out), 0);
    ck_assert_int_eq(grant_verify_purpose(k, text, 1999, GRANT_ROUTE, &out), SBX_EPERM);
    ck_assert_int_eq(out.purpose, GRANT_ROUTE); /* zeroed */

    g.logs_tail = GRANT_LOGS_TAIL_ALL;
    g.logs_follow = false;
    ck_assert_int_eq(grant_sign(k, &g, text), 0);
    ck_assert_msg(strncmp(text, "v1.wrk_abc.sbx_def.logs-all-0.2000.", 35) == 0, "got [%s]", text);
    ck_assert_int_eq(grant_verify(k, text, 0, &out), 0);
    ck_assert_int_eq(out.logs_tail, GRANT_LOGS_TAIL_ALL);
    ck_assert(!out.logs_follow);

    /* The same MAC under another purpose field is not a grant. */
    char swapped[GRANT_MAX];
    const char *mac = strrchr(text, '.') + 1;
    snprintf(swapped, sizeof swapped, "v1.wrk_abc.sbx_def.8080.2000.%s", mac);
    ck_assert_int_eq(grant_verify(k, swapped, 0, &out), SBX_EAUTH);
    snprintf(swapped, sizeof swapped, "v1.wrk_abc.sbx_def.logs-all-1.2000.%s", mac);
    ck_assert_int_eq(grant_verify(k, swapped, 0, &out), SBX_EAUTH);

    /* A route grant is still a route grant, text unchanged, and no logs grant. */
    grant_t r = { .worker_id = "wrk_abc", .sandbox_id = "sbx_def", .port = 8080, .expires_unix = 2000 };
    ck_assert_int_eq(grant_sign(k, &r, text), 0);
    ck_assert(strncmp(text, "v1.wrk_abc.sbx_def.8080.2000.", 29) == 0);
    ck_assert_int_eq(strlen(text), 29 + 64);
    ck_assert_int_eq(grant_verify_purpose(k, text, 0, GRANT_ROUTE, &out), 0);
    ck_assert_int_eq(out.port, 8080);
    ck_assert_int_eq(grant_verify_purpose(k, text, 0, GRANT_LOGS, &out), SBX_EPERM);
}
END_TEST

START_TEST(test_logs_grant_refuses_malformed_fields)
{
    unsigned char k[GRANT_KEY_BYTES];
    grant_key_from_token("sbt_logs", k);
    static const char *const fields[] = {
        "logs", "logs-", "logs--1-1", "logs-1-", "logs-1-2", "logs-01-1", "logs-1000001-0", "logs-all-1-1",
        "logs-+5-1", "logs-5-1x", "logs-ALL-0", "log-5-1", "logs-5", "0", "65536", "-1", "8080x",
    };
    const char *mac = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        char text[GRANT_MAX];
        grant_t out;
        snprintf(text, sizeof text, "v1.wrk_a.sbx_b.%s.2000.%s", fields[i], mac);
        ck_assert_msg(grant_verify(k, text, 0, &out) == SBX_EINVAL, "accepted field [%s]", fields[i]);
    }
    grant_t g = { .worker_id = "wrk_a", .sandbox_id = "sbx_b", .expires_unix = 1, .purpose = GRANT_LOGS,
                  .logs_tail = SBX_LOGS_TAIL_MAX + 1 };
    char text[GRANT_MAX];
    ck_assert_int_eq(grant_sign(k, &g, text), SBX_EINVAL);
    g.logs_tail = -2;
    ck_assert_int_eq(grant_sign(k, &g, text), SBX_EINVAL);
    g.logs_tail = SBX_LOGS_TAIL_MAX;
    ck_assert_int_eq(grant_sign(k, &g, text), 0);
    g.purpose = (grant_purpose_t)7;
    ck_assert_int_eq(grant_sign(k, &g, text), SBX_EINVAL);
}
END_TEST

START_TEST(test_grant_refuses_tampering_expiry_other_keys_and_garbage)
{
    unsigned char k[GRANT_KEY_BYTES], other[GRANT_KEY_BYTES];
    grant_key_from_token("sbt_a", k);
    grant_key_from_token("sbt_b", other);
    grant_t g = { .worker_id = "wrk_abc", .sandbox_id = "sbx_def", .port = 80, .expires_unix = 100 };
    char text[GRANT_MAX], bad[GRANT_MAX];
    ck_assert_int_eq(grant_sign(k, &g, text), 0);
    grant_t out;
    ck_assert_int_eq(grant_verify(other, text, 0, &out), SBX_EAUTH);
    ck_assert_int_eq(grant_verify(k, text, 101, &out), SBX_ETIMEOUT);
    snprintf(bad, sizeof bad, "%s", text);
    bad[19] = '1'; /* port 80 -> 81?  "v1.wrk_abc.sbx_def.8" index 19 is the port */
    ck_assert_int_eq(grant_verify(k, bad, 0, &out), SBX_EAUTH);
    snprintf(bad, sizeof bad, "%s", text);
    bad[strlen(bad) - 1] = bad[strlen(bad) - 1] == '0' ? '1' : '0';
    ck_assert_int_eq(grant_verify(k, bad, 0, &out), SBX_EAUTH);
    ck_assert_int_eq(grant_verify(k, "", 0, &out), SBX_EINVAL);
    ck_assert_int_eq(grant_verify(k, "v1.a.b.c", 0, &out), SBX_EINVAL);
    ck_assert_int_eq(grant_verify(k, "v2.wrk.sbx.80.100.00", 0, &out), SBX_EINVAL);
    grant_t dotted = { .worker_id = "wrk.x", .sandbox_id = "sbx", .port = 80, .expires_unix = 1 };
    ck_assert_int_eq(grant_sign(k, &dotted, text), SBX_EINVAL);
    grant_t port0 = { .worker_id = "wrk", .sandbox_id = "sbx", .port = 0, .expires_unix = 1 };
    ck_assert_int_eq(grant_sign(k, &port0, text), SBX_EINVAL);
    ck_assert_int_eq(grant_key_from_hash_hex("zz", k), SBX_EINVAL);
}
END_TEST

Suite *unit_suite(void)
{
    if (sodium_init() < 0) {
        fprintf(stderr, "sodium_init failed\n");
        return NULL;
    }
    Suite *s = suite_create("token");
    TCase *ids = unit_tcase_add(s, "ids", UNIT_TESTS(
        test_ids_new_has_prefix_and_26_base32_chars,
        test_ids_new_gives_distinct_ids,
        test_ids_valid_rejects_malformed_ids,
        test_ids_base32_matches_rfc4648_vectors,
    ));
    TCase *tokens = unit_tcase_add(s, "tokens", UNIT_TESTS(
        test_generated_token_parses_to_its_id,
        test_generated_tokens_are_distinct,
        test_hash_is_lowercase_hex_and_verifies,
        test_hash_matches_known_blake2b_256,
        test_changed_character_fails_verification,
        test_verify_with_bad_stored_hex_fails,
        test_parse_id_accepts_well_formed_token,
        test_parse_id_rejects_malformed_tokens,
    ));
    TCase *grants = unit_tcase_add(s, "grants", UNIT_TESTS(
        test_grant_round_trip_with_key_from_token_and_from_hash,
        test_grant_refuses_tampering_expiry_other_keys_and_garbage,
        test_logs_grant_round_trip_and_purposes_do_not_mix,
        test_logs_grant_refuses_malformed_fields,
    ));
    TCase *const all[] = { ids, tokens, grants };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tcase_add_checked_fixture(all[i], setup, NULL);
    return s;
}
