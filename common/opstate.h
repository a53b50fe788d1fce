/* Operation and sandbox state machines: the ONE transition table (docs/architecture.md#operations). */
#ifndef SBX_OPSTATE_H
#define SBX_OPSTATE_H

#include <stdbool.h>

typedef enum {
    OP_PENDING = 0,
    OP_ADMITTED,
    OP_LEASED,
    OP_RUNNING,
    OP_SUCCEEDED,
    OP_FAILED,
    OP_CANCELLED,
    OP__COUNT
} op_state_t;

/* extend: a sandbox's TTL moved, done by the controller alone (never leased). */
typedef enum { OPK_CREATE = 0, OPK_DELETE, OPK_EXEC, OPK_SHARE, OPK_UNSHARE, OPK_EXTEND, OPK_SNAPSHOT, OPK_PAUSE,
               OPK_RESUME, OPK_SNAPSHOT_COPY, OPK_NETWORK, OPK__COUNT } op_kind_t;

typedef enum {
    PH_PENDING = 0,
    PH_SCHEDULED,
    PH_PROVISIONING,
    PH_RUNNING,
    PH_DELETING,
    PH_DELETED,
    PH_FAILED,
    PH_LOST,
    PH_PAUSED,   /* stopped and kept by a pause operation (its files kept; see docs/pause.md) */
    PH__COUNT
} sandbox_phase_t;

const char *op_state_name(op_state_t s);
int op_state_parse(const char *s, op_state_t *ret);
bool op_state_terminal(op_state_t s);

const char *op_kind_name(op_kind_t k);
int op_kind_parse(const char *s, op_kind_t *ret);

const char *sandbox_phase_name(sandbox_phase_t p);
int sandbox_phase_parse(const char *s, sandbox_phase_t *ret);

/* True when an operation may move from `from` to `to`. Every transition the
 * controller performs is checked against this table first; its SQL is a
 * compare-and-set on `from`. */
bool op_transition_allowed(op_state_t from, op_state_t to);

#endif
