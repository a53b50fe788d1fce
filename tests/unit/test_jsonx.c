/* Unit tests for the json-c helpers: strict bounded parsing and typed access (common/jsonx.c). */
#include "check_util.h"
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "jsonx.h"

/* Parses the literal (without its NUL); returns the result code. */
static int parse(const char *s, size_t n, json_object **ret, api_error_t *err)
{
    *ret = NULL;
    memset(err, 0, sizeof *err);
    return jsonx_parse(s, n, ret, err);
}

/* Asserts the literal is refused as invalid_json and nothing is returned. */
static void check_rejected(const char *s, size_t n, const char *why_substr)
{
    json_object *o;
    api_error_t err;
    int r = parse(s, n, &o, &err);
    ck_assert_msg(r == SBX_EINVAL, "accepted %.*s", (int)n, s);
    ck_assert_ptr_null(o);
    ck_assert_int_eq(err.code, API_INVALID_JSON);
    if (why_substr)
        ck_assert_msg(strstr(err.message, why_substr) != NULL, "message \"%s\" lacks \"%s\"", err.message,
                      why_substr);
}
#define REJECTED(lit, why) check_rejected((lit), sizeof(lit) - 1, (why))

/* Asserts the literal parses to a value of type t; returns it (caller puts). */
static json_object *check_accepted(const char *s, size_t n, json_type t)
{
    json_object *o;
    api_error_t err;
    int r = parse(s, n, &o, &err);
    ck_assert_msg(r == 0, "rejected %.*s: %s", (int)n, s, err.message);
    ck_assert_ptr_nonnull(o);
    ck_assert_str_eq(json_type_to_name(json_object_get_type(o)), json_type_to_name(t));
    return o;
}
#define ACCEPTED(lit, t) check_accepted((lit), sizeof(lit) - 1, (t))

static char *nested_arrays(int depth)
{
    char *s = unit_xmalloc((size_t)depth * 2 + 1);
    memset(s, '[', (size_t)depth);
    memset(s + depth, ']', (size_t)depth);
    s[depth * 2] = '\0';
    return s;
}

/* ---- parse: accepted ---- */

START_TEST(test_parse_accepts_object_and_reads_fields)
{
    json_object *o = ACCEPTED("{\"a\":1,\"b\":\"x\",\"c\":[true,null]}", json_type_object);
    int64_t a = 0;
    ck_assert(jsonx_get_int(o, "a", &a));
    ck_assert_int_eq(a, 1);
    ck_assert_str_eq(jsonx_get_str(o, "b"), "x");
    ck_assert_int_eq(json_object_array_length(jsonx_get_arr(o, "c")), 2);
    json_object_put(o);
}
END_TEST

START_TEST(test_parse_accepts_surrounding_whitespace)
{
    json_object_put(ACCEPTED(" \t\r\n{\"a\":1} \t\r\n", json_type_object));
    json_object_put(ACCEPTED("\n[ 1 , 2 ]\n", json_type_array));
    json_object_put(ACCEPTED("  \"s\"  ", json_type_string));
}
END_TEST

START_TEST(test_parse_accepts_bare_scalars_at_end_of_input)
{
    json_object *o = ACCEPTED("123", json_type_int);
    ck_assert_int_eq(json_object_get_int64(o), 123);
    json_object_put(o);
    o = ACCEPTED("-7", json_type_int);
    ck_assert_int_eq(json_object_get_int64(o), -7);
    json_object_put(o);
    json_object_put(ACCEPTED("1.5", json_type_double));
    o = ACCEPTED("true", json_type_boolean);
    ck_assert(json_object_get_boolean(o));
    json_object_put(o);
    json_object_put(ACCEPTED("false", json_type_boolean));
    json_object_put(ACCEPTED("\"text\"", json_type_string));
}
END_TEST

START_TEST(test_parse_accepts_nesting_up_to_depth_limit)
{
    char *s = nested_arrays(32);
    json_object *o = check_accepted(s, strlen(s), json_type_array);
    json_object_put(o);
    free(s);
}
END_TEST

START_TEST(test_parse_accepts_escaped_quotes_and_apostrophes_inside_strings)
{
    json_object *o = ACCEPTED("{\"k\":\"it's \\\"quoted\\\" \\\\ NaN Infinity\"}", json_type_object);
    ck_assert_str_eq(jsonx_get_str(o, "k"), "it's \"quoted\" \\ NaN Infinity");
    json_object_put(o);
}
END_TEST

START_TEST(test_parse_uses_only_n_bytes)
{
    /* The bytes after n are never looked at. */
    const char *s = "{\"a\":1}garbage";
    json_object *o;
    api_error_t err;
    ck_assert_int_eq(parse(s, 7, &o, &err), 0);
    ck_assert_ptr_nonnull(o);
    json_object_put(o);
}
END_TEST

/* ---- parse: rejected ---- */

START_TEST(test_parse_rejects_trailing_garbage)
{
    REJECTED("{} x", NULL);
    REJECTED("{}{}", NULL);
    REJECTED("[1] [2]", NULL);
    REJECTED("{\"a\":1},", NULL);
    REJECTED("1 2", NULL);
    REJECTED("\"a\" \"b\"", NULL);
    /* A NUL after the value is not whitespace. */
    REJECTED("{\"a\":1}\0", "trailing data after JSON value at byte 7");
}
END_TEST

START_TEST(test_parse_rejects_truncated_input)
{
    REJECTED("", "unexpected end of input");
    REJECTED("   ", "unexpected end of input");
    REJECTED("{", "unexpected end of input");
    REJECTED("{\"a\":1", "malformed JSON at byte 6: unexpected end of input");
    REJECTED("{\"a\":", "unexpected end of input");
    REJECTED("[1,2", "unexpected end of input");
    REJECTED("\"abc", "unexpected end of input");
    REJECTED("tru", "unexpected end of input");
    REJECTED("-", "unexpected end of input");
    REJECTED("1e", "unexpected end of input");
}
END_TEST

START_TEST(test_parse_rejects_trailing_commas)
{
    /* json-c strict mode refuses trailing commas. */
    REJECTED("{\"a\":1,}", NULL);
    REJECTED("[1,]", NULL);
    REJECTED("[,1]", NULL);
}
END_TEST

START_TEST(test_parse_rejects_single_quotes)
{
    /* json-c 0.16 strict mode accepts single-quoted keys; jsonx refuses them. */
    REJECTED("{'a':1}", "not JSON");
    REJECTED("{'a':\"b\"}", "not JSON");
    REJECTED("['a']", NULL);
    REJECTED("{\"a\":'b'}", NULL);
}
END_TEST

START_TEST(test_parse_rejects_nan_and_infinity)
{
    /* json-c strict mode accepts these literals; they are not JSON. */
    REJECTED("[NaN]", "not JSON");
    REJECTED("{\"a\":Infinity}", "not JSON");
    REJECTED("[-Infinity]", "not JSON");
    REJECTED("[nan]", NULL);
    REJECTED("[inf]", NULL);
}
END_TEST

START_TEST(test_parse_rejects_other_non_strict_input)
{
    REJECTED("/* comment */ {}", NULL);
    REJECTED("{} // comment", NULL);
    REJECTED("{\"a\":01}", NULL);          /* leading zero */
    REJECTED("{\"a\":True}", NULL);
    REJECTED("{a:1}", NULL);               /* unquoted key */
    REJECTED("{\"a\" 1}", NULL);
    REJECTED("\xEF\xBB\xBF{}", NULL);      /* byte order mark */
    REJECTED("{\"a\":\"x\0y\"}", NULL);    /* raw NUL inside a string */
}
END_TEST

START_TEST(test_parse_rejects_top_level_null)
{
    REJECTED("null", "null");
    REJECTED(" null ", "null");
}
END_TEST

START_TEST(test_parse_rejects_nesting_beyond_depth_limit)
{
    char *s = nested_arrays(33);
    check_rejected(s, strlen(s), "nesting too deep");
    free(s);
    s = nested_arrays(10000);
    check_rejected(s, strlen(s), "nesting too deep");
    free(s);
    /* Objects count as well. */
    char obj[33 * 6 + 8] = "";
    for (int i = 0; i < 33; i++)
        strcat(obj, "{\"a\":");
    strcat(obj, "1");
    for (int i = 0; i < 33; i++)
        strcat(obj, "}");
    check_rejected(obj, strlen(obj), "nesting too deep");
}
END_TEST

START_TEST(test_parse_error_without_err_still_fails)
{
    json_object *o = NULL;
    ck_assert_int_eq(jsonx_parse("{", 1, &o, NULL), SBX_EINVAL);
    ck_assert_ptr_null(o);
    ck_assert_int_eq(jsonx_parse("{}", 2, &o, NULL), 0);
    json_object_put(o);
}
END_TEST

/* Asserts the literal is refused as invalid_argument with the message. */
static void check_bad_text(const char *s, size_t n, const char *message)
{
    json_object *o;
    api_error_t err;
    int r = parse(s, n, &o, &err);
    ck_assert_msg(r == SBX_EINVAL, "accepted %.*s", (int)n, s);
    ck_assert_ptr_null(o);
    ck_assert_int_eq(err.code, API_INVALID_ARGUMENT);
    ck_assert_str_eq(err.message, message);
}
#define BAD_TEXT(lit, msg) check_bad_text((lit), sizeof(lit) - 1, (msg))

START_TEST(test_parse_rejects_invalid_utf8_naming_the_field)
{
    BAD_TEXT("{\"image\":\"a\xff\"}", "invalid UTF-8 in \"image\"");
    BAD_TEXT("{\"labels\":{\"ok\":\"\xc3\xa9\",\"team\":\"\xc3\"}}", "invalid UTF-8 in \"labels.team\"");
    BAD_TEXT("{\"argv\":[\"sh\",\"-c\",\"\xed\xa0\x80\"]}", "invalid UTF-8 in \"argv[2]\"");
    BAD_TEXT("{\"a\":[{\"b\":[\"x\",\"\xc0\xaf\"]}]}", "invalid UTF-8 in \"a[0].b[1]\"");
    BAD_TEXT("{\"labels\":{\"t\xfe\":\"x\"}}", "invalid UTF-8 in a key of \"labels\"");
    BAD_TEXT("{\"\xfe\":1}", "invalid UTF-8 in a key of \"(top level)\"");
    BAD_TEXT("\"\xff\"", "invalid UTF-8 in \"(top level)\"");
}
END_TEST

START_TEST(test_refuse_nul_names_the_field)
{
    static const char text[] = "{\"env\":{\"K\":\"a\\u0000b\"}}";
    json_object *o;
    api_error_t err;
    ck_assert_int_eq(parse(text, sizeof text - 1, &o, &err), 0);
    ck_assert_int_eq(jsonx_refuse_nul(o, &err), SBX_EINVAL);
    ck_assert_int_eq(err.code, API_INVALID_ARGUMENT);
    ck_assert_str_eq(err.message, "a NUL character in \"env.K\"");
    json_object_put(o);
    ck_assert_int_eq(parse("{\"env\":{\"K\":\"ab\"}}", 18, &o, &err), 0);
    ck_assert_int_eq(jsonx_refuse_nul(o, &err), 0);
    json_object_put(o);
}
END_TEST

START_TEST(test_parse_accepts_valid_multibyte_utf8)
{
    static const char MB[] = "{\"s\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 \\u00e9\"}";
    json_object *o = check_accepted(MB, sizeof MB - 1,
                                    json_type_object);
    json_object_put(o);
}
END_TEST

/* ---- typed getters ---- */

static json_object *sample(void)
{
    static const char text[] = "{\"s\":\"str\",\"i\":42,\"big\":-9007199254740993,\"d\":1.5,\"b\":true,"
                               "\"n\":null,\"o\":{\"x\":1},\"a\":[1]}";
    json_object *o;
    api_error_t err;
    ck_assert_int_eq(parse(text, sizeof text - 1, &o, &err), 0);
    return o;
}

START_TEST(test_getters_return_values_of_matching_type)
{
    json_object *o = sample();
    int64_t i = 0;
    bool b = false;
    ck_assert_str_eq(jsonx_get_str(o, "s"), "str");
    ck_assert(jsonx_get_int(o, "i", &i));
    ck_assert_int_eq(i, 42);
    ck_assert(jsonx_get_int(o, "big", &i));
    ck_assert_int_eq(i, -9007199254740993LL);
    ck_assert(jsonx_get_bool(o, "b", &b));
    ck_assert(b);
    ck_assert_ptr_nonnull(jsonx_get_obj(o, "o"));
    ck_assert_ptr_nonnull(jsonx_get_arr(o, "a"));
    json_object_put(o);
}
END_TEST

START_TEST(test_getters_return_null_or_false_for_wrong_types)
{
    json_object *o = sample();
    static const char *keys[] = { "s", "i", "d", "b", "n", "o", "a", "missing" };
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        const char *key = keys[k];
        int64_t i = 777;
        bool b = true;
        if (strcmp(key, "s") != 0)
            ck_assert_msg(jsonx_get_str(o, key) == NULL, "get_str(%s) not NULL", key);
        if (strcmp(key, "i") != 0) {
            ck_assert_msg(!jsonx_get_int(o, key, &i), "get_int(%s) true", key);
            ck_assert_int_eq(i, 777);
        }
        if (strcmp(key, "b") != 0) {
            ck_assert_msg(!jsonx_get_bool(o, key, &b), "get_bool(%s) true", key);
            ck_assert(b);
        }
        if (strcmp(key, "o") != 0)
            ck_assert_msg(jsonx_get_obj(o, key) == NULL, "get_obj(%s) not NULL", key);
        if (strcmp(key, "a") != 0)
            ck_assert_msg(jsonx_get_arr(o, key) == NULL, "get_arr(%s) not NULL", key);
    }
    json_object_put(o);
}
END_TEST

START_TEST(test_getters_on_non_object_return_null)
{
    json_object *arr = json_object_new_array();
    int64_t i;
    bool b;
    ck_assert_ptr_null(jsonx_get_str(arr, "s"));
    ck_assert_ptr_null(jsonx_get_obj(NULL, "o"));
    ck_assert(!jsonx_get_int(arr, "i", &i));
    ck_assert(!jsonx_get_bool(NULL, "b", &b));
    json_object_put(arr);
}
END_TEST

/* ---- builders ---- */

START_TEST(test_add_helpers_and_dump_produce_compact_json)
{
    json_object *o = json_object_new_object();
    jsonx_add_str(o, "s", "a/b \"q\"");
    jsonx_add_str(o, "null", NULL);
    jsonx_add_int(o, "i", -5);
    jsonx_add_bool(o, "t", true);
    jsonx_add(o, "none", NULL);
    char *s = jsonx_dump(o);
    ck_assert_str_eq(s, "{\"s\":\"a/b \\\"q\\\"\",\"null\":null,\"i\":-5,\"t\":true,\"none\":null}");
    free(s);
    json_object_put(o);
}
END_TEST

START_TEST(test_dump_round_trips_through_parse)
{
    json_object *o = sample();
    char *s = jsonx_dump(o);
    json_object *back;
    api_error_t err;
    ck_assert_int_eq(parse(s, strlen(s), &back, &err), 0);
    char *s2 = jsonx_dump(back);
    ck_assert_str_eq(s2, s);
    free(s);
    free(s2);
    json_object_put(back);
    json_object_put(o);
}
END_TEST

START_TEST(test_parse_stored_reads_values_again_and_again)
{
    /* one tokener per thread, reset between texts: a value after a broken
     * one, scalars that end at the text's end, null and junk give NULL */
    const char *texts[] = { "{\"a\": [1, 2, {\"b\": \"c\"}]}", "{\"a\": [1,", "123", "true", "\"s\"", "[]" };
    const char *want[] = { "{\"a\":[1,2,{\"b\":\"c\"}]}", NULL, "123", "true", "\"s\"", "[]" };
    for (int round = 0; round < 3; round++)
        for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
            json_object *o = jsonx_parse_stored(texts[i]);
            if (!want[i]) {
                ck_assert_ptr_null(o);
                continue;
            }
            ck_assert_ptr_nonnull(o);
            char *d = jsonx_dump(o);
            ck_assert_str_eq(d, want[i]);
            free(d);
            json_object_put(o);
        }
    ck_assert_ptr_null(jsonx_parse_stored("null"));
    ck_assert_ptr_null(jsonx_parse_stored("{} x"));
    ck_assert_ptr_null(jsonx_parse_stored(NULL));
}
END_TEST

START_TEST(test_error_body_has_code_and_message)
{
    json_object *e = jsonx_error_body("invalid_argument", "cpu_millis must be an integer");
    char *s = jsonx_dump(e);
    ck_assert_str_eq(s, "{\"error\":{\"code\":\"invalid_argument\",\"message\":\"cpu_millis must be an integer\"}}");
    free(s);
    json_object_put(e);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("jsonx");
    unit_tcase_add(s, "parse", UNIT_TESTS(
        test_parse_accepts_object_and_reads_fields,
        test_parse_accepts_surrounding_whitespace,
        test_parse_accepts_bare_scalars_at_end_of_input,
        test_parse_accepts_nesting_up_to_depth_limit,
        test_parse_accepts_escaped_quotes_and_apostrophes_inside_strings,
        test_parse_uses_only_n_bytes,
        test_parse_rejects_trailing_garbage,
        test_parse_rejects_truncated_input,
        test_parse_rejects_trailing_commas,
        test_parse_rejects_single_quotes,
        test_parse_rejects_nan_and_infinity,
        test_parse_rejects_other_non_strict_input,
        test_parse_rejects_top_level_null,
        test_parse_rejects_nesting_beyond_depth_limit,
        test_parse_error_without_err_still_fails,
        test_parse_rejects_invalid_utf8_naming_the_field,
        test_refuse_nul_names_the_field,
        test_parse_accepts_valid_multibyte_utf8,
        test_parse_stored_reads_values_again_and_again,
    ));
    unit_tcase_add(s, "access", UNIT_TESTS(
        test_getters_return_values_of_matching_type,
        test_getters_return_null_or_false_for_wrong_types,
        test_getters_on_non_object_return_null,
        test_add_helpers_and_dump_produce_compact_json,
        test_dump_round_trips_through_parse,
        test_error_body_has_code_and_message,
    ));
    return s;
}
