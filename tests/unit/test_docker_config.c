/* Unit tests for worker/docker_config: the hardening profile of every
 * sandbox container and of the gVisor probe container. */
#include "check_util.h"
#include <stdlib.h>
#include <string.h>

#include "docker/docker_config.h"
#include "jsonx.h"
#include "runtime.h"

static sandbox_spec_t spec_default(void)
{
    sandbox_spec_t s;
    memset(&s, 0, sizeof s);
    s.image = (char *)"busybox:latest";
    s.cpu_millis = 1500;
    s.memory_mib = 512;
    return s;
}

static json_object *body_for(const sandbox_spec_t *s, const char *runtime, const char *network)
{
    runtime_create_req_t req = { .sandbox_id = "sbx_1", .tenant = "t1", .spec = s, .isolation = ISO_CONTAINER,
                                 .cluster_id = "cl_1" };
    docker_create_plan_t plan = { .runtime = runtime, .network_mode = network };
    json_object *o = docker_sandbox_body(&req, &plan);
    ck_assert_ptr_nonnull(o);
    return o;
}

/* The JSON text of key in o ("" when absent). */
static const char *text_of(json_object *o, const char *key)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(o, key, &v))
        return "";
    return json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);
}

START_TEST(test_every_sandbox_gets_the_base_profile)
{
    sandbox_spec_t s = spec_default();
    json_object *o = body_for(&s, NULL, "none");
    json_object *hc = jsonx_get_obj(o, "HostConfig");
    int64_t v;
    bool b;
    ck_assert_str_eq(text_of(hc, "CapDrop"), "[\"ALL\"]");
    ck_assert_str_eq(text_of(hc, "CapAdd"), "[\"CHOWN\",\"DAC_OVERRIDE\",\"FOWNER\",\"SETGID\",\"SETUID\",\"KILL\"]");
    ck_assert_str_eq(text_of(hc, "SecurityOpt"), "[\"no-new-privileges\"]");
    ck_assert(jsonx_get_bool(hc, "Privileged", &b) && !b);
    ck_assert(jsonx_get_bool(hc, "Init", &b) && b);
    ck_assert(jsonx_get_int(hc, "PidsLimit", &v) && v == DOCKER_PIDS_LIMIT);
    ck_assert(jsonx_get_int(hc, "Memory", &v) && v == 512LL * 1024 * 1024);
    ck_assert(jsonx_get_int(hc, "MemorySwap", &v) && v == 512LL * 1024 * 1024);
    ck_assert(jsonx_get_int(hc, "NanoCpus", &v) && v == 1500000000LL);
    ck_assert_str_eq(text_of(hc, "Binds"), "[]");
    ck_assert_str_eq(text_of(hc, "Mounts"), "[]");
    ck_assert_str_eq(jsonx_get_str(hc, "NetworkMode"), "none");
    /* dockerd's default runtime, a writable root, Docker's seccomp profile */
    ck_assert_str_eq(text_of(hc, "Runtime"), "");
    ck_assert_str_eq(text_of(hc, "ReadonlyRootfs"), "");
    ck_assert_str_eq(text_of(hc, "Tmpfs"), "");
    ck_assert_ptr_null(strstr(json_object_to_json_string(o), "seccomp"));
    json_object *labels = jsonx_get_obj(o, "Labels");
    ck_assert_str_eq(jsonx_get_str(labels, RUNTIME_LABEL_MANAGED), RUNTIME_MANAGED_SANDBOX);
    ck_assert_str_eq(jsonx_get_str(labels, RUNTIME_LABEL_SANDBOX), "sbx_1");
    ck_assert_str_eq(jsonx_get_str(labels, RUNTIME_LABEL_CLUSTER), "cl_1");
    json_object_put(o);
}
END_TEST

START_TEST(test_hardened_sandbox_has_no_capabilities)
{
    sandbox_spec_t s = spec_default();
    s.hardened = true;
    json_object *o = body_for(&s, NULL, "none");
    json_object *hc = jsonx_get_obj(o, "HostConfig");
    ck_assert_str_eq(text_of(hc, "CapAdd"), "[]");
    ck_assert_str_eq(text_of(hc, "CapDrop"), "[\"ALL\"]");
    json_object_put(o);
}
END_TEST

START_TEST(test_read_only_root_gets_a_bounded_tmp)
{
    sandbox_spec_t s = spec_default();
    s.read_only_root = true;
    json_object *o = body_for(&s, NULL, "none");
    json_object *hc = jsonx_get_obj(o, "HostConfig");
    bool b;
    ck_assert(jsonx_get_bool(hc, "ReadonlyRootfs", &b) && b);
    ck_assert_str_eq(jsonx_get_str(jsonx_get_obj(hc, "Tmpfs"), "/tmp"), "rw,nosuid,nodev,mode=1777,size=64m");
    json_object_put(o);
    s.memory_mib = 32;
    o = body_for(&s, NULL, "none");
    ck_assert_str_eq(jsonx_get_str(jsonx_get_obj(jsonx_get_obj(o, "HostConfig"), "Tmpfs"), "/tmp"),
                     "rw,nosuid,nodev,mode=1777,size=8m");
    json_object_put(o);
}
END_TEST

START_TEST(test_tmpfs_size_is_a_quarter_of_memory_up_to_64_mib)
{
    ck_assert_int_eq(docker_tmpfs_mib(6), 1);
    ck_assert_int_eq(docker_tmpfs_mib(3), 1);
    ck_assert_int_eq(docker_tmpfs_mib(100), 25);
    ck_assert_int_eq(docker_tmpfs_mib(256), 64);
    ck_assert_int_eq(docker_tmpfs_mib(4096), 64);
}
END_TEST

START_TEST(test_plan_sets_runtime_and_network)
{
    sandbox_spec_t s = spec_default();
    json_object *o = body_for(&s, "runsc", "sandbox-restricted");
    json_object *hc = jsonx_get_obj(o, "HostConfig");
    ck_assert_str_eq(jsonx_get_str(hc, "Runtime"), "runsc");
    ck_assert_str_eq(jsonx_get_str(hc, "NetworkMode"), "sandbox-restricted");
    json_object_put(o);
}
END_TEST

START_TEST(test_user_labels_cannot_impersonate_a_sandbox)
{
    sandbox_spec_t s = spec_default();
    kv_t items[2] = { { (char *)RUNTIME_LABEL_SANDBOX, (char *)"sbx_other" }, { (char *)"team", (char *)"a" } };
    s.labels.items = items;
    s.labels.n = 2;
    json_object *o = body_for(&s, NULL, "none");
    json_object *labels = jsonx_get_obj(o, "Labels");
    ck_assert_str_eq(jsonx_get_str(labels, RUNTIME_LABEL_SANDBOX), "sbx_1");
    ck_assert_str_eq(jsonx_get_str(labels, "team"), "a");
    json_object_put(o);
}
END_TEST

START_TEST(test_egress_allow_label_is_the_workers_and_open_only)
{
    sandbox_spec_t s = spec_default();
    kv_t items[1] = { { (char *)RUNTIME_LABEL_EGRESS_ALLOW, (char *)"0.0.0.0/0" } };
    s.labels.items = items;
    s.labels.n = 1;
    /* a user label of that name never survives, whatever the network */
    for (int m = NET_NONE; m <= NET_OPEN; m++) {
        s.network = (net_mode_t)m;
        json_object *o = body_for(&s, NULL, "x");
        ck_assert_ptr_null(jsonx_get_str(jsonx_get_obj(o, "Labels"), RUNTIME_LABEL_EGRESS_ALLOW));
        json_object_put(o);
    }
    /* the assignment's list: only on an open sandbox */
    runtime_create_req_t req = { .sandbox_id = "sbx_1", .spec = &s, .egress_allow = "10.1.0.0/16,fd00::/8" };
    docker_create_plan_t plan = { .network_mode = "x" };
    for (int m = NET_NONE; m <= NET_OPEN; m++) {
        s.network = (net_mode_t)m;
        json_object *o = docker_sandbox_body(&req, &plan);
        const char *v = jsonx_get_str(jsonx_get_obj(o, "Labels"), RUNTIME_LABEL_EGRESS_ALLOW);
        if (m == NET_OPEN)
            ck_assert_str_eq(v, "10.1.0.0/16,fd00::/8");
        else
            ck_assert_ptr_null(v);
        json_object_put(o);
    }
}
END_TEST

START_TEST(test_filtered_sandbox_gets_the_filter_as_resolver_and_its_rules_as_label)
{
    sandbox_spec_t s = spec_default();
    kv_t items[1] = { { (char *)RUNTIME_LABEL_EGRESS, (char *)"{\"default\":\"allow\"}" } };
    s.labels.items = items;
    s.labels.n = 1;
    s.network = NET_OPEN;
    /* a user label of that name never survives */
    json_object *o = body_for(&s, NULL, "sandbox-open");
    ck_assert_ptr_null(jsonx_get_str(jsonx_get_obj(o, "Labels"), RUNTIME_LABEL_EGRESS));
    ck_assert_str_eq(text_of(jsonx_get_obj(o, "HostConfig"), "Dns"), "");
    json_object_put(o);
    /* on the filtered network: the rules (canonical) and the filter's resolver */
    char *allow[1] = { (char *)"api.test" };
    s.egress.allow = allow;
    s.egress.n_allow = 1;
    s.egress.set = true;
    runtime_create_req_t req = { .sandbox_id = "sbx_1", .spec = &s };
    docker_create_plan_t plan = { .network_mode = "sandbox-filtered", .filter_dns = "172.30.0.1" };
    o = docker_sandbox_body(&req, &plan);
    ck_assert_str_eq(jsonx_get_str(jsonx_get_obj(o, "Labels"), RUNTIME_LABEL_EGRESS),
                     "{\"allow\":[\"api.test\"],\"deny\":[],\"default\":\"deny\"}");
    json_object *hc = jsonx_get_obj(o, "HostConfig");
    ck_assert_str_eq(text_of(hc, "Dns"), "[\"172.30.0.1\"]");
    ck_assert_str_eq(jsonx_get_str(hc, "NetworkMode"), "sandbox-filtered");
    /* and no capability that forges addresses */
    const char *caps = text_of(hc, "CapAdd");
    ck_assert_ptr_null(strstr(caps, "NET_RAW"));
    ck_assert_ptr_null(strstr(caps, "NET_ADMIN"));
    ck_assert_str_eq(text_of(hc, "CapDrop"), "[\"ALL\"]");
    json_object_put(o);
}
END_TEST

START_TEST(test_probe_is_hardened_and_never_a_sandbox)
{
    json_object *o = docker_probe_body("sandbox-probe:1", "runsc", "w-1");
    json_object *hc = jsonx_get_obj(o, "HostConfig");
    json_object *labels = jsonx_get_obj(o, "Labels");
    bool b;
    ck_assert_str_eq(jsonx_get_str(o, "Image"), "sandbox-probe:1");
    ck_assert_str_eq(text_of(o, "Cmd"), "[\"\\/sbin\\/docker-init\",\"--version\"]");
    ck_assert_str_eq(jsonx_get_str(hc, "Runtime"), "runsc");
    ck_assert_str_eq(jsonx_get_str(hc, "NetworkMode"), "none");
    ck_assert(jsonx_get_bool(hc, "Init", &b) && b);
    ck_assert(jsonx_get_bool(hc, "AutoRemove", &b) && !b);
    ck_assert_str_eq(text_of(hc, "CapAdd"), "[]");
    ck_assert_str_eq(jsonx_get_str(labels, RUNTIME_LABEL_MANAGED), RUNTIME_MANAGED_PROBE);
    ck_assert_str_eq(jsonx_get_str(labels, RUNTIME_LABEL_WORKER), "w-1");
    ck_assert_ptr_null(jsonx_get_str(labels, RUNTIME_LABEL_CLUSTER));
    ck_assert_ptr_null(jsonx_get_str(labels, RUNTIME_LABEL_SANDBOX));
    json_object_put(o);
}
END_TEST

START_TEST(test_main_process_log_is_one_bounded_json_file)
{
    sandbox_spec_t s = spec_default();
    json_object *o = body_for(&s, NULL, "none");
    json_object *lc = jsonx_get_obj(jsonx_get_obj(o, "HostConfig"), "LogConfig");
    ck_assert_ptr_nonnull(lc);
    ck_assert_str_eq(jsonx_get_str(lc, "Type"), "json-file");
    /* Engine API 1.41 takes Config as a map of strings; bytes without a unit. */
    ck_assert_str_eq(text_of(lc, "Config"), "{\"max-size\":\"10485760\",\"max-file\":\"1\"}");
    ck_assert_uint_eq(SBX_CONTAINER_LOG_MAX_BYTES, 10485760u);
    json_object_put(o);
    /* The probe container too. */
    o = docker_probe_body("sandbox-probe:1", "runsc", "w1");
    lc = jsonx_get_obj(jsonx_get_obj(o, "HostConfig"), "LogConfig");
    ck_assert_str_eq(jsonx_get_str(jsonx_get_obj(lc, "Config"), "max-file"), "1");
    json_object_put(o);
}
END_TEST

START_TEST(test_disk_quota_labels_the_sandbox_and_bounds_every_tmpfs)
{
    sandbox_spec_t s = spec_default();
    s.disk_mib = 32;
    s.read_only_root = true;
    json_object *o = body_for(&s, NULL, "none");
    json_object *hc = jsonx_get_obj(o, "HostConfig");
    int64_t v = 0;
    ck_assert_str_eq(jsonx_get_str(jsonx_get_obj(o, "Labels"), RUNTIME_LABEL_DISK_MIB), "32");
    /* /tmp (a quarter of 512 MiB is 64) and /dev/shm (64) within the 32 MiB quota */
    ck_assert_str_eq(jsonx_get_str(jsonx_get_obj(hc, "Tmpfs"), "/tmp"), "rw,nosuid,nodev,mode=1777,size=32m");
    ck_assert(jsonx_get_int(hc, "ShmSize", &v) && v == 32LL * 1024 * 1024);
    ck_assert_str_eq(text_of(hc, "StorageOpt"), "");
    json_object_put(o);
    /* A driver that takes StorageOpt gets the quota as its size. */
    runtime_create_req_t req = { .sandbox_id = "sbx_1", .tenant = "t1", .spec = &s, .isolation = ISO_CONTAINER };
    docker_create_plan_t plan = { .network_mode = "none", .storage_quota = true };
    o = docker_sandbox_body(&req, &plan);
    ck_assert_str_eq(text_of(jsonx_get_obj(o, "HostConfig"), "StorageOpt"), "{\"size\":\"32M\"}");
    json_object_put(o);
    /* A large quota leaves Docker's /dev/shm size; no quota, no label. */
    s.disk_mib = 4096;
    o = body_for(&s, NULL, "none");
    ck_assert(jsonx_get_int(jsonx_get_obj(o, "HostConfig"), "ShmSize", &v) && v == 64LL * 1024 * 1024);
    json_object_put(o);
    s.disk_mib = 0;
    o = body_for(&s, NULL, "none");
    ck_assert_ptr_null(jsonx_get_str(jsonx_get_obj(o, "Labels"), RUNTIME_LABEL_DISK_MIB));
    json_object_put(o);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("docker_config");
    unit_tcase_add(s, "core", UNIT_TESTS(
        test_every_sandbox_gets_the_base_profile,
        test_hardened_sandbox_has_no_capabilities,
        test_read_only_root_gets_a_bounded_tmp,
        test_tmpfs_size_is_a_quarter_of_memory_up_to_64_mib,
        test_plan_sets_runtime_and_network,
        test_user_labels_cannot_impersonate_a_sandbox,
        test_egress_allow_label_is_the_workers_and_open_only,
        test_filtered_sandbox_gets_the_filter_as_resolver_and_its_rules_as_label,
        test_probe_is_hardened_and_never_a_sandbox,
        test_main_process_log_is_one_bounded_json_file,
        test_disk_quota_labels_the_sandbox_and_bounds_every_tmpfs,
    ));
    return s;
}
