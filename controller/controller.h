/* The controller: HTTP threads, reconcile loop and their shared settings. */
#ifndef SBX_CONTROLLER_H
#define SBX_CONTROLLER_H

#include <stdbool.h>
#include <stdatomic.h>
#include <stddef.h>

#include "classify.h"
#include "config.h"
#include "store.h"

typedef struct http_thread http_thread_t;
typedef struct reconcile reconcile_t;
typedef struct notify_listener notify_listener_t;
typedef struct publisher publisher_t;

typedef struct controller {
    cfg_t cfg;                 /* private copy of the settings */
    char *conninfo;            /* libpq connection string or URL */
    store_limits_t lim;
    int64_t max_body_client;   /* client request bodies */
    int64_t max_cpu_millis, max_memory_mib, max_ttl_seconds, exec_output_max;
    int64_t exec_timeout_max;        /* exec_timeout_max_seconds */
    int64_t default_disk_mib, max_disk_mib;
    classify_rules_t rules;    /* the server's classification rules */
    char *public_url;          /* base of path-based route addresses (route_public_url), no trailing slash */
    char *route_domain;        /* host-based route addresses; NULL when not configured */
    int64_t max_route_ttl;
    int nthreads;
    http_thread_t **threads;
    int listen_fd;
    int port;                  /* the port really bound (listen may say :0) */
    int route_fd;              /* the route listener (proxy.c) */
    int route_port;
    struct ssl_ctx_st *api_tls;   /* TLS of the API listener (tls.c); NULL: plain HTTP */
    struct ssl_ctx_st *route_tls; /* TLS of the route listener; NULL: plain HTTP */
    struct ssl_ctx_st *worker_tls; /* verifies the workers' forwarders (controller_worker_ca); NULL: plain TCP */
    struct proxy_net *trusted_proxies; /* networks whose X-Forwarded-* headers count */
    int ntrusted_proxies;
    int64_t route_max_request, route_max_response; /* 0: no limit */
    int route_idle_seconds, route_max_seconds, route_max_conns;
    struct ratelimit *rl_requests;   /* per client token (server.c); NULL: not limited */
    struct ratelimit *rl_operations; /* per tenant, requests that start an operation */
    int route_max_conns_per_addr;  /* 0: no limit */
    reconcile_t *rec;
    notify_listener_t *notify;
    publisher_t *publisher;    /* NATS event publisher; NULL without nats_url */
    atomic_int stopping;
    /* The reconcile loop's last builds pass saw unfinished template builds:
     * an exec's end then kicks it too (a build's next step waits on it). */
    atomic_bool builds_active;
    unsigned char *secrets_key; /* secrets_key_file's key (sodium_malloc, read-only); NULL: no secrets */
} controller_t;

/* Migrates the database, binds the listening socket and starts the HTTP
 * threads and the reconcile loop. Returns 0 or a negative code with a
 * one-line reason in err. */
int controller_start(const cfg_t *cfg, const char *conninfo, controller_t **ret, char *err, size_t errlen);

/* Stops accepting, answers parked long-polls, stops the loops, frees. */
void controller_stop(controller_t *ctl);

/* Wakes every parked long-poll so it re-checks its condition. Thread-safe. */
void controller_wake_waiters(controller_t *ctl);

/* What a wake-up says changed: parked requests of the other kinds are not
 * re-checked (controller_wake). */
#define WAKE_OPERATIONS 1u /* any operation may have ended: every operation wait */
#define WAKE_LEASES     2u /* an operation was leased: the workers' polls */
#define WAKE_OUTPUT     4u /* live exec output: its followers */
#define WAKE_EVENTS     8u /* events were written: event long-polls */
#define WAKE_ALL        (WAKE_OPERATIONS | WAKE_LEASES | WAKE_OUTPUT | WAKE_EVENTS)
#define WAKE_LEASES_NAMED 16u /* operations were leased to the workers named in ops: their polls */
#define WAKE_POLL_FREED 32u   /* an operation ended on the workers named in ops: their polls held back by a
                               * tenant's executor cap (req_t.poll_held) claim again */

/* Wakes only the parked long-polls mask says can have been answered, the
 * waits on the operations named in ops (ended; may be NULL) and, with
 * WAKE_LEASES_NAMED, the polls of the workers named there (worker ids
 * and operation ids never meet: their prefixes differ). Thread-safe. */
void controller_wake(controller_t *ctl, unsigned mask, const char *const *ops, int nops);

/* Makes the reconcile loop run now. Thread-safe. */
void controller_kick_reconcile(controller_t *ctl);

#endif
