/* The Docker backend's container listing: remove and the inventory (with
 * the details of stopped containers). */
#include "docker_internal.h"
#include "jsonx.h"
#include "observed.h"
#include "timeutil.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int docker_container_list(docker_runtime_t *rt, const char *label, json_object **ret, api_error_t *err)
{
    int r = 0;
    char path[1024];
    char *esc = NULL;
    json_object *filters = json_object_new_object(), *arr = json_object_new_array(), *list = NULL;
    docker_reply_t rep;
    memset(&rep, 0, sizeof rep);
    json_object_array_add(arr, json_object_new_string(label));
    jsonx_add(filters, "label", arr);
    char *fj = jsonx_dump(filters);
    esc = fj ? curl_easy_escape(NULL, fj, 0) : NULL;
    free(fj);
    if (!esc) {
        api_error_set(err, API_INTERNAL, "out of memory");
        r = SBX_ENOMEM;
        goto cleanup;
    }
    snprintf(path, sizeof path, "/containers/json?all=true&filters=%s", esc);
    r = docker_call(rt, "GET", path, NULL, DOCKER_CALL_TIMEOUT_MS, &rep, err);
    if (r < 0)
        goto cleanup;
    list = docker_reply_json(&rep);
    if (rep.status != 200 || !list || !json_object_is_type(list, json_type_array)) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot list containers: %s",
                          rep.body.truncated ? "the reply is too large" : msg);
        goto cleanup;
    }
    *ret = list;
    list = NULL;
cleanup:
    if (list)
        json_object_put(list);
    json_object_put(filters);
    curl_free(esc);
    docker_reply_release(&rep);
    return r;
}

int docker_rt_remove(runtime_t *base, const char *sandbox_id, const char *ref, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    int r = 0;
    json_object *list = NULL;
    if (ref && *ref) {
        if (!docker_name_ok(ref, 80))
            return api_error_set(err, API_INVALID_ARGUMENT, "malformed runtime ref");
        r = docker_container_delete(rt, ref, err);
        if (r < 0)
            goto cleanup;
    }
    if (!sandbox_id)
        goto cleanup;
    if (!docker_name_ok(sandbox_id, SBX_ID_MAX))
        return api_error_set(err, API_INVALID_ARGUMENT, "malformed sandbox id");
    /* Also whatever else carries the sandbox's label (a ref the controller
     * never learnt because a create's report was lost). */
    char label[SBX_ID_MAX + 64];
    snprintf(label, sizeof label, "%s=%s", RUNTIME_LABEL_SANDBOX, sandbox_id);
    r = docker_container_list(rt, label, &list, err);
    if (r < 0)
        goto cleanup;
    size_t n = json_object_array_length(list);
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(list, i);
        const char *id = jsonx_get_str(e, "Id");
        /* Never another worker's (a shared Docker host), nor what is not a
         * sandbox of ours at all. */
        const char *maker = jsonx_get_str(jsonx_get_obj(e, "Labels"), RUNTIME_LABEL_WORKER);
        const char *managed = jsonx_get_str(jsonx_get_obj(e, "Labels"), RUNTIME_LABEL_MANAGED);
        if (!managed || strcmp(managed, RUNTIME_MANAGED_SANDBOX) != 0 ||
            (rt->worker_name[0] && maker && strcmp(maker, rt->worker_name) != 0))
            continue;
        if (id && docker_name_ok(id, 80) && (r = docker_container_delete(rt, id, err)) < 0)
            goto cleanup;
    }
cleanup:
    /* Its rules go with it (also those of other containers already gone). */
    if (r == 0)
        docker_egress_allow_drop(rt, sandbox_id);
    if (r == 0)
        docker_filter_drop(rt, sandbox_id);
    /* and its volumes' mounts */
    if (r == 0 && sandbox_id)
        docker_volumes_release(rt, sandbox_id);
    if (list)
        json_object_put(list);
    return r;
}

/* Where the next inventory starts fetching details among the stopped
 * objects: each call takes the next SBX_INVENTORY_DETAILS_MAX of them. */
static atomic_uint docker_details_rotor;

/* Fills `exit` of at most SBX_INVENTORY_DETAILS_MAX stopped objects,
 * within DOCKER_DETAILS_BUDGET_MS. */
static void docker_inventory_details(docker_runtime_t *rt, runtime_object_t *objs, size_t n)
{
    size_t stopped = 0;
    for (size_t i = 0; i < n; i++)
        if (observed_stopped(objs[i].state))
            stopped++;
    if (stopped == 0)
        return;
    size_t take = stopped < SBX_INVENTORY_DETAILS_MAX ? stopped : SBX_INVENTORY_DETAILS_MAX;
    size_t first = atomic_fetch_add(&docker_details_rotor, (unsigned)take) % stopped;
    size_t seen = 0, done = 0;
    int64_t until = time_deadline_ms(DOCKER_DETAILS_BUDGET_MS);
    /* Two rounds over the list: from the first-th stopped object on, then
     * wrapping around to those before it. */
    for (int round = 0; round < 2 && done < take; round++) {
        seen = 0;
        for (size_t i = 0; i < n && done < take; i++) {
            if (!observed_stopped(objs[i].state))
                continue;
            bool in_turn = round == 0 ? seen >= first : seen < first;
            seen++;
            if (!in_turn || docker_cancelled(rt) || time_mono_ms() >= until)
                continue;
            api_error_t ignored;
            if (docker_container_exit(rt, objs[i].ref, &objs[i].exit, &ignored) < 0)
                memset(&objs[i].exit, 0, sizeof objs[i].exit);
            done++;
        }
    }
}

int docker_rt_inventory(runtime_t *base, const char *cluster_id, const char *worker_name, runtime_object_t **ret,
                        size_t *ret_n, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    int r = 0;
    json_object *list = NULL;
    runtime_object_t *objs = NULL;
    char label[160];
    if (cluster_id && *cluster_id)
        snprintf(label, sizeof label, "%s=%s", RUNTIME_LABEL_CLUSTER, cluster_id);
    else
        snprintf(label, sizeof label, "%s=true", RUNTIME_LABEL_MANAGED);
    r = docker_container_list(rt, label, &list, err);
    if (r < 0)
        goto cleanup;
    size_t k = 0;
    if ((r = docker_inventory_parse(list, worker_name, &objs, &k)) < 0) {
        api_error_set(err, r == SBX_ENOMEM ? API_INTERNAL : API_RUNTIME_ERROR,
                      r == SBX_ENOMEM ? "out of memory" : "docker answered the container list with no array");
        goto cleanup;
    }
    docker_inventory_details(rt, objs, k);
    /* The allow rules of sandboxes whose container is gone or stopped. */
    docker_egress_allow_sweep(rt);
    *ret = objs;
    *ret_n = k;
    objs = NULL;
cleanup:
    runtime_inventory_free(objs, 0);
    if (list)
        json_object_put(list);
    return r;
}
