/* Unit tests for worker/external's pure parts: the protocol 1 codec (request
 * lines, responses and their error mapping, hello, sandbox objects, exec
 * results, stats), the stream frame decoder, and the call table with its
 * deadlines (docs/runtime-drivers.md). */
#include "check_util.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "external/extdrv.h"
#include "external/runtime_external.h"
#include "timeutil.h"

static json_object *parse(const char *s)
{
    json_object *o = NULL;
    api_error_t err;
    ck_assert_int_eq(jsonx_parse(s, strlen(s), &o, &err), 0);
    return o;
}

START_TEST(test_request_line_is_one_json_rpc_line)
{
    json_object *p = parse("{\"ref\":\"a\\nb\"}");
    size_t n = 0;
    char *line = extdrv_request_line(7, "exec", p, &n);
    ck_assert_uint_eq(n, strlen(line));
    ck_assert_int_eq(line[n - 1], '\n');
    ck_assert_ptr_null(memchr(line, '\n', n - 1));
    ck_assert_str_eq(line, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"exec\",\"params\":{\"ref\":\"a\\nb\"}}\n");
    free(line);
    line = extdrv_request_line(1, "inventory", NULL, &n);
    ck_assert_str_eq(line, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"inventory\",\"params\":{}}\n");
    free(line);
    json_object_put(p);
}
END_TEST

START_TEST(test_responses_are_decoded_and_errors_mapped_one_to_one)
{
    extdrv_msg_t m;
    api_error_t err;
    const char *ok = "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"ref\":\"r1\"}}";
    ck_assert_int_eq(extdrv_msg_parse("d", ok, strlen(ok), &m, &err), 0);
    ck_assert_int_eq(m.id, 3);
    ck_assert(!m.is_error);
    ck_assert_str_eq(jsonx_get_str(m.result, "ref"), "r1");
    extdrv_msg_release(&m);

    const char *nf = "{\"id\":4,\"error\":{\"code\":-32000,\"message\":\"no such sandbox\",\"data\":{\"code\":"
                     "\"not_found\"}}}";
    ck_assert_int_eq(extdrv_msg_parse("d", nf, strlen(nf), &m, &err), 0);
    ck_assert(m.is_error);
    ck_assert_int_eq(m.err.code, API_NOT_FOUND);
    ck_assert_str_eq(m.err.message, "no such sandbox");

    const char *iso = "{\"id\":5,\"error\":{\"code\":1,\"message\":\"no kvm\",\"data\":{\"code\":"
                      "\"isolation_unavailable\"}}}";
    ck_assert_int_eq(extdrv_msg_parse("d", iso, strlen(iso), &m, &err), 0);
    ck_assert_int_eq(m.err.code, API_ISOLATION_UNAVAILABLE);

    /* an unknown or missing code: runtime_error naming the driver */
    const char *odd = "{\"id\":6,\"error\":{\"code\":-32603,\"message\":\"boom\",\"data\":{\"code\":\"weird\"}}}";
    ck_assert_int_eq(extdrv_msg_parse("vmm", odd, strlen(odd), &m, &err), 0);
    ck_assert_int_eq(m.err.code, API_RUNTIME_ERROR);
    ck_assert_str_eq(m.err.message, "driver vmm: boom");

    /* a notification is ignored */
    const char *note = "{\"jsonrpc\":\"2.0\",\"method\":\"log\"}";
    ck_assert_int_eq(extdrv_msg_parse("d", note, strlen(note), &m, &err), 0);
    ck_assert_int_eq(m.id, 0);
}
END_TEST

START_TEST(test_malformed_lines_are_protocol_errors)
{
    static const char *const bad[] = { "not json", "[1,2]", "{\"id\":\"x\",\"result\":{}}", "{\"id\":0,\"result\":{}}",
                                       "{\"id\":-3,\"result\":{}}", "{\"id\":2}", "{\"id\":2,\"result\":{}} x", "" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        extdrv_msg_t m;
        api_error_t err;
        ck_assert_msg(extdrv_msg_parse("d", bad[i], strlen(bad[i]), &m, &err) == SBX_EINVAL, "accepted: %s", bad[i]);
        ck_assert_int_eq(err.code, API_RUNTIME_ERROR);
        ck_assert_msg(strstr(err.message, "driver d") != NULL, "%s", err.message);
    }
}
END_TEST

START_TEST(test_hello_gives_classes_modes_and_capabilities)
{
    json_object *r = parse("{\"name\":\"vmm\",\"version\":\"1\",\"protocol\":1,\"classes\":[{\"class\":\"microvm\","
                           "\"network_modes\":[\"none\",\"restricted\",\"bogus\"],\"probe\":\"tcg\"},{\"class\":"
                           "\"unikernel\"}],\"capabilities\":[\"files\",\"dial\"]}");
    extdrv_hello_t h;
    api_error_t err;
    ck_assert_int_eq(extdrv_hello_parse(r, &h, &err), 0);
    ck_assert_str_eq(h.name, "vmm");
    ck_assert(h.offers[ISO_MICROVM] && !h.offers[ISO_CONTAINER] && !h.offers[ISO_GVISOR]);
    ck_assert_uint_eq(h.net_modes[ISO_MICROVM], (1u << NET_NONE) | (1u << NET_RESTRICTED));
    ck_assert_str_eq(h.probe[ISO_MICROVM], "tcg");
    ck_assert(h.cap_files && h.cap_dial && !h.cap_shell && !h.cap_images);
    json_object_put(r);

    r = parse("{\"name\":\"vmm\",\"protocol\":2}");
    ck_assert_int_eq(extdrv_hello_parse(r, &h, &err), SBX_EINVAL);
    ck_assert_str_eq(err.message, "driver vmm speaks protocol 2, the worker 1");
    json_object_put(r);
    r = parse("{\"protocol\":1}");
    ck_assert_int_eq(extdrv_hello_parse(r, &h, &err), SBX_EINVAL);
    json_object_put(r);
}
END_TEST

START_TEST(test_refs_are_bounded_and_plain)
{
    ck_assert(extdrv_ref_valid("fk0123"));
    ck_assert(extdrv_ref_valid("a.b_c-d"));
    char *longest = unit_repeat('a', SBX_DRIVER_REF_MAX), *over = unit_repeat('a', SBX_DRIVER_REF_MAX + 1);
    ck_assert(extdrv_ref_valid(longest));
    ck_assert(!extdrv_ref_valid(over));
    free(longest);
    free(over);
    static const char *const bad[] = { "", "a/b", "../x", "a b", "x:y", "a\n", NULL };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(!extdrv_ref_valid(bad[i]), "accepted %s", bad[i] ? bad[i] : "NULL");
}
END_TEST

START_TEST(test_sandbox_objects_get_the_x_prefix_and_their_exit)
{
    json_object *o = parse("{\"ref\":\"fk1\",\"sandbox_id\":\"sbx_1\",\"tenant\":\"t\",\"state\":\"exited\","
                           "\"labels\":{\"dev.sandbox.managed\":\"true\"},\"exit\":{\"exit_code\":137,"
                           "\"oom_killed\":true,\"finished_at\":\"2026-01-01T00:00:00Z\"}}");
    runtime_object_t obj;
    json_object *labels = NULL;
    api_error_t err;
    ck_assert_int_eq(extdrv_object_parse(o, &obj, &labels, &err), 0);
    ck_assert_str_eq(obj.ref, "x:fk1");
    ck_assert_str_eq(obj.sandbox_id, "sbx_1");
    ck_assert(obj.exit.known && obj.exit.oom_killed);
    ck_assert_int_eq(obj.exit.exit_code, 137);
    ck_assert_str_eq(jsonx_get_str(labels, "dev.sandbox.managed"), "true");
    json_object_put(o);
    o = parse("{\"ref\":\"../etc\",\"sandbox_id\":\"sbx_1\"}");
    ck_assert_int_eq(extdrv_object_parse(o, &obj, NULL, &err), SBX_EINVAL);
    json_object_put(o);
    o = parse("{\"ref\":\"fk1\"}");
    ck_assert_int_eq(extdrv_object_parse(o, &obj, NULL, &err), SBX_EINVAL);
    json_object_put(o);
}
END_TEST

START_TEST(test_create_params_keep_the_owner_labels_over_user_labels)
{
    kv_t lab[] = { { "dev.sandbox.worker", "evil" }, { "team", "a" } };
    sandbox_spec_t spec = { .image = "img:1", .cpu_millis = 500, .memory_mib = 64, .disk_mib = 10,
                            .network = NET_NONE, .labels = { lab, 2 } };
    runtime_create_req_t req = { .sandbox_id = "sbx_1", .tenant = "t", .spec = &spec, .isolation = ISO_MICROVM,
                                 .cluster_id = "c1", .worker_name = "w1" };
    json_object *p = extdrv_create_params(&req);
    json_object *l = jsonx_get_obj(p, "labels");
    ck_assert_str_eq(jsonx_get_str(p, "class"), "microvm");
    ck_assert_str_eq(jsonx_get_str(l, RUNTIME_LABEL_WORKER), "w1");
    ck_assert_str_eq(jsonx_get_str(l, RUNTIME_LABEL_MANAGED), "true");
    ck_assert_str_eq(jsonx_get_str(l, RUNTIME_LABEL_CLUSTER), "c1");
    ck_assert_str_eq(jsonx_get_str(l, RUNTIME_LABEL_DISK_MIB), "10");
    ck_assert_str_eq(jsonx_get_str(l, "team"), "a");
    json_object_put(p);
}
END_TEST

START_TEST(test_exec_results_and_stats_are_checked)
{
    runtime_exec_result_t r;
    api_error_t err;
    memset(&r, 0, sizeof r);
    json_object *o = parse("{\"exit_code\":137,\"signal\":9,\"timed_out\":true,\"duration_ms\":2001}");
    ck_assert_int_eq(extdrv_exec_result_parse(o, &r, &err), 0);
    ck_assert_int_eq(r.exit_code, 137);
    ck_assert_int_eq(r.signal, 9);
    ck_assert(r.timed_out && !r.cancelled);
    json_object_put(o);
    static const char *const bad[] = { "{}", "{\"exit_code\":256}", "{\"exit_code\":0,\"signal\":99}" };
    for (size_t i = 0; i < 3; i++) {
        o = parse(bad[i]);
        ck_assert_msg(extdrv_exec_result_parse(o, &r, &err) == SBX_EINVAL, "accepted %s", bad[i]);
        json_object_put(o);
    }
    runtime_files_stat_t st;
    o = parse("{\"stat\":{\"name\":\"f\",\"size\":3,\"mode\":33188,\"type\":\"file\",\"mtime\":\"x\"}}");
    ck_assert_int_eq(extdrv_stat_parse(o, &st, &err), 0);
    ck_assert_str_eq(st.type, "file");
    ck_assert_uint_eq(st.mode, 0644);
    json_object_put(o);
    o = parse("{\"stat\":{\"name\":\"f\",\"size\":-1,\"type\":\"file\"}}");
    ck_assert_int_eq(extdrv_stat_parse(o, &st, &err), SBX_EINVAL);
    json_object_put(o);
}
END_TEST

START_TEST(test_frames_are_decoded_across_splits_and_bad_ones_refused)
{
    unsigned char buf[64];
    size_t n = 0;
    shellframe_header(buf, SHELLFRAME_DATA, 2);
    memcpy(buf + 5, "hi", 2);
    n = 7;
    shellframe_header(buf + n, EXTDRV_FRAME_STDERR, 1);
    buf[n + 5] = 'e';
    n += 6;
    shellframe_exit(buf + n, 137);
    n += 9;
    extdrv_frames_t d;
    extdrv_frames_init(&d);
    int types[3] = { 0 }, k = 0;
    int32_t code = 0;
    /* one byte at a time */
    for (size_t i = 0; i < n; i++) {
        size_t used = 0;
        extdrv_frame_t f;
        int r = extdrv_frames_next(&d, buf + i, 1, &used, &f);
        ck_assert_int_ge(r, 0);
        ck_assert_uint_eq(used, 1);
        if (r == 1) {
            types[k++] = f.type;
            if (f.type == SHELLFRAME_EXIT)
                code = f.exit_code;
        }
    }
    ck_assert_int_eq(k, 3);
    ck_assert_int_eq(types[0], SHELLFRAME_DATA);
    ck_assert_int_eq(types[1], EXTDRV_FRAME_STDERR);
    ck_assert_int_eq(code, 137);
    /* unknown type, empty data, oversized data, a bad exit */
    unsigned char bad[4][5];
    shellframe_header(bad[0], 9, 1);
    shellframe_header(bad[1], SHELLFRAME_DATA, 0);
    shellframe_header(bad[2], SHELLFRAME_DATA, SHELLFRAME_PAYLOAD_MAX + 1);
    shellframe_header(bad[3], SHELLFRAME_EXIT, 3);
    for (int i = 0; i < 4; i++) {
        size_t used;
        extdrv_frame_t f;
        extdrv_frames_init(&d);
        ck_assert_int_eq(extdrv_frames_next(&d, bad[i], 5, &used, &f), SBX_EINVAL);
    }
}
END_TEST

START_TEST(test_driver_commands_are_json_arrays)
{
    char **argv = NULL, why[300];
    size_t argc = 0;
    ck_assert_int_eq(runtime_external_parse_command("[\"/usr/bin/python3\",\"/a b/d.py\"]", &argv, &argc, why,
                                                    sizeof why), 0);
    ck_assert_uint_eq(argc, 2);
    ck_assert_str_eq(argv[1], "/a b/d.py");
    ck_assert_ptr_null(argv[2]);
    for (size_t i = 0; i < argc; i++)
        free(argv[i]);
    free(argv);
    static const char *const bad[] = { "", "/usr/bin/x", "[]", "[1]", "[\"\"]", "[\"rel/x\"]", "{\"a\":1}",
                                       "[\"a\\u0000b\"]" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(runtime_external_parse_command(bad[i], &argv, &argc, why, sizeof why) == SBX_EINVAL,
                      "accepted %s", bad[i]);
}
END_TEST

/* ---- the call table ---------------------------------------------------------- */

START_TEST(test_table_hands_answers_to_their_calls_out_of_order)
{
    extdrv_table_t t;
    extdrv_table_init(&t);
    int64_t far = time_deadline_ms(10000);
    extdrv_call_t *a = extdrv_table_add(&t, far), *b = extdrv_table_add(&t, far);
    ck_assert_int_ne(a->id, b->id);
    extdrv_msg_t m = { .id = b->id, .result = json_object_new_object() };
    ck_assert_int_eq(extdrv_table_complete(&t, &m), 0);
    ck_assert_ptr_null(m.result);
    ck_assert(extdrv_table_done(&t, b) && !extdrv_table_done(&t, a));
    ck_assert_int_eq(extdrv_table_wait(&t, b, NULL), 0);
    ck_assert_ptr_nonnull(b->result);
    /* an answer twice, or to an id never sent: a protocol error */
    extdrv_msg_t again = { .id = b->id, .result = json_object_new_object() };
    ck_assert_int_eq(extdrv_table_complete(&t, &again), SBX_ENOTFOUND);
    extdrv_msg_release(&again);
    extdrv_msg_t stray = { .id = 999 };
    ck_assert_int_eq(extdrv_table_complete(&t, &stray), SBX_ENOTFOUND);
    extdrv_msg_t e = { .id = a->id, .is_error = true };
    api_error_set(&e.err, API_NOT_FOUND, "gone");
    ck_assert_int_eq(extdrv_table_complete(&t, &e), 0);
    ck_assert_int_eq(a->rc, SBX_ERUNTIME);
    ck_assert_int_eq(a->err.code, API_NOT_FOUND);
    extdrv_table_remove(&t, a);
    extdrv_table_remove(&t, b);
    ck_assert_uint_eq(t.n, 0);
    extdrv_table_release(&t);
}
END_TEST

START_TEST(test_table_deadline_passes_and_cancel_stops_a_wait)
{
    extdrv_table_t t;
    extdrv_table_init(&t);
    /* from before the deadline is set: a slow (sanitized, loaded) start
     * between the two would otherwise count against the wait */
    int64_t t0 = time_mono_ms();
    extdrv_call_t *c = extdrv_table_add(&t, time_deadline_ms(150)), *d = extdrv_table_add(&t, time_deadline_ms(5000));
    ck_assert_int_le(extdrv_table_next_deadline(&t), time_deadline_ms(150));
    ck_assert_int_eq(extdrv_table_wait(&t, c, NULL), SBX_ETIMEOUT);
    int64_t took = time_mono_ms() - t0;
    ck_assert_int_ge(took, 140);
    ck_assert_int_lt(took, 1000);
    atomic_int stop = 1;
    ck_assert_int_eq(extdrv_table_wait(&t, d, &stop), SBX_ECANCELLED);
    /* a restart fails everything in flight */
    extdrv_table_fail_all(&t, API_RUNTIME_ERROR, "driver d restarted: it exited");
    ck_assert_int_eq(extdrv_table_wait(&t, d, NULL), 0);
    ck_assert_int_eq(d->rc, SBX_ERUNTIME);
    ck_assert_str_eq(d->err.message, "driver d restarted: it exited");
    extdrv_table_set_deadline(&t, c, 5);
    ck_assert_int_eq(c->deadline_ms, 5);
    extdrv_table_remove(&t, c);
    extdrv_table_remove(&t, d);
    extdrv_table_release(&t);
}
END_TEST

typedef struct {
    extdrv_table_t *t;
    int64_t id;
} answer_arg_t;

static void *answer_later(void *p)
{
    answer_arg_t *a = p;
    usleep(50000);
    extdrv_msg_t m = { .id = a->id, .result = json_object_new_object() };
    extdrv_table_complete(a->t, &m);
    extdrv_msg_release(&m);
    return NULL;
}

START_TEST(test_table_wakes_a_waiter_when_its_answer_comes)
{
    extdrv_table_t t;
    extdrv_table_init(&t);
    extdrv_call_t *c = extdrv_table_add(&t, time_deadline_ms(5000));
    answer_arg_t a = { &t, c->id };
    pthread_t th;
    pthread_create(&th, NULL, answer_later, &a);
    ck_assert_int_eq(extdrv_table_wait(&t, c, NULL), 0);
    ck_assert_ptr_nonnull(c->result);
    pthread_join(th, NULL);
    extdrv_table_remove(&t, c);
    extdrv_table_release(&t);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("extdrv");
    unit_tcase_add(s, "codec", UNIT_TESTS(
        test_request_line_is_one_json_rpc_line,
        test_responses_are_decoded_and_errors_mapped_one_to_one,
        test_malformed_lines_are_protocol_errors,
        test_hello_gives_classes_modes_and_capabilities,
        test_refs_are_bounded_and_plain,
        test_sandbox_objects_get_the_x_prefix_and_their_exit,
        test_create_params_keep_the_owner_labels_over_user_labels,
        test_exec_results_and_stats_are_checked,
        test_frames_are_decoded_across_splits_and_bad_ones_refused,
        test_driver_commands_are_json_arrays,
    ));
    unit_tcase_add(s, "table", UNIT_TESTS(
        test_table_hands_answers_to_their_calls_out_of_order,
        test_table_deadline_passes_and_cancel_stops_a_wait,
        test_table_wakes_a_waiter_when_its_answer_comes,
    ));
    return s;
}
