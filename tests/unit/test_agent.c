/* Unit tests for the worker's assignment logic (agent_run_assignment)
 * against a fake runtime: what each kind asks of the runtime and what the
 * report body says. No controller: the agent is made but never started. */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check_util.h"
#include "agent.h"
#include "agent_internal.h"
#include "agent_output.h"
#include "config.h"
#include "errors.h"
#include "jsonx.h"
#include "log.h"
#include "runtime.h"

/* A runtime whose answers the test sets and whose calls it records. */
typedef struct fake_runtime {
    runtime_t base;
    int creates, execs, removes, frees;
    /* what runtime_create got */
    char create_sandbox[64], create_tenant[64], create_image[128], create_cluster[64], create_worker[64];
    isolation_t create_isolation;
    /* what runtime_exec and runtime_remove got */
    char exec_ref[80], exec_argv0[64];
    size_t exec_max;
    char remove_sandbox[64], remove_ref[80];
    bool remove_ref_null;
    /* answers: fail_code != 0 makes the call fail with it */
    api_code_t fail_code;
    bool fail_exit_known;     /* a failed create: fill *ret_exit as a stopped container */
    const char *exec_stdout;
    int exec_exit_code;
    /* runtime_check_owner: what it got and what it answers */
    int owner_checks;
    char owner_sandbox[64], owner_worker[64], owner_ref[80];
    bool owner_foreign;       /* the object carries another sandbox's labels */
    bool owner_missing;       /* there is no such object */
} fake_runtime_t;

static fake_runtime_t *fake;  /* the one the current test's agent owns */

static int fake_fail(fake_runtime_t *f, api_error_t *err)
{
    return api_error_set(err, f->fail_code, "fake runtime says %s", api_code_info(f->fail_code)->name);
}

static int fake_ping(runtime_t *rt, long timeout_ms, api_error_t *err)
{
    (void)rt, (void)timeout_ms, (void)err;
    return 0;
}

static int fake_create(runtime_t *rt, const runtime_create_req_t *req, char ret_ref[80], runtime_exit_t *ret_exit,
                       api_error_t *err)
{
    fake_runtime_t *f = (fake_runtime_t *)rt;
    f->creates++;
    snprintf(f->create_sandbox, sizeof f->create_sandbox, "%s", req->sandbox_id ? req->sandbox_id : "");
    snprintf(f->create_tenant, sizeof f->create_tenant, "%s", req->tenant ? req->tenant : "");
    snprintf(f->create_image, sizeof f->create_image, "%s", req->spec->image ? req->spec->image : "");
    snprintf(f->create_cluster, sizeof f->create_cluster, "%s", req->cluster_id ? req->cluster_id : "(null)");
    snprintf(f->create_worker, sizeof f->create_worker, "%s", req->worker_name ? req->worker_name : "(null)");
    f->create_isolation = req->isolation;
    if (f->fail_code) {
        if (f->fail_exit_known && ret_exit) {
            ret_exit->known = true;
            snprintf(ret_exit->state, sizeof ret_exit->state, "exited");
            ret_exit->exit_code = 3;
            ret_exit->oom_killed = false;
            snprintf(ret_exit->finished_at, sizeof ret_exit->finished_at, "2026-01-02T03:04:05Z");
            ret_exit->output_tail = strdup("boom\n");
        }
        return fake_fail(f, err);
    }
    snprintf(ret_ref, 80, "ref-of-%s", req->sandbox_id);
    return 0;
}

static int fake_exec(runtime_t *rt, const char *ref, const exec_spec_t *spec, size_t max_output,
                     const runtime_output_sink_t *sink, runtime_exec_result_t *ret, api_error_t *err)
{
    (void)sink;
    fake_runtime_t *f = (fake_runtime_t *)rt;
    f->execs++;
    snprintf(f->exec_ref, sizeof f->exec_ref, "%s", ref ? ref : "(null)");
    snprintf(f->exec_argv0, sizeof f->exec_argv0, "%s", spec->argv && spec->argv[0] ? spec->argv[0] : "");
    f->exec_max = max_output;
    memset(ret, 0, sizeof *ret);
    sbuf_init(&ret->out, max_output);
    sbuf_init(&ret->err, max_output);
    if (f->fail_code)
        return fake_fail(f, err);
    const char *out = f->exec_stdout ? f->exec_stdout : "";
    sbuf_append_bounded(&ret->out, out, strlen(out));
    ret->exit_code = f->exec_exit_code;
    ret->duration_ms = 7;
    return 0;
}

static int fake_remove(runtime_t *rt, const char *sandbox_id, const char *ref, api_error_t *err)
{
    fake_runtime_t *f = (fake_runtime_t *)rt;
    f->removes++;
    snprintf(f->remove_sandbox, sizeof f->remove_sandbox, "%s", sandbox_id ? sandbox_id : "(null)");
    snprintf(f->remove_ref, sizeof f->remove_ref, "%s", ref ? ref : "(null)");
    f->remove_ref_null = ref == NULL;
    return f->fail_code ? fake_fail(f, err) : 0;
}

static int fake_check_owner(runtime_t *rt, const runtime_owner_t *who, const char *ref, char ret_ref[80],
                            api_error_t *err)
{
    fake_runtime_t *f = (fake_runtime_t *)rt;
    f->owner_checks++;
    snprintf(f->owner_sandbox, sizeof f->owner_sandbox, "%s", who->sandbox_id ? who->sandbox_id : "(null)");
    snprintf(f->owner_worker, sizeof f->owner_worker, "%s", who->worker_name ? who->worker_name : "(null)");
    snprintf(f->owner_ref, sizeof f->owner_ref, "%s", ref ? ref : "(null)");
    if (f->owner_missing) {
        api_error_set(err, API_NOT_FOUND, "no container");
        return SBX_ENOTFOUND;
    }
    if (f->owner_foreign) {
        api_error_set(err, API_NOT_FOUND, "container %s is not sandbox %s's", ref ? ref : "-", who->sandbox_id);
        return SBX_EPERM;
    }
    if (ref && *ref)
        snprintf(ret_ref, 80, "%s", ref);
    else
        snprintf(ret_ref, 80, "sbx-%s", who->sandbox_id);
    return 0;
}

static int fake_inventory(runtime_t *rt, const char *cluster_id, const char *worker_name, runtime_object_t **ret,
                          size_t *ret_n, api_error_t *err)
{
    (void)rt, (void)cluster_id, (void)worker_name, (void)err;
    *ret = NULL;
    *ret_n = 0;
    return 0;
}

static int fake_images(runtime_t *rt, char ***ret, size_t *ret_n, api_error_t *err)
{
    (void)rt, (void)err;
    *ret = NULL;
    *ret_n = 0;
    return 0;
}

static int fake_dial(runtime_t *rt, const runtime_dial_req_t *req, int *ret_fd, api_error_t *err)
{
    (void)rt, (void)ret_fd;
    return api_error_set(err, API_NOT_FOUND, "sandbox %s not found", req->sandbox_id);
}

static int fake_logs_target(runtime_t *rt, const char *sandbox_id, const char *worker_name, char ret_ref[80],
                            api_error_t *err)
{
    (void)rt, (void)worker_name, (void)ret_ref;
    return api_error_set(err, API_NOT_FOUND, "sandbox %s not found", sandbox_id);
}

static int fake_logs_stream(runtime_t *rt, const char *ref, const runtime_logs_req_t *req, api_error_t *err)
{
    (void)rt, (void)req;
    return api_error_set(err, API_NOT_FOUND, "container %s not found", ref);
}

static size_t fake_isolation_classes(const runtime_t *rt, isolation_t *ret, size_t max)
{
    (void)rt;
    if (max < 1)
        return 0;
    ret[0] = ISO_CONTAINER;
    return 1;
}

static unsigned fake_network_modes(const runtime_t *rt, isolation_t cls)
{
    (void)rt;
    return cls == ISO_CONTAINER ? 1u << NET_NONE : 0;
}

static const char *fake_probe_result(const runtime_t *rt, isolation_t cls)
{
    (void)rt;
    return cls == ISO_GVISOR ? "not offered: fake runtime" : NULL;
}

static const char *fake_network_unavailable(const runtime_t *rt, isolation_t cls, net_mode_t mode)
{
    (void)rt;
    return cls == ISO_CONTAINER && mode == NET_NONE ? "" : "not offered by the fake runtime";
}

static void fake_set_cancel_flag(runtime_t *rt, const atomic_int *flag) { (void)rt, (void)flag; }

static void fake_free(runtime_t *rt)
{
    fake_runtime_t *f = (fake_runtime_t *)rt;
    f->frees++;
    if (f == fake)
        fake = NULL;
    free(f);
}

static const runtime_ops_t fake_ops = {
    .name = "fake",
    .ping = fake_ping,
    .create = fake_create,
    .exec = fake_exec,
    .remove = fake_remove,
    .check_owner = fake_check_owner,
    .inventory = fake_inventory,
    .images = fake_images,
    .dial = fake_dial,
    .logs_target = fake_logs_target,
    .logs_stream = fake_logs_stream,
    .isolation_classes = fake_isolation_classes,
    .network_modes = fake_network_modes,
    .probe_result = fake_probe_result,
    .network_unavailable = fake_network_unavailable,
    .set_cancel_flag = fake_set_cancel_flag,
    .free = fake_free,
};

static agent_t *agent;

/* A fresh agent on a fresh fake runtime; not started (no controller). */
static void setup(void)
{
    cfg_t cfg;
    char err[256] = "";
    log_set_level(LOG_ERROR);
    ck_assert_int_eq(cfg_init(&cfg), 0);
    ck_assert_int_eq(cfg_set(&cfg, "worker_name", "unit-worker", "flag", err, sizeof err), 0);
    fake = calloc(1, sizeof *fake);
    ck_assert_ptr_nonnull(fake);
    fake->base.ops = &fake_ops;
    int r = agent_new_with_runtime(&cfg, "unit-token", &fake->base, &agent, err, sizeof err);
    cfg_release(&cfg);
    ck_assert_msg(r == 0, "agent_new_with_runtime: %d %s", r, err);
}

static void teardown(void)
{
    agent_free(agent);
    agent = NULL;
    ck_assert_ptr_null(fake); /* agent_free freed the runtime */
}

/* Runs the assignment given as JSON text and returns the report body. */
static json_object *run(const char *job_json)
{
    json_object *job = NULL;
    ck_assert_int_eq(jsonx_parse(job_json, strlen(job_json), &job, NULL), 0);
    json_object *body = agent_run_assignment(agent, job);
    json_object_put(job);
    return body;
}

static void check_failed(json_object *body, const char *code)
{
    ck_assert_ptr_nonnull(body);
    ck_assert_str_eq(jsonx_get_str(body, "outcome"), "failed");
    json_object *e = jsonx_get_obj(body, "error");
    ck_assert_ptr_nonnull(e);
    ck_assert_str_eq(jsonx_get_str(e, "code"), code);
    ck_assert_ptr_nonnull(jsonx_get_str(e, "message"));
}

START_TEST(test_create_passes_the_assignment_to_the_runtime_and_reports_its_ref)
{
    json_object *body = run("{\"operation_id\":\"op_1\",\"attempt\":2,\"kind\":\"create\",\"sandbox_id\":\"sbx_a\","
                            "\"tenant\":\"t1\",\"isolation\":\"gvisor\",\"spec\":{\"image\":\"busybox:1\"}}");
    ck_assert_int_eq(fake->creates, 1);
    ck_assert_str_eq(fake->create_sandbox, "sbx_a");
    ck_assert_str_eq(fake->create_tenant, "t1");
    ck_assert_str_eq(fake->create_image, "busybox:1");
    ck_assert_int_eq(fake->create_isolation, ISO_GVISOR);
    ck_assert_str_eq(fake->create_worker, "unit-worker");
    ck_assert_str_eq(fake->create_cluster, ""); /* not registered: no installation id yet */
    ck_assert_ptr_nonnull(body);
    ck_assert_str_eq(jsonx_get_str(body, "operation_id"), "op_1");
    int64_t attempt = 0;
    ck_assert(jsonx_get_int(body, "attempt", &attempt));
    ck_assert_int_eq(attempt, 2);
    ck_assert_str_eq(jsonx_get_str(body, "outcome"), "succeeded");
    ck_assert_str_eq(jsonx_get_str(body, "runtime_ref"), "ref-of-sbx_a");
    ck_assert_ptr_null(jsonx_get_obj(body, "error"));
    json_object_put(body);
}
END_TEST

START_TEST(test_create_without_isolation_is_the_container_class)
{
    json_object *body = run("{\"operation_id\":\"op_1\",\"attempt\":1,\"kind\":\"create\",\"sandbox_id\":\"sbx_a\","
                            "\"tenant\":\"t1\",\"spec\":{\"image\":\"busybox:1\"}}");
    ck_assert_int_eq(fake->creates, 1);
    ck_assert_int_eq(fake->create_isolation, ISO_CONTAINER);
    ck_assert_str_eq(jsonx_get_str(body, "outcome"), "succeeded");
    json_object_put(body);
}
END_TEST

START_TEST(test_create_of_an_unknown_class_fails_without_calling_the_runtime)
{
    json_object *body = run("{\"operation_id\":\"op_1\",\"attempt\":1,\"kind\":\"create\",\"sandbox_id\":\"sbx_a\","
                            "\"isolation\":\"quantum\",\"spec\":{\"image\":\"busybox:1\"}}");
    ck_assert_int_eq(fake->creates, 0);
    check_failed(body, "isolation_unavailable");
    ck_assert_ptr_null(jsonx_get_str(body, "runtime_ref"));
    json_object_put(body);
}
END_TEST

START_TEST(test_create_with_a_bad_spec_fails_without_calling_the_runtime)
{
    json_object *body = run("{\"operation_id\":\"op_1\",\"attempt\":1,\"kind\":\"create\",\"sandbox_id\":\"sbx_a\","
                            "\"spec\":{\"cpu_millis\":\"lots\"}}");
    ck_assert_int_eq(fake->creates, 0);
    check_failed(body, "invalid_argument");
    json_object_put(body);
}
END_TEST

START_TEST(test_create_whose_container_stopped_reports_how_it_ended)
{
    fake->fail_code = API_SANDBOX_EXITED;
    fake->fail_exit_known = true;
    json_object *body = run("{\"operation_id\":\"op_1\",\"attempt\":1,\"kind\":\"create\",\"sandbox_id\":\"sbx_a\","
                            "\"spec\":{\"image\":\"busybox:1\"}}");
    ck_assert_int_eq(fake->creates, 1);
    check_failed(body, "sandbox_exited");
    json_object *ob = jsonx_get_obj(body, "observed");
    ck_assert_ptr_nonnull(ob);
    ck_assert_str_eq(jsonx_get_str(ob, "state"), "exited");
    int64_t code = 0;
    ck_assert(jsonx_get_int(ob, "exit_code", &code));
    ck_assert_int_eq(code, 3);
    ck_assert_str_eq(jsonx_get_str(ob, "finished_at"), "2026-01-02T03:04:05Z");
    ck_assert_str_eq(jsonx_get_str(ob, "output_tail"), "boom\n");
    ck_assert_ptr_null(jsonx_get_str(body, "runtime_ref"));
    json_object_put(body);
}
END_TEST

START_TEST(test_create_cancelled_at_shutdown_is_left_to_its_lease)
{
    fake->fail_code = API_CANCELLED;
    json_object *body = run("{\"operation_id\":\"op_1\",\"attempt\":1,\"kind\":\"create\",\"sandbox_id\":\"sbx_a\","
                            "\"spec\":{\"image\":\"busybox:1\"}}");
    ck_assert_int_eq(fake->creates, 1);
    ck_assert_ptr_null(body);
}
END_TEST

START_TEST(test_exec_without_ref_runs_in_the_container_named_for_the_sandbox)
{
    fake->exec_stdout = "hi\n";
    fake->exec_exit_code = 4;
    json_object *body = run("{\"operation_id\":\"op_2\",\"attempt\":1,\"kind\":\"exec\",\"sandbox_id\":\"sbx_b\","
                            "\"exec\":{\"argv\":[\"echo\",\"hi\"],\"max_output_bytes\":100}}");
    ck_assert_int_eq(fake->execs, 1);
    ck_assert_str_eq(fake->exec_ref, "sbx-sbx_b");
    ck_assert_str_eq(fake->exec_argv0, "echo");
    ck_assert_uint_eq(fake->exec_max, 100);
    ck_assert_str_eq(jsonx_get_str(body, "outcome"), "succeeded");
    json_object *res = jsonx_get_obj(body, "result");
    ck_assert_ptr_nonnull(res);
    ck_assert_str_eq(jsonx_get_str(res, "stdout"), "hi\n");
    int64_t code = 0;
    ck_assert(jsonx_get_int(res, "exit_code", &code));
    ck_assert_int_eq(code, 4);
    json_object_put(body);
}
END_TEST

START_TEST(test_exec_with_ref_and_default_output_bound)
{
    json_object *body = run("{\"operation_id\":\"op_2\",\"attempt\":1,\"kind\":\"exec\",\"sandbox_id\":\"sbx_b\","
                            "\"runtime_ref\":\"abc123\",\"exec\":{\"argv\":[\"true\"]}}");
    ck_assert_str_eq(fake->exec_ref, "abc123");
    ck_assert_uint_eq(fake->exec_max, SBX_EXEC_OUTPUT_DEFAULT);
    ck_assert_str_eq(jsonx_get_str(body, "outcome"), "succeeded");
    json_object_put(body);
}
END_TEST

START_TEST(test_exec_cancelled_at_shutdown_is_reported_failed_not_left)
{
    fake->fail_code = API_CANCELLED;
    json_object *body = run("{\"operation_id\":\"op_2\",\"attempt\":1,\"kind\":\"exec\",\"sandbox_id\":\"sbx_b\","
                            "\"exec\":{\"argv\":[\"sleep\",\"100\"]}}");
    ck_assert_int_eq(fake->execs, 1);
    check_failed(body, "runtime_error");
    ck_assert_ptr_null(jsonx_get_obj(body, "result"));
    json_object_put(body);
}
END_TEST

START_TEST(test_exec_failure_carries_the_runtime_code)
{
    fake->fail_code = API_NOT_FOUND;
    json_object *body = run("{\"operation_id\":\"op_2\",\"attempt\":1,\"kind\":\"exec\",\"sandbox_id\":\"sbx_b\","
                            "\"exec\":{\"argv\":[\"true\"]}}");
    check_failed(body, "not_found");
    ck_assert_str_eq(jsonx_get_str(jsonx_get_obj(body, "error"), "message"), "fake runtime says not_found");
    json_object_put(body);
}
END_TEST

START_TEST(test_delete_by_sandbox_id_passes_no_ref)
{
    json_object *body = run("{\"operation_id\":\"op_3\",\"attempt\":1,\"kind\":\"delete\",\"sandbox_id\":\"sbx_c\"}");
    ck_assert_int_eq(fake->removes, 1);
    ck_assert_str_eq(fake->remove_sandbox, "sbx_c");
    ck_assert(fake->remove_ref_null);
    ck_assert_str_eq(jsonx_get_str(body, "outcome"), "succeeded");
    json_object_put(body);
}
END_TEST

START_TEST(test_delete_naming_nothing_fails_without_calling_the_runtime)
{
    json_object *body = run("{\"operation_id\":\"op_3\",\"attempt\":1,\"kind\":\"delete\"}");
    ck_assert_int_eq(fake->removes, 0);
    check_failed(body, "invalid_argument");
    json_object_put(body);
}
END_TEST

START_TEST(test_exec_in_a_container_of_another_sandbox_is_refused_not_found)
{
    fake->owner_foreign = true;
    json_object *body = run("{\"operation_id\":\"op_2\",\"attempt\":1,\"kind\":\"exec\",\"sandbox_id\":\"sbx_b\","
                            "\"runtime_ref\":\"cafe01\",\"exec\":{\"argv\":[\"cat\",\"/secret\"]}}");
    ck_assert_int_eq(fake->owner_checks, 1);
    ck_assert_str_eq(fake->owner_sandbox, "sbx_b");
    ck_assert_str_eq(fake->owner_worker, "unit-worker");
    ck_assert_str_eq(fake->owner_ref, "cafe01");
    ck_assert_int_eq(fake->execs, 0);
    check_failed(body, "not_found");
    json_object_put(body);
}
END_TEST

START_TEST(test_exec_without_sandbox_id_is_refused_without_calling_the_runtime)
{
    json_object *body = run("{\"operation_id\":\"op_2\",\"attempt\":1,\"kind\":\"exec\","
                            "\"runtime_ref\":\"cafe01\",\"exec\":{\"argv\":[\"true\"]}}");
    ck_assert_int_eq(fake->owner_checks + fake->execs, 0);
    check_failed(body, "invalid_argument");
    json_object_put(body);
}
END_TEST

START_TEST(test_delete_of_a_container_of_another_sandbox_is_refused_not_found)
{
    fake->owner_foreign = true;
    json_object *body = run("{\"operation_id\":\"op_3\",\"attempt\":1,\"kind\":\"delete\",\"sandbox_id\":\"sbx_c\","
                            "\"runtime_ref\":\"cafe02\"}");
    ck_assert_int_eq(fake->owner_checks, 1);
    ck_assert_str_eq(fake->owner_ref, "cafe02");
    ck_assert_int_eq(fake->removes, 0);
    check_failed(body, "not_found");
    json_object_put(body);
}
END_TEST

START_TEST(test_delete_whose_container_is_gone_removes_by_label)
{
    fake->owner_missing = true;
    json_object *body = run("{\"operation_id\":\"op_3\",\"attempt\":1,\"kind\":\"delete\",\"sandbox_id\":\"sbx_c\","
                            "\"runtime_ref\":\"cafe03\"}");
    ck_assert_int_eq(fake->removes, 1);
    ck_assert_str_eq(fake->remove_sandbox, "sbx_c");
    ck_assert(fake->remove_ref_null);
    ck_assert_str_eq(jsonx_get_str(body, "outcome"), "succeeded");
    json_object_put(body);
}
END_TEST

START_TEST(test_delete_of_its_own_container_passes_the_checked_ref)
{
    json_object *body = run("{\"operation_id\":\"op_3\",\"attempt\":1,\"kind\":\"delete\",\"sandbox_id\":\"sbx_c\","
                            "\"runtime_ref\":\"cafe04\"}");
    ck_assert_int_eq(fake->owner_checks, 1);
    ck_assert_str_eq(fake->remove_ref, "cafe04");
    ck_assert_str_eq(jsonx_get_str(body, "outcome"), "succeeded");
    json_object_put(body);
}
END_TEST

START_TEST(test_unknown_kind_is_invalid_argument)
{
    json_object *body = run("{\"operation_id\":\"op_4\",\"attempt\":1,\"kind\":\"reboot\",\"sandbox_id\":\"sbx_d\"}");
    ck_assert_int_eq(fake->creates + fake->execs + fake->removes, 0);
    check_failed(body, "invalid_argument");
    json_object_put(body);
}
END_TEST

START_TEST(test_assignment_without_operation_id_or_attempt_is_dropped)
{
    ck_assert_ptr_null(run("{\"attempt\":1,\"kind\":\"delete\",\"sandbox_id\":\"sbx_e\"}"));
    ck_assert_ptr_null(run("{\"operation_id\":\"op_5\",\"kind\":\"delete\",\"sandbox_id\":\"sbx_e\"}"));
    ck_assert_int_eq(fake->removes, 0);
}
END_TEST

START_TEST(test_the_agent_probe_result_comes_from_the_runtime)
{
    ck_assert_str_eq(agent_probe_result(agent, ISO_GVISOR), "not offered: fake runtime");
    ck_assert_ptr_null(agent_probe_result(agent, ISO_CONTAINER));
}
END_TEST

static json_object *job_of(const char *tenant)
{
    json_object *j = json_object_new_object();
    jsonx_add_str(j, "tenant", tenant);
    return j;
}

START_TEST(test_the_queue_takes_turns_by_tenant)
{
    /* A ring of 6 from slot 4: a, a, a, b, a, c; three executors. */
    json_object *q[6];
    const char *order[6] = { "a", "a", "a", "b", "a", "c" };
    for (int i = 0; i < 6; i++)
        q[(4 + i) % 6] = job_of(order[i]);
    char running[3][SBX_MAX_NAME_BYTES + 1] = { "", "", "" };
    /* Nothing runs: the oldest. */
    ck_assert_uint_eq(agent_queue_pick(q, 6, 4, 6, running, 3), 0);
    /* a runs (three tenants have work: a share of one each): b's. */
    snprintf(running[0], sizeof running[0], "a");
    ck_assert_uint_eq(agent_queue_pick(q, 6, 4, 6, running, 3), 3);
    /* a and b run: c's. */
    snprintf(running[1], sizeof running[1], "b");
    ck_assert_uint_eq(agent_queue_pick(q, 6, 4, 6, running, 3), 5);
    /* a, b and c one each: every share is taken, the executor waits. */
    snprintf(running[2], sizeof running[2], "c");
    ck_assert_uint_eq(agent_queue_pick(q, 6, 4, 6, running, 3), SIZE_MAX);
    /* a twice and c: b's, under its share. */
    snprintf(running[1], sizeof running[1], "a");
    ck_assert_uint_eq(agent_queue_pick(q, 6, 4, 6, running, 3), 3);
    /* Only a queued, a twice and c running: a's share (2 of 3) is taken,
     * the third executor stays for c. */
    ck_assert_uint_eq(agent_queue_pick(q, 6, 4, 3, running, 3), SIZE_MAX);
    /* a alone, one running: its share is every executor. */
    running[1][0] = running[2][0] = '\0';
    ck_assert_uint_eq(agent_queue_pick(q, 6, 4, 3, running, 3), 0);
    for (int i = 0; i < 6; i++)
        json_object_put(q[i]);
}
END_TEST

START_TEST(test_a_tenant_holds_its_share_of_the_executors_at_least_one)
{
    /* the default, 75 %: 6 of 8 (two stay for other tenants), 3 of 4 */
    ck_assert_int_eq(agent_tenant_executors(8, 75), 6);
    ck_assert_int_eq(agent_tenant_executors(4, 75), 3);
    ck_assert_int_eq(agent_tenant_executors(32, 75), 24);
    /* rounded down, never below one */
    ck_assert_int_eq(agent_tenant_executors(3, 50), 1);
    ck_assert_int_eq(agent_tenant_executors(2, 75), 1);
    ck_assert_int_eq(agent_tenant_executors(1, 75), 1);
    ck_assert_int_eq(agent_tenant_executors(8, 1), 1);
    /* 100: every executor (no cap asked of the claim) */
    ck_assert_int_eq(agent_tenant_executors(8, 100), 8);
    ck_assert_int_eq(agent_tenant_executors(256, 100), 256);
}
END_TEST

/* A loopback port nothing listens on: bound and closed again. */
static int closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof sa;
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

START_TEST(test_live_output_stays_bounded_while_the_controller_is_unreachable)
{
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", closed_port());
    httpc_t *c = NULL;
    ck_assert_int_eq(httpc_new(url, "unit-token", &c), 0);
    agent_output_t *ao = calloc(1, sizeof *ao);
    ck_assert_ptr_nonnull(ao);
    agent_output_init(ao, agent, c, "op_unit", 1);
    static char block[65536];
    memset(block, 'x', sizeof block);
    int64_t total = 0;
    /* 5 MiB in both streams, switching often, nothing ever answering. */
    for (int i = 0; i < 80; i++) {
        size_t n = i % 3 == 0 ? sizeof block : 1000;
        ao->sink.write(ao->sink.ud, 1 + i % 2, block, n);
        total += (int64_t)n;
    }
    ck_assert_uint_le(ao->buf.len, AGENT_OUTPUT_BUFFER_MAX);
    ck_assert_int_eq(ao->next_offset, total);
    ck_assert_uint_gt(ao->dropped, 0);
    ck_assert_uint_eq(ao->buf.len + ao->dropped, (uint64_t)total);
    /* What is pending is contiguous and ends at the next offset. */
    size_t sum = 0;
    for (size_t i = 0; i + 1 < ao->npieces; i++)
        ck_assert_int_eq(ao->pieces[i].offset + (int64_t)ao->pieces[i].len, ao->pieces[i + 1].offset);
    for (size_t i = 0; i < ao->npieces; i++)
        sum += ao->pieces[i].len;
    ck_assert_uint_eq(sum, ao->buf.len);
    ck_assert_int_eq(ao->pieces[ao->npieces - 1].offset + (int64_t)ao->pieces[ao->npieces - 1].len, total);
    ck_assert(!ao->stopped);
    agent_output_release(ao);
    free(ao);
    httpc_free(c);
}
END_TEST

/* As a heartbeat answer's "cancel" list of one id (NULL: empty) sets it. */
static void set_cancelled(agent_t *a, const char *op_id)
{
    pthread_mutex_lock(&a->mu);
    a->ncancel = 0;
    if (op_id)
        snprintf(a->cancel_ops[a->ncancel++], SBX_ID_MAX, "%s", op_id);
    pthread_mutex_unlock(&a->mu);
}

START_TEST(test_live_output_of_a_cancelled_exec_is_seen_from_the_heartbeat_list)
{
    agent_output_t *ao = calloc(1, sizeof *ao);
    ck_assert_ptr_nonnull(ao);
    agent_output_init(ao, agent, NULL, "op_cancelme", 1);
    ck_assert(!ao->sink.cancelled(ao->sink.ud));
    set_cancelled(agent, "op_other");
    ck_assert(!ao->sink.cancelled(ao->sink.ud));
    set_cancelled(agent, "op_cancelme");
    ck_assert(ao->sink.cancelled(ao->sink.ud));
    set_cancelled(agent, NULL);
    ck_assert(ao->sink.cancelled(ao->sink.ud)); /* sticky: the kill is under way */
    agent_output_release(ao);
    free(ao);
}
END_TEST

START_TEST(test_unanswered_polls_are_named_until_kept_long_enough_the_oldest_dropped_when_full)
{
    agent_unanswered_t u = { .n = 0 };
    char q[512];
    agent_unanswered_query(&u, q, sizeof q);
    ck_assert_str_eq(q, "");
    agent_unanswered_add(&u, "aaaa", 1000);
    agent_unanswered_add(&u, "bbbb", 30000);
    agent_unanswered_query(&u, q, sizeof q);
    ck_assert_str_eq(q, "&unanswered=aaaa,bbbb");
    /* answered before aaaa was kept long enough: both named again */
    agent_unanswered_answered(&u, 1000 + AGENT_UNANSWERED_KEEP_MS - 1);
    ck_assert_int_eq(u.n, 2);
    /* answered past aaaa's keep: aaaa goes, bbbb stays */
    agent_unanswered_answered(&u, 1000 + AGENT_UNANSWERED_KEEP_MS);
    agent_unanswered_query(&u, q, sizeof q);
    ck_assert_str_eq(q, "&unanswered=bbbb");
    /* full: the oldest goes first */
    char id[8];
    for (int i = 0; i < SBX_POLL_UNANSWERED_MAX + 2; i++) {
        snprintf(id, sizeof id, "p%d", i);
        agent_unanswered_add(&u, id, 40000 + i);
    }
    ck_assert_int_eq(u.n, SBX_POLL_UNANSWERED_MAX);
    ck_assert_str_eq(u.id[0], "p2");
    ck_assert_str_eq(u.id[SBX_POLL_UNANSWERED_MAX - 1], "p9");
    /* a buffer too small for all: whole ids only */
    agent_unanswered_query(&u, q, 20);
    ck_assert_str_eq(q, "&unanswered=p2,p3");
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("agent");
    unit_tcase_add(s, "queue", UNIT_TESTS(test_the_queue_takes_turns_by_tenant,
                                          test_a_tenant_holds_its_share_of_the_executors_at_least_one,
                                          test_unanswered_polls_are_named_until_kept_long_enough_the_oldest_dropped_when_full,));
    TCase *tc = unit_tcase_add(s, "assignments", UNIT_TESTS(
        test_create_passes_the_assignment_to_the_runtime_and_reports_its_ref,
        test_create_without_isolation_is_the_container_class,
        test_create_of_an_unknown_class_fails_without_calling_the_runtime,
        test_create_with_a_bad_spec_fails_without_calling_the_runtime,
        test_create_whose_container_stopped_reports_how_it_ended,
        test_create_cancelled_at_shutdown_is_left_to_its_lease,
        test_exec_without_ref_runs_in_the_container_named_for_the_sandbox,
        test_exec_with_ref_and_default_output_bound,
        test_exec_cancelled_at_shutdown_is_reported_failed_not_left,
        test_exec_failure_carries_the_runtime_code,
        test_delete_by_sandbox_id_passes_no_ref,
        test_delete_naming_nothing_fails_without_calling_the_runtime,
        test_exec_in_a_container_of_another_sandbox_is_refused_not_found,
        test_exec_without_sandbox_id_is_refused_without_calling_the_runtime,
        test_delete_of_a_container_of_another_sandbox_is_refused_not_found,
        test_delete_whose_container_is_gone_removes_by_label,
        test_delete_of_its_own_container_passes_the_checked_ref,
        test_unknown_kind_is_invalid_argument,
        test_assignment_without_operation_id_or_attempt_is_dropped,
        test_the_agent_probe_result_comes_from_the_runtime,
    ));
    tcase_add_checked_fixture(tc, setup, teardown);
    TCase *lo = unit_tcase_add(s, "live output", UNIT_TESTS(
        test_live_output_stays_bounded_while_the_controller_is_unreachable,
        test_live_output_of_a_cancelled_exec_is_seen_from_the_heartbeat_list,
    ));
    tcase_add_checked_fixture(lo, setup, teardown);
    return s;
}
