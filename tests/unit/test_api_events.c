/* Unit tests for the query of GET /v1/events (api_events_parse): the
 * cursor, tail, limit, filters, the kind prefix forms and every refusal. */
#include "check_util.h"
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "api.h"

/* Parses the query string qs; returns api_events_parse's result. */
static int parse(const char *qs, events_query_t *q, api_error_t *err)
{
    struct evkeyvalq kv;
    TAILQ_INIT(&kv);
    ck_assert_int_eq(evhttp_parse_query_str(qs, &kv), 0);
    int rc = api_events_parse(&kv, q, err);
    evhttp_clear_headers(&kv);
    return rc;
}

START_TEST(test_defaults_read_from_the_oldest)
{
    events_query_t q;
    api_error_t err;
    ck_assert_int_eq(parse("", &q, &err), 0);
    ck_assert_int_eq(q.after, 0);
    ck_assert_int_eq(q.tail, 0);
    ck_assert_int_eq(q.limit, 100);
    ck_assert_str_eq(q.sandbox_id, "");
    ck_assert_str_eq(q.operation_id, "");
    ck_assert_str_eq(q.kind, "");
    ck_assert_ptr_null(q.scope);
}
END_TEST

START_TEST(test_cursor_limit_and_filters)
{
    events_query_t q;
    api_error_t err;
    ck_assert_int_eq(parse("after=9223372036854775807&limit=1000&wait=5&sandbox=sbx_abcdefghijklmnopqrstuvwxyz"
                           "&operation=op_abcdefghijklmnopqrstuvwxyz&kind=sandbox.running",
                           &q, &err),
                     0);
    ck_assert_int_eq(q.after, INT64_MAX);
    ck_assert_int_eq(q.limit, 1000);
    ck_assert_str_eq(q.sandbox_id, "sbx_abcdefghijklmnopqrstuvwxyz");
    ck_assert_str_eq(q.operation_id, "op_abcdefghijklmnopqrstuvwxyz");
    ck_assert_str_eq(q.kind, "sandbox.running");
    ck_assert(!q.kind_prefix);
    ck_assert_int_eq(parse("tail=10", &q, &err), 0);
    ck_assert_int_eq(q.tail, 10);
}
END_TEST

START_TEST(test_kind_prefix_forms)
{
    events_query_t q;
    api_error_t err;
    ck_assert_int_eq(parse("kind=operation.*", &q, &err), 0);
    ck_assert_str_eq(q.kind, "operation.");
    ck_assert(q.kind_prefix);
    ck_assert_int_eq(parse("kind=operation.", &q, &err), 0);
    ck_assert_str_eq(q.kind, "operation.");
    ck_assert(q.kind_prefix);
    ck_assert_int_eq(parse("kind=route.removed", &q, &err), 0);
    ck_assert(!q.kind_prefix);
}
END_TEST

START_TEST(test_refusals_name_the_parameter)
{
    static const struct {
        const char *qs, *word;
    } bad[] = {
        { "after=-1", "after" },
        { "after=abc", "after" },
        { "after=", "after" },
        { "after=99999999999999999999", "after" },
        { "limit=0", "limit" },
        { "limit=1001", "limit" },
        { "tail=0", "tail" },
        { "tail=1001", "tail" },
        { "tail=5&after=3", "not both" },
        { "tail=5&limit=3", "limit" },
        { "sandbox=op_abcdefghijklmnopqrstuvwxyz", "sandbox" },
        { "sandbox=sbx_abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz", "sandbox" },
        { "operation=x", "operation" },
        { "kind=", "kind" },
        { "kind=*", "kind" },
        { "kind=.x", "kind" },
        { "kind=a%20b", "kind" },
        { "kind=kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk", "kind" },
        { "nope=1", "unknown parameter" },
        { "limit=5&limit=6", "more than once" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        events_query_t q;
        api_error_t err;
        memset(&err, 0, sizeof err);
        ck_assert_msg(parse(bad[i].qs, &q, &err) == SBX_EINVAL, "%s was accepted", bad[i].qs);
        ck_assert_int_eq(err.code, API_INVALID_ARGUMENT);
        ck_assert_msg(strstr(err.message, bad[i].word) != NULL, "%s: message \"%s\" does not say \"%s\"", bad[i].qs,
                      err.message, bad[i].word);
    }
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("api_events");
    unit_tcase_add(s, "parse", UNIT_TESTS(
        test_defaults_read_from_the_oldest,
        test_cursor_limit_and_filters,
        test_kind_prefix_forms,
        test_refusals_name_the_parameter,
    ));
    return s;
}
