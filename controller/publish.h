/* The NATS publisher: forwards the events table to subjects
 * {prefix}.{tenant}.{kind}, in id order, at least once, from one leader. */
#ifndef SBX_PUBLISH_H
#define SBX_PUBLISH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "controller.h"

typedef struct publisher publisher_t;

/* The session-level advisory lock the leader holds on its own connection
 * (the migration lock's key + 1). Whoever holds it is the only publisher
 * and the only writer of event_publisher. */
#define PUBLISH_LOCK_KEY "7526746283465837"

/* Starts the publisher thread when ctl's nats_url is set; with no nats_url it
 * does nothing and sets *ret to NULL. The thread connects to PostgreSQL and
 * NATS on its own, with backoff: neither being down fails the start. Returns
 * 0, or SBX_EINVAL (a nats_subject_prefix that is no valid subject) or
 * SBX_ENOMEM with a one-line reason in err. */
int publish_start(controller_t *ctl, publisher_t **ret, char *err, size_t errlen);

/* Stops and joins the thread (within about a second), releases leadership,
 * frees p. Accepts NULL. */
void publish_stop(publisher_t *p);

/* ---- the pure parts, for tests ---- */

/* What the publisher knows about missing ids (holes in the id sequence: a
 * rolled-back transaction, one not committed yet, or pruned events). */
typedef struct publish_gap {
    int64_t settled_below; /* missing ids below this will never commit (PostgreSQL said so) */
    int64_t graced_below;  /* missing ids below this were waited for a grace: passed too */
    int64_t seen_below;    /* holes below this were first seen at seen_ms (0: none pending) */
    int64_t seen_ms;
} publish_gap_t;

/* How far one batch may go. */
typedef struct publish_plan {
    int nrows;          /* rows ids[0..nrows) go out next, in order */
    int64_t cursor;     /* the cursor once they are out */
    int64_t missing;    /* ids in (old cursor, cursor] that have no row: passed */
    int64_t graced;     /* of those, passed by the grace, not known to be final */
    int64_t blocked_at; /* the first missing id the batch stopped at, 0 when it did not stop */
} publish_plan_t;

/* Plans one batch: ids are the event ids after cursor, strictly ascending
 * (a batch read in one snapshot). A missing id is passed when it lies below
 * gap->settled_below, or when it was first seen missing (by a read that saw
 * a larger id) at least grace_ms before now_ms; any other missing id stops
 * the batch, which then records when it saw the holes. Updates *gap; fills
 * *ret. */
void publish_plan_batch(publish_gap_t *gap, int64_t cursor, const int64_t *ids, int n, int64_t now_ms,
                        int64_t grace_ms, publish_plan_t *ret);

/* Records that no transaction that could still commit an id below `below`
 * is running: ids below it that a later read still misses are passed. */
void publish_gap_settle(publish_gap_t *gap, int64_t below);

/* Writes the subject {prefix}.{tenant}.{kind} into buf: a NULL tenant is
 * "_system"; in the tenant, any byte outside [A-Za-z0-9_-] becomes '_'; in
 * the kind, bytes outside [A-Za-z0-9_.-] become '_' and empty tokens "_".
 * Returns 0 or SBX_ETOOBIG. */
int publish_subject(char *buf, size_t buflen, const char *prefix, const char *tenant, const char *kind);

/* True when prefix is one or more dot-separated tokens of [A-Za-z0-9_-]. */
bool publish_prefix_valid(const char *prefix);

/* Copies a NATS URL (or comma-separated list) with any user:password@ or
 * token@ replaced by "***@", for logs. Truncates to buflen. Returns buf. */
const char *publish_url_redact(const char *url, char *buf, size_t buflen);

#endif
