/* The worker agent's internals, shared by agent.c (helpers, lifecycle),
 * agent_assign.c (executors, poller) and agent_heartbeat.c (registration,
 * heartbeat). Not for use outside worker/agent*.c. */
#ifndef SBX_AGENT_INTERNAL_H
#define SBX_AGENT_INTERNAL_H

#include "agent.h"
#include "forward.h"
#include "health.h"
#include "httpc.h"
#include "limits.h"
#include "metrics.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define AGENT_COMPONENT          "worker"
#define AGENT_POLL_WAIT_S        30
/* The poll's HTTP deadline: the long-poll plus the controller's slack. */
#define AGENT_POLL_TIMEOUT_MS    ((AGENT_POLL_WAIT_S + 15) * 1000L)
#define AGENT_HTTP_TIMEOUT_MS    30000L
#define AGENT_BACKOFF_MIN_MS     200
#define AGENT_BACKOFF_MAX_MS     5000
/* Assignments waiting for an executor, per executor; when the queue is
 * full the poller stops polling (nothing leased is ever dropped). */
#define AGENT_QUEUE_PER_EXECUTOR 4
#define AGENT_REPORT_ATTEMPTS    5
/* The heartbeat saying the worker stops waits at most this for its answer. */
#define AGENT_STOPPING_BEAT_MS 3000
/* Orphans removed per heartbeat at most (each is a Docker call). */
#define AGENT_ORPHANS_PER_BEAT   16
/* At stop, how long in-flight assignments may run before the runtime is
 * told to give up (an exec is then killed). */
#define AGENT_STOP_GRACE_MS      20000
/* A report is at most the controller's body limit; keep room for the
 * envelope around the exec result. */
#define AGENT_RESULT_MAX_BYTES   (SBX_MAX_BODY_BYTES - 64u * 1024u)
#define AGENT_WORKER_ID_MAX      128
/* Cancelled execs one heartbeat answer names at most (the rest next beat). */
#define AGENT_CANCEL_MAX         256

struct agent {
    char *controller_url;            /* as configured: one URL or a comma-separated list */
    char **urls;                     /* the list, for failover */
    int nurls;
    char *token;
    char *ca_file;                   /* worker_controller_ca; NULL: the system's CAs */
    char *name;
    kv_list_t labels;
    int64_t cpu_millis;
    int64_t memory_mib;
    int64_t slots;
    int64_t disk_interval_ms;        /* worker_disk_interval_ms: the disk watch's period */
    int executors;
    int tenant_executors;            /* what one tenant may hold of them (agent_tenant_executors) */
    runtime_t *rt;
    forward_t *fwd;                  /* the route forwarder (worker_route_listen) */
    json_object *sessions;           /* ended E2B processes not reported yet (under mu; agent_report_sessions) */
    int64_t sessions_dropped;        /* ... dropped past AGENT_SESSIONS_MAX, not yet logged */
    uint64_t sessions_shifted;       /* ... dropped from the front ever: a report in flight knows what moved */
    /* the egress filter's records drained and not yet taken by the
     * controller (the heartbeat thread's own; agent_report_network) */
    json_object *netlog;
    int64_t netlog_dropped;
    health_t *health;                /* /healthz, /readyz, /metrics (worker_health_listen); NULL when not served */

    pthread_mutex_t mu;
    pthread_cond_t cond;             /* any change below; CLOCK_MONOTONIC */
    char worker_id[AGENT_WORKER_ID_MAX];
    char cluster_id[64];             /* from registration: labels our runtime objects */
    char (*inflight)[SBX_ID_MAX];    /* sandboxes an executor works on (one slot each) */
    char (*inflight_tenant)[SBX_MAX_NAME_BYTES + 1]; /* and their tenants (the queue's turns) */
    char (*held)[SBX_ID_MAX];        /* operations received and not yet reported */
    size_t nheld, held_cap;
    bool registered;
    bool need_register;
    uint64_t register_epoch;         /* registrations so far: the heartbeat's next inventory is full after one */
    int64_t heartbeat_seconds;
    int64_t lease_seconds;
    int64_t last_contact_ms;         /* time_mono_ms() of the last answer from the controller; 0: none */
    char last_error[256];            /* the last failed exchange, for /readyz */
    json_object **queue;             /* ring of assignments (owned) */
    size_t qcap, qhead, qlen;
    int busy;                        /* executors running an assignment */
    int exec_slots;                  /* executor threads that took a slot */
    bool exec_stop;                  /* executors leave once idle */

    /* Running execs a client cancelled (the last heartbeat's "cancel"). */
    char (*cancel_ops)[SBX_ID_MAX];
    size_t ncancel;

    atomic_int stop_poll;            /* aborts the long-poll at once */
    atomic_int stop_hb;
    atomic_int cancel_rt;            /* runtime calls give up */

    pthread_t poller, heartbeat, disk;
    pthread_t *exec_threads;
    int exec_started;
    bool poller_started, heartbeat_started, disk_started;
    bool stopped;
    atomic_bool stopping;     /* agent_stop began: every heartbeat says so */
};

/* The shared flags (stop, cancel): set once, read by every thread. */
static inline void agent_flag_set(atomic_int *flag) { atomic_store(flag, 1); }
static inline bool agent_flag(const atomic_int *flag) { return atomic_load(flag) != 0; }

/* The worker's metrics (the process registry, common/metrics.h), made once
 * by the first agent_new. */
extern metric_family_t *agent_m_assignments, *agent_m_assignment_seconds, *agent_m_running, *agent_m_sandboxes,
    *agent_m_heartbeats, *agent_m_capacity, *agent_m_disk_stops;

/* A client for this thread, on the first controller URL, aborting its
 * requests once *abort_flag is set (NULL: never). NULL, logged as failing
 * for user ("the poller"), when it cannot be made. */
httpc_t *agent_client(agent_t *a, const atomic_int *abort_flag, const char *user);

/* The cluster id from the last registration ("" before the first). */
void agent_cluster_id(agent_t *a, char out[64]);

/* runtime_check_owner for sandbox_id as this worker's (its name, the
 * installation it registered with); a refusal (SBX_EPERM) is logged. */
int agent_check_owner(agent_t *a, const char *sandbox_id, const char *ref, char ret_ref[80], api_error_t *err);

/* The controller answered an exchange (for /readyz). */
void agent_contact(agent_t *a);

/* After a transport failure: point c at the next controller URL, if any. */
void agent_failover(agent_t *a, httpc_t *c);

/* The operations this worker holds, for its heartbeat (the controller
 * renews only their leases). */
void agent_hold(agent_t *a, const char *op_id);

/* An assignment kind as a label: one of a fixed set, never the wire text. */
const char *agent_kind_label(const char *kind);

/* Logs a failure only when it differs from the previous one of this loop,
 * so a controller that stays down does not flood the log. */
void agent_log_failure(int *last_kind, int kind, const char *what, const char *reason);

/* The operation op_id was reported (or dropped): no longer held. */
void agent_release(agent_t *a, const char *op_id);

/* True when an executor is working on this sandbox right now. */
bool agent_sandbox_busy(agent_t *a, const char *sandbox_id);

/* Sleeps up to ms, returning early when *flag is set (agent_stop
 * broadcasts the condition). */
void agent_sleep_ms(agent_t *a, int64_t ms, const atomic_int *flag);

/* After a failed exchange: sleeps *backoff_ms (as agent_sleep_ms), then
 * doubles it up to AGENT_BACKOFF_MAX_MS. */
void agent_backoff(agent_t *a, int64_t *backoff_ms, const atomic_int *flag);

/* The observed fields of a stopped container, for a heartbeat's inventory
 * entry or a create's report (the controller reads them with
 * common/observed.c). */
void agent_add_exit(json_object *o, const runtime_exit_t *e);

/* The thread entry points (arg: the agent), started by agent_start and
 * joined by agent_stop: an executor, the poller, the heartbeat. */
void *agent_executor_main(void *arg);
void *agent_poller_main(void *arg);

/* Logs a failed exchange (once per kind of failure); a transport failure
 * also moves c to the next controller URL. */
void agent_exchange_failed(agent_t *a, httpc_t *c, int *last_kind, int rc, const httpc_response_t *resp,
                           const char *what);

void *agent_heartbeat_main(void *arg);

/* The disk watch (agent_disk.c): every disk_interval_ms, one
 * runtime_disk_enforce pass over the running sandboxes, until stop_hb. */
void *agent_disk_main(void *arg);

/* Registers, retrying with backoff until the controller answers 200 or the
 * agent stops. Returns 0 when registered. */
int agent_register(agent_t *a, httpc_t *c);
/* Tells the controller this worker stops (a heartbeat with "stopping":
 * true, bounded by AGENT_STOPPING_BEAT_MS): nothing new is placed on it,
 * and the creates it was leased but had not started go elsewhere at once;
 * unstarted (NULL: none), [{"operation_id","attempt"}], are assignments it
 * took and gives back unstarted. With stopped (its last beat, once its
 * work is reported): it is unreachable, restarting, from now on, its
 * sandboxes kept for worker_lost_after_seconds. A failure is only logged. */
void agent_heartbeat_stopping(agent_t *a, bool stopped, json_object *unstarted);

/* The executors one tenant's assignments may hold on this worker at once:
 * percent (worker_tenant_executors_percent) of executors, rounded down, at
 * least 1. Equal to executors: no cap. The worker asks its poll to hold to
 * it (`poll?tenant_executors=N`); the controller's claim enforces it,
 * tightened by the tenant policy's max_executors_per_worker. */
int agent_tenant_executors(int executors, int percent);

/* The polls whose answers never reached this worker (a transport error,
 * a cut connection, an answer that was not the list): each next poll names
 * them (`poll?…&unanswered=ID,…`), and the controller hands what they
 * claimed out again, since the worker never started it. A poll's id stays
 * named for AGENT_UNANSWERED_KEEP_MS after it failed, past the longest a
 * controller still holding that request could take to claim for it. */
#define AGENT_UNANSWERED_KEEP_MS 60000
typedef struct agent_unanswered {
    char id[SBX_POLL_UNANSWERED_MAX][SBX_POLL_ID_MAX + 1];
    int64_t failed_at[SBX_POLL_UNANSWERED_MAX];
    int n;
} agent_unanswered_t;
/* Notes that the poll id got no answer at now (ms); when full, the oldest
 * is dropped. */
void agent_unanswered_add(agent_unanswered_t *u, const char *id, int64_t now);
/* A poll naming them all was answered at now: those named long enough go. */
void agent_unanswered_answered(agent_unanswered_t *u, int64_t now);
/* "&unanswered=A,B" (or "") into out. */
void agent_unanswered_query(const agent_unanswered_t *u, char *out, size_t cap);

/* Tenants one pick tells apart (more share as if they were this many). */
#define AGENT_PICK_TENANTS 64
/* Which queued assignment an executor takes next: the oldest of the tenant
 * with the fewest assignments running (running[0, nrun): the executors'
 * tenants, "" when idle), among the tenants under their share of the
 * executors (nrun divided among the tenants with work here, running or
 * queued, rounded up), so one tenant's backlog neither holds another's
 * work back nor takes the executors another needs. queue is a ring (qcap
 * slots from qhead, qlen used); returns the offset from qhead, or SIZE_MAX
 * when every queued tenant has its share running (the executor waits). */
size_t agent_queue_pick(json_object *const *queue, size_t qcap, size_t qhead, size_t qlen,
                        const char (*running)[SBX_MAX_NAME_BYTES + 1], int nrun);

/* Ended E2B processes kept for reporting at most: past it the oldest go
 * (counted in a warning), so a controller out of reach costs bounded memory. */
#define AGENT_SESSIONS_MAX 1024
/* forward_session_fn: queues an ended E2B process for the controller. */
void agent_session_ended(void *ud, const forward_session_t *s);
/* Reports what agent_session_ended queued, up to SBX_WORKER_SESSIONS_MAX a
 * request, over c (the heartbeat thread's client): POST
 * /v1/workers/{wid}/sessions. What the controller did not take stays
 * queued for the next heartbeat. */
void agent_report_sessions(agent_t *a, httpc_t *c, const char *wid);

#endif
