/* Container create bodies: the sandbox hardening profile and the probe
 * container (see docker_config.h). */
#include "docker_config.h"
#include "jsonx.h"
#include "limits.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Enough for ordinary package installs and builds as root inside the
 * container; everything else (NET_RAW, MKNOD, SYS_CHROOT, AUDIT_WRITE,
 * SETFCAP, NET_BIND_SERVICE, ...) stays dropped. */
const char *const docker_sandbox_caps[] = { "CHOWN", "DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID", "KILL", NULL };

json_object *docker_json_strings(const char *const *items)
{
    json_object *a = json_object_new_array();
    for (const char *const *p = items; *p; p++)
        json_object_array_add(a, json_object_new_string(*p));
    return a;
}

json_object *docker_json_env(const kv_list_t *env)
{
    json_object *a = json_object_new_array();
    for (size_t i = 0; i < env->n; i++) {
        size_t l = strlen(env->items[i].key) + strlen(env->items[i].value) + 2;
        char *kv = malloc(l);
        if (!kv)
            continue;
        snprintf(kv, l, "%s=%s", env->items[i].key, env->items[i].value);
        json_object_array_add(a, json_object_new_string(kv));
        free(kv);
    }
    return a;
}

int64_t docker_tmpfs_mib(int64_t memory_mib)
{
    int64_t m = memory_mib / 4;
    if (m > DOCKER_TMPFS_MAX_MIB)
        m = DOCKER_TMPFS_MAX_MIB;
    return m < 1 ? 1 : m;
}

int64_t docker_tmpfs_quota_mib(const sandbox_spec_t *s, int64_t default_mib)
{
    return s->disk_mib > 0 && s->disk_mib < default_mib ? s->disk_mib : default_mib;
}

/* The HostConfig hardening every container of ours gets: no capabilities
 * but caps (may be empty), no privilege gain, a pids limit, memory without
 * swap, docker-init as pid 1, no mounts, ports or restart, a bounded log. Seccomp is left
 * at Docker's default profile: it is never set to unconfined. */
static json_object *docker_hardened_host_config(const char *const *caps, int64_t memory_mib, int64_t pids)
{
    static const char *const cap_drop[] = { "ALL", NULL };
    static const char *const secopt[] = { "no-new-privileges", NULL };
    json_object *hc = json_object_new_object();
    jsonx_add_int(hc, "Memory", memory_mib * 1024 * 1024);
    jsonx_add_int(hc, "MemorySwap", memory_mib * 1024 * 1024);
    jsonx_add_int(hc, "PidsLimit", pids);
    jsonx_add(hc, "CapDrop", docker_json_strings(cap_drop));
    jsonx_add(hc, "CapAdd", docker_json_strings(caps));
    jsonx_add(hc, "SecurityOpt", docker_json_strings(secopt));
    jsonx_add_bool(hc, "Privileged", false);
    /* docker-init as pid 1 reaps the zombies of killed exec trees, which
     * `sleep` would leave to fill the pids limit. */
    jsonx_add_bool(hc, "Init", true);
    jsonx_add(hc, "Binds", json_object_new_array());
    jsonx_add(hc, "Mounts", json_object_new_array());
    jsonx_add_bool(hc, "PublishAllPorts", false);
    jsonx_add_bool(hc, "AutoRemove", false);
    json_object *rp = json_object_new_object();
    jsonx_add_str(rp, "Name", "no");
    jsonx_add(hc, "RestartPolicy", rp);
    /* Docker's own log of the main process: one bounded file (json-file,
     * which `GET /containers/{id}/logs` reads), whatever the daemon's
     * default driver, so a chatty sandbox cannot fill the host's disk. */
    char max_size[32];
    snprintf(max_size, sizeof max_size, "%u", SBX_CONTAINER_LOG_MAX_BYTES);
    json_object *lc = json_object_new_object(), *lcc = json_object_new_object();
    jsonx_add_str(lc, "Type", "json-file");
    jsonx_add_str(lcc, "max-size", max_size);
    jsonx_add_str(lcc, "max-file", "1");
    jsonx_add(lc, "Config", lcc);
    jsonx_add(hc, "LogConfig", lc);
    return hc;
}

json_object *docker_sandbox_body(const runtime_create_req_t *req, const docker_create_plan_t *plan)
{
    static const char *const entrypoint[] = { "sleep", NULL };
    static const char *const cmd[] = { "infinity", NULL };
    static const char *const no_caps[] = { NULL };
    const sandbox_spec_t *s = req->spec;

    json_object *o = json_object_new_object();
    jsonx_add_str(o, "Image", plan->image ? plan->image : s->image);
    jsonx_add(o, "Entrypoint", docker_json_strings(entrypoint));
    jsonx_add(o, "Cmd", docker_json_strings(cmd));
    json_object *env = docker_json_env(&s->env);
    if (req->secrets && json_object_array_length(req->secrets) > 0) {
        /* secrets at egress: clients that keep a CA bundle of their own
         * (Python requests, Node) trust the sandbox's CA too, unless the
         * create set these itself */
        static const char *const ca_env[][2] = {
            { "SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt" },
            { "REQUESTS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt" },
            { "CURL_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt" },
            { "NODE_EXTRA_CA_CERTS", "/etc/ssl/certs/sandbox-egress-ca.pem" },
        };
        for (size_t i = 0; i < sizeof ca_env / sizeof ca_env[0]; i++) {
            bool set = false;
            for (size_t k = 0; k < s->env.n && !set; k++)
                set = strcmp(s->env.items[k].key, ca_env[i][0]) == 0;
            char kv[96];
            snprintf(kv, sizeof kv, "%s=%s", ca_env[i][0], ca_env[i][1]);
            if (!set)
                json_object_array_add(env, json_object_new_string(kv));
        }
    }
    jsonx_add(o, "Env", env);
    json_object *labels = kv_list_to_json(&s->labels);
    /* Ours last: a user label cannot impersonate another sandbox. */
    jsonx_add_str(labels, RUNTIME_LABEL_MANAGED, "true");
    jsonx_add_str(labels, RUNTIME_LABEL_SANDBOX, req->sandbox_id);
    jsonx_add_str(labels, RUNTIME_LABEL_TENANT, req->tenant ? req->tenant : (s->tenant ? s->tenant : ""));
    if (req->cluster_id && *req->cluster_id)
        jsonx_add_str(labels, RUNTIME_LABEL_CLUSTER, req->cluster_id);
    if (req->worker_name && *req->worker_name)
        jsonx_add_str(labels, RUNTIME_LABEL_WORKER, req->worker_name);
    char disk[32];
    snprintf(disk, sizeof disk, "%lld", (long long)s->disk_mib);
    if (s->disk_mib > 0)
        jsonx_add_str(labels, RUNTIME_LABEL_DISK_MIB, disk);
    /* The allow list is the worker's record (restored from at start):
     * never a user label of that name, and only for the open network. */
    json_object_object_del(labels, RUNTIME_LABEL_EGRESS_ALLOW);
    json_object_object_del(labels, RUNTIME_LABEL_EGRESS);
    if (s->network == NET_OPEN && req->egress_allow && *req->egress_allow)
        jsonx_add_str(labels, RUNTIME_LABEL_EGRESS_ALLOW, req->egress_allow);
    if (plan->filter_dns && s->egress.set) { /* the filter learns them from here */
        json_object *rules = egress_rules_to_json(&s->egress);
        jsonx_add_str(labels, RUNTIME_LABEL_EGRESS, json_object_to_json_string_ext(rules, JSON_C_TO_STRING_PLAIN));
        json_object_put(rules);
    }
    jsonx_add(o, "Labels", labels);
    jsonx_add_bool(o, "AttachStdin", false);
    jsonx_add_bool(o, "AttachStdout", false);
    jsonx_add_bool(o, "AttachStderr", false);
    jsonx_add_bool(o, "Tty", false);
    jsonx_add_bool(o, "OpenStdin", false);

    json_object *hc = docker_hardened_host_config(s->hardened ? no_caps : docker_sandbox_caps, s->memory_mib,
                                                  DOCKER_PIDS_LIMIT);
    jsonx_add_int(hc, "NanoCpus", s->cpu_millis * 1000000);
    jsonx_add_str(hc, "NetworkMode", plan->network_mode);
    if (plan->filter_dns) { /* its resolver: the filter (any other is redirected there too) */
        const char *dns[] = { plan->filter_dns, NULL };
        jsonx_add(hc, "Dns", docker_json_strings(dns));
    }
    /* its volumes only: each a bind of the worker's own mount of it */
    if (plan->mounts)
        jsonx_add(hc, "Mounts", json_object_get(plan->mounts));
    if (plan->runtime)
        jsonx_add_str(hc, "Runtime", plan->runtime);
    /* tmpfs pages count against memory, not disk: each is bounded by its
     * size option, within the disk quota too. */
    if (s->disk_mib > 0) {
        jsonx_add_int(hc, "ShmSize", docker_tmpfs_quota_mib(s, DOCKER_SHM_MIB) * 1024 * 1024);
        if (plan->storage_quota) {
            json_object *so = json_object_new_object();
            char size[40];
            snprintf(size, sizeof size, "%lldM", (long long)s->disk_mib);
            jsonx_add_str(so, "size", size);
            jsonx_add(hc, "StorageOpt", so);
        }
    }
    if (s->read_only_root) {
        char opts[96];
        snprintf(opts, sizeof opts, "rw,nosuid,nodev,mode=1777,size=%lldm",
                 (long long)docker_tmpfs_quota_mib(s, docker_tmpfs_mib(s->memory_mib)));
        jsonx_add_bool(hc, "ReadonlyRootfs", true);
        json_object *tmpfs = json_object_new_object();
        jsonx_add_str(tmpfs, "/tmp", opts);
        jsonx_add(hc, "Tmpfs", tmpfs);
    }
    jsonx_add(o, "HostConfig", hc);
    return o;
}

json_object *docker_probe_body(const char *image, const char *runtime, const char *worker_name)
{
    static const char *const cmd[] = { "/sbin/docker-init", "--version", NULL };
    static const char *const no_caps[] = { NULL };
    json_object *o = json_object_new_object();
    jsonx_add_str(o, "Image", image);
    jsonx_add(o, "Cmd", docker_json_strings(cmd));
    json_object *labels = json_object_new_object();
    jsonx_add_str(labels, RUNTIME_LABEL_MANAGED, RUNTIME_MANAGED_PROBE);
    if (worker_name && *worker_name)
        jsonx_add_str(labels, RUNTIME_LABEL_WORKER, worker_name);
    jsonx_add(o, "Labels", labels);
    jsonx_add_bool(o, "AttachStdin", false);
    jsonx_add_bool(o, "AttachStdout", false);
    jsonx_add_bool(o, "AttachStderr", false);
    jsonx_add_bool(o, "Tty", false);
    json_object *hc = docker_hardened_host_config(no_caps, DOCKER_PROBE_MEMORY_MIB, DOCKER_PROBE_PIDS_LIMIT);
    jsonx_add_str(hc, "NetworkMode", "none");
    jsonx_add_str(hc, "Runtime", runtime);
    jsonx_add(o, "HostConfig", hc);
    return o;
}
