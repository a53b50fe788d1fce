/* MicroVMs' NICs behind the egress filter (docs/network.md): a sandbox of
 * the microvm class with network open gets a tap of its own (the driver
 * makes it, sandbox-vmm's capability nic), a /30 of worker_nic_subnet, and
 * the filter has its rules by the guest's address, as a container on the
 * filtered bridge. rules_install (docker_filter.c) sends every tap named
 * nic_prefix+N to the filter and drops the rest of what it sends; the
 * worker's files under the filter's /run directory keep each NIC (its
 * slot, addresses, tenant and the tenant's CIDRs in <sbx>.vm.json, its
 * rules in <sbx>.json) for a restarted worker or filter. */
#include "docker_internal.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "jsonx.h"
#include "log.h"

/* Slots are taken one at a time (one process, one worker). */
static pthread_mutex_t nic_mu = PTHREAD_MUTEX_INITIALIZER;

/* A NIC's file older than this whose sandbox no backend holds is let go
 * (a create's whole time: a NIC made for a create under way is kept). */
#define NIC_SWEEP_AGE_S 600

void docker_nic_setup(docker_runtime_t *rt)
{
    rt->nic_prefix[0] = '\0';
    rt->nic_slots = 0;
    const char *sn = rt->nic_subnet;
    char addr[32];
    unsigned bits = 0;
    struct in_addr a;
    if (!sn[0]) {
        snprintf(rt->nic_why, sizeof rt->nic_why, "disabled (worker_nic_subnet is empty)");
        return;
    }
    if (sscanf(sn, "%31[0-9.]/%u", addr, &bits) != 2 || inet_pton(AF_INET, addr, &a) != 1 || bits < 8 ||
        bits > 28) {
        snprintf(rt->nic_why, sizeof rt->nic_why, "worker_nic_subnet %.60s is not an IPv4 range of /8 to /28", sn);
        return;
    }
    if (access("/dev/net/tun", R_OK | W_OK) != 0) {
        snprintf(rt->nic_why, sizeof rt->nic_why, "/dev/net/tun: %s", strerror(errno));
        return;
    }
    uint32_t mask = 0xffffffffu << (32 - bits);
    rt->nic_base = ntohl(a.s_addr) & mask;
    rt->nic_slots = 1u << (30 - bits);
    /* the taps' names: "sbv", 4 hex digits of the bridge's name (another
     * worker's filter on this host has its own), the slot */
    uint32_t h = 2166136261u;
    for (const char *p = rt->filter_bridge; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    snprintf(rt->nic_prefix, sizeof rt->nic_prefix, "sbv%04x", (unsigned)(h & 0xffff));
    rt->nic_why[0] = '\0';
}

static void nic_addr(const docker_runtime_t *rt, unsigned slot, unsigned host_part, char out[16])
{
    struct in_addr a = { .s_addr = htonl(rt->nic_base + 4 * slot + host_part) };
    inet_ntop(AF_INET, &a, out, 16);
}

/* Whether a slot is free: no NIC file of ours has it, and no interface of
 * this host has an address in its /30 (another worker's, or the host's). */
static bool nic_slot_free(const docker_runtime_t *rt, unsigned slot, const bool *taken, const struct ifaddrs *ifs)
{
    if (taken[slot])
        return false;
    uint32_t lo = rt->nic_base + 4 * slot;
    for (const struct ifaddrs *i = ifs; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET) {
            uint32_t x = ntohl(((const struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr);
            if (x >= lo && x < lo + 4)
                return false;
        }
    return true;
}

/* Calls fn for every NIC file (<sbx>.vm.json) with its sandbox id. */
static void nic_each(docker_runtime_t *rt, void (*fn)(docker_runtime_t *rt, const char *sbx, void *ud), void *ud)
{
    DIR *d = opendir(rt->filter_rules_dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n <= 8 || n > 80 || strcmp(e->d_name + n - 8, ".vm.json") != 0)
            continue;
        char sbx[96];
        snprintf(sbx, sizeof sbx, "%.*s", (int)(n - 8), e->d_name);
        fn(rt, sbx, ud);
    }
    closedir(d);
}

static void nic_mark(docker_runtime_t *rt, const char *sbx, void *ud)
{
    bool *taken = ud;
    json_object *o = docker_filter_load(rt, sbx, ".vm.json");
    int64_t slot = -1;
    if (o && jsonx_get_int(o, "slot", &slot) && slot >= 0 && (uint64_t)slot < rt->nic_slots)
        taken[slot] = true;
    json_object_put(o);
}

/* Tells the filter sandbox sbx's NIC from its files. */
static int nic_tell(docker_runtime_t *rt, const char *sbx, api_error_t *err)
{
    json_object *vm = docker_filter_load(rt, sbx, ".vm.json"), *rules = docker_filter_load(rt, sbx, ".json");
    const char *guest = jsonx_get_str(vm, "guest");
    if (!vm || !rules || !guest) {
        json_object_put(vm);
        json_object_put(rules);
        return api_error_set(err, API_RUNTIME_ERROR, "the NIC of sandbox %s has no %s", sbx,
                             !vm || !guest ? "record" : "rules");
    }
    json_object *req = json_object_new_object(), *resp = NULL;
    jsonx_add_str(req, "op", "set");
    jsonx_add_str(req, "addr", guest);
    jsonx_add_str(req, "sandbox", sbx);
    jsonx_add_str(req, "tenant", jsonx_get_str(vm, "tenant") ? jsonx_get_str(vm, "tenant") : "");
    jsonx_add(req, "rules", rules);
    json_object *cidrs = jsonx_get_arr(vm, "cidrs");
    jsonx_add(req, "cidrs", cidrs ? json_object_get(cidrs) : json_object_new_array());
    json_object_put(vm);
    int r = docker_filter_call(rt, req, &resp, err);
    json_object_put(req);
    json_object_put(resp);
    return r;
}

static int nic_tell_ref(docker_runtime_t *rt, const char *sbx, const char *ref, api_error_t *err)
{
    (void)ref;
    return nic_tell(rt, sbx, err);
}

static void nic_restore_one(docker_runtime_t *rt, const char *sbx, void *ud)
{
    (void)ud;
    api_error_t err;
    if (nic_tell(rt, sbx, &err) < 0)
        log_warn("worker", "cannot give the egress filter the NIC of sandbox %s: %s", sbx, err.message);
}

void docker_nic_restore(docker_runtime_t *rt)
{
    if (rt->nic_prefix[0])
        nic_each(rt, nic_restore_one, NULL);
}

bool docker_nic_support(runtime_t *base, char *why, size_t whylen)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    if (!rt->filter_ready) {
        snprintf(why, whylen, "this worker runs no egress filter");
        return false;
    }
    if (!rt->nic_prefix[0]) {
        snprintf(why, whylen, "%s", rt->nic_why[0] ? rt->nic_why : "no NICs");
        return false;
    }
    return true;
}

int docker_nic_attach(runtime_t *base, const runtime_create_req_t *req, runtime_nic_t *ret, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    char why[200], path[192];
    if (!docker_nic_support(base, why, sizeof why))
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "network open for isolation %s goes through the "
                             "egress filter: %s", isolation_name(req->isolation), why);
    if (!req->spec || !docker_filter_file(rt, req->sandbox_id, ".vm.json", path, sizeof path))
        return api_error_set(err, API_INVALID_ARGUMENT, "malformed create request (sandbox id)");
    /* its rules: the create's, or (open without any) every name */
    json_object *rules;
    if (req->spec->egress.set) {
        rules = egress_rules_to_json(&req->spec->egress);
    } else {
        rules = json_object_new_object();
        jsonx_add(rules, "allow", json_object_new_array());
        jsonx_add(rules, "deny", json_object_new_array());
        jsonx_add_str(rules, "default", "allow");
    }
    json_object *vm = json_object_new_object(), *cidrs = json_object_new_array();
    for (const char *p = req->egress_allow; p && *p;) {
        const char *comma = strchr(p, ',');
        size_t l = comma ? (size_t)(comma - p) : strlen(p);
        json_object_array_add(cidrs, json_object_new_string_len(p, (int)l));
        p = comma ? comma + 1 : p + l;
    }
    pthread_mutex_lock(&nic_mu);
    bool *taken = calloc(rt->nic_slots, sizeof *taken);
    struct ifaddrs *ifs = NULL;
    int r = 0;
    unsigned slot = 0;
    if (!taken || getifaddrs(&ifs) != 0) {
        r = api_error_set(err, API_INTERNAL, "cannot list this host's addresses: %s", strerror(errno));
    } else {
        nic_each(rt, nic_mark, taken);
        /* a sandbox made again (a retried create) keeps its slot */
        json_object *was = docker_filter_load(rt, req->sandbox_id, ".vm.json");
        int64_t s = -1;
        if (was && jsonx_get_int(was, "slot", &s) && s >= 0 && (uint64_t)s < rt->nic_slots)
            taken[s] = false;
        json_object_put(was);
        while (slot < rt->nic_slots && !nic_slot_free(rt, slot, taken, ifs))
            slot++;
        if (slot == rt->nic_slots)
            r = api_error_set(err, API_UNAVAILABLE, "every address of worker_nic_subnet %s is taken", rt->nic_subnet);
    }
    if (r == 0) {
        snprintf(ret->tap, sizeof ret->tap, "%s%u", rt->nic_prefix, slot);
        nic_addr(rt, slot, 1, ret->host);
        nic_addr(rt, slot, 2, ret->guest);
        ret->prefix = 30;
        jsonx_add_int(vm, "slot", slot);
        jsonx_add_str(vm, "tap", ret->tap);
        jsonx_add_str(vm, "host", ret->host);
        jsonx_add_str(vm, "guest", ret->guest);
        jsonx_add_str(vm, "tenant", req->tenant ? req->tenant : "");
        jsonx_add(vm, "cidrs", cidrs);
        cidrs = NULL;
        char *rtext = jsonx_dump(rules), *vtext = jsonx_dump(vm);
        if (!rtext || !vtext)
            r = api_error_set(err, API_INTERNAL, "out of memory");
        else if ((r = docker_filter_keep(rt, req->sandbox_id, ".json", rtext, err)) == 0)
            r = docker_filter_keep(rt, req->sandbox_id, ".vm.json", vtext, err);
        free(rtext);
        free(vtext);
    }
    pthread_mutex_unlock(&nic_mu);
    if (ifs)
        freeifaddrs(ifs);
    free(taken);
    json_object_put(rules);
    json_object_put(vm);
    json_object_put(cidrs);
    /* in the filter before the guest boots: until then it refuses all */
    if (r == 0 && (r = nic_tell(rt, req->sandbox_id, err)) < 0)
        docker_nic_detach(base, req->sandbox_id);
    return r;
}

int docker_nic_egress_set(runtime_t *base, const char *sandbox_id, json_object *egress, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    if (!rt->filter_ready)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "this worker runs no egress filter");
    json_object *vm = docker_filter_load(rt, sandbox_id, ".vm.json");
    json_object_put(vm);
    if (!vm)
        return api_error_set(err, API_CONFLICT, "sandbox %s has no NIC behind the egress filter here", sandbox_id);
    return docker_filter_rules_change(rt, sandbox_id, egress, nic_tell_ref, NULL, err);
}

void docker_nic_detach(runtime_t *base, const char *sandbox_id)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    char path[192];
    if (!docker_filter_file(rt, sandbox_id, ".vm.json", path, sizeof path) || access(path, F_OK) != 0)
        return; /* none here (a container's rules are its remove's) */
    docker_filter_drop(rt, sandbox_id);
    api_error_t ignored;
    docker_filter_keep(rt, sandbox_id, ".vm.json", NULL, &ignored);
}

typedef struct {
    const char *const *live;
    size_t n;
} nic_sweep_t;

static void nic_sweep_one(docker_runtime_t *rt, const char *sbx, void *ud)
{
    const nic_sweep_t *w = ud;
    for (size_t i = 0; i < w->n; i++)
        if (w->live[i] && strcmp(w->live[i], sbx) == 0)
            return;
    char path[192];
    struct stat st;
    if (!docker_filter_file(rt, sbx, ".vm.json", path, sizeof path) || stat(path, &st) != 0 ||
        time(NULL) - st.st_mtime < NIC_SWEEP_AGE_S)
        return;
    log_info("worker", "the NIC of sandbox %s is let go: no backend holds the sandbox", sbx);
    docker_nic_detach(&rt->base, sbx);
}

void docker_nic_sweep(runtime_t *base, const char *const *live, size_t n)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    if (!rt->filter_rules_dir[0])
        return;
    nic_sweep_t w = { live, n };
    nic_each(rt, nic_sweep_one, &w);
}
