/* Unit tests for worker/runtime_multi.c, one worker holding several
 * backends: the union of classes, a create routed by its exact class (never
 * a weaker one), later calls by ref prefix or by asking each backend, the
 * union of inventories and images. Two fake backends stand in for Docker and
 * an external driver. */
#include "check_util.h"
#include <stdlib.h>
#include <string.h>

#include "runtime.h"

typedef struct fake {
    runtime_t base;
    isolation_t cls;
    const char *prefix;
    const char *sandbox;      /* the one sandbox it holds */
    int creates, execs, removes;
    bool fail_inventory;
    /* NICs (the Docker-like one filters them, the driver-like one takes them) */
    bool nic_ready, fail_create;
    int attached, detached, nic_sets, swept;
    char last_nic_tap[16];
    /* snapshots: the one it holds, and the copies it sent and took */
    const char *snapshot;
    int exports, imports;
} fake_t;

static fake_t *F(runtime_t *rt) { return (fake_t *)rt; }
static const fake_t *CF(const runtime_t *rt) { return (const fake_t *)rt; }

static int f_ping(runtime_t *rt, long t, api_error_t *e) { (void)rt; (void)t; (void)e; return 0; }
static int f_create(runtime_t *rt, const runtime_create_req_t *req, char ref[80], runtime_exit_t *x, api_error_t *e)
{
    (void)x;
    if (F(rt)->fail_create)
        return api_error_set(e, API_RUNTIME_ERROR, "boot failed");
    snprintf(F(rt)->last_nic_tap, sizeof F(rt)->last_nic_tap, "%s", req->nic ? req->nic->tap : "");
    F(rt)->creates++;
    snprintf(ref, 80, "%s1", F(rt)->prefix);
    return 0;
}
static int f_exec(runtime_t *rt, const char *ref, const exec_spec_t *s, size_t m, const runtime_output_sink_t *k,
                  runtime_exec_result_t *r, api_error_t *e)
{
    (void)ref; (void)s; (void)m; (void)k; (void)e;
    memset(r, 0, sizeof *r);
    F(rt)->execs++;
    return 0;
}
static int f_remove(runtime_t *rt, const char *sbx, const char *ref, api_error_t *e)
{
    (void)sbx; (void)ref; (void)e;
    F(rt)->removes++;
    return 0;
}
static int f_check_owner(runtime_t *rt, const runtime_owner_t *who, const char *ref, char ret[80], api_error_t *e)
{
    (void)ref;
    if (strcmp(who->sandbox_id, F(rt)->sandbox) != 0) {
        api_error_set(e, API_NOT_FOUND, "no such sandbox");
        return SBX_ENOTFOUND;
    }
    snprintf(ret, 80, "%s1", F(rt)->prefix);
    return 0;
}
static int f_inventory(runtime_t *rt, const char *c, const char *w, runtime_object_t **ret, size_t *n, api_error_t *e)
{
    (void)c; (void)w;
    if (F(rt)->fail_inventory)
        return api_error_set(e, API_RUNTIME_ERROR, "cannot list");
    runtime_object_t *o = calloc(1, sizeof *o);
    snprintf(o->sandbox_id, sizeof o->sandbox_id, "%s", F(rt)->sandbox);
    snprintf(o->ref, sizeof o->ref, "%s1", F(rt)->prefix);
    *ret = o;
    *n = 1;
    return 0;
}
static int f_images(runtime_t *rt, char ***ret, size_t *n, api_error_t *e)
{
    (void)e;
    char **v = calloc(2, sizeof *v);
    v[0] = strdup("shared:1");
    v[1] = strdup(F(rt)->prefix[0] ? "driver-only:1" : "docker-only:1");
    *ret = v;
    *n = 2;
    return 0;
}
static int f_dial(runtime_t *rt, const runtime_dial_req_t *r, int *fd, api_error_t *e)
{
    (void)rt; (void)r; (void)fd;
    return api_error_set(e, API_NOT_FOUND, "no");
}
static int f_logs_target(runtime_t *rt, const char *sbx, const char *w, char ret[80], api_error_t *e)
{
    runtime_owner_t who = { .sandbox_id = sbx, .worker_name = w };
    return f_check_owner(rt, &who, NULL, ret, e);
}
static int f_logs_stream(runtime_t *rt, const char *ref, const runtime_logs_req_t *r, api_error_t *e)
{
    (void)rt; (void)ref; (void)r; (void)e;
    return 0;
}
static size_t f_classes(const runtime_t *rt, isolation_t *ret, size_t max)
{
    if (max == 0)
        return 0;
    ret[0] = CF(rt)->cls;
    return 1;
}
static unsigned f_modes(const runtime_t *rt, isolation_t cls) { return cls == CF(rt)->cls ? 1u << NET_NONE : 0; }
static const char *f_probe(const runtime_t *rt, isolation_t cls)
{
    return cls == CF(rt)->cls ? "ok: fake" : NULL;
}
static const char *f_netwhy(const runtime_t *rt, isolation_t cls, net_mode_t m)
{
    (void)rt; (void)cls; (void)m;
    return "";
}
static void f_cancel(runtime_t *rt, const atomic_int *f) { (void)rt; (void)f; }
static bool f_nic_support(runtime_t *rt, char *why, size_t len)
{
    snprintf(why, len, "no filter here");
    return F(rt)->nic_ready;
}
static int f_nic_attach(runtime_t *rt, const runtime_create_req_t *req, runtime_nic_t *ret, api_error_t *e)
{
    (void)req; (void)e;
    F(rt)->attached++;
    snprintf(ret->tap, sizeof ret->tap, "sbvtest0");
    snprintf(ret->host, sizeof ret->host, "10.213.0.1");
    snprintf(ret->guest, sizeof ret->guest, "10.213.0.2");
    ret->prefix = 30;
    return 0;
}
static int f_nic_set(runtime_t *rt, const char *sbx, json_object *eg, api_error_t *e)
{
    (void)sbx; (void)eg; (void)e;
    F(rt)->nic_sets++;
    return 0;
}
static void f_nic_detach(runtime_t *rt, const char *sbx) { (void)sbx; F(rt)->detached++; }
static void f_nic_sweep(runtime_t *rt, const char *const *live, size_t n)
{
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(live[1], "sbx_x");
    F(rt)->swept++;
}
static bool f_takes_nic(const runtime_t *rt) { (void)rt; return true; }
static int f_snap_list(runtime_t *rt, const char *c, const char *w, runtime_snapshot_t **ret, size_t *n,
                       api_error_t *e)
{
    (void)c; (void)w; (void)e;
    *ret = calloc(1, sizeof **ret);
    *n = F(rt)->snapshot ? 1 : 0;
    if (F(rt)->snapshot)
        snprintf((*ret)[0].id, sizeof (*ret)[0].id, "%s", F(rt)->snapshot);
    return 0;
}
static int f_snap_export(runtime_t *rt, const runtime_snapshot_export_req_t *req, api_error_t *e)
{
    if (!F(rt)->snapshot || strcmp(req->snapshot_id, F(rt)->snapshot) != 0)
        return api_error_set(e, API_NOT_FOUND, "not here");
    F(rt)->exports++;
    return 0;
}
static int f_snap_import(runtime_t *rt, const runtime_snapshot_req_t *req, runtime_files_read_fn read, void *ud,
                         runtime_snapshot_t *ret, api_error_t *e)
{
    (void)read; (void)ud; (void)e;
    F(rt)->imports++;
    snprintf(ret->id, sizeof ret->id, "%s", req->snapshot_id);
    return 0;
}
static void f_free(runtime_t *rt) { free(rt); }

static const runtime_ops_t docker_like = {
    .name = "docker", .ping = f_ping, .create = f_create, .exec = f_exec, .remove = f_remove,
    .check_owner = f_check_owner, .inventory = f_inventory, .images = f_images, .dial = f_dial,
    .logs_target = f_logs_target, .logs_stream = f_logs_stream, .isolation_classes = f_classes,
    .network_modes = f_modes, .probe_result = f_probe, .network_unavailable = f_netwhy,
    .set_cancel_flag = f_cancel, .snapshot_list = f_snap_list, .snapshot_export = f_snap_export,
    .snapshot_import = f_snap_import, .free = f_free,
};
static runtime_ops_t driver_like, docker_filtering, driver_nic;

static runtime_t *multi, *parts[2];
static fake_t *dk, *dr;

static void setup(void)
{
    driver_like = docker_like;
    driver_like.name = "external";
    driver_like.ref_prefix = "x:";
    docker_filtering = docker_like;
    docker_filtering.nic_support = f_nic_support;
    docker_filtering.nic_attach = f_nic_attach;
    docker_filtering.nic_egress_set = f_nic_set;
    docker_filtering.nic_detach = f_nic_detach;
    docker_filtering.nic_sweep = f_nic_sweep;
    driver_nic = driver_like;
    driver_nic.takes_nic = f_takes_nic;
    dk = calloc(1, sizeof *dk);
    dr = calloc(1, sizeof *dr);
    *dk = (fake_t){ .base.ops = &docker_like, .cls = ISO_CONTAINER, .prefix = "", .sandbox = "sbx_d" };
    *dr = (fake_t){ .base.ops = &driver_like, .cls = ISO_MICROVM, .prefix = "x:", .sandbox = "sbx_x" };
    parts[0] = &dk->base;
    parts[1] = &dr->base;
    api_error_t err;
    ck_assert_int_eq(runtime_multi_new(parts, 2, &multi, &err), 0);
    ck_assert_ptr_null(parts[0]);
    ck_assert_ptr_null(parts[1]);
}

static void teardown(void) { runtime_free(multi); }

START_TEST(test_offers_the_union_of_classes_under_one_name)
{
    isolation_t cls[4];
    ck_assert_uint_eq(runtime_isolation_classes(multi, cls, 4), 2);
    ck_assert_int_eq(cls[0], ISO_CONTAINER);
    ck_assert_int_eq(cls[1], ISO_MICROVM);
    ck_assert_str_eq(runtime_name(multi), "docker,external");
    ck_assert_uint_eq(runtime_network_modes(multi, ISO_MICROVM), 1u << NET_NONE);
    ck_assert_uint_eq(runtime_network_modes(multi, ISO_GVISOR), 0);
    ck_assert_str_eq(runtime_probe_result(multi, ISO_MICROVM), "ok: fake");
    ck_assert_ptr_null(runtime_probe_result(multi, ISO_GVISOR));
}
END_TEST

START_TEST(test_create_goes_to_the_backend_of_its_exact_class)
{
    sandbox_spec_t spec = { .image = "i", .network = NET_NONE };
    runtime_create_req_t req = { .sandbox_id = "s", .spec = &spec, .isolation = ISO_MICROVM };
    char ref[80];
    api_error_t err;
    ck_assert_int_eq(runtime_create(multi, &req, ref, NULL, &err), 0);
    ck_assert_str_eq(ref, "x:1");
    ck_assert_int_eq(dr->creates, 1);
    req.isolation = ISO_CONTAINER;
    ck_assert_int_eq(runtime_create(multi, &req, ref, NULL, &err), 0);
    ck_assert_str_eq(ref, "1");
    ck_assert_int_eq(dk->creates, 1);
    /* nobody offers gvisor: refused, never handed to a weaker class */
    req.isolation = ISO_GVISOR;
    ck_assert_int_lt(runtime_create(multi, &req, ref, NULL, &err), 0);
    ck_assert_int_eq(err.code, API_ISOLATION_UNAVAILABLE);
    ck_assert_int_eq(dk->creates + dr->creates, 2);
}
END_TEST

START_TEST(test_later_calls_follow_the_ref_prefix)
{
    exec_spec_t spec = { 0 };
    runtime_exec_result_t res;
    api_error_t err;
    ck_assert_int_eq(runtime_exec(multi, "x:1", &spec, 10, NULL, &res, &err), 0);
    ck_assert_int_eq(dr->execs, 1);
    ck_assert_int_eq(runtime_exec(multi, "abcdef", &spec, 10, NULL, &res, &err), 0);
    ck_assert_int_eq(dk->execs, 1);
    ck_assert_int_eq(runtime_remove(multi, "sbx_x", "x:1", &err), 0);
    ck_assert_int_eq(dr->removes, 1);
    ck_assert_int_eq(dk->removes, 0);
    /* without a ref every backend removes what it has of the sandbox */
    ck_assert_int_eq(runtime_remove(multi, "sbx_x", NULL, &err), 0);
    ck_assert_int_eq(dr->removes, 2);
    ck_assert_int_eq(dk->removes, 1);
}
END_TEST

START_TEST(test_calls_by_sandbox_ask_each_backend)
{
    char ref[80];
    api_error_t err;
    runtime_owner_t who = { .sandbox_id = "sbx_x", .worker_name = "w" };
    ck_assert_int_eq(runtime_check_owner(multi, &who, NULL, ref, &err), 0);
    ck_assert_str_eq(ref, "x:1");
    who.sandbox_id = "sbx_d";
    ck_assert_int_eq(runtime_check_owner(multi, &who, NULL, ref, &err), 0);
    ck_assert_str_eq(ref, "1");
    who.sandbox_id = "sbx_none";
    ck_assert_int_eq(runtime_check_owner(multi, &who, NULL, ref, &err), SBX_ENOTFOUND);
    ck_assert_int_eq(runtime_logs_target(multi, "sbx_x", "w", ref, &err), 0);
    ck_assert_str_eq(ref, "x:1");
    ck_assert_int_eq(runtime_files_target(multi, "sbx_d", "w", ref, NULL, &err), 0);
    ck_assert_str_eq(ref, "1");
    ck_assert_int_lt(runtime_files_target(multi, "sbx_none", "w", ref, NULL, &err), 0);
    ck_assert_int_eq(err.code, API_NOT_FOUND);
}
END_TEST

START_TEST(test_inventory_and_images_are_unions)
{
    runtime_object_t *objs = NULL;
    size_t n = 0;
    api_error_t err;
    ck_assert_int_eq(runtime_inventory(multi, NULL, "w", &objs, &n, &err), 0);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(objs[0].sandbox_id, "sbx_d");
    ck_assert_str_eq(objs[1].ref, "x:1");
    runtime_inventory_free(objs, n);
    char **names = NULL;
    ck_assert_int_eq(runtime_images(multi, &names, &n, &err), 0);
    ck_assert_uint_eq(n, 3);
    runtime_images_free(names, n);
    /* one backend's inventory unreadable: the whole inventory fails (the
     * controller must not conclude its sandboxes are gone) */
    dr->fail_inventory = true;
    ck_assert_int_lt(runtime_inventory(multi, NULL, "w", &objs, &n, &err), 0);
    ck_assert_str_eq(err.message, "cannot list");
}
END_TEST

/* A microvm create with network open goes out through the Docker
 * backend's filter: a NIC attached before the create, in its request,
 * let go when the create fails or at remove; the class offers open and
 * filtered only while that filter runs; a live rule change goes there. */
START_TEST(test_open_for_a_class_without_it_takes_a_nic_of_the_filtering_backend)
{
    runtime_free(multi);
    dk = calloc(1, sizeof *dk);
    dr = calloc(1, sizeof *dr);
    *dk = (fake_t){ .base.ops = &docker_filtering, .cls = ISO_CONTAINER, .prefix = "", .sandbox = "sbx_d" };
    *dr = (fake_t){ .base.ops = &driver_nic, .cls = ISO_MICROVM, .prefix = "x:", .sandbox = "sbx_x" };
    parts[0] = &dk->base;
    parts[1] = &dr->base;
    api_error_t err;
    ck_assert_int_eq(runtime_multi_new(parts, 2, &multi, &err), 0);
    sandbox_spec_t spec = { .image = "i", .network = NET_OPEN };
    runtime_create_req_t req = { .sandbox_id = "sbx_x", .spec = &spec, .isolation = ISO_MICROVM };
    char ref[80];
    /* no filter running: neither offered nor made, and the answer says why */
    ck_assert_uint_eq(runtime_network_modes(multi, ISO_MICROVM), 1u << NET_NONE);
    ck_assert_ptr_nonnull(strstr(runtime_network_unavailable(multi, ISO_MICROVM, NET_OPEN), "no filter here"));
    ck_assert_int_eq(runtime_create(multi, &req, ref, NULL, &err), 0);
    ck_assert_str_eq(dr->last_nic_tap, "");   /* no NIC: the driver decides (sandbox-vmm refuses open then) */
    ck_assert_int_eq(dk->attached, 0);
    /* the filter runs: open and filtered offered, the create carries a NIC */
    dk->nic_ready = true;
    ck_assert_uint_eq(runtime_network_modes(multi, ISO_MICROVM),
                      (1u << NET_NONE) | (1u << NET_OPEN) | (1u << NET_OFFER_FILTERED));
    ck_assert_int_eq(runtime_create(multi, &req, ref, NULL, &err), 0);
    ck_assert_str_eq(dr->last_nic_tap, "sbvtest0");
    ck_assert_int_eq(dk->attached, 1);
    ck_assert_int_eq(dk->detached, 0);
    /* a container's open is its own backend's: no NIC */
    req.isolation = ISO_CONTAINER;
    ck_assert_int_eq(runtime_create(multi, &req, ref, NULL, &err), 0);
    ck_assert_int_eq(dk->attached, 1);
    /* a create that fails lets its NIC go; secrets are refused before one is made */
    req.isolation = ISO_MICROVM;
    dr->fail_create = true;
    ck_assert_int_lt(runtime_create(multi, &req, ref, NULL, &err), 0);
    ck_assert_int_eq(dk->attached, 2);
    ck_assert_int_eq(dk->detached, 1);
    dr->fail_create = false;
    json_object *secrets = json_object_new_array();
    json_object_array_add(secrets, json_object_new_object());
    req.secrets = secrets;
    ck_assert_int_lt(runtime_create(multi, &req, ref, NULL, &err), 0);
    ck_assert_int_eq(err.code, API_ISOLATION_UNAVAILABLE);
    ck_assert_int_eq(dk->attached, 2);
    json_object_put(secrets);
    /* a live change of the VM's rules goes to the filter; remove lets the NIC go */
    json_object *eg = json_object_new_object();
    ck_assert_int_eq(runtime_egress_set(multi, "sbx_x", "x:1", eg, &err), 0);
    ck_assert_int_eq(dk->nic_sets, 1);
    json_object_put(eg);
    ck_assert_int_eq(runtime_remove(multi, "sbx_x", "x:1", &err), 0);
    ck_assert_int_eq(dk->detached, 2);
    ck_assert_int_eq(runtime_remove(multi, "sbx_d", "1", &err), 0);
    ck_assert_int_eq(dk->detached, 2);     /* a container has no NIC to let go */
    /* the inventory sweeps the NICs of sandboxes gone */
    runtime_object_t *objs = NULL;
    size_t n = 0;
    ck_assert_int_eq(runtime_inventory(multi, NULL, "w", &objs, &n, &err), 0);
    runtime_inventory_free(objs, n);
    ck_assert_int_eq(dk->swept, 1);
}
END_TEST

/* A copy is sent by the backend holding the snapshot (the driver's microvm
 * snapshot, not the first backend that can send), and taken by the backend
 * of the snapshot's class; a class no backend runs is refused. */
START_TEST(test_snapshot_copies_go_to_the_backend_that_holds_or_runs_them)
{
    api_error_t err;
    dr->snapshot = "snp_vm";
    dk->snapshot = "snp_ct";
    runtime_snapshot_export_req_t ex = { .snapshot_id = "snp_vm", .worker_name = "w" };
    ck_assert_int_eq(runtime_snapshot_export(multi, &ex, &err), 0);
    ck_assert_int_eq(dr->exports, 1);
    ck_assert_int_eq(dk->exports, 0);
    ex.snapshot_id = "snp_ct";
    ck_assert_int_eq(runtime_snapshot_export(multi, &ex, &err), 0);
    ck_assert_int_eq(dk->exports, 1);
    ex.snapshot_id = "snp_none";
    ck_assert_int_lt(runtime_snapshot_export(multi, &ex, &err), 0);
    ck_assert_int_eq(err.code, API_NOT_FOUND);
    runtime_snapshot_t got;
    runtime_snapshot_req_t im = { .snapshot_id = "snp_new", .tenant = "t", .isolation = ISO_MICROVM };
    ck_assert_int_eq(runtime_snapshot_import(multi, &im, NULL, NULL, &got, &err), 0);
    ck_assert_int_eq(dr->imports, 1);
    ck_assert_int_eq(dk->imports, 0);
    im.isolation = ISO_CONTAINER;
    ck_assert_int_eq(runtime_snapshot_import(multi, &im, NULL, NULL, &got, &err), 0);
    ck_assert_int_eq(dk->imports, 1);
    im.isolation = ISO_GVISOR;
    ck_assert_int_lt(runtime_snapshot_import(multi, &im, NULL, NULL, &got, &err), 0);
    ck_assert_int_eq(err.code, API_ISOLATION_UNAVAILABLE);
    ck_assert_int_eq(dk->imports + dr->imports, 2);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("runtime_multi");
    TCase *tc = unit_tcase_add(s, "core", UNIT_TESTS(
        test_offers_the_union_of_classes_under_one_name,
        test_create_goes_to_the_backend_of_its_exact_class,
        test_later_calls_follow_the_ref_prefix,
        test_calls_by_sandbox_ask_each_backend,
        test_inventory_and_images_are_unions,
        test_open_for_a_class_without_it_takes_a_nic_of_the_filtering_backend,
        test_snapshot_copies_go_to_the_backend_that_holds_or_runs_them,
    ));
    tcase_add_checked_fixture(tc, setup, teardown);
    return s;
}
