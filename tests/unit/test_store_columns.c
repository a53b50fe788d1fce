/* Unit tests for the store's column tables (controller/store/columns.c):
 * the SELECT list they give and the JSON a row becomes, on results made
 * in memory (no database). */
#include "check_util.h"
#include <stdlib.h>
#include <string.h>

#include "store/store_int.h"

/* A one-row result of n text columns; vals[i] NULL is SQL NULL. */
static PGresult *one_row(int n, const char *const *vals)
{
    static char name[] = "c";
    PGresult *r = PQmakeEmptyPGresult(NULL, PGRES_TUPLES_OK);
    ck_assert_ptr_nonnull(r);
    PGresAttDesc *attrs = calloc((size_t)n, sizeof *attrs);
    for (int i = 0; i < n; i++) {
        attrs[i].name = name;
        attrs[i].typid = 25; /* text */
        attrs[i].typlen = -1;
        attrs[i].atttypmod = -1;
    }
    ck_assert_int_eq(PQsetResultAttrs(r, n, attrs), 1);
    free(attrs);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(PQsetvalue(r, 0, i, (char *)vals[i], vals[i] ? (int)strlen(vals[i]) : -1), 1);
    return r;
}

/* The row's JSON from store__row_json, and the same text from
 * store__row_raw unless the row holds unreadable JSON (the text writer
 * passes PostgreSQL's JSON through). */
static void assert_row_json_ex(const store_table_t *t, int n, const char *const *vals, const char *want, bool raw)
{
    PGresult *r = one_row(n, vals);
    json_object *o = store__row_json(t, r, 0);
    char *got = jsonx_dump(o);
    ck_assert_str_eq(got, want);
    free(got);
    json_object_put(o);
    if (raw) {
        o = store__row_raw(t, r, 0);
        got = jsonx_dump(o);
        ck_assert_str_eq(got, want);
        free(got);
        json_object_put(o);
    }
    PQclear(r);
}

static void assert_row_json(const store_table_t *t, int n, const char *const *vals, const char *want)
{
    assert_row_json_ex(t, n, vals, want, true);
}

START_TEST(test_worker_row_nests_capacity_and_omits_a_null_route_address)
{
    const char *v[] = { "wrk_1", "w1", "{\"zone\":\"a\"}", "[\"container\"]", "docker", "1000", "512", "4", "250",
                        "128", "1", "1.2", "ready", "t", "T1", "T0", "{}", "{}", "3", NULL, NULL };
    assert_row_json(&store__t_worker, 21, v,
                    "{\"id\":\"wrk_1\",\"name\":\"w1\",\"labels\":{\"zone\":\"a\"},\"isolation\":[\"container\"],"
                    "\"runtime\":\"docker\",\"capacity\":{\"cpu_millis\":1000,\"memory_mib\":512,\"slots\":4},"
                    "\"allocated\":{\"cpu_millis\":250,\"memory_mib\":128,\"slots\":1},\"version\":\"1.2\","
                    "\"state\":\"ready\",\"stopping\":true,\"last_heartbeat\":\"T1\",\"created_at\":\"T0\",\"networks\":{},"
                    "\"probes\":{},\"images_present\":3}");
    v[19] = "10.0.0.1:7000";
    v[20] = "{\"reason\": \"restarting\", \"since\": \"T2\", \"lost_at\": \"T3\"}";
    PGresult *r = one_row(21, v);
    json_object *o = store__row_json(&store__t_worker, r, 0);
    ck_assert_str_eq(jsonx_get_str(o, "route_address"), "10.0.0.1:7000");
    ck_assert_str_eq(jsonx_get_str(jsonx_get_obj(o, "unreachable"), "reason"), "restarting");
    json_object *raw = store__row_raw(&store__t_worker, r, 0);
    char *text = jsonx_dump(raw);
    ck_assert_ptr_nonnull(
        strstr(text, ",\"unreachable\":{\"reason\":\"restarting\",\"since\":\"T2\",\"lost_at\":\"T3\"}}"));
    free(text);
    json_object_put(raw);
    ck_assert_str_eq(store__col_text(&store__t_worker, r, 0, "id"), "wrk_1");
    ck_assert_ptr_null(store__col_text(&store__t_worker, r, 0, "no_such_key"));
    json_object_put(o);
    PQclear(r);
}
END_TEST

START_TEST(test_operation_error_comes_from_its_hidden_columns)
{
    const char *v[] = { "op_1", "create", "failed", "sbx_1", "2", "T0", "T1", "T2", NULL, "{\"x\":1}", "timeout", NULL };
    assert_row_json(&store__t_op, 12, v,
                    "{\"id\":\"op_1\",\"kind\":\"create\",\"state\":\"failed\",\"sandbox_id\":\"sbx_1\",\"attempt\":2,"
                    "\"created_at\":\"T0\",\"updated_at\":\"T1\",\"finished_at\":\"T2\","
                    "\"error\":{\"code\":\"timeout\",\"message\":\"\"},\"placement\":null,\"result\":{\"x\":1}}");
    v[10] = NULL;
    v[7] = NULL;
    assert_row_json(&store__t_op, 12, v,
                    "{\"id\":\"op_1\",\"kind\":\"create\",\"state\":\"failed\",\"sandbox_id\":\"sbx_1\",\"attempt\":2,"
                    "\"created_at\":\"T0\",\"updated_at\":\"T1\",\"finished_at\":null,\"error\":null,"
                    "\"placement\":null,\"result\":{\"x\":1}}");
}
END_TEST

START_TEST(test_event_data_is_an_object_even_when_unreadable)
{
    const char *v[] = { "7", "T", NULL, "worker.lost", NULL, NULL, NULL };
    assert_row_json(&store__t_event, 7, v,
                    "{\"id\":7,\"ts\":\"T\",\"tenant\":null,\"kind\":\"worker.lost\",\"sandbox_id\":null,"
                    "\"operation_id\":null,\"data\":{}}");
    v[6] = "not json";
    assert_row_json_ex(&store__t_event, 7, v,
                    "{\"id\":7,\"ts\":\"T\",\"tenant\":null,\"kind\":\"worker.lost\",\"sandbox_id\":null,"
                    "\"operation_id\":null,\"data\":{}}", false);
}
END_TEST

START_TEST(test_raw_rows_escape_text_and_compact_postgres_json)
{
    /* strings with quotes, backslashes, slashes, control characters and
     * UTF-8; JSON as jsonb prints it (spaces after colons and commas, none
     * inside strings kept out) */
    const char *v[] = { "7", "T", "t\"e\\n/a\x01\n\t\xc3\xa9", "k", NULL, "op_1",
                        "{\"a\": [1, 2.5, {\"b c\": \"x, y: z\\\" }\"}], \"d\": null, \"e\": true}" };
    assert_row_json(&store__t_event, 7, v,
                    "{\"id\":7,\"ts\":\"T\",\"tenant\":\"t\\\"e\\\\n/a\\u0001\\n\\t\xc3\xa9\",\"kind\":\"k\","
                    "\"sandbox_id\":null,\"operation_id\":\"op_1\","
                    "\"data\":{\"a\":[1,2.5,{\"b c\":\"x, y: z\\\" }\"}],\"d\":null,\"e\":true}}");
}
END_TEST

START_TEST(test_sandbox_row_keeps_its_key_order_and_types)
{
    /* ..., read_only_root, hardened, auto_pause, selector, classification,
     * pool, unreachable, paused, from, volumes, failure, accelerator */
    const char *v[] = { "sbx_1", "web", "acme", "busybox", "running", "running", "w1", "container", "100", "32",
                        "64", "3600", "none", NULL, "{\"a\":\"b\"}", "TE", "TC", "TU", "f", "t", "f", "{}", NULL, NULL,
                        "{\"worker\": \"w1\", \"reason\": \"no heartbeat\", \"since\": \"T1\", \"lost_at\": \"T2\"}",
                        NULL, NULL, NULL, NULL, NULL };
    assert_row_json(&store__t_sandbox, 30, v,
                    "{\"id\":\"sbx_1\",\"name\":\"web\",\"tenant\":\"acme\",\"image\":\"busybox\",\"phase\":\"running\","
                    "\"desired_state\":\"running\",\"worker\":\"w1\",\"isolation\":\"container\",\"cpu_millis\":100,"
                    "\"memory_mib\":32,\"disk_mib\":64,\"ttl_seconds\":3600,\"network\":\"none\",\"trust\":null,"
                    "\"labels\":{\"a\":\"b\"},\"expires_at\":\"TE\",\"created_at\":\"TC\",\"updated_at\":\"TU\","
                    "\"read_only_root\":false,\"hardened\":true,\"auto_pause\":false,\"selector\":{},\"classification\":null,"
                    "\"unreachable\":{\"worker\":\"w1\",\"reason\":\"no heartbeat\",\"since\":\"T1\","
                    "\"lost_at\":\"T2\"},\"failure\":null}");
}
END_TEST

START_TEST(test_assignment_keeps_the_request_hidden)
{
    const char *v[] = { "op_1", "exec", "1", "sbx_1", "acme", "gvisor", NULL, "{\"image\":\"x\"}", "{\"argv\":[]}",
                        NULL, "TC", "tnt_1" };
    PGresult *r = one_row(12, v);
    json_object *o = store__row_json(&store__t_assignment, r, 0);
    char *got = jsonx_dump(o);
    ck_assert_str_eq(got, "{\"operation_id\":\"op_1\",\"kind\":\"exec\",\"attempt\":1,\"sandbox_id\":\"sbx_1\","
                          "\"tenant\":\"acme\",\"isolation\":\"gvisor\",\"runtime_ref\":null,"
                          "\"spec\":{\"image\":\"x\"},\"created_at\":\"TC\"}");
    ck_assert_str_eq(store__col_text(&store__t_assignment, r, 0, "request"), "{\"argv\":[]}");
    ck_assert_str_eq(store__col_text(&store__t_assignment, r, 0, "tenant_id"), "tnt_1");
    free(got);
    json_object_put(o);
    PQclear(r);
}
END_TEST

START_TEST(test_select_lists_come_from_the_tables)
{
    ck_assert_str_eq(store__cols(&store__t_tenant),
                     "tn.id, tn.name, to_char(tn.created_at AT TIME ZONE 'UTC', "
                     "'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), tn.policy::text");
    /* A hook column selects nothing; hidden columns are selected last. */
    const char *ops = store__cols(&store__t_op);
    ck_assert_ptr_nonnull(strstr(ops, "o.finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), "
                                      "o.placement::text, o.result::text, o.error_code, o.error_message"));
    ck_assert_ptr_eq(strstr(ops, "o.error_message"), ops + strlen(ops) - strlen("o.error_message"));
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("store_columns");
    unit_tcase_add(s, "columns", UNIT_TESTS(
        test_worker_row_nests_capacity_and_omits_a_null_route_address,
        test_operation_error_comes_from_its_hidden_columns,
        test_event_data_is_an_object_even_when_unreadable,
        test_raw_rows_escape_text_and_compact_postgres_json,
        test_sandbox_row_keeps_its_key_order_and_types,
        test_assignment_keeps_the_request_hidden,
        test_select_lists_come_from_the_tables,
    ));
    return s;
}
