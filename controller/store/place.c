/* The placement decision for one create, over plain structs: AEGIS's
 * verdicts turned into an action and the placement JSON `sandbox get`
 * shows. Pure: store/reconcile.c loads the rows and commits the action. */
#include "place.h"
#include "errors.h"
#include "jsonx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_object *placement_json(const char *worker, const char *summary, const aegis_verdict_t *vs, int n,
                                   int best, const aegis_request_t *rq)
{
    json_object *pl = json_object_new_object();
    jsonx_add_str(pl, "worker", worker);
    jsonx_add_str(pl, "summary", summary);
    jsonx_add_str(pl, "needs", isolation_name(rq->need));
    jsonx_add_str(pl, "isolation", best >= 0 ? isolation_name(vs[best].run_as) : NULL);
    json_object *reasons = json_object_new_array();
    if (best >= 0)
        json_object_array_add(reasons, json_object_new_string(vs[best].why));
    int shown = best >= 0;
    for (int i = 0; i < n; i++) {
        if (i == best)
            continue;
        if (shown >= AEGIS_REASONS_MAX) {
            char more[64];
            snprintf(more, sizeof more, "and %d more worker(s)", n - i - (best > i ? 1 : 0));
            json_object_array_add(reasons, json_object_new_string(more));
            break;
        }
        json_object_array_add(reasons, json_object_new_string(vs[i].why));
        shown++;
    }
    if (n == 0)
        json_object_array_add(reasons, json_object_new_string("no worker has registered"));
    jsonx_add(pl, "reasons", reasons);
    if (best >= 0) {
        json_object *sc = json_object_new_object();
        jsonx_add_int(sc, "score", vs[best].score);
        jsonx_add_int(sc, "fit", vs[best].fit);
        jsonx_add_int(sc, "image", vs[best].image);
        jsonx_add_int(sc, "spread", vs[best].spread);
        jsonx_add(pl, "score", sc);
    }
    return pl;
}

int place_decide(const place_input_t *in, place_decision_t *ret)
{
    memset(ret, 0, sizeof *ret);
    ret->worker = -1;
    int n = in->n;
    aegis_verdict_t *vs = calloc((size_t)(n ? n : 1), sizeof *vs);
    if (!vs)
        return SBX_ENOMEM;
    int best = -1;
    aegis_outcome_t out = aegis_decide(&in->rq, in->ws, (size_t)n, vs, &best, ret->summary, sizeof ret->summary);
    if (out == AEGIS_CHOSEN) {
        ret->action = PLACE_LEASE;
        ret->worker = best;
        ret->run_as = vs[best].run_as;
        ret->placement = placement_json(in->ws[best].name, ret->summary, vs, n, best, &in->rq);
    } else {
        ret->action = out == AEGIS_REFUSE ? PLACE_REFUSE : PLACE_WAIT;
        ret->placement = placement_json(NULL, ret->summary, vs, n, -1, &in->rq);
    }
    free(vs);
    return 0;
}

void place_decision_release(place_decision_t *d)
{
    if (!d)
        return;
    if (d->placement)
        json_object_put(d->placement);
    d->placement = NULL;
}

unsigned place_classes_parse(const char *csv)
{
    unsigned classes = 0;
    const char *cl = csv;
    while (cl && *cl) {
        const char *end = strchr(cl, ',');
        size_t len = end ? (size_t)(end - cl) : strlen(cl);
        char name[16];
        isolation_t have;
        snprintf(name, sizeof name, "%.*s", (int)(len < 15 ? len : 15), cl);
        if (isolation_parse(name, &have) == 0)
            classes |= 1u << have;
        cl = end ? end + 1 : NULL;
    }
    return classes;
}

void place_networks_parse(json_object *nets, unsigned ret[3])
{
    for (int k = ISO_CONTAINER; k <= ISO_MICROVM; k++) {
        json_object *modes = NULL;
        if (!nets || !json_object_object_get_ex(nets, isolation_name((isolation_t)k), &modes) ||
            !json_object_is_type(modes, json_type_array))
            continue;
        for (size_t j = 0; j < json_object_array_length(modes); j++) {
            int m;
            if (net_offer_parse(json_object_get_string(json_object_array_get_idx(modes, j)), &m) == 0)
                ret[k] |= 1u << m;
        }
    }
}
