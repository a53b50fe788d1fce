/* A composite runtime: one worker holding several backends
 * (worker_runtime = docker,external). It offers the union of their classes,
 * sends a create to the first backend offering exactly its class, finds the
 * backend of every later call by the ref's prefix (runtime_ops_t.ref_prefix)
 * or, for calls naming only a sandbox, by asking each in turn, and reports
 * the union of their inventories. */
#include "runtime.h"

#include <json-c/json.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct multi_runtime {
    runtime_t base;
    runtime_ops_t ops;        /* the table below with this runtime's name */
    char name[64];
    runtime_t *b[SBX_RUNTIME_BACKENDS_MAX];
    size_t n;
    char nic_why[256];        /* why no backend filters NICs (network_unavailable's answer) */
} multi_runtime_t;

/* A shell handle: which backend holds it. */
typedef struct multi_shell {
    runtime_t *b;
    runtime_shell_t *s;
} multi_shell_t;

static multi_runtime_t *multi(runtime_t *rt) { return (multi_runtime_t *)rt; }
static const multi_runtime_t *cmulti(const runtime_t *rt) { return (const multi_runtime_t *)rt; }

static bool multi_offers(const runtime_t *b, isolation_t cls)
{
    isolation_t list[8];
    size_t n = runtime_isolation_classes(b, list, 8);
    for (size_t i = 0; i < n; i++)
        if (list[i] == cls)
            return true;
    return false;
}

/* The backend offering cls (the first in the list), NULL none. */
static runtime_t *multi_by_class(const multi_runtime_t *m, isolation_t cls)
{
    for (size_t i = 0; i < m->n; i++)
        if (multi_offers(m->b[i], cls))
            return m->b[i];
    return NULL;
}

/* The backend whose prefix ref has; else the first without a prefix. */
static runtime_t *multi_by_ref(const multi_runtime_t *m, const char *ref)
{
    runtime_t *plain = NULL;
    for (size_t i = 0; i < m->n; i++) {
        const char *p = m->b[i]->ops->ref_prefix;
        if (p && *p) {
            if (ref && strncmp(ref, p, strlen(p)) == 0)
                return m->b[i];
        } else if (!plain) {
            plain = m->b[i];
        }
    }
    return plain ? plain : m->b[0];
}

static int multi_ping(runtime_t *rt, long timeout_ms, api_error_t *err)
{
    multi_runtime_t *m = multi(rt);
    for (size_t i = 0; i < m->n; i++) {
        int r = runtime_ping(m->b[i], timeout_ms, err);
        if (r < 0)
            return r;
    }
    return 0;
}

static runtime_t *multi_volumes(runtime_t *rt, char *why, size_t whylen);

/* The backend whose egress filter takes NICs (the first), NULL none (why). */
static runtime_t *multi_nic_backend(const multi_runtime_t *m, char *why, size_t whylen)
{
    snprintf(why, whylen, "no backend of this worker filters egress");
    for (size_t i = 0; i < m->n; i++)
        if (m->b[i]->ops->nic_support && runtime_nic_support(m->b[i], why, whylen))
            return m->b[i];
    return NULL;
}

/* Whether b's create of class cls with network open goes through a NIC
 * another backend filters (b makes no open network of its own). */
static bool multi_open_by_nic(const multi_runtime_t *m, runtime_t *b, isolation_t cls, runtime_t **ret_nb)
{
    char why[200];
    *ret_nb = NULL;
    if (!runtime_takes_nic(b) || (runtime_network_modes(b, cls) & (1u << NET_OPEN)))
        return false;
    *ret_nb = multi_nic_backend(m, why, sizeof why);
    return *ret_nb && *ret_nb != b;
}

static int multi_create(runtime_t *rt, const runtime_create_req_t *req, char ret_ref[80], runtime_exit_t *ret_exit,
                        api_error_t *err)
{
    multi_runtime_t *m = multi(rt);
    runtime_t *b = multi_by_class(m, req->isolation);
    if (!b) {
        if (ret_exit)
            memset(ret_exit, 0, sizeof *ret_exit);
        const char *why = NULL;
        for (size_t i = 0; i < m->n && !why; i++)
            why = runtime_probe_result(m->b[i], req->isolation);
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "isolation %s is not offered by this worker%s%.300s",
                             isolation_name(req->isolation), why ? ": " : "", why ? why : "");
    }
    char why[160];
    runtime_create_req_t r2 = *req;
    /* open for a backend without a network of its own (microvm): a NIC
     * the filter of another takes, its rules there before it boots */
    runtime_t *nb = NULL;
    runtime_nic_t nic;
    if (req->spec && req->spec->network == NET_OPEN && multi_open_by_nic(m, b, req->isolation, &nb)) {
        if (req->secrets && json_object_array_length(req->secrets) > 0) {
            if (ret_exit)
                memset(ret_exit, 0, sizeof *ret_exit);
            return api_error_set(err, API_ISOLATION_UNAVAILABLE, "isolation %s takes no secrets at egress here "
                                 "(container and gvisor do)", isolation_name(req->isolation));
        }
        int r = runtime_nic_attach(nb, req, &nic, err);
        if (r < 0) {
            if (ret_exit)
                memset(ret_exit, 0, sizeof *ret_exit);
            return r;
        }
        r2.nic = &nic;
    }
    /* a snapshot another backend holds as an image (a container's, or a
     * template's): the backend that runs the class starts from its files */
    sandbox_spec_t s2;
    char simage[256];
    for (size_t i = 0; req->spec && req->spec->from && i < m->n; i++) {
        api_error_t e;
        if (m->b[i] == b || runtime_snapshot_image(m->b[i], req, simage, sizeof simage, &e) < 0)
            continue;
        s2 = *req->spec;
        s2.image = simage;
        s2.from = NULL;
        r2.spec = &s2;
        r2.image_of_snapshot = true;
        break;
    }
    runtime_t *vb = req->spec && req->spec->nvolumes > 0 ? multi_volumes(rt, why, sizeof why) : NULL;
    int r;
    if (!vb || vb == b) {
        r = runtime_create(b, &r2, ret_ref, ret_exit, err);
    } else {
        /* a backend that takes disks (microvm): the volume backend claims
         * the volumes' images for it */
        runtime_disk_t *disks = NULL;
        r = runtime_volume_disks(vb, &r2, &disks, &r2.ndisks, err);
        if (r < 0) {
            if (ret_exit)
                memset(ret_exit, 0, sizeof *ret_exit);
        } else {
            r2.disks = disks;
            r = runtime_create(b, &r2, ret_ref, ret_exit, err);
            free(disks);
            if (r < 0)
                runtime_volume_release(vb, req->sandbox_id);
        }
    }
    if (r < 0 && r2.nic)
        runtime_nic_detach(nb, req->sandbox_id);
    return r;
}

static int multi_exec(runtime_t *rt, const char *ref, const exec_spec_t *spec, size_t max_output,
                      const runtime_output_sink_t *sink, runtime_exec_result_t *ret, api_error_t *err)
{
    return runtime_exec(multi_by_ref(multi(rt), ref), ref, spec, max_output, sink, ret, err);
}

static int multi_remove(runtime_t *rt, const char *sandbox_id, const char *ref, api_error_t *err)
{
    multi_runtime_t *m = multi(rt);
    char why[160];
    runtime_t *vb = multi_volumes(rt, why, sizeof why);
    if (ref && *ref) {
        runtime_t *b = multi_by_ref(m, ref);
        int r = runtime_remove(b, sandbox_id, ref, err);
        if (r == 0 && vb && vb != b) /* the volume disks it held */
            runtime_volume_release(vb, sandbox_id);
        runtime_t *nb = multi_nic_backend(m, why, sizeof why);
        if (r == 0 && nb && nb != b) /* the NIC it had */
            runtime_nic_detach(nb, sandbox_id);
        return r;
    }
    int r = 0;
    for (size_t i = 0; i < m->n; i++) {
        api_error_t e;
        int ri = runtime_remove(m->b[i], sandbox_id, NULL, &e);
        if (ri < 0 && r == 0) {
            r = ri;
            *err = e;
        }
    }
    if (r == 0 && vb)
        runtime_volume_release(vb, sandbox_id);
    runtime_t *nb = r == 0 ? multi_nic_backend(m, why, sizeof why) : NULL;
    if (nb)
        runtime_nic_detach(nb, sandbox_id);
    return r;
}

static int multi_check_owner(runtime_t *rt, const runtime_owner_t *who, const char *ref, char ret_ref[80],
                             api_error_t *err)
{
    multi_runtime_t *m = multi(rt);
    if (ref && *ref)
        return runtime_check_owner(multi_by_ref(m, ref), who, ref, ret_ref, err);
    int r = SBX_ENOTFOUND;
    for (size_t i = 0; i < m->n; i++) {
        r = runtime_check_owner(m->b[i], who, NULL, ret_ref, err);
        if (r != SBX_ENOTFOUND)
            return r;
    }
    return r;
}

static int multi_inventory(runtime_t *rt, const char *cluster_id, const char *worker_name, runtime_object_t **ret,
                           size_t *ret_n, api_error_t *err)
{
    multi_runtime_t *m = multi(rt);
    runtime_object_t *all = NULL;
    size_t total = 0;
    for (size_t i = 0; i < m->n; i++) {
        runtime_object_t *objs = NULL;
        size_t n = 0;
        int r = runtime_inventory(m->b[i], cluster_id, worker_name, &objs, &n, err);
        if (r < 0) {
            runtime_inventory_free(all, total);
            return r;
        }
        runtime_object_t *grown = realloc(all, (total + n + 1) * sizeof *grown);
        if (!grown) {
            runtime_inventory_free(objs, n);
            runtime_inventory_free(all, total);
            return api_error_set(err, API_INTERNAL, "out of memory");
        }
        all = grown;
        memcpy(all + total, objs, n * sizeof *objs); /* the exits' tails move with them */
        total += n;
        free(objs);
    }
    /* the volume disks and NICs of sandboxes no backend holds any more
     * (removed while the worker was down) are let go */
    char why[160];
    runtime_t *vb = multi_volumes(rt, why, sizeof why), *nb = multi_nic_backend(m, why, sizeof why);
    const char **live = vb || nb ? calloc(total + 1, sizeof *live) : NULL;
    if (live) {
        for (size_t i = 0; i < total; i++)
            live[i] = all[i].sandbox_id;
        if (vb)
            runtime_volume_sweep_disks(vb, live, total);
        if (nb)
            runtime_nic_sweep(nb, live, total);
        free(live);
    }
    *ret = all;
    *ret_n = total;
    return 0;
}

static int multi_images(runtime_t *rt, char ***ret, size_t *ret_n, api_error_t *err)
{
    multi_runtime_t *m = multi(rt);
    char **names = calloc(RUNTIME_MAX_IMAGES, sizeof *names);
    size_t n = 0;
    if (!names)
        return api_error_set(err, API_INTERNAL, "out of memory");
    for (size_t i = 0; i < m->n; i++) {
        char **one = NULL;
        size_t k = 0;
        int r = runtime_images(m->b[i], &one, &k, err);
        if (r < 0) {
            runtime_images_free(names, n);
            return r;
        }
        for (size_t j = 0; j < k; j++) {
            bool dup = false;
            for (size_t q = 0; q < n && !dup; q++)
                dup = strcmp(names[q], one[j]) == 0;
            if (!dup && n < RUNTIME_MAX_IMAGES) {
                names[n++] = one[j];
                one[j] = NULL;
            }
        }
        runtime_images_free(one, k);
    }
    *ret = names;
    *ret_n = n;
    return 0;
}

static int multi_image_details(runtime_t *rt, json_object **ret, api_error_t *err)
{
    multi_runtime_t *m = multi(rt);
    json_object *all = NULL;
    for (size_t i = 0; i < m->n; i++) {
        json_object *one = NULL;
        api_error_t e;
        if (runtime_image_details(m->b[i], &one, &e) < 0)
            continue; /* a backend without details (or failing): the others' still count */
        if (!all) {
            all = one;
            continue;
        }
        json_object_object_foreach(one, k, v) {
            if (!json_object_object_get_ex(all, k, NULL))
                json_object_object_add(all, k, json_object_get(v));
        }
        json_object_put(one);
    }
    if (!all)
        return api_error_set(err, API_UNAVAILABLE, "no runtime keeps image details");
    *ret = all;
    return 0;
}

static int multi_dial(runtime_t *rt, const runtime_dial_req_t *req, int *ret_fd, api_error_t *err)
{
    multi_runtime_t *m = multi(rt);
    int r = 0;
    for (size_t i = 0; i < m->n; i++) {
        r = runtime_dial(m->b[i], req, ret_fd, err);
        if (r == 0 || err->code != API_NOT_FOUND)
            return r;
    }
    return r;
}

static int multi_logs_target(runtime_t *rt, const char *sandbox_id, const char *worker_name, char ret_ref[80],
                             api_error_t *err)
{
    multi_runtime_t *m = multi(rt);
    int r = 0;
    for (size_t i = 0; i < m->n; i++) {
        r = runtime_logs_target(m->b[i], sandbox_id, worker_name, ret_ref, err);
        if (r == 0 || err->code != API_NOT_FOUND)
            return r;
    }
    return r;
}

static int multi_logs_stream(runtime_t *rt, const char *ref, const runtime_logs_req_t *req, api_error_t *err)
{
    return runtime_logs_stream(multi_by_ref(multi(rt), ref), ref, req, err);
}

static int multi_files_target(runtime_t *rt, const char *sandbox_id, const char *worker_name, char ret_ref[80],
                              int64_t *ret_fs_bytes, api_error_t *err)
{
    multi_runtime_t *m = multi(rt);
    int r = 0;
    for (size_t i = 0; i < m->n; i++) {
        r = runtime_files_target(m->b[i], sandbox_id, worker_name, ret_ref, ret_fs_bytes, err);
        if (r == 0 || err->code != API_NOT_FOUND)
            return r;
    }
    return r;
}

static int multi_files_put(runtime_t *rt, const runtime_files_put_req_t *req, int64_t *ret_bytes, api_error_t *err)
{
    return runtime_files_put(multi_by_ref(multi(rt), req->ref), req, ret_bytes, err);
}

static int multi_files_get(runtime_t *rt, const runtime_files_get_req_t *req, api_error_t *err)
{
    return runtime_files_get(multi_by_ref(multi(rt), req->ref), req, err);
}

static int multi_shell_open(runtime_t *rt, const runtime_shell_req_t *req, runtime_shell_t **ret, int *ret_fd,
                            runtime_shell_early_t *ret_early, api_error_t *err)
{
    multi_shell_t *ms = calloc(1, sizeof *ms);
    if (!ms)
        return api_error_set(err, API_INTERNAL, "out of memory");
    ms->b = multi_by_ref(multi(rt), req->ref);
    int r = runtime_shell_open(ms->b, req, &ms->s, ret_fd, ret_early, err);
    if (r < 0) {
        free(ms);
        return r;
    }
    *ret = (runtime_shell_t *)ms;
    return 0;
}

static int multi_shell_resize(runtime_t *rt, runtime_shell_t *s, unsigned cols, unsigned rows, api_error_t *err)
{
    (void)rt;
    multi_shell_t *ms = (multi_shell_t *)s;
    return runtime_shell_resize(ms->b, ms->s, cols, rows, err);
}

static int multi_shell_exit_code(runtime_t *rt, runtime_shell_t *s, int *ret_code, api_error_t *err)
{
    (void)rt;
    multi_shell_t *ms = (multi_shell_t *)s;
    return runtime_shell_exit_code(ms->b, ms->s, ret_code, err);
}

static void multi_shell_close(runtime_t *rt, runtime_shell_t *s)
{
    (void)rt;
    multi_shell_t *ms = (multi_shell_t *)s;
    runtime_shell_close(ms->b, ms->s);
    free(ms);
}

static int multi_snapshot_create(runtime_t *rt, const runtime_snapshot_req_t *req, runtime_snapshot_t *ret,
                                  api_error_t *err)
{
    return runtime_snapshot_create(multi_by_ref(multi(rt), req->ref), req, ret, err);
}

/* The union of the backends' snapshots (a failing backend fails the list:
 * a partial one would make the controller's wanted ones look gone). */
static int multi_snapshot_list(runtime_t *rt, const char *cluster_id, const char *worker_name,
                               runtime_snapshot_t **ret, size_t *ret_n, api_error_t *err)
{
    multi_runtime_t *m = multi(rt);
    runtime_snapshot_t *all = NULL;
    size_t total = 0;
    for (size_t i = 0; i < m->n; i++) {
        runtime_snapshot_t *one = NULL;
        size_t n = 0;
        if (runtime_snapshot_list(m->b[i], cluster_id, worker_name, &one, &n, err) < 0) {
            free(all);
            return SBX_ERUNTIME;
        }
        if (n > 0) {
            runtime_snapshot_t *grown = realloc(all, (total + n) * sizeof *all);
            if (!grown) {
                free(one);
                free(all);
                return api_error_set(err, API_INTERNAL, "out of memory");
            }
            all = grown;
            memcpy(all + total, one, n * sizeof *one);
            total += n;
        }
        free(one);
    }
    *ret = all;
    *ret_n = total;
    return 0;
}

static int multi_snapshot_remove(runtime_t *rt, const char *snapshot_id, const char *worker_name, api_error_t *err)
{
    multi_runtime_t *m = multi(rt);
    for (size_t i = 0; i < m->n; i++)
        if (runtime_snapshot_remove(m->b[i], snapshot_id, worker_name, err) < 0)
            return SBX_ERUNTIME;
    return 0;
}

/* The backend that holds snapshot id for worker_name, or NULL. */
static runtime_t *multi_snapshot_holder(const multi_runtime_t *m, const char *id, const char *worker_name)
{
    for (size_t i = 0; i < m->n; i++) {
        runtime_snapshot_t *l = NULL;
        size_t n = 0;
        api_error_t ignored;
        bool here = false;
        if (runtime_snapshot_list(m->b[i], NULL, worker_name, &l, &n, &ignored) == 0)
            for (size_t k = 0; k < n && !here; k++)
                here = strcmp(l[k].id, id) == 0;
        free(l);
        if (here)
            return m->b[i];
    }
    return NULL;
}

/* A snapshot is sent by the backend that holds it. */
static int multi_snapshot_export(runtime_t *rt, const runtime_snapshot_export_req_t *req, api_error_t *err)
{
    runtime_t *b = multi_snapshot_holder(multi(rt), req->snapshot_id, req->worker_name);
    if (!b)
        return api_error_set(err, API_NOT_FOUND, "snapshot %s is not on worker %s", req->snapshot_id,
                             req->worker_name ? req->worker_name : "?");
    return runtime_snapshot_export(b, req, err);
}

/* A copy is taken by the backend of its sandboxes' class. */
static int multi_snapshot_import(runtime_t *rt, const runtime_snapshot_req_t *req, runtime_files_read_fn read,
                                 void *ud, runtime_snapshot_t *ret, api_error_t *err)
{
    runtime_t *b = multi_by_class(multi(rt), req->isolation);
    if (!b)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "no runtime here runs %s: it cannot take the copy of %s",
                             isolation_name(req->isolation), req->snapshot_id);
    return runtime_snapshot_import(b, req, read, ud, ret, err);
}

/* Volumes live with the first backend that has them (Docker's). */
static runtime_t *multi_volumes(runtime_t *rt, char *why, size_t whylen)
{
    multi_runtime_t *m = multi(rt);
    for (size_t i = 0; i < m->n; i++)
        if (runtime_volume_support(m->b[i], why, whylen))
            return m->b[i];
    return NULL;
}

static bool multi_volume_support(runtime_t *rt, char *why, size_t whylen)
{
    return multi_volumes(rt, why, whylen) != NULL;
}

static int multi_volume_list(runtime_t *rt, runtime_volume_t **ret, size_t *ret_n, api_error_t *err)
{
    char why[160];
    runtime_t *b = multi_volumes(rt, why, sizeof why);
    *ret = NULL;
    *ret_n = 0;
    return b ? runtime_volume_list(b, ret, ret_n, err) : 0;
}

static int multi_volume_remove(runtime_t *rt, const char *volume_id, api_error_t *err)
{
    char why[160];
    runtime_t *b = multi_volumes(rt, why, sizeof why);
    return b ? runtime_volume_remove(b, volume_id, err) : 0;
}

static int multi_pause(runtime_t *rt, const char *ref, bool *ret_memory, api_error_t *err)
{
    return runtime_pause(multi_by_ref(multi(rt), ref), ref, ret_memory, err);
}

static int multi_resume(runtime_t *rt, const char *sandbox_id, const char *ref, runtime_exit_t *ret_exit,
                        api_error_t *err)
{
    return runtime_resume(multi_by_ref(multi(rt), ref), sandbox_id, ref, ret_exit, err);
}

static int multi_egress_set(runtime_t *rt, const char *sandbox_id, const char *ref, json_object *egress,
                            api_error_t *err)
{
    multi_runtime_t *m = multi(rt);
    runtime_t *b = multi_by_ref(m, ref);
    char why[200];
    runtime_t *nb = runtime_takes_nic(b) ? multi_nic_backend(m, why, sizeof why) : NULL;
    if (nb && nb != b) /* its NIC's rules, at the filter that takes it */
        return runtime_nic_egress_set(nb, sandbox_id, egress, err);
    return runtime_egress_set(b, sandbox_id, ref, egress, err);
}

/* Every backend's records in one array (at most max in all). */
static int multi_egress_drain(runtime_t *rt, int max, json_object **ret, int64_t *ret_dropped, api_error_t *err)
{
    multi_runtime_t *m = multi(rt);
    int any = -1;
    *ret = json_object_new_array();
    for (size_t i = 0; i < m->n; i++) {
        json_object *part = NULL;
        int64_t dropped = 0;
        int left = max - (int)json_object_array_length(*ret);
        if (left <= 0 || runtime_egress_drain(m->b[i], left, &part, &dropped, err) < 0)
            continue;
        any = 0;
        *ret_dropped += dropped;
        for (size_t k = 0; k < json_object_array_length(part); k++)
            json_object_array_add(*ret, json_object_get(json_object_array_get_idx(part, k)));
        json_object_put(part);
    }
    if (any < 0) {
        json_object_put(*ret);
        *ret = NULL;
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "no backend filters egress by name");
    }
    return 0;
}

static size_t multi_isolation_classes(const runtime_t *rt, isolation_t *ret, size_t max)
{
    const multi_runtime_t *m = cmulti(rt);
    size_t n = 0;
    for (int c = ISO_CONTAINER; c <= ISO_MICROVM && n < max; c++)
        if (multi_by_class(m, (isolation_t)c))
            ret[n++] = (isolation_t)c;
    return n;
}

static unsigned multi_network_modes(const runtime_t *rt, isolation_t cls)
{
    const multi_runtime_t *m = cmulti(rt);
    runtime_t *b = multi_by_class(m, cls), *nb;
    if (!b)
        return 0;
    unsigned modes = runtime_network_modes(b, cls);
    if (multi_open_by_nic(m, b, cls, &nb)) /* open, and rules by domain, through the filter */
        modes |= (1u << NET_OPEN) | (1u << NET_OFFER_FILTERED);
    return modes;
}

static const char *multi_probe_result(const runtime_t *rt, isolation_t cls)
{
    const multi_runtime_t *m = cmulti(rt);
    runtime_t *b = multi_by_class(m, cls);
    if (b)
        return runtime_probe_result(b, cls);
    for (size_t i = 0; i < m->n; i++) {
        const char *t = runtime_probe_result(m->b[i], cls);
        if (t)
            return t;
    }
    return NULL;
}

static const char *multi_network_unavailable(const runtime_t *rt, isolation_t cls, net_mode_t mode)
{
    const multi_runtime_t *m = cmulti(rt);
    runtime_t *b = multi_by_class(m, cls), *nb;
    if (b && ((int)mode == NET_OPEN || (int)mode == NET_OFFER_FILTERED) && runtime_takes_nic(b) &&
        !(runtime_network_modes(b, cls) & (1u << NET_OPEN)) && !multi_open_by_nic(m, b, cls, &nb)) {
        multi_runtime_t *mw = (multi_runtime_t *)m; /* the answer's buffer */
        char why[160];
        multi_nic_backend(m, why, sizeof why);
        snprintf(mw->nic_why, sizeof mw->nic_why, "open only through the egress filter, and %s", why);
        return mw->nic_why;
    }
    if (b)
        return runtime_network_unavailable(b, cls, mode);
    const char *t = multi_probe_result(rt, cls);
    return t ? t : "the class is not offered by this worker";
}

static void multi_set_cancel_flag(runtime_t *rt, const atomic_int *flag)
{
    multi_runtime_t *m = multi(rt);
    for (size_t i = 0; i < m->n; i++)
        runtime_set_cancel_flag(m->b[i], flag);
}

static const char *multi_disk_mode(const runtime_t *rt) { return runtime_disk_mode(cmulti(rt)->b[0]); }

static int multi_disk_enforce(runtime_t *rt, const char *cluster_id, const char *worker_name,
                              runtime_disk_stop_t *ret, size_t max, size_t *ret_n, api_error_t *err)
{
    multi_runtime_t *m = multi(rt);
    size_t total = 0;
    int r = 0;
    for (size_t i = 0; i < m->n && total < max; i++) {
        size_t k = 0;
        api_error_t e;
        int ri = runtime_disk_enforce(m->b[i], cluster_id, worker_name, ret + total, max - total, &k, &e);
        total += k;
        if (ri < 0 && r == 0) {
            r = ri;
            *err = e;
        }
    }
    *ret_n = total;
    return r;
}

static void multi_free(runtime_t *rt)
{
    multi_runtime_t *m = multi(rt);
    for (size_t i = 0; i < m->n; i++)
        runtime_free(m->b[i]);
    free(m);
}

static const runtime_ops_t multi_ops = {
    .ping = multi_ping,
    .create = multi_create,
    .exec = multi_exec,
    .remove = multi_remove,
    .check_owner = multi_check_owner,
    .inventory = multi_inventory,
    .images = multi_images,
    .image_details = multi_image_details,
    .dial = multi_dial,
    .logs_target = multi_logs_target,
    .logs_stream = multi_logs_stream,
    .files_target = multi_files_target,
    .files_put = multi_files_put,
    .files_get = multi_files_get,
    .shell_open = multi_shell_open,
    .shell_resize = multi_shell_resize,
    .shell_exit_code = multi_shell_exit_code,
    .shell_close = multi_shell_close,
    .isolation_classes = multi_isolation_classes,
    .network_modes = multi_network_modes,
    .probe_result = multi_probe_result,
    .network_unavailable = multi_network_unavailable,
    .set_cancel_flag = multi_set_cancel_flag,
    .disk_mode = multi_disk_mode,
    .disk_enforce = multi_disk_enforce,
    .snapshot_create = multi_snapshot_create,
    .snapshot_list = multi_snapshot_list,
    .snapshot_remove = multi_snapshot_remove,
    .snapshot_export = multi_snapshot_export,
    .snapshot_import = multi_snapshot_import,
    .exec_user = true, /* each backend's runtime_exec says for itself */
    .volume_support = multi_volume_support,
    .volume_list = multi_volume_list,
    .volume_remove = multi_volume_remove,
    .pause = multi_pause,
    .resume = multi_resume,
    .egress_set = multi_egress_set,
    .egress_drain = multi_egress_drain,
    .free = multi_free,
};

int runtime_multi_new(runtime_t **backends, size_t n, runtime_t **ret, api_error_t *err)
{
    if (n == 0 || n > SBX_RUNTIME_BACKENDS_MAX)
        return api_error_set(err, API_INVALID_ARGUMENT, "a composite runtime holds 1..%d backends",
                             SBX_RUNTIME_BACKENDS_MAX);
    multi_runtime_t *m = calloc(1, sizeof *m);
    if (!m)
        return api_error_set(err, API_INTERNAL, "out of memory");
    m->ops = multi_ops;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(m->name);
        snprintf(m->name + l, sizeof m->name - l, "%s%s", i ? "," : "", backends[i]->ops->name);
        m->b[i] = backends[i];
        backends[i] = NULL;
    }
    m->n = n;
    m->ops.name = m->name;
    m->base.ops = &m->ops;
    *ret = &m->base;
    return 0;
}
