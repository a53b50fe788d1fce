/* The worker agent's disk watch: its own thread, so a slow measurement
 * never delays a heartbeat, running one runtime_disk_enforce pass every
 * worker_disk_interval_ms. A stopped sandbox's next inventory entry says
 * disk_quota_exceeded, and the controller fails it with that reason. */
#include "agent_internal.h"
#include "log.h"
#include "metrics.h"
#include "timeutil.h"

#include <pthread.h>
#include <stdio.h>

/* Stops one pass reports at most (more are still stopped, and counted). */
#define AGENT_DISK_STOPS_MAX 64

void *agent_disk_main(void *arg)
{
    agent_t *a = arg;
    int last_kind = 0;
    runtime_disk_stop_t stops[AGENT_DISK_STOPS_MAX];
    while (!agent_flag(&a->stop_hb)) {
        pthread_mutex_lock(&a->mu);
        while (!a->registered && !agent_flag(&a->stop_hb))
            pthread_cond_wait(&a->cond, &a->mu);
        pthread_mutex_unlock(&a->mu);
        if (agent_flag(&a->stop_hb))
            break;
        int64_t t0 = time_mono_ms();
        char cluster[64];
        agent_cluster_id(a, cluster);
        size_t n = 0;
        api_error_t err;
        int rc = runtime_disk_enforce(a->rt, cluster[0] ? cluster : NULL, a->name, stops, AGENT_DISK_STOPS_MAX, &n,
                                      &err);
        if (rc < 0)
            agent_log_failure(&last_kind, -1, "measure the sandboxes' disk use", err.message);
        else
            last_kind = 0;
        for (size_t i = 0; i < n; i++) {
            log_warn(AGENT_COMPONENT, "stopped sandbox %s: its writable layer holds %lld MiB, over its disk quota of "
                     "%lld MiB (disk_quota_exceeded)", stops[i].sandbox_id,
                     (long long)(stops[i].used_bytes / (1024 * 1024)), (long long)stops[i].quota_mib);
            metrics_add(agent_m_disk_stops, NULL, 1);
        }
        int left = time_left_ms(t0 + a->disk_interval_ms);
        if (left > 0)
            agent_sleep_ms(a, left, &a->stop_hb);
    }
    return NULL;
}
