/* The Docker backend of the runtime interface (runtime_docker.h): what it
 * offers, its discovery (the gVisor probe, the worker's networks), open,
 * ping, images and the operations table. The Engine API (v1.41) over its
 * unix socket with libcurl; never shells out to the docker CLI. */
#include "docker_internal.h"
#include "docker_stream.h"
#include "jsonx.h"
#include "tarball.h"
#include "timeutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- what this runtime offers ------------------------------------------ */

static void docker_runtime_free(docker_runtime_t *rt)
{
    if (!rt)
        return;
    docker_filter_stop(rt);
    free(rt->socket_path);
    if (rt->images_list)
        json_object_put(rt->images_list);
    pthread_mutex_destroy(&rt->images_mu);
    free(rt);
}

static void docker_rt_free(runtime_t *base) { docker_runtime_free((docker_runtime_t *)base); }

static void docker_rt_set_cancel_flag(runtime_t *base, const atomic_int *flag)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    rt->cancel = flag;
}

static size_t docker_rt_isolation_classes(const runtime_t *base, isolation_t *ret, size_t max)
{
    const docker_runtime_t *rt = (const docker_runtime_t *)base;
    size_t n = 0;
    for (int c = 0; c < DOCKER_CLASSES && n < max; c++)
        if (rt->offered[c])
            ret[n++] = (isolation_t)c;
    return n;
}

static unsigned docker_rt_network_modes(const runtime_t *base, isolation_t cls)
{
    const docker_runtime_t *rt = (const docker_runtime_t *)base;
    if ((int)cls < 0 || (int)cls >= DOCKER_CLASSES || !rt->offered[cls])
        return 0;
    return rt->net_modes[cls];
}

static const char *docker_rt_probe_result(const runtime_t *base, isolation_t cls)
{
    const docker_runtime_t *rt = (const docker_runtime_t *)base;
    if ((int)cls < 0 || (int)cls >= DOCKER_CLASSES || !rt->considered[cls])
        return NULL;
    return rt->probe[cls];
}

static const char *docker_rt_network_unavailable(const runtime_t *base, isolation_t cls, net_mode_t mode)
{
    const docker_runtime_t *rt = (const docker_runtime_t *)base;
    if ((int)cls < 0 || (int)cls >= DOCKER_CLASSES || (int)mode < 0 || (int)mode >= DOCKER_MODES)
        return "unknown class or network mode";
    if (!rt->offered[cls])
        return rt->considered[cls] ? rt->probe[cls] : "the class is not offered by this worker";
    return rt->net_modes[cls] & (1u << mode) ? "" : rt->net_why[cls][mode];
}

/* ---- discovery: the gVisor probe, networks, images ----------------------- */

/* True when runsc's runtimeArgs (from /info) give it no network:
 * "--network=none" or "--network" "none" (one or two dashes). */
static bool docker_runsc_args_no_network(json_object *args)
{
    size_t n = args && json_object_is_type(args, json_type_array) ? json_object_array_length(args) : 0;
    for (size_t i = 0; i < n; i++) {
        const char *a = json_object_get_string(json_object_array_get_idx(args, i));
        if (!a || a[0] != '-')
            continue;
        a += a[1] == '-' ? 2 : 1;
        if (strcmp(a, "network=none") == 0)
            return true;
        if (strcmp(a, "network") == 0 && i + 1 < n) {
            const char *v = json_object_get_string(json_object_array_get_idx(args, i + 1));
            if (v && strcmp(v, "none") == 0)
                return true;
        }
    }
    return false;
}

/* The runsc binary dockerd runs (its runtime "path"), as a file this
 * process can see: absolute as given, else searched like dockerd would. */
static void docker_runsc_exe(const char *path, char out[RUNSC_PATH_MAX])
{
    static const char *const dirs[] = { "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin",
                                        "/bin", NULL };
    struct stat st;
    out[0] = '\0';
    if (!path || !*path || strlen(path) >= RUNSC_PATH_MAX - 32)
        return;
    if (path[0] == '/') {
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
            snprintf(out, RUNSC_PATH_MAX, "%s", path);
        return;
    }
    if (strchr(path, '/'))
        return;
    for (const char *const *d = dirs; *d; d++) {
        char cand[RUNSC_PATH_MAX];
        snprintf(cand, sizeof cand, "%s/%s", *d, path);
        if (stat(cand, &st) == 0 && S_ISREG(st.st_mode)) {
            snprintf(out, RUNSC_PATH_MAX, "%s", cand);
            return;
        }
    }
}

/* Makes the probe image from an in-memory tar holding one empty directory
 * when Docker does not have it (no registry needed). */
int docker_probe_image(docker_runtime_t *rt, api_error_t *err)
{
    int r = 0;
    long status = 0;
    unsigned char tar[TARBALL_DIR_BYTES];
    docker_pull_t p;
    docker_reply_t rep;
    memset(&p, 0, sizeof p);
    sbuf_init(&p.line, DOCKER_PULL_LINE_BYTES);
    r = docker_call(rt, "GET", "/images/" DOCKER_PROBE_IMAGE "/json", NULL, DOCKER_PROBE_CALL_MS, &rep, err);
    if (r < 0 || rep.status == 200)
        goto cleanup;
    if (rep.status != 404) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot inspect image %s: %s", DOCKER_PROBE_IMAGE, msg);
        goto cleanup;
    }
    if (tarball_dir("probe", tar) < 0) {
        r = api_error_set(err, API_INTERNAL, "cannot build the probe image's tar");
        goto cleanup;
    }
    r = docker_call_raw(rt, "POST", "/images/create?fromSrc=-&repo=" DOCKER_PROBE_REPO "&tag=" DOCKER_PROBE_TAG, tar,
                        sizeof tar, "application/x-tar", DOCKER_PROBE_CALL_MS, docker_pull_write_cb, &p, &status,
                        err);
    if (r < 0)
        goto cleanup;
    docker_pull_line(&p);
    if (status != 200 || p.failed)
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot import image %s: %s", DOCKER_PROBE_IMAGE,
                          p.failed ? p.error : "docker answered without a reason");
cleanup:
    docker_reply_release(&rep);
    sbuf_release(&p.line);
    return r;
}

/* Removes probe containers a worker that died mid-probe left behind; a
 * recent one may be another worker's probe running now and is kept. */
static void docker_probe_remove_stale(docker_runtime_t *rt)
{
    json_object *list = NULL;
    api_error_t ignored;
    if (docker_container_list(rt, RUNTIME_LABEL_MANAGED "=" RUNTIME_MANAGED_PROBE, &list, &ignored) < 0)
        return;
    int64_t now_s = time_wall_ms() / 1000;
    for (size_t i = 0; i < json_object_array_length(list); i++) {
        json_object *c = json_object_array_get_idx(list, i);
        const char *id = jsonx_get_str(c, "Id");
        int64_t created = 0;
        if (id && docker_name_ok(id, 80) && jsonx_get_int(c, "Created", &created) &&
            created < now_s - DOCKER_PROBE_STALE_S)
            docker_container_delete(rt, id, &ignored);
    }
    json_object_put(list);
}

/* Runs the probe container under runtime: `docker-init --version` (the tini
 * Docker mounts at /sbin/docker-init under Init) must exit 0 and print
 * "tini". Always removes the container. */
static int docker_probe_run(docker_runtime_t *rt, const char *runtime, api_error_t *err)
{
    int r = 0;
    char path[256], id[80] = "", msg[320];
    json_object *body = NULL, *o = NULL;
    docker_reply_t rep;
    sbuf_t out, errs;
    docker_stream_t demux;
    memset(&rep, 0, sizeof rep);
    sbuf_init(&out, 4096);
    sbuf_init(&errs, 4096);

    body = docker_probe_body(DOCKER_PROBE_IMAGE, runtime, rt->worker_name);
    r = docker_call(rt, "POST", "/containers/create", body, DOCKER_PROBE_CALL_MS, &rep, err);
    if (r < 0)
        goto cleanup;
    o = docker_reply_json(&rep);
    const char *cid = jsonx_get_str(o, "Id");
    if (rep.status != 201 || !cid || !docker_name_ok(cid, sizeof id)) {
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot create the probe container: %s", msg);
        goto cleanup;
    }
    snprintf(id, sizeof id, "%s", cid);
    docker_reply_release(&rep);

    snprintf(path, sizeof path, "/containers/%s/start", id);
    r = docker_call(rt, "POST", path, NULL, DOCKER_PROBE_CALL_MS, &rep, err);
    if (r < 0)
        goto cleanup;
    if (rep.status != 204 && rep.status != 304) {
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot start the probe container: %s", msg);
        goto cleanup;
    }
    docker_reply_release(&rep);

    snprintf(path, sizeof path, "/containers/%s/wait?condition=not-running", id);
    r = docker_call(rt, "POST", path, NULL, DOCKER_PROBE_WAIT_MS, &rep, err);
    if (r == SBX_ETIMEOUT) {
        r = api_error_set(err, API_TIMEOUT, "the probe container did not exit within %ld s",
                          DOCKER_PROBE_WAIT_MS / 1000);
        goto cleanup;
    }
    if (r < 0)
        goto cleanup;
    if (o)
        json_object_put(o);
    o = docker_reply_json(&rep);
    int64_t code = -1;
    if (rep.status != 200 || !jsonx_get_int(o, "StatusCode", &code)) {
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot wait for the probe container: %s", msg);
        goto cleanup;
    }
    docker_reply_release(&rep);

    snprintf(path, sizeof path, "/containers/%s/logs?stdout=true&stderr=true", id);
    r = docker_call(rt, "GET", path, NULL, DOCKER_PROBE_CALL_MS, &rep, err);
    if (r < 0)
        goto cleanup;
    docker_stream_init(&demux, &out, &errs);
    if (rep.status == 200 && rep.body.len)
        docker_stream_push(&demux, rep.body.data, rep.body.len);
    if (code != 0 || !strstr(sbuf_cstr(&out), "tini")) {
        const char *said = errs.len ? sbuf_cstr(&errs) : sbuf_cstr(&out);
        r = api_error_set(err, API_RUNTIME_ERROR, "docker-init --version exited %lld%s%.200s", (long long)code,
                          *said ? ": " : " without output", said);
        size_t l = strlen(err->message);
        while (l > 0 && (err->message[l - 1] == '\n' || err->message[l - 1] == '\r'))
            err->message[--l] = '\0';
        goto cleanup;
    }
cleanup:
    if (id[0]) {
        api_error_t ignored;
        docker_container_delete(rt, id, &ignored);
    }
    if (body)
        json_object_put(body);
    if (o)
        json_object_put(o);
    docker_reply_release(&rep);
    sbuf_release(&out);
    sbuf_release(&errs);
    return r;
}

/* Decides the gvisor class from /info and the probe. */
static void docker_gvisor_discover(docker_runtime_t *rt, json_object *info)
{
    const char *name = rt->gvisor_runtime;
    char *why = rt->probe[ISO_GVISOR];
    rt->considered[ISO_GVISOR] = true;
    if (!name[0]) {
        snprintf(why, RUNTIME_PROBE_TEXT_MAX, "not offered: disabled (worker_gvisor_runtime is empty)");
        return;
    }
    json_object *entry = jsonx_get_obj(jsonx_get_obj(info, "Runtimes"), name);
    if (!entry) {
        snprintf(why, RUNTIME_PROBE_TEXT_MAX,
                 "not offered: dockerd has no runtime named %s (register it under \"runtimes\" in dockerd's "
                 "daemon.json and restart dockerd)", name);
        return;
    }
    api_error_t perr;
    docker_probe_remove_stale(rt);
    if (docker_probe_image(rt, &perr) < 0 || docker_probe_run(rt, name, &perr) < 0) {
        snprintf(why, RUNTIME_PROBE_TEXT_MAX, "not offered: probe failed: %.340s", perr.message);
        return;
    }
    docker_runsc_exe(jsonx_get_str(entry, "path"), rt->runsc_exe);
    rt->offered[ISO_GVISOR] = true;
    snprintf(why, RUNTIME_PROBE_TEXT_MAX, "ok: %s ran a probe container", name);
    if (docker_runsc_args_no_network(jsonx_get_arr(entry, "runtimeArgs"))) {
        rt->net_modes[ISO_GVISOR] = 1u << NET_NONE;
        for (int m = NET_RESTRICTED; m < DOCKER_MODES; m++)
            snprintf(rt->net_why[ISO_GVISOR][m], RUNTIME_PROBE_TEXT_MAX,
                     "dockerd runs %s with --network=none, so gVisor sandboxes have loopback only", name);
    } else {
        rt->net_modes[ISO_GVISOR] = rt->net_modes[ISO_CONTAINER];
        memcpy(rt->net_why[ISO_GVISOR], rt->net_why[ISO_CONTAINER], sizeof rt->net_why[ISO_GVISOR]);
    }
}

/* Checks that an existing network is what the worker would have created:
 * a bridge, internal exactly when restricted, no traffic between
 * containers and, when internal, no host address on the bridge. */
static int docker_network_check(json_object *net, const char *name, net_mode_t mode, api_error_t *err)
{
    bool want_internal = mode == NET_RESTRICTED, internal = false;
    const char *driver = jsonx_get_str(net, "Driver");
    json_object *opts = jsonx_get_obj(net, "Options");
    const char *icc = jsonx_get_str(opts, "com.docker.network.bridge.enable_icc");
    const char *inhibit = jsonx_get_str(opts, "com.docker.network.bridge.inhibit_ipv4");
    const char *problem = NULL;
    jsonx_get_bool(net, "Internal", &internal);
    if (!driver || strcmp(driver, "bridge") != 0)
        problem = "its driver is not bridge";
    else if (internal != want_internal)
        problem = want_internal ? "it is not internal (sandboxes would have egress)"
                                : "it is internal (sandboxes would have no egress)";
    else if (!icc || strcmp(icc, "false") != 0)
        problem = "it lets containers reach each other (com.docker.network.bridge.enable_icc is not false)";
    else if ((int)mode == NET_OFFER_FILTERED &&
             (!jsonx_get_str(opts, "com.docker.network.bridge.enable_ip_masquerade") ||
              strcmp(jsonx_get_str(opts, "com.docker.network.bridge.enable_ip_masquerade"), "false") != 0))
        problem = "it masquerades (com.docker.network.bridge.enable_ip_masquerade is not false)";
    else if (want_internal && (!inhibit || strcmp(inhibit, "true") != 0))
        problem = "its bridge has a host address (com.docker.network.bridge.inhibit_ipv4 is not true), so sandboxes "
                  "could reach services on the host";
    if (problem)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE,
                             "Docker network %s exists but %s; refusing to run network %s on it (remove it with "
                             "`docker network rm %s` or set worker_%s_network to another name)",
                             name, problem, net_offer_name((int)mode), name, net_offer_name((int)mode));
    return 0;
}

/* The networks named exactly name: a new array (empty when none). */
static int docker_network_find(docker_runtime_t *rt, const char *name, json_object **ret, api_error_t *err)
{
    char path[1024];
    json_object *list = NULL;
    char *esc = docker_filter_param("name", name);
    if (!esc) {
        api_error_set(err, API_INTERNAL, "out of memory");
        return SBX_ENOMEM;
    }
    snprintf(path, sizeof path, "/networks?filters=%s", esc);
    curl_free(esc);
    int r = docker_get_json(rt, path, DOCKER_CALL_TIMEOUT_MS, &list, err);
    if (r < 0)
        return r;
    json_object *found = json_object_new_array();
    size_t n = json_object_is_type(list, json_type_array) ? json_object_array_length(list) : 0;
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(list, i);
        const char *nm = jsonx_get_str(e, "Name");
        const char *id = jsonx_get_str(e, "Id");
        /* the name filter matches substrings; ids go into URL paths */
        if (nm && strcmp(nm, name) == 0 && id && docker_name_ok(id, 80))
            json_object_array_add(found, json_object_get(e));
    }
    json_object_put(list);
    *ret = found;
    return 0;
}

/* Docker's CheckDuplicate is not atomic: workers starting together on one
 * dockerd can each create the network. Keeps one — the one containers are
 * attached to, if any (a duplicate name makes Docker refuse to attach, so
 * at most one can have them), else the smallest id, so every worker keeps
 * the same — and removes the others when they are the worker's and unused. */
static int docker_network_dedupe(docker_runtime_t *rt, json_object *matches, api_error_t *err)
{
    size_t n = json_object_array_length(matches), used = 0, keep = 0;
    bool *ours = calloc(n, sizeof *ours), *busy = calloc(n, sizeof *busy);
    int r = 0;
    if (!ours || !busy) {
        r = api_error_set(err, API_INTERNAL, "out of memory");
        goto cleanup;
    }
    for (size_t i = 0; i < n; i++) {
        char path[160];
        json_object *net = NULL;
        const char *id = jsonx_get_str(json_object_array_get_idx(matches, i), "Id");
        snprintf(path, sizeof path, "/networks/%s", id);
        if (docker_get_json(rt, path, DOCKER_CALL_TIMEOUT_MS, &net, err) < 0)
            goto cleanup; /* gone already: another worker is deduplicating; the caller looks again */
        const char *m = jsonx_get_str(jsonx_get_obj(net, "Labels"), RUNTIME_LABEL_MANAGED);
        json_object *cs = jsonx_get_obj(net, "Containers");
        ours[i] = m && strcmp(m, RUNTIME_MANAGED_NETWORK) == 0;
        busy[i] = cs && json_object_object_length(cs) > 0;
        json_object_put(net);
        const char *best = jsonx_get_str(json_object_array_get_idx(matches, keep), "Id");
        if (busy[i])
            used++;
        if ((busy[i] && !busy[keep]) || (busy[i] == busy[keep] && strcmp(id, best) < 0))
            keep = i;
    }
    for (size_t i = 0; i < n && used <= 1; i++) {
        if (i == keep)
            continue;
        if (!ours[i] || busy[i])
            break;
        char path[160];
        docker_reply_t rep;
        snprintf(path, sizeof path, "/networks/%s", jsonx_get_str(json_object_array_get_idx(matches, i), "Id"));
        if ((r = docker_call(rt, "DELETE", path, NULL, DOCKER_CALL_TIMEOUT_MS, &rep, err)) < 0)
            goto cleanup;
        long status = rep.status;
        docker_reply_release(&rep);
        if (status != 204 && status != 200 && status != 404)
            break;
    }
    r = 0;
cleanup:
    free(ours);
    free(busy);
    return r;
}

int docker_network_ensure(docker_runtime_t *rt, net_mode_t mode, api_error_t *err)
{
    const char *name = rt->net_name[mode];
    bool created = false;
    int dedupes = 0;
    for (int attempt = 0; attempt < 8; attempt++) {
        json_object *nets = NULL;
        int r = docker_network_find(rt, name, &nets, err);
        if (r < 0)
            return r;
        size_t n = json_object_array_length(nets);
        if (n > 1 && dedupes < 3) {
            if (dedupes++ > 0)
                usleep(100000); /* let a worker deduplicating at the same time finish */
            r = docker_network_dedupe(rt, nets, err);
            json_object_put(nets);
            if (r < 0)
                return r;
            continue;
        }
        if (n > 1) {
            json_object_put(nets);
            return api_error_set(err, API_ISOLATION_UNAVAILABLE,
                                 "%zu Docker networks are named %s; remove all but one (docker network ls)", n, name);
        }
        if (n == 1) {
            r = docker_network_check(json_object_array_get_idx(nets, 0), name, mode, err);
            json_object_put(nets);
            /* Ours just now: look once more for a racing creator's copy. */
            if (r == 0 && created && dedupes == 0) {
                created = false;
                continue;
            }
            return r;
        }
        json_object_put(nets);
        if (created)
            break;
        json_object *body = json_object_new_object(), *opts = json_object_new_object(),
                    *labels = json_object_new_object();
        jsonx_add_str(body, "Name", name);
        jsonx_add_str(body, "Driver", "bridge");
        jsonx_add_bool(body, "CheckDuplicate", true);
        jsonx_add_bool(body, "Internal", mode == NET_RESTRICTED);
        jsonx_add_bool(body, "Attachable", false);
        jsonx_add_bool(body, "EnableIPv6", false);
        jsonx_add_str(opts, "com.docker.network.bridge.enable_icc", "false");
        if (mode == NET_RESTRICTED)
            jsonx_add_str(opts, "com.docker.network.bridge.inhibit_ipv4", "true");
        if ((int)mode == NET_OFFER_FILTERED) /* nothing leaves it but through the filter */
            jsonx_add_str(opts, "com.docker.network.bridge.enable_ip_masquerade", "false");
        jsonx_add(body, "Options", opts);
        jsonx_add_str(labels, RUNTIME_LABEL_MANAGED, RUNTIME_MANAGED_NETWORK);
        jsonx_add(body, "Labels", labels);
        docker_reply_t rep;
        r = docker_call(rt, "POST", "/networks/create", body, DOCKER_CALL_TIMEOUT_MS, &rep, err);
        json_object_put(body);
        long status = rep.status;
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        docker_reply_release(&rep);
        if (r < 0)
            return r;
        if (status != 201 && status != 409)
            return api_error_set(err, API_RUNTIME_ERROR, "cannot create Docker network %s: %s", name, msg);
        created = true;
    }
    return api_error_set(err, API_RUNTIME_ERROR, "Docker network %s was created but cannot be found", name);
}

/* Decides the container class's network modes, creating the networks and
 * the open network's egress rules. */
static void docker_networks_discover(docker_runtime_t *rt, const runtime_docker_options_t *opt)
{
    rt->net_modes[ISO_CONTAINER] = 1u << NET_NONE;
    for (int m = NET_RESTRICTED; m <= NET_OPEN; m++) {
        char *why = rt->net_why[ISO_CONTAINER][m];
        api_error_t nerr;
        if (!rt->net_name[m][0])
            snprintf(why, RUNTIME_PROBE_TEXT_MAX, "disabled (worker_%s_network is empty)",
                     net_mode_name((net_mode_t)m));
        else if (docker_network_ensure(rt, (net_mode_t)m, &nerr) < 0)
            snprintf(why, RUNTIME_PROBE_TEXT_MAX, "%.390s", nerr.message);
        else if (m == NET_OPEN && docker_egress_setup(rt, &nerr) < 0)
            snprintf(why, RUNTIME_PROBE_TEXT_MAX, "%.390s", nerr.message); /* no open without its rules */
        else
            rt->net_modes[ISO_CONTAINER] |= 1u << m;
    }
    /* open through the egress filter: sandboxes with egress rules by domain */
    api_error_t ferr;
    if (opt->egress_upstream_ca)
        snprintf(rt->filter_upstream_ca, sizeof rt->filter_upstream_ca, "%s", opt->egress_upstream_ca);
    if (opt->nic_subnet)
        snprintf(rt->nic_subnet, sizeof rt->nic_subnet, "%s", opt->nic_subnet);
    if (docker_filter_setup(rt, opt->egress_filter, opt->egress_upstream, &ferr) < 0)
        snprintf(rt->net_why[ISO_CONTAINER][NET_OFFER_FILTERED], RUNTIME_PROBE_TEXT_MAX, "%.390s", ferr.message);
    else
        rt->net_modes[ISO_CONTAINER] |= 1u << NET_OFFER_FILTERED;
}

static const runtime_ops_t docker_ops;

int runtime_docker_open(const runtime_docker_options_t *opt, runtime_t **ret, api_error_t *err)
{
    int r = 0;
    const char *sock = opt->socket_path && *opt->socket_path ? opt->socket_path : "/var/run/docker.sock";
    const char *names[][2] = {
        { "worker_gvisor_runtime", opt->gvisor_runtime },
        { "worker_restricted_network", opt->restricted_network },
        { "worker_open_network", opt->open_network },
        { "worker_filtered_network", opt->filtered_network },
    };
    docker_reply_t rep;
    json_object *info = NULL;
    memset(&rep, 0, sizeof rep);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i][1] && *names[i][1] && !docker_name_ok(names[i][1], DOCKER_NETWORK_NAME_MAX))
            return api_error_set(err, API_INVALID_ARGUMENT,
                                 "%s must be letters, digits, '.', '_' or '-' (at most %d), got \"%.64s\"",
                                 names[i][0], DOCKER_NETWORK_NAME_MAX - 1, names[i][1]);
    docker_runtime_t *rt = calloc(1, sizeof *rt);
    if (rt) {
        rt->base.ops = &docker_ops;
        pthread_mutex_init(&rt->images_mu, NULL);
        atomic_init(&rt->egress_rules_any, true);
        atomic_init(&rt->egress_adds, 0);
    }
    if (!rt || !(rt->socket_path = strdup(sock))) {
        api_error_set(err, API_INTERNAL, "out of memory");
        r = SBX_ENOMEM;
        goto cleanup;
    }
    snprintf(rt->gvisor_runtime, sizeof rt->gvisor_runtime, "%s", opt->gvisor_runtime ? opt->gvisor_runtime : "");
    snprintf(rt->worker_name, sizeof rt->worker_name, "%s", opt->worker_name ? opt->worker_name : "");
    snprintf(rt->image_registries, sizeof rt->image_registries, "%s",
             opt->image_registries ? opt->image_registries : "");
    snprintf(rt->net_name[NET_RESTRICTED], DOCKER_NETWORK_NAME_MAX, "%s",
             opt->restricted_network ? opt->restricted_network : "");
    snprintf(rt->net_name[NET_OPEN], DOCKER_NETWORK_NAME_MAX, "%s", opt->open_network ? opt->open_network : "");
    snprintf(rt->net_name[NET_OFFER_FILTERED], DOCKER_NETWORK_NAME_MAX, "%s",
             opt->filtered_network ? opt->filtered_network : "");
    if (docker_call(rt, "GET", "/_ping", NULL, 10000L, &rep, err) < 0) {
        api_error_set(err, API_UNAVAILABLE, "docker engine at %s does not answer (is dockerd running?)",
                      rt->socket_path);
        r = SBX_EUNAVAIL;
        goto cleanup;
    }
    if (rep.status != 200) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        api_error_set(err, API_UNAVAILABLE, "docker engine at %s answered /_ping with %ld: %s", rt->socket_path,
                      rep.status, msg);
        r = SBX_EUNAVAIL;
        goto cleanup;
    }
    if (docker_get_json(rt, "/info", DOCKER_CALL_TIMEOUT_MS, &info, err) < 0) {
        r = SBX_EUNAVAIL;
        goto cleanup;
    }
    rt->offered[ISO_CONTAINER] = true;
    docker_networks_discover(rt, opt);
    docker_gvisor_discover(rt, info);
    docker_disk_discover(rt, info);
    docker_volumes_probe(rt, opt->volume_dir);
    *ret = &rt->base;
    rt = NULL;
cleanup:
    if (info)
        json_object_put(info);
    docker_reply_release(&rep);
    docker_runtime_free(rt);
    return r;
}

static int docker_rt_ping(runtime_t *base, long timeout_ms, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    docker_reply_t rep;
    int r = docker_call(rt, "GET", "/_ping", NULL, timeout_ms, &rep, err);
    if (r == 0 && rep.status != 200) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        api_error_set(err, API_RUNTIME_ERROR, "docker engine at %s answered /_ping with %ld: %s", rt->socket_path,
                      rep.status, msg);
        r = SBX_ERUNTIME;
    }
    docker_reply_release(&rep);
    /* the readiness probe: the open network's egress rules are still
     * there, and the egress filter runs */
    if (r == 0)
        r = docker_egress_check(rt, err);
    if (r == 0)
        r = docker_filter_check(rt, err);
    return r;
}

/* RepoTags[j] of an Engine image, or NULL for one not listed: empty,
 * "<none>:<none>", longer than RUNTIME_MAX_IMAGE_NAME. */
static const char *image_tag(json_object *tags, size_t j)
{
    const char *t = json_object_get_string(json_object_array_get_idx(tags, j));
    /* snapshots are a tenant's, never advertised as images */
    return t && *t && strcmp(t, "<none>:<none>") != 0 && strlen(t) <= RUNTIME_MAX_IMAGE_NAME &&
                   !spec_image_is_snapshot(t)
               ? t
               : NULL;
}

/* How long one image list serves: a heartbeat's names and then their
 * details (two runtime calls) take one Engine call. */
#define DOCKER_IMAGES_REUSE_MS 2000

/* The Engine's image list, a copy of the caller's own (json-c's reference
 * counts are not atomic: the kept list is touched under the lock only);
 * the one kept when it is younger than DOCKER_IMAGES_REUSE_MS. */
int docker_image_list(docker_runtime_t *rt, json_object **ret, api_error_t *err)
{
    int r = 0;
    pthread_mutex_lock(&rt->images_mu);
    int64_t now = time_mono_ms();
    if (!rt->images_list || now - rt->images_at_ms >= DOCKER_IMAGES_REUSE_MS) {
        json_object *list = NULL;
        r = docker_get_json(rt, "/images/json", DOCKER_CALL_TIMEOUT_MS, &list, err);
        if (r == 0) {
            if (rt->images_list)
                json_object_put(rt->images_list);
            rt->images_list = list;
            rt->images_at_ms = now;
        }
    }
    *ret = NULL;
    if (r == 0 && json_object_deep_copy(rt->images_list, ret, NULL) < 0)
        r = api_error_set(err, API_INTERNAL, "out of memory");
    pthread_mutex_unlock(&rt->images_mu);
    return r;
}

static int docker_rt_images(runtime_t *base, char ***ret, size_t *ret_n, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    json_object *list = NULL;
    int r = docker_image_list(rt, &list, err);
    if (r < 0)
        return r;
    size_t n = 0;
    char **names = calloc(RUNTIME_MAX_IMAGES, sizeof *names);
    if (!names) {
        json_object_put(list);
        api_error_set(err, API_INTERNAL, "out of memory");
        return SBX_ENOMEM;
    }
    size_t count = json_object_is_type(list, json_type_array) ? json_object_array_length(list) : 0;
    for (size_t i = 0; i < count && n < RUNTIME_MAX_IMAGES; i++) {
        json_object *tags = jsonx_get_arr(json_object_array_get_idx(list, i), "RepoTags");
        size_t nt = tags ? json_object_array_length(tags) : 0;
        for (size_t j = 0; j < nt && n < RUNTIME_MAX_IMAGES; j++) {
            const char *t = image_tag(tags, j);
            if (!t)
                continue;
            if (!(names[n] = strdup(t))) {
                runtime_images_free(names, n);
                json_object_put(list);
                api_error_set(err, API_INTERNAL, "out of memory");
                return SBX_ENOMEM;
            }
            n++;
        }
    }
    json_object_put(list);
    *ret = names;
    *ret_n = n;
    return 0;
}

/* {"repo:tag":{"size","created"}} from the Engine's image list (Size in
 * bytes, Created in Unix seconds), for the names docker_rt_images gives. */
static int docker_rt_image_details(runtime_t *base, json_object **ret, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    json_object *list = NULL;
    int r = docker_image_list(rt, &list, err);
    if (r < 0)
        return r;
    json_object *out = json_object_new_object();
    size_t count = json_object_is_type(list, json_type_array) ? json_object_array_length(list) : 0, n = 0;
    for (size_t i = 0; i < count && n < RUNTIME_MAX_IMAGES; i++) {
        json_object *img = json_object_array_get_idx(list, i);
        json_object *tags = jsonx_get_arr(img, "RepoTags");
        int64_t size = -1, created = -1;
        jsonx_get_int(img, "Size", &size);
        jsonx_get_int(img, "Created", &created);
        size_t nt = tags ? json_object_array_length(tags) : 0;
        for (size_t j = 0; j < nt && n < RUNTIME_MAX_IMAGES; j++) {
            const char *t = image_tag(tags, j);
            if (!t)
                continue;
            json_object *d = json_object_new_object();
            if (size >= 0)
                jsonx_add_int(d, "size", size);
            if (created >= 0)
                jsonx_add_int(d, "created", created);
            json_object_object_add(out, t, d);
            n++;
        }
    }
    json_object_put(list);
    *ret = out;
    return 0;
}

/* ---- the operations table ---------------------------------------------- */

static int docker_rt_egress_set(runtime_t *base, const char *sandbox_id, const char *ref, json_object *egress,
                                api_error_t *err)
{
    return docker_filter_egress_set((docker_runtime_t *)base, sandbox_id, ref, egress, err);
}

static int docker_rt_egress_drain(runtime_t *base, int max, json_object **ret, int64_t *ret_dropped,
                                  api_error_t *err)
{
    return docker_filter_drain((docker_runtime_t *)base, max, ret, ret_dropped, err);
}

static const runtime_ops_t docker_ops = {
    .name = RUNTIME_BACKEND_DOCKER,
    .ping = docker_rt_ping,
    .create = docker_rt_create,
    .exec = docker_rt_exec,
    .remove = docker_rt_remove,
    .check_owner = docker_rt_check_owner,
    .inventory = docker_rt_inventory,
    .images = docker_rt_images,
    .snapshot_create = docker_rt_snapshot_create,
    .snapshot_list = docker_rt_snapshot_list,
    .snapshot_remove = docker_rt_snapshot_remove,
    .snapshot_export = docker_rt_snapshot_export,
    .snapshot_import = docker_rt_snapshot_import,
    .exec_user = true,
    .volume_support = docker_rt_volume_support,
    .volume_list = docker_rt_volume_list,
    .volume_remove = docker_rt_volume_remove,
    .volume_disks = docker_rt_volume_disks,
    .snapshot_image = docker_rt_snapshot_image,
    .volume_release = docker_rt_volume_release,
    .volume_sweep_disks = docker_rt_volume_sweep_disks,
    .pause = docker_rt_pause,
    .resume = docker_rt_resume,
    .egress_set = docker_rt_egress_set,
    .egress_drain = docker_rt_egress_drain,
    .nic_support = docker_nic_support,
    .nic_attach = docker_nic_attach,
    .nic_egress_set = docker_nic_egress_set,
    .nic_detach = docker_nic_detach,
    .nic_sweep = docker_nic_sweep,
    .image_details = docker_rt_image_details,
    .dial = docker_rt_dial,
    .logs_target = docker_rt_logs_target,
    .logs_stream = docker_rt_logs_stream,
    .files_target = docker_rt_files_target,
    .files_put = docker_rt_files_put,
    .files_get = docker_rt_files_get,
    .shell_open = docker_rt_shell_open,
    .shell_resize = docker_rt_shell_resize,
    .shell_exit_code = docker_rt_shell_exit_code,
    .shell_close = docker_rt_shell_close,
    .isolation_classes = docker_rt_isolation_classes,
    .network_modes = docker_rt_network_modes,
    .probe_result = docker_rt_probe_result,
    .network_unavailable = docker_rt_network_unavailable,
    .set_cancel_flag = docker_rt_set_cancel_flag,
    .disk_mode = docker_rt_disk_mode,
    .disk_enforce = docker_rt_disk_enforce,
    .free = docker_rt_free,
};
