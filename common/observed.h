/* What a runtime observed of a sandbox's container (its state and, once it
 * stopped, how), as a worker reports it and the controller judges it: the
 * strict reading of those fields and the failure they amount to. */
#ifndef SBX_OBSERVED_H
#define SBX_OBSERVED_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errors.h"
#include "limits.h"

#define OBSERVED_STATE_MAX 32   /* "running", "exited", ... and the NUL */
#define OBSERVED_TIME_MAX  40   /* RFC 3339 with nanoseconds and the NUL */

/* Failure reasons (sandboxes.failure.reason). */
#define OBSERVED_EXITED       "exited"       /* the main process ended */
#define OBSERVED_OOM_KILLED   "oom_killed"   /* the kernel's OOM killer ended it */
#define OBSERVED_START_FAILED "start_failed" /* the runtime could not start it */
#define OBSERVED_REMOVED      "removed"      /* the container vanished from a live worker */
#define OBSERVED_DISK_QUOTA   "disk_quota_exceeded" /* the worker stopped it: over its disk_mib */

typedef struct observed {
    char state[OBSERVED_STATE_MAX];
    bool has_exit_code;          /* the details below were observed */
    int64_t exit_code;
    bool oom_killed;
    bool disk_quota_exceeded;    /* its writable layer was over disk_mib when it stopped */
    char finished_at[OBSERVED_TIME_MAX];     /* "" unknown */
    char error[SBX_OBSERVED_ERROR_MAX];      /* the runtime's own error, "" none */
    const char *output_tail;     /* borrowed from the JSON read; NULL none */
    size_t output_tail_len;
} observed_t;

/* Reads the observed fields of o (an inventory entry or a report's
 * "observed"): state (required, [a-z_] at most 31 bytes), exit_code
 * (integer, -1 .. 2^31-1), oom_killed (bool), disk_quota_exceeded
 * (bool), finished_at (RFC 3339),
 * error (at most SBX_OBSERVED_ERROR_MAX - 1 bytes) and output_tail (at most
 * SBX_OUTPUT_TAIL_MAX bytes); the strings valid UTF-8 without NUL or, but
 * for output_tail, control characters. Absent optional fields stay unset.
 * ret borrows output_tail from o. Returns 0 or SBX_EINVAL with err naming
 * the field (prefixed by what, e.g. "inventory[3]"). */
int observed_from_json(json_object *o, const char *what, observed_t *ret, api_error_t *err);

/* True when a container in this runtime state will not run again by itself:
 * its main process has ended ("exited", "dead"). */
bool observed_stopped(const char *state);

/* True for a well-formed RFC 3339 time (YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM))
 * whose fields are in range, so PostgreSQL's timestamptz accepts it. */
bool observed_time_ok(const char *s);

/* True when s is a real time (not Docker's "0001-01-01T00:00:00Z" for
 * "never"). */
bool observed_time_known(const char *s);

/* The failure reason o amounts to: OBSERVED_DISK_QUOTA (first: the worker's
 * kill may also look like an OOM or a signal), OBSERVED_OOM_KILLED, OBSERVED_START_FAILED
 * (the runtime says why it could not start the process) or OBSERVED_EXITED. */
const char *observed_reason(const observed_t *o);

/* One line for people: what ended the main process, its code (and signal),
 * and the last line of its output when there is one. */
void observed_message(const observed_t *o, char *out, size_t outlen);

/* {"reason", "exit_code" (when known), "message"}: a new object; the caller
 * adds "at". */
json_object *observed_failure_json(const observed_t *o);

/* The failure of a container that vanished from its live worker. */
json_object *observed_removed_failure_json(void);

#endif
