/* Unit tests for the strict sandbox spec codec (common/spec.c): create requests.
 * The exec request and kv list codecs are in test_spec_exec.c. */
#include "check_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "jsonx.h"
#include "limits.h"
#include "spec.h"

/* Asserts that a create request is refused as invalid_argument with a
 * message containing `want`, and leaves *ret empty. */
static void expect_spec_error(const char *text, const char *want)
{
    json_object *o = unit_json(text);
    sandbox_spec_t s;
    api_error_t err = { 0 };
    memset(&s, 0x5A, sizeof s);
    unit_expect_invalid("spec", text, spec_from_json(o, &s, &err), &err, want);
    ck_assert_ptr_null(s.image);
    ck_assert_ptr_null(s.tenant);
    ck_assert_ptr_null(s.env.items);
    ck_assert_ptr_null(s.labels.items);
    spec_release(&s);
    json_object_put(o);
}

/* Expects the request text_fmt(key, value) refused, with want_fmt(key) in the
 * message, for every key of keys and every value of values. */
static void expect_each_refused(const char *text_fmt, const char *want_fmt, const char *const keys[], size_t n_keys,
                                const char *const values[], size_t n_values)
{
    for (size_t k = 0; k < n_keys; k++)
        for (size_t v = 0; v < n_values; v++) {
            char text[256], want[64];
            snprintf(text, sizeof text, text_fmt, keys[k], values[v]);
            snprintf(want, sizeof want, want_fmt, keys[k]);
            expect_spec_error(text, want);
        }
}

/* Expects a create request with any of the n bad keys, or with a key of
 * fill one byte over the limit, in the object field refused naming the key. */
static void expect_bad_keys_refused(const char *field, const char *const bad[], size_t n, char fill)
{
    char text[512], want[32];
    snprintf(want, sizeof want, "%s key \"", field);
    for (size_t i = 0; i < n; i++) {
        snprintf(text, sizeof text, "{\"image\":\"b\",\"%s\":{\"%s\":\"v\"}}", field, bad[i]);
        expect_spec_error(text, want);
    }
    char *key = unit_repeat(fill, SBX_MAX_KEY_BYTES + 1);
    snprintf(text, sizeof text, "{\"image\":\"b\",\"%s\":{\"%s\":\"v\"}}", field, key);
    expect_spec_error(text, want);
    free(key);
}

/* Decodes a spec that must be valid. */
static void spec_ok(const char *text, sandbox_spec_t *s)
{
    json_object *o = unit_json(text);
    api_error_t err = { 0 };
    ck_assert_msg(spec_from_json(o, s, &err) == 0, "spec %s refused: %s", text, err.message);
    json_object_put(o);
}

/* ---- defaults and round trip ---- */

START_TEST(test_minimal_spec_gets_documented_defaults)
{
    sandbox_spec_t s;
    spec_ok("{\"image\":\"busybox\"}", &s);
    ck_assert_str_eq(s.image, "busybox");
    ck_assert_ptr_null(s.tenant);
    ck_assert_int_eq(s.cpu_millis, 1000);
    ck_assert_int_eq(s.memory_mib, 512);
    ck_assert_int_eq(s.ttl_seconds, 3600);
    ck_assert_int_eq(s.network, NET_NONE);
    ck_assert(!s.untrusted_repo);
    ck_assert(!s.generated_code);
    ck_assert(!s.hostile);
    ck_assert_uint_eq(s.env.n, 0);
    ck_assert_uint_eq(s.labels.n, 0);
    spec_release(&s);
}
END_TEST

START_TEST(test_null_fields_get_defaults)
{
    sandbox_spec_t s;
    spec_ok("{\"image\":\"busybox\",\"tenant\":null,\"cpu_millis\":null,\"memory_mib\":null,\"ttl_seconds\":null,"
            "\"network\":null,\"trust\":null,\"env\":null,\"labels\":null}",
            &s);
    ck_assert_ptr_null(s.tenant);
    ck_assert_int_eq(s.cpu_millis, SPEC_DEFAULT_CPU_MILLIS);
    ck_assert_int_eq(s.memory_mib, SPEC_DEFAULT_MEMORY_MIB);
    ck_assert_int_eq(s.ttl_seconds, SPEC_DEFAULT_TTL_SECONDS);
    ck_assert_int_eq(s.network, NET_NONE);
    spec_release(&s);

    spec_ok("{\"image\":\"busybox\",\"trust\":{\"hostile\":null}}", &s);
    ck_assert(!s.hostile);
    spec_release(&s);
}
END_TEST

START_TEST(test_full_spec_decodes_every_field)
{
    sandbox_spec_t s;
    spec_ok("{\"tenant\":\"platform\",\"image\":\"busybox:latest\",\"cpu_millis\":2000,\"memory_mib\":4096,"
            "\"ttl_seconds\":7200,\"network\":\"restricted\","
            "\"trust\":{\"untrusted_repo\":true,\"generated_code\":false,\"hostile\":true},"
            "\"env\":{\"K\":\"V\",\"_X1\":\"a=b c\"},\"labels\":{\"team/app.name-x_y\":\"v\"}}",
            &s);
    ck_assert_str_eq(s.tenant, "platform");
    ck_assert_str_eq(s.image, "busybox:latest");
    ck_assert_int_eq(s.cpu_millis, 2000);
    ck_assert_int_eq(s.memory_mib, 4096);
    ck_assert_int_eq(s.ttl_seconds, 7200);
    ck_assert_int_eq(s.network, NET_RESTRICTED);
    ck_assert(s.untrusted_repo);
    ck_assert(!s.generated_code);
    ck_assert(s.hostile);
    ck_assert_uint_eq(s.env.n, 2);
    ck_assert_str_eq(s.env.items[0].key, "K");
    ck_assert_str_eq(s.env.items[0].value, "V");
    ck_assert_str_eq(s.env.items[1].key, "_X1");
    ck_assert_str_eq(s.env.items[1].value, "a=b c");
    ck_assert_uint_eq(s.labels.n, 1);
    ck_assert_str_eq(s.labels.items[0].key, "team/app.name-x_y");
    ck_assert_str_eq(s.labels.items[0].value, "v");
    spec_release(&s);
}
END_TEST

static void assert_spec_equal(const sandbox_spec_t *a, const sandbox_spec_t *b)
{
    if (a->tenant || b->tenant) {
        ck_assert_ptr_nonnull(a->tenant);
        ck_assert_ptr_nonnull(b->tenant);
        ck_assert_str_eq(a->tenant, b->tenant);
    }
    ck_assert_str_eq(a->image, b->image);
    ck_assert_int_eq(a->cpu_millis, b->cpu_millis);
    ck_assert_int_eq(a->memory_mib, b->memory_mib);
    ck_assert_int_eq(a->ttl_seconds, b->ttl_seconds);
    ck_assert_int_eq(a->network, b->network);
    ck_assert_int_eq(a->untrusted_repo, b->untrusted_repo);
    ck_assert_int_eq(a->generated_code, b->generated_code);
    ck_assert_int_eq(a->hostile, b->hostile);
    ck_assert_uint_eq(a->env.n, b->env.n);
    for (size_t i = 0; i < a->env.n; i++) {
        ck_assert_str_eq(a->env.items[i].key, b->env.items[i].key);
        ck_assert_str_eq(a->env.items[i].value, b->env.items[i].value);
    }
    ck_assert_uint_eq(a->labels.n, b->labels.n);
    for (size_t i = 0; i < a->labels.n; i++) {
        ck_assert_str_eq(a->labels.items[i].key, b->labels.items[i].key);
        ck_assert_str_eq(a->labels.items[i].value, b->labels.items[i].value);
    }
}

static void check_spec_round_trip(const char *text)
{
    sandbox_spec_t a, b;
    spec_ok(text, &a);
    json_object *o = spec_to_json(&a);
    char *dump1 = jsonx_dump(o);
    api_error_t err;
    memset(&err, 0, sizeof err);
    ck_assert_msg(spec_from_json(o, &b, &err) == 0, "canonical %s refused: %s", dump1, err.message);
    assert_spec_equal(&a, &b);
    /* The canonical form is a fixed point. */
    json_object *o2 = spec_to_json(&b);
    char *dump2 = jsonx_dump(o2);
    ck_assert_str_eq(dump2, dump1);
    free(dump1);
    free(dump2);
    json_object_put(o);
    json_object_put(o2);
    spec_release(&a);
    spec_release(&b);
}

START_TEST(test_spec_round_trip_keeps_values)
{
    check_spec_round_trip("{\"image\":\"busybox\"}");
    check_spec_round_trip("{\"tenant\":\"t-1_x\",\"image\":\"registry.example:5000/team/img@sha256:abc\","
                          "\"cpu_millis\":10,\"memory_mib\":6,\"ttl_seconds\":10,\"network\":\"open\","
                          "\"trust\":{\"untrusted_repo\":true,\"generated_code\":true,\"hostile\":true},"
                          "\"env\":{\"A\":\"\",\"B\":\"\\u00e9\\n\\\"q\\\"\"},\"labels\":{\"x\":\"1\",\"y.z\":\"2\"}}");
    check_spec_round_trip("{\"image\":\"i\",\"cpu_millis\":1024000,\"memory_mib\":4194304,\"ttl_seconds\":2592000,"
                          "\"network\":\"restricted\",\"trust\":{\"generated_code\":true}}");
    check_spec_round_trip("{\"image\":\"i\",\"network\":\"open\",\"egress\":{\"allow\":[\"*.Pkg.test\"],"
                          "\"deny\":[\"x.pkg.test.\"]}}");
}
END_TEST

START_TEST(test_spec_egress_rules)
{
    sandbox_spec_t s;
    spec_ok("{\"image\":\"i\",\"network\":\"open\",\"egress\":{\"allow\":[\"A.test\"]}}", &s);
    ck_assert(s.egress.set);
    ck_assert_str_eq(s.egress.allow[0], "a.test");
    json_object *j = spec_to_json(&s);
    ck_assert_str_eq(json_object_to_json_string_ext(jsonx_get_obj(j, "egress"), JSON_C_TO_STRING_PLAIN),
                     "{\"allow\":[\"a.test\"],\"deny\":[],\"default\":\"deny\"}");
    json_object_put(j);
    spec_release(&s);
    /* none: absent from the canonical form */
    spec_ok("{\"image\":\"i\",\"network\":\"open\"}", &s);
    j = spec_to_json(&s);
    ck_assert(!json_object_object_get_ex(j, "egress", NULL));
    json_object_put(j);
    spec_release(&s);
    expect_spec_error("{\"image\":\"i\",\"egress\":{\"allow\":[\"a.test\"]}}", "apply to network open");
    expect_spec_error("{\"image\":\"i\",\"network\":\"open\",\"egress\":{\"deny\":[\"::1\"]}}",
                      "egress.deny[0]");
}
END_TEST

START_TEST(test_spec_to_json_writes_every_field)
{
    sandbox_spec_t s;
    spec_ok("{\"image\":\"busybox\",\"env\":{\"K\":\"V\"}}", &s);
    json_object *o = spec_to_json(&s);
    char *d = jsonx_dump(o);
    ck_assert_str_eq(d, "{\"tenant\":null,\"image\":\"busybox\",\"cpu_millis\":1000,\"memory_mib\":512,"
                        "\"ttl_seconds\":3600,\"network\":\"none\","
                        "\"trust\":{\"untrusted_repo\":false,\"generated_code\":false,\"hostile\":false},"
                        "\"isolation\":null,\"read_only_root\":false,\"hardened\":false,"
                        "\"env\":{\"K\":\"V\"},\"labels\":{},\"selector\":{}}");
    free(d);
    json_object_put(o);
    spec_release(&s);
}
END_TEST

START_TEST(test_numeric_bounds_are_inclusive)
{
    sandbox_spec_t s;
    char text[256];
    snprintf(text, sizeof text, "{\"image\":\"i\",\"cpu_millis\":%d,\"memory_mib\":%d,\"ttl_seconds\":%d}",
             SBX_CPU_MILLIS_MIN, SBX_MEMORY_MIB_MIN, SBX_TTL_SECONDS_MIN);
    spec_ok(text, &s);
    ck_assert_int_eq(s.cpu_millis, SBX_CPU_MILLIS_MIN);
    ck_assert_int_eq(s.memory_mib, SBX_MEMORY_MIB_MIN);
    ck_assert_int_eq(s.ttl_seconds, SBX_TTL_SECONDS_MIN);
    spec_release(&s);
    snprintf(text, sizeof text, "{\"image\":\"i\",\"cpu_millis\":%d,\"memory_mib\":%d,\"ttl_seconds\":%d}",
             SBX_CPU_MILLIS_MAX, SBX_MEMORY_MIB_MAX, SBX_TTL_SECONDS_MAX);
    spec_ok(text, &s);
    ck_assert_int_eq(s.cpu_millis, SBX_CPU_MILLIS_MAX);
    ck_assert_int_eq(s.memory_mib, SBX_MEMORY_MIB_MAX);
    ck_assert_int_eq(s.ttl_seconds, SBX_TTL_SECONDS_MAX);
    spec_release(&s);
}
END_TEST

START_TEST(test_env_and_labels_at_their_limits_are_accepted)
{
    /* SBX_MAX_ENV env entries, SBX_MAX_LABELS labels, a 128-byte key and a 4096-byte value. */
    size_t cap = 64 * 1024;
    char *text = unit_xmalloc(cap);
    size_t o = (size_t)snprintf(text, cap, "{\"image\":\"i\",\"env\":{");
    for (int i = 0; i < SBX_MAX_ENV; i++)
        o += (size_t)snprintf(text + o, cap - o, "%s\"E%d\":\"v\"", i ? "," : "", i);
    o += (size_t)snprintf(text + o, cap - o, "},\"labels\":{");
    for (int i = 0; i < SBX_MAX_LABELS - 1; i++)
        o += (size_t)snprintf(text + o, cap - o, "%s\"l%d\":\"v\"", i ? "," : "", i);
    char *key = unit_repeat('k', SBX_MAX_KEY_BYTES), *val = unit_repeat('v', SBX_MAX_VALUE_BYTES);
    o += (size_t)snprintf(text + o, cap - o, ",\"%s\":\"%s\"}}", key, val);
    ck_assert_uint_lt(o, cap);
    sandbox_spec_t s;
    spec_ok(text, &s);
    ck_assert_uint_eq(s.env.n, SBX_MAX_ENV);
    ck_assert_uint_eq(s.labels.n, SBX_MAX_LABELS);
    ck_assert_uint_eq(strlen(s.labels.items[SBX_MAX_LABELS - 1].value), SBX_MAX_VALUE_BYTES);
    spec_release(&s);
    free(key);
    free(val);
    free(text);
}
END_TEST

/* ---- invalid create requests ---- */

START_TEST(test_body_not_an_object_is_rejected)
{
    expect_spec_error("[]", "request body must be a JSON object");
    expect_spec_error("\"busybox\"", "request body must be a JSON object");
    expect_spec_error("42", "request body must be a JSON object");
    sandbox_spec_t s;
    api_error_t err;
    ck_assert_int_eq(spec_from_json(NULL, &s, &err), SBX_EINVAL);
    ck_assert_int_eq(err.code, API_INVALID_ARGUMENT);
    ck_assert_str_eq(err.message, "the request body must be a JSON object");
}
END_TEST

START_TEST(test_unknown_top_level_field_is_named)
{
    expect_spec_error("{\"image\":\"b\",\"imagee\":\"x\"}", "unknown field \"imagee\" in the sandbox spec");
    expect_spec_error("{\"image\":\"b\",\"runtime\":\"kata\"}", "unknown field \"runtime\"");
    expect_spec_error("{\"image\":\"b\",\"untrusted_repo\":true}", "unknown field \"untrusted_repo\"");
    expect_spec_error("{\"image\":\"b\",\"\":1}", "unknown field \"\"");
    expect_spec_error("{\"image\":\"b\",\"Image\":\"c\"}", "unknown field \"Image\"");
}
END_TEST

START_TEST(test_unknown_trust_field_is_named)
{
    expect_spec_error("{\"image\":\"b\",\"trust\":{\"evil\":true}}", "unknown field \"evil\" in trust");
    expect_spec_error("{\"image\":\"b\",\"trust\":{\"hostile\":false,\"Hostile\":true}}",
                      "unknown field \"Hostile\" in trust");
}
END_TEST

/* Decodes with a server default image; must succeed. */
static void spec_default_ok(const char *text, const char *def, sandbox_spec_t *s)
{
    json_object *o = unit_json(text);
    api_error_t err = { 0 };
    ck_assert_msg(spec_from_json_default(o, def, s, &err) == 0, "spec %s refused: %s", text, err.message);
    json_object_put(o);
}

START_TEST(test_absent_image_gets_the_default)
{
    sandbox_spec_t s;
    spec_default_ok("{}", "sandbox/busybox:latest", &s);
    ck_assert_str_eq(s.image, "sandbox/busybox:latest");
    ck_assert_int_eq(s.cpu_millis, SPEC_DEFAULT_CPU_MILLIS);
    /* the canonical JSON names the image used */
    json_object *o = spec_to_json(&s);
    ck_assert_str_eq(jsonx_get_str(o, "image"), "sandbox/busybox:latest");
    json_object_put(o);
    spec_release(&s);
    spec_default_ok("{\"image\":null,\"cpu_millis\":200}", "sandbox/busybox:latest", &s);
    ck_assert_str_eq(s.image, "sandbox/busybox:latest");
    ck_assert_int_eq(s.cpu_millis, 200);
    spec_release(&s);
}
END_TEST

START_TEST(test_explicit_image_wins_over_the_default)
{
    sandbox_spec_t s;
    spec_default_ok("{\"image\":\"alpine:3\"}", "sandbox/busybox:latest", &s);
    ck_assert_str_eq(s.image, "alpine:3");
    spec_release(&s);
}
END_TEST

START_TEST(test_default_does_not_excuse_a_bad_image)
{
    static const char *bad[] = { "{\"image\":\"\"}", "{\"image\":42}", "{\"image\":\"a b\"}" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        json_object *o = unit_json(bad[i]);
        sandbox_spec_t s;
        api_error_t err;
        memset(&err, 0, sizeof err);
        ck_assert_int_eq(spec_from_json_default(o, "sandbox/busybox:latest", &s, &err), SBX_EINVAL);
        ck_assert_int_eq(err.code, API_INVALID_ARGUMENT);
        ck_assert_ptr_null(s.image);
        json_object_put(o);
    }
    /* no default: still required */
    json_object *o = unit_json("{}");
    sandbox_spec_t s;
    api_error_t err;
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(spec_from_json_default(o, NULL, &s, &err), SBX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.message, "image is required"));
    json_object_put(o);
}
END_TEST

START_TEST(test_image_ref_validation)
{
    static const char *good[] = {
        "busybox", "busybox:latest", "sandbox/busybox:latest", "library/debian:12",
        "registry.example:5000/team/img:v1.2-rc_3", "localhost/img", "localhost:5000/a/b/c",
        "a__b/c-d--e.f_g:TAG", "img@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "img:1@sha256:0123456789abcdef0123456789abcdef",
    };
    static const char *bad[] = {
        "", "Busybox", "busy box", "busybox:", ":latest", "/busybox", "busybox/", "a//b", "-a", "a-",
        "a...b", "a___b", "img:-x", "img:.x", "img@sha256:abc", "img@:0123456789abcdef0123456789abcdef",
        "img@sha256:0123456789ABCDEF0123456789ABCDEF", "host:port/img", "img:t@g", "img\n",
    };
    char why[256];
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        ck_assert_msg(spec_image_ref_valid(good[i], why, sizeof why), "%s refused: %s", good[i], why);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        why[0] = '\0';
        ck_assert_msg(!spec_image_ref_valid(bad[i], why, sizeof why), "%s accepted", bad[i]);
        ck_assert_msg(why[0] != '\0', "%s: no reason", bad[i]);
    }
    char *longname = unit_repeat('a', SBX_MAX_IMAGE_BYTES + 1);
    ck_assert(!spec_image_ref_valid(longname, why, sizeof why));
    ck_assert_ptr_nonnull(strstr(why, "at most"));
    free(longname);
    ck_assert(!spec_image_ref_valid(NULL, NULL, 0));
}
END_TEST

START_TEST(test_image_missing_or_empty_or_wrong_type_is_rejected)
{
    expect_spec_error("{}", "image is required");
    expect_spec_error("{\"image\":null}", "image is required");
    expect_spec_error("{\"cpu_millis\":1000}", "image is required");
    expect_spec_error("{\"image\":\"\"}", "image must be 1 to 512 printable bytes");
    expect_spec_error("{\"image\":42}", "image must be a string");
    expect_spec_error("{\"image\":[\"busybox\"]}", "image must be a string");
    expect_spec_error("{\"image\":{}}", "image must be a string");
    expect_spec_error("{\"image\":true}", "image must be a string");
}
END_TEST

START_TEST(test_image_with_space_or_control_or_nul_is_rejected)
{
    expect_spec_error("{\"image\":\"busy box\"}", "image must not contain spaces");
    expect_spec_error("{\"image\":\" busybox\"}", "image must not contain spaces");
    expect_spec_error("{\"image\":\"busybox\\n\"}", "image must be 1 to 512 printable bytes");
    expect_spec_error("{\"image\":\"busybox\\t\"}", "image");
    expect_spec_error("{\"image\":\"busybox\\u007f\"}", "image");
    expect_spec_error("{\"image\":\"busy\\u0000box\"}", "image must not contain NUL bytes");
}
END_TEST

START_TEST(test_image_too_long_is_rejected)
{
    char *img = unit_repeat('a', SBX_MAX_IMAGE_BYTES + 1);
    size_t cap = strlen(img) + 32;
    char *text = unit_xmalloc(cap);
    snprintf(text, cap, "{\"image\":\"%s\"}", img);
    expect_spec_error(text, "image must be 1 to 512 printable bytes");
    /* Exactly at the limit is fine. */
    img[SBX_MAX_IMAGE_BYTES] = '\0';
    snprintf(text, cap, "{\"image\":\"%s\"}", img);
    sandbox_spec_t s;
    spec_ok(text, &s);
    ck_assert_uint_eq(strlen(s.image), SBX_MAX_IMAGE_BYTES);
    spec_release(&s);
    free(img);
    free(text);
}
END_TEST

START_TEST(test_invalid_tenant_is_rejected)
{
    static const char *bad[] = {
        "\"Platform\"", "\"-team\"", "\"_team\"", "\"te am\"", "\"team.x\"", "\"t\\u00e9am\"", "\"\"",
        "42", "true", "[\"t\"]",
        "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"", /* 64 */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char text[256];
        snprintf(text, sizeof text, "{\"image\":\"b\",\"tenant\":%s}", bad[i]);
        expect_spec_error(text, "tenant must");
    }
    sandbox_spec_t s;
    spec_ok("{\"image\":\"b\",\"tenant\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}", &s);
    ck_assert_uint_eq(strlen(s.tenant), 63);
    spec_release(&s);
    spec_ok("{\"image\":\"b\",\"tenant\":\"0team-a_b\"}", &s);
    ck_assert_str_eq(s.tenant, "0team-a_b");
    spec_release(&s);
}
END_TEST

START_TEST(test_numeric_fields_out_of_range_are_rejected_naming_the_field)
{
    static const char *const fields[] = { "cpu_millis", "memory_mib", "ttl_seconds" };
    static const char *const values[] = { "-1", "0", "1000000000000000", "-1000000000000000",
                                    "9223372036854775807", "18446744073709551615",
                                    "100000000000000000000000000000" };
    expect_each_refused("{\"image\":\"b\",\"%s\":%s}", "%s must be between ", fields, 3, values,
                        sizeof values / sizeof *values);
}
END_TEST

START_TEST(test_numeric_range_message_names_bounds_and_value)
{
    expect_spec_error("{\"image\":\"b\",\"cpu_millis\":-1}", "cpu_millis must be between 10 and 1024000 (got -1)");
    expect_spec_error("{\"image\":\"b\",\"cpu_millis\":9}", "cpu_millis must be between 10 and 1024000 (got 9)");
    expect_spec_error("{\"image\":\"b\",\"cpu_millis\":1024001}", "(got 1024001)");
    expect_spec_error("{\"image\":\"b\",\"memory_mib\":5}", "memory_mib must be between 6 and 4194304 (got 5)");
    expect_spec_error("{\"image\":\"b\",\"memory_mib\":4194305}", "(got 4194305)");
    expect_spec_error("{\"image\":\"b\",\"ttl_seconds\":9}", "ttl_seconds must be between 10 and 2592000 (got 9)");
    expect_spec_error("{\"image\":\"b\",\"ttl_seconds\":2592001}", "(got 2592001)");
    expect_spec_error("{\"image\":\"b\",\"ttl_seconds\":1000000000000000}", "(got 1000000000000000)");
}
END_TEST

START_TEST(test_numeric_fields_of_non_integer_type_are_rejected)
{
    static const char *const fields[] = { "cpu_millis", "memory_mib", "ttl_seconds" };
    static const char *const values[] = { "\"1000\"", "1000.0", "1.5", "1e3", "true", "[1000]", "{}", "\"\"" };
    expect_each_refused("{\"image\":\"b\",\"%s\":%s}", "%s must be an integer", fields, 3, values,
                        sizeof values / sizeof *values);
}
END_TEST

START_TEST(test_unknown_network_is_rejected)
{
    static const char *bad[] = { "\"closed\"", "\"NONE\"", "\"Open\"", "\"\"", "\"none \"", "1", "true",
                                 "[\"none\"]", "{}" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char text[128];
        snprintf(text, sizeof text, "{\"image\":\"b\",\"network\":%s}", bad[i]);
        expect_spec_error(text, "network must be one of none, restricted, open");
    }
    static const struct { const char *name; net_mode_t m; } good[] = {
        { "none", NET_NONE }, { "restricted", NET_RESTRICTED }, { "open", NET_OPEN } };
    for (size_t i = 0; i < 3; i++) {
        char text[128];
        snprintf(text, sizeof text, "{\"image\":\"b\",\"network\":\"%s\"}", good[i].name);
        sandbox_spec_t s;
        spec_ok(text, &s);
        ck_assert_int_eq(s.network, good[i].m);
        spec_release(&s);
    }
}
END_TEST

START_TEST(test_trust_that_is_not_an_object_is_rejected)
{
    expect_spec_error("{\"image\":\"b\",\"trust\":true}", "trust must be an object");
    expect_spec_error("{\"image\":\"b\",\"trust\":\"hostile\"}", "trust must be an object");
    expect_spec_error("{\"image\":\"b\",\"trust\":[\"hostile\"]}", "trust must be an object");
    expect_spec_error("{\"image\":\"b\",\"trust\":1}", "trust must be an object");
}
END_TEST

START_TEST(test_trust_values_that_are_not_booleans_are_rejected)
{
    static const char *const keys[] = { "untrusted_repo", "generated_code", "hostile" };
    static const char *const values[] = { "\"true\"", "1", "0", "\"yes\"", "[]", "{}" };
    expect_each_refused("{\"image\":\"b\",\"trust\":{\"%s\":%s}}", "trust.%s must be true or false", keys, 3,
                        values, sizeof values / sizeof *values);
}
END_TEST

START_TEST(test_env_that_is_not_an_object_is_rejected)
{
    expect_spec_error("{\"image\":\"b\",\"env\":[\"K=V\"]}", "env must be an object of string values");
    expect_spec_error("{\"image\":\"b\",\"env\":\"K=V\"}", "env must be an object");
    expect_spec_error("{\"image\":\"b\",\"env\":1}", "env must be an object");
    expect_spec_error("{\"image\":\"b\",\"labels\":[]}", "labels must be an object");
}
END_TEST

START_TEST(test_env_bad_key_is_rejected)
{
    static const char *const bad[] = { "1A", "A-B", "A B", "A=B", "", "A.B", "\\u00c9T\\u00c9", "$A" };
    expect_bad_keys_refused("env", bad, sizeof bad / sizeof *bad, 'K');
}
END_TEST

START_TEST(test_env_non_string_value_is_rejected)
{
    expect_spec_error("{\"image\":\"b\",\"env\":{\"K\":1}}", "env.K must be a string");
    expect_spec_error("{\"image\":\"b\",\"env\":{\"K\":null}}", "env.K must be a string");
    expect_spec_error("{\"image\":\"b\",\"env\":{\"K\":true}}", "env.K must be a string");
    expect_spec_error("{\"image\":\"b\",\"env\":{\"A\":\"ok\",\"K\":[\"v\"]}}", "env.K must be a string");
    expect_spec_error("{\"image\":\"b\",\"labels\":{\"k\":{}}}", "labels.k must be a string");
}
END_TEST

START_TEST(test_env_value_with_nul_byte_is_rejected)
{
    expect_spec_error("{\"image\":\"b\",\"env\":{\"K\":\"a\\u0000b\"}}", "env.K must not contain NUL bytes");
    expect_spec_error("{\"image\":\"b\",\"labels\":{\"k\":\"\\u0000\"}}", "labels.k must not contain NUL bytes");
}
END_TEST

START_TEST(test_env_value_too_long_is_rejected)
{
    char *val = unit_repeat('v', SBX_MAX_VALUE_BYTES + 1);
    size_t cap = strlen(val) + 64;
    char *text = unit_xmalloc(cap);
    snprintf(text, cap, "{\"image\":\"b\",\"env\":{\"K\":\"%s\"}}", val);
    expect_spec_error(text, "env.K is longer than 4096 bytes");
    free(val);
    free(text);
}
END_TEST

static char *many_entries(const char *field, int n)
{
    size_t cap = 64 + (size_t)n * 24;
    char *text = unit_xmalloc(cap);
    size_t o = (size_t)snprintf(text, cap, "{\"image\":\"b\",\"%s\":{", field);
    for (int i = 0; i < n; i++)
        o += (size_t)snprintf(text + o, cap - o, "%s\"K%d\":\"v\"", i ? "," : "", i);
    snprintf(text + o, cap - o, "}}");
    return text;
}

START_TEST(test_too_many_env_entries_are_rejected)
{
    char *text = many_entries("env", SBX_MAX_ENV + 1);
    expect_spec_error(text, "env has 129 entries; at most 128 are allowed");
    free(text);
}
END_TEST

START_TEST(test_too_many_labels_are_rejected)
{
    char *text = many_entries("labels", SBX_MAX_LABELS + 1);
    expect_spec_error(text, "labels has 65 entries; at most 64 are allowed");
    free(text);
}
END_TEST

START_TEST(test_label_bad_key_is_rejected)
{
    static const char *const bad[] = { "a b", "", "a:b", "a=b", "\\u00e9", "a\\tb", "a,b" };
    expect_bad_keys_refused("labels", bad, sizeof bad / sizeof *bad, 'k');
}
END_TEST

START_TEST(test_error_without_err_still_fails)
{
    json_object *o = unit_json("{\"image\":\"\"}");
    sandbox_spec_t s;
    ck_assert_int_eq(spec_from_json(o, &s, NULL), SBX_EINVAL);
    json_object_put(o);
}
END_TEST

/* ---- names ---- */

START_TEST(test_isolation_flags_and_selector)
{
    sandbox_spec_t s;
    spec_ok("{\"image\":\"i\",\"isolation\":\"gvisor\",\"read_only_root\":true,\"hardened\":true,"
            "\"selector\":{\"zone\":\"a\"}}", &s);
    ck_assert(s.has_isolation);
    ck_assert_int_eq(s.isolation, ISO_GVISOR);
    ck_assert(s.read_only_root);
    ck_assert(s.hardened);
    ck_assert_uint_eq(s.selector.n, 1);
    ck_assert_str_eq(s.selector.items[0].key, "zone");
    spec_release(&s);
    spec_ok("{\"image\":\"i\",\"isolation\":null}", &s);
    ck_assert(!s.has_isolation);
    spec_release(&s);
    expect_spec_error("{\"image\":\"i\",\"isolation\":\"vm\"}", "isolation must be one of");
    expect_spec_error("{\"image\":\"i\",\"read_only_root\":1}", "read_only_root must be true or false");
    expect_spec_error("{\"image\":\"i\",\"hardened\":\"yes\"}", "hardened must be true or false");
    expect_spec_error("{\"image\":\"i\",\"selector\":{\"a b\":\"x\"}}", "selector");
    check_spec_round_trip("{\"image\":\"i\",\"isolation\":\"microvm\",\"read_only_root\":true,"
                          "\"selector\":{\"gpu\":\"no\"}}");
}
END_TEST

START_TEST(test_network_and_isolation_names_round_trip)
{
    for (int m = 0; m < 3; m++) {
        net_mode_t back = (net_mode_t)99;
        ck_assert_int_eq(net_mode_parse(net_mode_name((net_mode_t)m), &back), 0);
        ck_assert_int_eq(back, m);
    }
    ck_assert_str_eq(isolation_name(ISO_CONTAINER), "container");
    ck_assert_str_eq(isolation_name(ISO_GVISOR), "gvisor");
    ck_assert_str_eq(isolation_name(ISO_MICROVM), "microvm");
    for (int c = 0; c < 3; c++) {
        isolation_t back = (isolation_t)99;
        ck_assert_int_eq(isolation_parse(isolation_name((isolation_t)c), &back), 0);
        ck_assert_int_eq(back, c);
    }
    net_mode_t m;
    isolation_t c;
    ck_assert_int_eq(net_mode_parse("closed", &m), SBX_EINVAL);
    ck_assert_int_eq(net_mode_parse(NULL, &m), SBX_EINVAL);
    ck_assert_int_eq(isolation_parse("vm", &c), SBX_EINVAL);
    ck_assert_int_eq(isolation_parse(NULL, &c), SBX_EINVAL);
    ck_assert_str_eq(net_mode_name((net_mode_t)7), "none");
    ck_assert_str_eq(isolation_name((isolation_t)7), "container");
}
END_TEST
START_TEST(test_disk_mib_is_optional_bounded_and_kept)
{
    sandbox_spec_t s;
    spec_ok("{\"image\":\"b\"}", &s);
    ck_assert_int_eq(s.disk_mib, 0); /* absent: the server's default_disk_mib */
    json_object *j = spec_to_json(&s);
    ck_assert(!json_object_object_get_ex(j, "disk_mib", NULL));
    json_object_put(j);
    spec_release(&s);
    spec_ok("{\"image\":\"b\",\"disk_mib\":64}", &s);
    ck_assert_int_eq(s.disk_mib, 64);
    j = spec_to_json(&s);
    int64_t v = 0;
    ck_assert(jsonx_get_int(j, "disk_mib", &v) && v == 64);
    json_object_put(j);
    spec_release(&s);
    check_spec_round_trip("{\"image\":\"b\",\"disk_mib\":16777216}");
    expect_spec_error("{\"image\":\"b\",\"disk_mib\":15}", "disk_mib must be between 16 and 16777216 (got 15)");
    expect_spec_error("{\"image\":\"b\",\"disk_mib\":0}", "disk_mib must be between 16 and 16777216 (got 0)");
    expect_spec_error("{\"image\":\"b\",\"disk_mib\":-1}", "(got -1)");
    expect_spec_error("{\"image\":\"b\",\"disk_mib\":16777217}", "(got 16777217)");
    expect_spec_error("{\"image\":\"b\",\"disk_mib\":\"64\"}", "disk_mib must be an integer");
    expect_spec_error("{\"image\":\"b\",\"disk_mib\":6.5}", "disk_mib must be an integer");
}
END_TEST

/* An extend request: {"ttl_seconds": N} and nothing else. */
static int extend_parse(const char *text, int64_t *ret, api_error_t *err)
{
    json_object *o = unit_json(text);
    int rc = spec_extend_from_json(o, ret, err);
    json_object_put(o);
    return rc;
}

START_TEST(test_extend_request_takes_ttl_seconds_from_one_to_the_absolute_bound)
{
    api_error_t err = { 0 };
    int64_t ttl = -1;
    ck_assert_int_eq(extend_parse("{\"ttl_seconds\":1}", &ttl, &err), 0);
    ck_assert_int_eq(ttl, SBX_EXTEND_TTL_SECONDS_MIN);
    char text[64];
    snprintf(text, sizeof text, "{\"ttl_seconds\":%d}", SBX_TTL_SECONDS_MAX);
    ck_assert_int_eq(extend_parse(text, &ttl, &err), 0);
    ck_assert_int_eq(ttl, SBX_TTL_SECONDS_MAX);
}
END_TEST

START_TEST(test_extend_request_refuses_anything_else_naming_the_problem)
{
    static const struct {
        const char *text, *want;
    } bad[] = {
        { "[]", "must be a JSON object" },
        { "\"ttl_seconds\"", "must be a JSON object" },
        { "{}", "ttl_seconds is required" },
        { "{\"ttl_seconds\":null}", "ttl_seconds is required" },
        { "{\"ttl_seconds\":0}", "ttl_seconds must be between 1 and" },
        { "{\"ttl_seconds\":-5}", "ttl_seconds must be between 1 and" },
        { "{\"ttl_seconds\":2592001}", "ttl_seconds must be between 1 and 2592000" },
        { "{\"ttl_seconds\":9223372036854775807}", "ttl_seconds must be between" },
        { "{\"ttl_seconds\":\"60\"}", "ttl_seconds must be an integer" },
        { "{\"ttl_seconds\":60.5}", "ttl_seconds must be an integer" },
        { "{\"ttl_seconds\":1e3}", "ttl_seconds must be an integer" },
        { "{\"ttl_seconds\":true}", "ttl_seconds must be an integer" },
        { "{\"ttl_seconds\":60,\"ttl\":60}", "unknown field \"ttl\" in an extend request" },
        { "{\"expires_at\":\"2030-01-01T00:00:00Z\"}", "unknown field \"expires_at\"" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        api_error_t err = { 0 };
        int64_t ttl = 77;
        unit_expect_invalid("extend", bad[i].text, extend_parse(bad[i].text, &ttl, &err), &err, bad[i].want);
        ck_assert_int_eq(ttl, 77);
    }
}
END_TEST

START_TEST(test_sandbox_names_are_short_plain_and_never_an_id)
{
    static const char *const good[] = { "web", "W", "a1", "web-1.test_2", "0lead-digit",
                                        "sbx", "sbxweb", "Sbx_upper" };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        ck_assert_msg(spec_sandbox_name_ok(good[i]), "%s should be a name", good[i]);
    char longest[SBX_SANDBOX_NAME_MAX + 2];
    memset(longest, 'n', SBX_SANDBOX_NAME_MAX);
    longest[SBX_SANDBOX_NAME_MAX] = '\0';
    ck_assert(spec_sandbox_name_ok(longest));
    longest[SBX_SANDBOX_NAME_MAX] = 'n';
    longest[SBX_SANDBOX_NAME_MAX + 1] = '\0';
    ck_assert(!spec_sandbox_name_ok(longest));
    static const char *const bad[] = { "", "-web", ".web", "_web", "web/1", "web:1", "web 1", "we\tb",
                                       "sbx_abc", "sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa", "caf\xc3\xa9", "..", "a/../b" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(!spec_sandbox_name_ok(bad[i]), "%s should not be a name", bad[i]);
    ck_assert(!spec_sandbox_name_ok(NULL));
}
END_TEST

START_TEST(test_from_names_a_snapshot_by_id_or_name_and_round_trips)
{
    sandbox_spec_t s;
    spec_ok("{\"image\":\"b\"}", &s);
    ck_assert_ptr_null(s.from);
    json_object *j = spec_to_json(&s);
    ck_assert(!json_object_object_get_ex(j, "from", NULL)); /* absent unless set */
    json_object_put(j);
    spec_release(&s);
    spec_ok("{\"image\":\"b\",\"from\":\"snp_aaaaaaaaaaaaaaaaaaaaaaaaaa\"}", &s);
    ck_assert_str_eq(s.from, "snp_aaaaaaaaaaaaaaaaaaaaaaaaaa");
    spec_release(&s);
    check_spec_round_trip("{\"image\":\"b\",\"from\":\"prepared-1.x\"}");
    expect_spec_error("{\"image\":\"b\",\"from\":\"snp_short\"}", "from must name a snapshot");
    expect_spec_error("{\"image\":\"b\",\"from\":\"sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa\"}", "from must name a snapshot");
    expect_spec_error("{\"image\":\"b\",\"from\":\"../x\"}", "from must name a snapshot");
    expect_spec_error("{\"image\":\"b\",\"from\":\"\"}", "from must be 1 to 63 printable bytes");
    expect_spec_error("{\"image\":\"b\",\"from\":7}", "from must be a string");
    /* names: a sandbox name's rule, never an id's shape */
    ck_assert(spec_snapshot_name_ok("prepared"));
    ck_assert(!spec_snapshot_name_ok("snp_prepared"));
    ck_assert(!spec_snapshot_name_ok("sbx_prepared"));
    ck_assert(!spec_snapshot_name_ok(NULL));
    ck_assert(spec_snapshot_ref_ok("snp_aaaaaaaaaaaaaaaaaaaaaaaaaa"));
    /* the reserved repository, however it is spelled */
    static const char *const snap[] = { "sandbox-snapshot", "sandbox-snapshot:snp_x", "docker.io/sandbox-snapshot:1",
                                        "reg:5000/a/sandbox-snapshot@sha256:0123", "Sandbox-Snapshot:x" };
    for (size_t i = 0; i < sizeof snap / sizeof *snap; i++)
        ck_assert_msg(spec_image_is_snapshot(snap[i]), "%s names the snapshot repository", snap[i]);
    static const char *const other[] = { "sandbox-snapshots", "sandbox/busybox:latest", "snapshot", "x/sandbox-snap",
                                         "sandbox-snapshot-x:1" };
    for (size_t i = 0; i < sizeof other / sizeof *other; i++)
        ck_assert_msg(!spec_image_is_snapshot(other[i]), "%s is not the snapshot repository", other[i]);
    char img[64];
    spec_snapshot_image("snp_aaaaaaaaaaaaaaaaaaaaaaaaaa", img, sizeof img);
    ck_assert_str_eq(img, "sandbox-snapshot:snp_aaaaaaaaaaaaaaaaaaaaaaaaaa");
    ck_assert(spec_image_is_snapshot(img));
}
END_TEST

/* A template version's config: every field checked, the canonical form
 * keeps only what was given. */
static void config_refused(const char *text, const char *want)
{
    json_object *o = unit_json(text), *out = NULL;
    api_error_t err;
    ck_assert_int_eq(spec_snapshot_config_from_json(o, &out, &err), SBX_EINVAL);
    ck_assert_ptr_null(out);
    ck_assert_msg(strstr(err.message, want), "%s: message [%s] lacks [%s]", text, err.message, want);
    json_object_put(o);
}

START_TEST(test_template_config_is_checked_and_canonical)
{
    json_object *out = NULL;
    api_error_t err;
    ck_assert_int_eq(spec_snapshot_config_from_json(NULL, &out, &err), 0);
    ck_assert_int_eq(json_object_object_length(out), 0);
    json_object_put(out);
    json_object *o = unit_json("{\"env\":{\"A\":\"1\",\"PATH\":\"/x:/y\"},\"workdir\":\"/app\",\"user\":\"app:app\","
                               "\"cmd\":[\"python3\",\"-m\",\"http.server\"],\"entrypoint\":null,\"expose\":[8000,443]}");
    ck_assert_int_eq(spec_snapshot_config_from_json(o, &out, &err), 0);
    ck_assert_str_eq(json_object_to_json_string_ext(out, JSON_C_TO_STRING_PLAIN),
                     "{\"env\":{\"A\":\"1\",\"PATH\":\"\\/x:\\/y\"},\"workdir\":\"\\/app\",\"user\":\"app:app\","
                     "\"cmd\":[\"python3\",\"-m\",\"http.server\"],\"expose\":[8000,443]}");
    json_object_put(out);
    json_object_put(o);
    config_refused("[1]", "config must be an object");
    config_refused("{\"volume\":\"/d\"}", "volume");
    config_refused("{\"env\":{\"1A\":\"x\"}}", "config.env");
    config_refused("{\"workdir\":\"rel/dir\"}", "config.workdir must be an absolute path");
    config_refused("{\"user\":\"-root\"}", "config.user");
    config_refused("{\"user\":\"a b\"}", "config.user");
    config_refused("{\"cmd\":\"sh -c x\"}", "config.cmd must be an array");
    config_refused("{\"cmd\":[1]}", "config.cmd[0] must be a string");
    config_refused("{\"expose\":[0]}", "config.expose[0] must be a port");
    config_refused("{\"expose\":[65536]}", "config.expose[0]");
    config_refused("{\"expose\":[\"80\"]}", "config.expose[0]");
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("spec");
    unit_tcase_add(s, "valid", UNIT_TESTS(
        test_disk_mib_is_optional_bounded_and_kept,
        test_minimal_spec_gets_documented_defaults,
        test_null_fields_get_defaults,
        test_full_spec_decodes_every_field,
        test_spec_round_trip_keeps_values, test_spec_egress_rules,
        test_spec_to_json_writes_every_field,
        test_numeric_bounds_are_inclusive,
        test_env_and_labels_at_their_limits_are_accepted,
        test_network_and_isolation_names_round_trip,
        test_isolation_flags_and_selector,
    ));
    unit_tcase_add(s, "invalid", UNIT_TESTS(
        test_body_not_an_object_is_rejected,
        test_unknown_top_level_field_is_named,
        test_unknown_trust_field_is_named,
        test_image_missing_or_empty_or_wrong_type_is_rejected,
        test_absent_image_gets_the_default,
        test_explicit_image_wins_over_the_default,
        test_default_does_not_excuse_a_bad_image,
        test_image_ref_validation,
        test_image_with_space_or_control_or_nul_is_rejected,
        test_image_too_long_is_rejected,
        test_invalid_tenant_is_rejected,
        test_numeric_fields_out_of_range_are_rejected_naming_the_field,
        test_numeric_range_message_names_bounds_and_value,
        test_numeric_fields_of_non_integer_type_are_rejected,
        test_unknown_network_is_rejected,
        test_trust_that_is_not_an_object_is_rejected,
        test_trust_values_that_are_not_booleans_are_rejected,
        test_env_that_is_not_an_object_is_rejected,
        test_env_bad_key_is_rejected,
        test_env_non_string_value_is_rejected,
        test_env_value_with_nul_byte_is_rejected,
        test_env_value_too_long_is_rejected,
        test_too_many_env_entries_are_rejected,
        test_too_many_labels_are_rejected,
        test_label_bad_key_is_rejected,
        test_error_without_err_still_fails,
        test_sandbox_names_are_short_plain_and_never_an_id,
        test_from_names_a_snapshot_by_id_or_name_and_round_trips,
        test_template_config_is_checked_and_canonical,
    ));
    unit_tcase_add(s, "extend", UNIT_TESTS(
        test_extend_request_takes_ttl_seconds_from_one_to_the_absolute_bound,
        test_extend_request_refuses_anything_else_naming_the_problem,
    ));
    return s;
}
