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

/* The archive API's stat header: Go's FileMode into permission bits and a type. */
START_TEST(test_path_stat_maps_go_file_modes)
{
    static const struct {
        const char *json;
        const char *type;
        unsigned mode;
    } cases[] = {
        { "{\"name\":\"work\",\"size\":4096,\"mode\":2147484141,\"mtime\":\"2026-12-01T19:00:00.5Z\",\"linkTarget\":\"\"}",
          "dir", 0755 },
        { "{\"name\":\"a.bin\",\"size\":5,\"mode\":416,\"mtime\":\"x\",\"linkTarget\":\"\"}", "file", 0640 },
        { "{\"name\":\"l\",\"size\":7,\"mode\":134218239,\"mtime\":\"x\",\"linkTarget\":\"big.bin\"}", "symlink", 0777 },
        { "{\"name\":\"su\",\"size\":1,\"mode\":8389101,\"mtime\":\"x\",\"linkTarget\":\"\"}", "file", 04755 },
        { "{\"name\":\"t\",\"size\":0,\"mode\":2148532735,\"mtime\":\"x\",\"linkTarget\":\"\"}", "dir", 01777 },
        { "{\"name\":\"p\",\"size\":0,\"mode\":33554852,\"mtime\":\"x\",\"linkTarget\":\"\"}", "other", 0644 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_object *o = unit_json(cases[i].json);
        runtime_files_stat_t st;
        ck_assert_msg(docker_path_stat_parse(o, &st), "case %zu", i);
        ck_assert_str_eq(st.type, cases[i].type);
        ck_assert_uint_eq(st.mode, cases[i].mode);
        json_object_put(o);
    }
    json_object *o = unit_json(cases[0].json);
    runtime_files_stat_t st;
    ck_assert(docker_path_stat_parse(o, &st));
    ck_assert_str_eq(st.name, "work");
    ck_assert_int_eq(st.size, 4096);
    ck_assert_str_eq(st.mtime, "2026-12-01T19:00:00.5Z");
    json_object_put(o);
    const char *bad[] = { "{}", "{\"name\":\"a\",\"size\":1}", "{\"name\":\"a\",\"size\":-1,\"mode\":1}",
                          "{\"name\":\"a\",\"size\":1,\"mode\":4294967296}", "{\"size\":1,\"mode\":1}" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        o = unit_json(bad[i]);
        ck_assert_msg(!docker_path_stat_parse(o, &st), "accepted %s", bad[i]);
        json_object_put(o);
    }
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("docker_parse");
    unit_tcase_add(s, "docker_parse", UNIT_TESTS(
        test_inventory_keeps_usable_sandboxes_of_this_worker,
        test_exit_from_inspect_bounds_what_docker_says,
        test_exec_from_inspect_and_disk_label,
        test_path_stat_maps_go_file_modes,
    ));
    return s;
}
