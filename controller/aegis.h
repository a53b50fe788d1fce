/* AEGIS placement as pure logic (docs/architecture.md#aegis-placement): Admission happens earlier,
 * under the tenant's row lock; here are Eligibility, Grading, Isolation
 * and Selection over a snapshot of the workers, with a sentence per worker
 * saying why it was or was not chosen. No I/O: store/reconcile.c feeds it rows and
 * applies the decision with a compare-and-set. */
#ifndef SBX_AEGIS_H
#define SBX_AEGIS_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spec.h"

/* Score weights, documented in docs/architecture.md. */
#define AEGIS_FIT_MAX        1000  /* a worker left exactly full by this sandbox */
#define AEGIS_IMAGE_BONUS     200  /* the image is already on the worker */
#define AEGIS_SPREAD_PENALTY  150  /* per sandbox of the same tenant already there */
#define AEGIS_SPREAD_MAX        4  /* penalties counted at most */

typedef struct aegis_worker {
    const char *id;
    const char *name;
    const char *state;          /* "ready", "draining", "lost" */
    bool fresh;                 /* heartbeat within the worker timeout */
    json_object *labels;        /* {"k":"v"} (borrowed) */
    unsigned classes;           /* bit (1 << isolation_t) per offered class */
    unsigned networks[3];       /* per class: bit (1 << net_mode_t) per mode */
    int64_t cap_cpu, cap_mem;   /* capacity */
    int64_t free_cpu, free_mem, free_slots;
    bool has_image;
    bool holds_snapshot;        /* holds the request's snapshot (when it names one) */
    /* can hold volumes, and none of the request's lives on another worker */
    bool holds_volumes;
    int64_t tenant_sandboxes;   /* live sandboxes of the same tenant on it */
} aegis_worker_t;

typedef struct aegis_request {
    isolation_t need;           /* the classification's minimum class */
    net_mode_t network;
    /* open with egress rules by domain: only a worker whose class offers
     * "filtered" (its egress filter enforces them) is eligible */
    bool egress_rules;
    int64_t cpu, mem;
    const kv_list_t *selector;  /* worker labels that must match; may be NULL */
    /* The snapshot it starts from (NULL: none): only a worker holding it
     * is eligible, and it runs as container or gvisor. */
    const char *snapshot;
    /* A volume it mounts (NULL: none): only a worker that can hold volumes
     * and where none of them lives elsewhere is eligible; it runs as
     * container or gvisor. */
    const char *volume;
} aegis_request_t;

typedef struct aegis_verdict {
    bool eligible;              /* passed every filter, including capacity */
    bool serves_class;          /* ready and fresh, and offers the class with the network */
    isolation_t run_as;         /* the weakest offered class >= need with the network */
    int64_t fit, image, spread, score;
    char why[256];              /* one sentence for the operator */
} aegis_verdict_t;

typedef enum {
    AEGIS_CHOSEN = 0,           /* ret_best names the worker */
    AEGIS_WAIT,                 /* nobody fits now (capacity, selector, no worker yet) */
    AEGIS_REFUSE,               /* no ready worker offers the class: isolation_unavailable */
} aegis_outcome_t;

/* Decides. out has n entries (one per worker, same order); *ret_best is the
 * chosen index for AEGIS_CHOSEN. msg gets a summary sentence (the refusal
 * message for AEGIS_REFUSE). Workers in the same order give the same answer:
 * ties go to the fewer sandboxes of the tenant, then to the name. */
aegis_outcome_t aegis_decide(const aegis_request_t *rq, const aegis_worker_t *ws, size_t n, aegis_verdict_t *out,
                             int *ret_best, char *msg, size_t msglen);

/* The fit score of placing cpu/mem on a worker (0..AEGIS_FIT_MAX). */
int64_t aegis_fit(int64_t cap_cpu, int64_t cap_mem, int64_t free_cpu, int64_t free_mem, int64_t cpu, int64_t mem);

/* "busybox" → "busybox:latest"; names with a tag or digest are kept. */
void aegis_image_ref(const char *image, char *out, size_t outlen);

#endif
