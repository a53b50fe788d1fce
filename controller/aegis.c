/* AEGIS: filter, then score, with the reasons. */
#include "aegis.h"

#include <stdio.h>
#include <string.h>

int64_t aegis_fit(int64_t cap_cpu, int64_t cap_mem, int64_t free_cpu, int64_t free_mem, int64_t cpu, int64_t mem)
{
    /* Best fit: the less room a worker has left after this sandbox, the
     * higher it scores; cpu and memory count half each, as fractions of the
     * worker's size so big and small workers compare fairly. */
    int64_t left = 0;
    if (cap_cpu > 0)
        left += (free_cpu - cpu) * (AEGIS_FIT_MAX / 2) / cap_cpu;
    if (cap_mem > 0)
        left += (free_mem - mem) * (AEGIS_FIT_MAX / 2) / cap_mem;
    int64_t fit = AEGIS_FIT_MAX - left;
    return fit < 0 ? 0 : fit > AEGIS_FIT_MAX ? AEGIS_FIT_MAX : fit;
}

void aegis_image_ref(const char *image, char *out, size_t outlen)
{
    const char *slash = strrchr(image, '/');
    const char *last = slash ? slash + 1 : image;
    if (strchr(image, '@') || strchr(last, ':'))
        snprintf(out, outlen, "%s", image);
    else
        snprintf(out, outlen, "%s:latest", image);
}

/* The first selector entry the worker's labels do not satisfy, or -1. */
static int selector_mismatch(const kv_list_t *sel, json_object *labels)
{
    for (size_t i = 0; sel && i < sel->n; i++) {
        json_object *v = NULL;
        if (!labels || !json_object_object_get_ex(labels, sel->items[i].key, &v) ||
            !json_object_is_type(v, json_type_string) || strcmp(json_object_get_string(v), sel->items[i].value) != 0)
            return (int)i;
    }
    return -1;
}

static void classes_text(unsigned classes, char *out, size_t outlen)
{
    out[0] = '\0';
    for (int c = ISO_CONTAINER; c <= ISO_MICROVM; c++)
        if (classes & (1u << c)) {
            size_t l = strlen(out);
            snprintf(out + l, outlen - l, "%s%s", l ? ", " : "", isolation_name((isolation_t)c));
        }
    if (!out[0])
        snprintf(out, outlen, "none");
}

/* Eligibility and Isolation for one worker; fills v->why when filtered. */
static void judge(const aegis_request_t *rq, const aegis_worker_t *w, aegis_verdict_t *v)
{
    memset(v, 0, sizeof *v);
    char cls[64];
    if (strcmp(w->state, "ready") != 0) {
        snprintf(v->why, sizeof v->why, "%s: filtered, %s%s", w->name, w->state,
                 strcmp(w->state, "draining") == 0 ? " (takes no new sandboxes)" : "");
        return;
    }
    if (!w->fresh) {
        snprintf(v->why, sizeof v->why, "%s: filtered, no heartbeat within the worker timeout", w->name);
        return;
    }
    /* Isolation: the weakest offered class at least as strong as the need
     * that also provides the network mode. Never a weaker one. */
    bool any_class = false;
    /* a snapshot's sandbox runs as container or gvisor, or as a microvm
     * when it needs one (a microvm snapshot's does: its create raised the
     * need; a container's image starts a VM with its files) */
    int top = rq->snapshot && rq->need < ISO_MICROVM ? ISO_GVISOR : ISO_MICROVM;
    for (int c = rq->need; c <= top; c++) {
        if (!(w->classes & (1u << c)))
            continue;
        any_class = true;
        if (w->networks[c] & (rq->egress_rules ? 1u << NET_OFFER_FILTERED : 1u << rq->network)) {
            v->serves_class = true;
            v->run_as = (isolation_t)c;
            break;
        }
    }
    if (!v->serves_class) {
        classes_text(w->classes, cls, sizeof cls);
        if (!any_class && rq->snapshot)
            snprintf(v->why, sizeof v->why,
                     "%s: filtered, offers %s but not %s up to gvisor (a sandbox %s runs as container or gvisor)",
                     w->name, cls, isolation_name(rq->need),
                     "from a snapshot");
        else if (!any_class)
            snprintf(v->why, sizeof v->why, "%s: filtered, offers %s but not %s or stronger", w->name, cls,
                     isolation_name(rq->need));
        else
            snprintf(v->why, sizeof v->why, "%s: filtered, offers %s or stronger but not with network %s%s",
                     w->name, isolation_name(rq->need), net_mode_name(rq->network),
                     rq->egress_rules ? " through an egress filter (egress rules by domain)" : "");
        return;
    }
    if (rq->snapshot && !w->holds_snapshot) {
        snprintf(v->why, sizeof v->why,
                 "%s: filtered, does not hold snapshot %s (a sandbox starts from a snapshot on the worker that made "
                 "it)", w->name, rq->snapshot);
        return;
    }
    if (rq->volume && !w->holds_volumes) {
        snprintf(v->why, sizeof v->why,
                 "%s: filtered, cannot hold its volumes (one lives on another worker, or this worker has no volume "
                 "support: root, loop devices and mkfs.ext4)", w->name);
        return;
    }
    int bad = selector_mismatch(rq->selector, w->labels);
    if (bad >= 0) {
        json_object *have = NULL;
        json_object_object_get_ex(w->labels, rq->selector->items[bad].key, &have);
        snprintf(v->why, sizeof v->why, "%s: filtered, selector %s=%s does not match (worker has %s)", w->name,
                 rq->selector->items[bad].key, rq->selector->items[bad].value,
                 have && json_object_is_type(have, json_type_string) ? json_object_get_string(have) : "no such label");
        return;
    }
    if (w->free_cpu < rq->cpu || w->free_mem < rq->mem || w->free_slots < 1) {
        snprintf(v->why, sizeof v->why,
                 "%s: filtered, not enough free capacity (needs %lldm cpu and %lld MiB; has %lldm, %lld MiB, %lld "
                 "slots)",
                 w->name, (long long)rq->cpu, (long long)rq->mem, (long long)w->free_cpu, (long long)w->free_mem,
                 (long long)w->free_slots);
        return;
    }
    /* Grading. */
    v->eligible = true;
    v->fit = aegis_fit(w->cap_cpu, w->cap_mem, w->free_cpu, w->free_mem, rq->cpu, rq->mem);
    v->image = w->has_image ? AEGIS_IMAGE_BONUS : 0;
    int64_t same = w->tenant_sandboxes < AEGIS_SPREAD_MAX ? w->tenant_sandboxes : AEGIS_SPREAD_MAX;
    v->spread = same * AEGIS_SPREAD_PENALTY;
    v->score = v->fit + v->image - v->spread;
}

/* True when a ranks before b. */
static bool better(const aegis_verdict_t *va, const aegis_worker_t *a, const aegis_verdict_t *vb,
                   const aegis_worker_t *b)
{
    if (va->score != vb->score)
        return va->score > vb->score;
    if (a->tenant_sandboxes != b->tenant_sandboxes)
        return a->tenant_sandboxes < b->tenant_sandboxes;
    return strcmp(a->name, b->name) < 0;
}

aegis_outcome_t aegis_decide(const aegis_request_t *rq, const aegis_worker_t *ws, size_t n, aegis_verdict_t *out,
                             int *ret_best, char *msg, size_t msglen)
{
    int best = -1;
    size_t ready = 0, serving = 0;
    for (size_t i = 0; i < n; i++) {
        judge(rq, &ws[i], &out[i]);
        if (strcmp(ws[i].state, "ready") == 0 && ws[i].fresh)
            ready++;
        if (out[i].serves_class)
            serving++;
        if (out[i].eligible && (best < 0 || better(&out[i], &ws[i], &out[best], &ws[best])))
            best = (int)i;
    }
    *ret_best = best;
    for (size_t i = 0; i < n; i++) {
        aegis_verdict_t *v = &out[i];
        if (!v->eligible)
            continue;
        snprintf(v->why, sizeof v->why, "%s: %s, score %lld = fit %lld + image %lld - spread %lld; runs as %s",
                 ws[i].name, (int)i == best ? "chosen" : "eligible, lower rank", (long long)v->score,
                 (long long)v->fit, (long long)v->image, (long long)v->spread, isolation_name(v->run_as));
    }
    if (best >= 0) {
        snprintf(msg, msglen, "placed on %s as %s (needs %s, network %s)", ws[best].name,
                 isolation_name(out[best].run_as), isolation_name(rq->need), net_mode_name(rq->network));
        return AEGIS_CHOSEN;
    }
    if (ready > 0 && serving == 0) {
        snprintf(msg, msglen,
                 "no ready worker offers isolation class %s%s%s%s%s, which this sandbox requires; refusing rather "
                 "than running it with weaker isolation",
                 isolation_name(rq->need), rq->network != NET_NONE ? " with network " : "",
                 rq->network != NET_NONE ? net_mode_name(rq->network) : "",
                 rq->egress_rules ? " through an egress filter that enforces its egress rules by domain" : "",
                 rq->snapshot && rq->need < ISO_MICROVM
                     ? " for a sandbox from a snapshot (a container's or gvisor's snapshot runs as one of those)"
                     : "");
        return AEGIS_REFUSE;
    }
    if (ready == 0)
        snprintf(msg, msglen, "waiting: no ready worker yet");
    else
        snprintf(msg, msglen, "waiting: %zu worker(s) offer %s but none fits now (%s)", serving,
                 isolation_name(rq->need), rq->snapshot ? "the snapshot's worker, selector or capacity"
                                                         : rq->volume ? "the volumes' worker, selector or capacity"
                                                         : "selector or capacity");
    return AEGIS_WAIT;
}
