/* Unit tests for worker/docker/docker_parse: the readers of Docker Engine
 * answers (container list, container inspect, exec inspect). */
#include "check_util.h"
#include <stdlib.h>
#include <string.h>

#include "docker/docker_parse.h"
#include "jsonx.h"
#include "runtime.h"

static json_object *parse(const char *s)
{
    json_object *o = NULL;
    ck_assert_int_eq(jsonx_parse(s, strlen(s), &o, NULL), 0);
    return o;
}

START_TEST(test_inventory_keeps_usable_sandboxes_of_this_worker)
{
    json_object *l = parse("[{\"Id\":\"c0\",\"State\":\"running\",\"Labels\":{\"dev.sandbox.id\":\"sbx_0\","
                           "\"dev.sandbox.tenant\":\"acme\",\"dev.sandbox.worker\":\"w1\"}},"
                           "{\"Id\":\"a/b\",\"Labels\":{\"dev.sandbox.id\":\"sbx_1\"}},"
                           "{\"Id\":\"c1\",\"Labels\":{\"dev.sandbox.id\":\"sbx 2\"}},"
                           "{\"Id\":\"c2\",\"State\":\"RUNNING\",\"Labels\":{\"dev.sandbox.id\":\"sbx_3\","
                           "\"dev.sandbox.tenant\":\"t\\u0001x\"}},"
                           "{\"Id\":\"c3\",\"Labels\":{\"dev.sandbox.id\":\"sbx_4\",\"dev.sandbox.worker\":\"w2\"}},"
                           "7,null,{\"Id\":\"c5\"}]");
    runtime_object_t *objs = NULL;
    size_t n = 99;
    ck_assert_int_eq(docker_inventory_parse(l, "w1", &objs, &n), 0);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(objs[0].sandbox_id, "sbx_0");
    ck_assert_str_eq(objs[0].tenant, "acme");
    ck_assert_str_eq(objs[0].state, "running");
    ck_assert_str_eq(objs[1].sandbox_id, "sbx_3");
    ck_assert_str_eq(objs[1].tenant, "");       /* a control character: dropped */
    ck_assert_str_eq(objs[1].state, "unknown"); /* not Docker's spelling */
    free(objs);
    json_object_put(l);
    json_object *o = parse("{\"Id\":\"c0\"}");
    ck_assert_int_eq(docker_inventory_parse(o, "w1", &objs, &n), SBX_EINVAL);
    ck_assert_ptr_null(objs);
    ck_assert_int_eq(docker_inventory_parse(NULL, NULL, &objs, &n), SBX_EINVAL);
    json_object_put(o);
}
END_TEST

START_TEST(test_exit_from_inspect_bounds_what_docker_says)
{
    json_object *o = parse("{\"State\":{\"Status\":\"exited\",\"ExitCode\":137,\"OOMKilled\":true,"
                           "\"Error\":\"a\\nb\\tc \\u00e9\",\"FinishedAt\":\"2026-12-01T15:40:00.5Z\"}}");
    runtime_exit_t e;
    memset(&e, 0, sizeof e);
    docker_exit_from_inspect(o, &e);
    ck_assert(e.known);
    ck_assert_str_eq(e.state, "exited");
    ck_assert_int_eq(e.exit_code, 137);
    ck_assert(e.oom_killed);
    ck_assert_str_eq(e.error, "a b c \xc3\xa9");
    json_object_put(o);
    o = parse("{\"State\":{\"Status\":\"Exited!\",\"ExitCode\":99999999999,\"FinishedAt\":\"soon\"}}");
    memset(&e, 0, sizeof e);
    docker_exit_from_inspect(o, &e);
    ck_assert_str_eq(e.state, "unknown");
    ck_assert_int_eq(e.exit_code, -1);
    ck_assert_str_eq(e.finished_at, "");
    json_object_put(o);
    memset(&e, 0, sizeof e);
    docker_exit_from_inspect(NULL, &e);
    ck_assert(!e.known);
}
END_TEST

START_TEST(test_exec_from_inspect_and_disk_label)
{
    json_object *o = parse("{\"Running\":false,\"ExitCode\":3,\"Pid\":5492,\"ContainerID\":\"1d94b8dfd3eb\"}");
    docker_exec_state_t st;
    docker_exec_from_inspect(o, &st);
    ck_assert(!st.running);
    ck_assert_int_eq(st.exit_code, 3);
    ck_assert_int_eq(st.pid, 5492);
    ck_assert_str_eq(st.container, "1d94b8dfd3eb");
    json_object_put(o);
    o = parse("{\"Running\":true,\"ExitCode\":-5,\"Pid\":-7,\"ContainerID\":\"../etc\"}");
    docker_exec_from_inspect(o, &st);
    ck_assert(st.running);
    ck_assert_int_eq(st.exit_code, -1);
    ck_assert_int_eq(st.pid, 0);
    ck_assert_str_eq(st.container, "");
    json_object_put(o);
    o = parse("{\"dev.sandbox.disk_mib\":\"64\"}");
    ck_assert_int_eq(docker_disk_label(o), 64);
    json_object_put(o);
    o = parse("{\"dev.sandbox.disk_mib\":\"99999999999999\"}");
    ck_assert_int_eq(docker_disk_label(o), 0);
    json_object_put(o);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("docker_parse");
    unit_tcase_add(s, "docker_parse", UNIT_TESTS(
        test_inventory_keeps_usable_sandboxes_of_this_worker,
        test_exit_from_inspect_bounds_what_docker_says,
        test_exec_from_inspect_and_disk_label,
    ));
    return s;
}
