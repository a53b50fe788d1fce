/* The transition table of operations and the names of states and phases. */
#include "opstate.h"
#include "errors.h"

#include <string.h>

static const char *op_names[OP__COUNT] = {
    "pending", "admitted", "leased", "running", "succeeded", "failed", "cancelled",
};
static const char *kind_names[OPK__COUNT] = { "create", "delete", "exec", "share", "unshare", "extend", "snapshot", "pause", "resume",
                                              "snapshot_copy", "network" };
static const char *phase_names[PH__COUNT] = {
    "pending", "scheduled", "provisioning", "running", "deleting", "deleted", "failed", "lost", "paused",
};

/* allowed[from][to]. Read with docs/architecture.md#operations:
 *   pending  -> admitted (policy ok) | failed (policy denies) | cancelled
 *   admitted -> leased (placed) | failed (isolation unavailable, deadline)
 *             | succeeded (completed by the controller alone: deleting a
 *               sandbox that was never placed; share and unshare; extend,
 *               admitted and succeeded in its request's transaction) | cancelled
 *   leased   -> running (worker took it) | admitted (lease expired, retry)
 *             | failed (lease expired, no retry left) | cancelled
 *   running  -> succeeded | failed (worker report, or lease expired with no
 *               retry left) | admitted (lease expired, retry) | cancelled
 *             | leased (the worker says the answer of the poll that handed
 *               it out never reached it: it never started)
 * Terminal states never move. */
static const bool allowed[OP__COUNT][OP__COUNT] = {
    [OP_PENDING]  = { [OP_ADMITTED] = true, [OP_FAILED] = true, [OP_CANCELLED] = true },
    [OP_ADMITTED] = { [OP_LEASED] = true, [OP_FAILED] = true, [OP_SUCCEEDED] = true, [OP_CANCELLED] = true },
    [OP_LEASED]   = { [OP_RUNNING] = true, [OP_ADMITTED] = true, [OP_FAILED] = true, [OP_CANCELLED] = true },
    [OP_RUNNING]  = { [OP_LEASED] = true, [OP_SUCCEEDED] = true, [OP_FAILED] = true, [OP_ADMITTED] = true,
                      [OP_CANCELLED] = true },
};

const char *op_state_name(op_state_t s) { return (unsigned)s < OP__COUNT ? op_names[s] : "unknown"; }
const char *op_kind_name(op_kind_t k) { return (unsigned)k < OPK__COUNT ? kind_names[k] : "unknown"; }
const char *sandbox_phase_name(sandbox_phase_t p) { return (unsigned)p < PH__COUNT ? phase_names[p] : "unknown"; }

static int parse_name(const char *const *names, int n, const char *s)
{
    for (int i = 0; s && i < n; i++)
        if (strcmp(names[i], s) == 0)
            return i;
    return -1;
}

int op_state_parse(const char *s, op_state_t *ret)
{
    int i = parse_name(op_names, OP__COUNT, s);
    if (i < 0)
        return SBX_EINVAL;
    *ret = (op_state_t)i;
    return 0;
}

int op_kind_parse(const char *s, op_kind_t *ret)
{
    int i = parse_name(kind_names, OPK__COUNT, s);
    if (i < 0)
        return SBX_EINVAL;
    *ret = (op_kind_t)i;
    return 0;
}

int sandbox_phase_parse(const char *s, sandbox_phase_t *ret)
{
    int i = parse_name(phase_names, PH__COUNT, s);
    if (i < 0)
        return SBX_EINVAL;
    *ret = (sandbox_phase_t)i;
    return 0;
}

bool op_state_terminal(op_state_t s)
{
    return s == OP_SUCCEEDED || s == OP_FAILED || s == OP_CANCELLED;
}

bool op_transition_allowed(op_state_t from, op_state_t to)
{
    if ((unsigned)from >= OP__COUNT || (unsigned)to >= OP__COUNT)
        return false;
    return allowed[from][to];
}
