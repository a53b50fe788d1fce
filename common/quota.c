/* Tenant quotas over live sandboxes and warm pool reservations. */
#include "quota.h"

#include <stdbool.h>
#include <stdio.h>

/* One rule: 0 when live + held + asked fits limit (0: unset), else
 * quota_exceeded in err. in_use names the live count ("sandboxes live",
 * "in use", "MiB in use"); a create's ask is said only when count_only is
 * false (its one sandbox goes without saying). */
static int quota_rule(const char *rule, int64_t limit, int64_t live, int64_t held, int64_t asked,
                      const char *in_use, bool count_only, const char *what, api_error_t *err)
{
    if (limit <= 0 || live + held + asked <= limit)
        return 0;
    char held_text[64] = "", asked_text[160];
    if (held > 0)
        snprintf(held_text, sizeof held_text, " and %lld held by its warm pools", (long long)held);
    if (what)
        snprintf(asked_text, sizeof asked_text, "; %.100s asks %lld more", what, (long long)asked);
    else if (!count_only)
        snprintf(asked_text, sizeof asked_text, ", %lld asked", (long long)asked);
    else
        asked_text[0] = '\0';
    return api_error_set(err, API_QUOTA_EXCEEDED, "tenant quota %s = %lld: %lld %s%s%s", rule, (long long)limit,
                         (long long)live, in_use, held_text, asked_text);
}

int quota_check(const policy_t *p, const quota_use_t *live, const quota_use_t *held, const quota_use_t *asked,
                const char *what, api_error_t *err)
{
    if (quota_rule("max_sandboxes", p->max_sandboxes, live->sandboxes, held->sandboxes, asked->sandboxes,
                   "sandboxes live", true, what, err) < 0 ||
        quota_rule("max_total_cpu_millis", p->max_total_cpu_millis, live->cpu_millis, held->cpu_millis,
                   asked->cpu_millis, "in use", false, what, err) < 0 ||
        quota_rule("max_total_memory_mib", p->max_total_memory_mib, live->memory_mib, held->memory_mib,
                   asked->memory_mib, "MiB in use", false, what, err) < 0)
        return SBX_EINVAL;
    return 0;
}
