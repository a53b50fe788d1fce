/* Files grants (common/grant.h): the upload and download purposes, the
 * digest of the request line they are bound to, and that no other kind of
 * grant passes for one (nor one for another kind). */
#include "check_util.h"
#include "grant.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>

static void files_grant(grant_purpose_t p, const char *line, grant_t *ret)
{
    memset(ret, 0, sizeof *ret);
    snprintf(ret->worker_id, sizeof ret->worker_id, "wrk_abc");
    snprintf(ret->sandbox_id, sizeof ret->sandbox_id, "sbx_def");
    ret->expires_unix = 2000;
    ret->purpose = p;
    grant_files_digest(line, strlen(line), ret->files_digest);
}

/* The digest is unkeyed BLAKE2b-128 of the line, in lowercase hex. */
START_TEST(test_files_digest_is_blake2b_128_hex)
{
    char d[GRANT_FILES_DIGEST_HEX];
    grant_files_digest("", 0, d);
    /* BLAKE2b-128("") */
    ck_assert_str_eq(d, "cae66941d9efbd404e4d88758ea67670");
    const char *line = "{\"op\":\"get\",\"path\":\"/work\",\"format\":\"tar\"}";
    char d2[GRANT_FILES_DIGEST_HEX], d3[GRANT_FILES_DIGEST_HEX];
    grant_files_digest(line, strlen(line), d2);
    ck_assert_uint_eq(strlen(d2), 32);
    grant_files_digest(line, strlen(line) - 1, d3);
    ck_assert_str_ne(d2, d3);
}
END_TEST

START_TEST(test_files_grants_round_trip)
{
    unsigned char k[GRANT_KEY_BYTES];
    grant_key_from_token("sbt_files", k);
    const grant_purpose_t ps[2] = { GRANT_FILES_PUT, GRANT_FILES_GET };
    const char *tags[2] = { ".fput-", ".fget-" };
    for (int i = 0; i < 2; i++) {
        const char *line = "{\"op\":\"put\",\"path\":\"/work\",\"format\":\"tar\",\"max_bytes\":1048576}";
        grant_t g, out;
        files_grant(ps[i], line, &g);
        char text[GRANT_MAX];
        ck_assert_int_eq(grant_sign(k, &g, text), 0);
        ck_assert_ptr_nonnull(strstr(text, tags[i]));
        ck_assert_int_eq(grant_verify_purpose(k, text, 1999, ps[i], &out), 0);
        ck_assert_int_eq(out.purpose, ps[i]);
        ck_assert_str_eq(out.files_digest, g.files_digest);
        ck_assert_str_eq(out.sandbox_id, "sbx_def");
        ck_assert_int_eq(out.port, 0);
        ck_assert_int_eq(grant_verify(k, text, 2001, &out), SBX_ETIMEOUT);
        /* A digest mismatch is the caller's check: the grant verifies, and its
         * digest differs from the one of another line. */
        char other[GRANT_FILES_DIGEST_HEX];
        const char *line2 = "{\"op\":\"put\",\"path\":\"/etc\",\"format\":\"tar\",\"max_bytes\":1048576}";
        grant_files_digest(line2, strlen(line2), other);
        ck_assert_int_eq(grant_verify(k, text, 0, &out), 0);
        ck_assert_int_ne(sodium_memcmp(out.files_digest, other, 32), 0);
    }
}
END_TEST

/* A put grant is no get grant and the reverse; neither is a route or logs
 * grant, and a route or logs grant is no files grant. */
START_TEST(test_files_purposes_do_not_mix)
{
    unsigned char k[GRANT_KEY_BYTES];
    grant_key_from_token("sbt_files", k);
    grant_t g, out;
    char text[GRANT_MAX];
    files_grant(GRANT_FILES_PUT, "{}", &g);
    ck_assert_int_eq(grant_sign(k, &g, text), 0);
    ck_assert_int_eq(grant_verify_purpose(k, text, 0, GRANT_FILES_GET, &out), SBX_EPERM);
    ck_assert_str_eq(out.files_digest, "");
    ck_assert_int_eq(grant_verify_purpose(k, text, 0, GRANT_ROUTE, &out), SBX_EPERM);
    ck_assert_int_eq(grant_verify_purpose(k, text, 0, GRANT_LOGS, &out), SBX_EPERM);
    /* The same MAC with the purpose field renamed is not a grant. */
    char swapped[GRANT_MAX];
    snprintf(swapped, sizeof swapped, "%s", text);
    char *f = strstr(swapped, ".fput-");
    ck_assert_ptr_nonnull(f);
    memcpy(f, ".fget-", 6);
    ck_assert_int_eq(grant_verify(k, swapped, 0, &out), SBX_EAUTH);

    grant_t r = { .worker_id = "wrk_abc", .sandbox_id = "sbx_def", .port = 8080, .expires_unix = 2000 };
    ck_assert_int_eq(grant_sign(k, &r, text), 0);
    ck_assert_int_eq(grant_verify_purpose(k, text, 0, GRANT_FILES_PUT, &out), SBX_EPERM);
    ck_assert_int_eq(grant_verify_purpose(k, text, 0, GRANT_FILES_GET, &out), SBX_EPERM);
    grant_t l = { .worker_id = "wrk_abc", .sandbox_id = "sbx_def", .expires_unix = 2000, .purpose = GRANT_LOGS,
                  .logs_tail = 5 };
    ck_assert_int_eq(grant_sign(k, &l, text), 0);
    ck_assert_int_eq(grant_verify_purpose(k, text, 0, GRANT_FILES_PUT, &out), SBX_EPERM);
    ck_assert_int_eq(grant_verify_purpose(k, text, 0, GRANT_FILES_GET, &out), SBX_EPERM);
    ck_assert_int_eq(grant_verify_purpose(k, text, 0, GRANT_LOGS, &out), 0);
}
END_TEST

/* Signs the text "v1.wrk_abc.sbx_def.<field>.2000" with a correct MAC, so
 * only the field's own form decides. */
static int verify_field(const unsigned char k[GRANT_KEY_BYTES], const char *field)
{
    char body[GRANT_MAX], text[GRANT_MAX * 2], mac[GRANT_KEY_BYTES * 2 + 1];
    unsigned char m[GRANT_KEY_BYTES];
    int n = snprintf(body, sizeof body, "v1.wrk_abc.sbx_def.%s.2000", field);
    crypto_generichash(m, sizeof m, (const unsigned char *)body, (size_t)n, k, GRANT_KEY_BYTES);
    sodium_bin2hex(mac, sizeof mac, m, sizeof m);
    snprintf(text, sizeof text, "%s.%s", body, mac);
    grant_t out;
    return grant_verify(k, text, 0, &out);
}

START_TEST(test_files_grant_refuses_malformed_digests)
{
    unsigned char k[GRANT_KEY_BYTES];
    grant_key_from_token("sbt_files", k);
    ck_assert_int_eq(verify_field(k, "fput-0123456789abcdef0123456789abcdef"), 0);
    ck_assert_int_eq(verify_field(k, "fget-0123456789abcdef0123456789abcdef"), 0);
    const char *bad[] = {
        "fput-", "fput-0123456789abcdef0123456789abcde",      /* 31 */
        "fput-0123456789abcdef0123456789abcdef0",             /* 33 */
        "fput-0123456789ABCDEF0123456789abcdef",              /* upper case */
        "fput-0123456789abcdef0123456789abcdeg",
        "fput-0123456789abcdef-123456789abcdef",
        "fpet-0123456789abcdef0123456789abcdef", "fput0123456789abcdef0123456789abcdef",
        "FPUT-0123456789abcdef0123456789abcdef", "fput--0123456789abcdef0123456789abcde",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(verify_field(k, bad[i]) == SBX_EINVAL, "accepted %s", bad[i]);
    /* Nor does grant_sign write one. */
    grant_t g;
    files_grant(GRANT_FILES_GET, "{}", &g);
    char text[GRANT_MAX];
    g.files_digest[0] = 'X';
    ck_assert_int_eq(grant_sign(k, &g, text), SBX_EINVAL);
    g.files_digest[0] = '\0';
    ck_assert_int_eq(grant_sign(k, &g, text), SBX_EINVAL);
}
END_TEST

START_TEST(test_shell_grants_round_trip_and_stay_apart)
{
    unsigned char k[GRANT_KEY_BYTES];
    grant_key_from_token("sbt_shell", k);
    const char *line = "{\"op\":\"shell\",\"argv\":[\"/bin/sh\"],\"cols\":80,\"rows\":24}";
    grant_t g, out;
    char text[GRANT_MAX];
    files_grant(GRANT_SHELL, line, &g);
    ck_assert_int_eq(grant_sign(k, &g, text), 0);
    ck_assert_ptr_nonnull(strstr(text, ".shell-"));
    ck_assert_int_eq(grant_verify_purpose(k, text, 0, GRANT_SHELL, &out), 0);
    ck_assert_str_eq(out.files_digest, g.files_digest);
    ck_assert_str_eq(out.sandbox_id, "sbx_def");
    /* A shell grant is no files, logs or route grant, and none of those is a shell grant. */
    ck_assert_int_eq(grant_verify_purpose(k, text, 0, GRANT_FILES_PUT, &out), SBX_EPERM);
    ck_assert_int_eq(grant_verify_purpose(k, text, 0, GRANT_FILES_GET, &out), SBX_EPERM);
    ck_assert_int_eq(grant_verify_purpose(k, text, 0, GRANT_ROUTE, &out), SBX_EPERM);
    ck_assert_int_eq(grant_verify_purpose(k, text, 0, GRANT_LOGS, &out), SBX_EPERM);
    ck_assert_int_eq(grant_verify_purpose(k, text, 2001, GRANT_SHELL, &out), SBX_ETIMEOUT);
    files_grant(GRANT_FILES_PUT, line, &g);
    ck_assert_int_eq(grant_sign(k, &g, text), 0);
    ck_assert_int_eq(grant_verify_purpose(k, text, 0, GRANT_SHELL, &out), SBX_EPERM);
    /* Renaming the purpose under the same MAC does not make one. */
    char *f = strstr(text, ".fput-");
    ck_assert_ptr_nonnull(f);
    char swapped[GRANT_MAX * 2];
    snprintf(swapped, sizeof swapped, "%.*s.shell-%s", (int)(f - text), text, f + 6);
    ck_assert_int_eq(grant_verify(k, swapped, 0, &out), SBX_EAUTH);
    /* Malformed shell digests. */
    ck_assert_int_eq(verify_field(k, "shell-0123456789abcdef0123456789abcdef"), 0);
    const char *bad[] = { "shell-", "shell-0123456789abcdef0123456789abcde", "shell-0123456789abcdef0123456789abcdef0",
                          "shell-0123456789ABCDEF0123456789abcdef", "shel-0123456789abcdef0123456789abcdef",
                          "shell0123456789abcdef0123456789abcdef", "SHELL-0123456789abcdef0123456789abcdef" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(verify_field(k, bad[i]) == SBX_EINVAL, "accepted %s", bad[i]);
}
END_TEST

Suite *unit_suite(void)
{
    if (sodium_init() < 0) {
        fprintf(stderr, "sodium_init failed\n");
        return NULL;
    }
    Suite *s = suite_create("grant");
    unit_tcase_add(s, "files", UNIT_TESTS(
        test_files_digest_is_blake2b_128_hex,
        test_files_grants_round_trip,
        test_files_purposes_do_not_mix,
        test_files_grant_refuses_malformed_digests,
    ));
    unit_tcase_add(s, "shell", UNIT_TESTS(
        test_shell_grants_round_trip_and_stay_apart,
    ));
    return s;
}
