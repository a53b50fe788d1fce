/* A tenant's quotas (policy max_sandboxes, max_total_cpu_millis,
 * max_total_memory_mib) against what it holds: its live sandboxes and the
 * sandboxes its warm pools keep for it. Pure: the store reads the counts. */
#ifndef SBX_QUOTA_H
#define SBX_QUOTA_H

#include <stdint.h>

#include "errors.h"
#include "policy.h"

/* Sandboxes and their summed cpu and memory. */
typedef struct quota_use {
    int64_t sandboxes, cpu_millis, memory_mib;
} quota_use_t;

/* Whether live (the tenant's live sandboxes) plus held (the sizes of its
 * warm pools, each member counted with its pool's cpu and memory) plus
 * asked fits every quota p sets (0: unset). what names the asker for the
 * message: NULL for a create (one sandbox), else e.g. "pool web of 2".
 * Returns 0, or SBX_EINVAL with err set to quota_exceeded naming the first
 * rule that binds: "tenant quota max_sandboxes = 3: 1 sandboxes live and
 * 2 held by its warm pools" (a create), "...; pool web of 2 asks 2 more"
 * (a declaration). */
int quota_check(const policy_t *p, const quota_use_t *live, const quota_use_t *held, const quota_use_t *asked,
                const char *what, api_error_t *err);

#endif
