/* Placement of a create as plain data (store/place.c): what the store loads
 * for one create, and the decision over it: which worker, or why it waits
 * or is refused. No database: store/reconcile.c loads and commits. */
#ifndef SBX_STORE_PLACE_H
#define SBX_STORE_PLACE_H

#include "aegis.h"

#include <json-c/json.h>

/* The reasons of a placement decision: the summary, then one sentence per
 * worker (the chosen one first), at most this many of them. */
#define AEGIS_REASONS_MAX 24

/* Everything one decision reads: the request and a snapshot of the
 * workers (borrowed). */
typedef struct place_input {
    aegis_request_t rq;
    aegis_worker_t *ws;
    int n;
} place_input_t;

typedef enum {
    PLACE_LEASE = 0, /* lease to ws[worker], running as run_as */
    PLACE_WAIT,      /* nobody fits now: keep the reasons on the operation */
    PLACE_REFUSE,    /* no ready worker offers the class: isolation_unavailable */
} place_action_t;

typedef struct place_decision {
    place_action_t action;
    int worker;              /* PLACE_LEASE: index into the input's ws */
    isolation_t run_as;      /* PLACE_LEASE */
    char summary[512];       /* the sentence for the operator (the refusal message) */
    json_object *placement;  /* {"worker","summary","needs","isolation","reasons",["score"]}; owned */
} place_decision_t;

/* Decides where in->rq goes among in->ws. Returns 0 with *ret filled (its
 * placement released with place_decision_release), or SBX_ENOMEM. */
int place_decide(const place_input_t *in, place_decision_t *ret);
void place_decision_release(place_decision_t *d);

/* A worker's classes as stored ("container,gvisor") → bits (1 << isolation_t);
 * unknown names are ignored. */
unsigned place_classes_parse(const char *csv);
/* A worker's networks ({"class":["mode",…]}, may be NULL) → per class bits
 * (1 << net_mode_t) in ret[ISO_CONTAINER..ISO_MICROVM]. */
void place_networks_parse(json_object *nets, unsigned ret[3]);

#endif
