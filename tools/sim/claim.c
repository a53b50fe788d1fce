/* sandbox-sim claim: warm pool claims at a fixed rate, an open loop (one
 * create every 1/rate s, whatever the answers do), each create matching a
 * pool's spec; times due → 202, tells hits from misses and deletes every
 * claimed sandbox; watches the pool's ready members and refills. */
#include "sim.h"
#include "errors.h"
#include "limits.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIM_CLAIM_WAIT_S        30      /* one long poll of a miss's create */
#define SIM_CLAIM_MAX_CONNS     1024    /* claims under way at once (more are not sent) */
#define SIM_CLAIM_MAX_TOTAL     1000000 /* rate × duration */
#define SIM_CLAIM_GRACE_S       60      /* after the window, for the claims still under way */
#define SIM_CLAIM_DELETE_TRIES  50      /* a delete's 429s waited out before giving up */
#define SIM_CLAIM_POOL_EVERY_MS 500     /* GET /v1/pools/{name} while claiming */
#define SIM_CLAIM_ERRORS_SHOWN  10

typedef struct sim_claims sim_claims_t;

/* One claim, from its due time to its delete's answer; on the run's list. */
typedef struct sim_claim {
    sim_claims_t *R;
    struct evhttp_connection *c;    /* the run's, held while the claim is under way */
    struct event *timer;            /* a wait's or a delete's retry after a 429 */
    int64_t t_due;
    char sbx[SBX_ID_MAX], op[SBX_ID_MAX];
    bool deleting;
    int tries;
    struct sim_claim *prev, *next;
} sim_claim_t;

/* A pool's counters as GET /v1/pools/{name} shows them. */
typedef struct sim_pool_view {
    int64_t size, ready, hits, misses, refills;
    int64_t t_us;                   /* when the answer came */
} sim_pool_view_t;

/* A sandbox the claims got: whether its 202 was a hit, when its claim
 * was due (from the start) and how long it took to the 202. */
typedef struct sim_claimed {
    char id[SBX_ID_MAX];
    bool hit;
    int64_t due_us, took_us;
} sim_claimed_t;

struct sim_claims {
    sim_api_t *api;
    json_object *body;              /* the create body, owned */
    const char *pool;               /* the pool watched (NULL: none) */
    long rate, duration, total;
    long sent, answered, hits, misses, errors, not_sent, deleted, delete_failed;
    long rate_limited;              /* creates refused with 429 (not sent again) */
    long retried;                   /* 429s of waits and deletes, waited out */
    int64_t t0, t_last_answer, lag_max_us;
    sim_samples_t hit_us, miss_202_us, miss_done_us;
    sim_claim_t *under_way;         /* the claims not finished */
    long nunder_way;
    struct evhttp_connection **idle;
    size_t nidle, nconns;
    sim_claimed_t *claimed;
    size_t nclaimed, capclaimed;
    struct event *tick, *grace, *pool_timer;
    bool window_over, draining_pool, stopped;
    struct evhttp_connection *pool_c;
    bool pool_busy, pool_final_sent;
    sim_pool_view_t before, after;
    int64_t ready_min;
    int rc;                         /* a failure before the claims began */
};

static json_object *jobj(json_object *o, const char *key)
{
    json_object *v = NULL;
    return o && json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_object) ? v : NULL;
}

static int64_t jint(json_object *o, const char *key)
{
    json_object *v = NULL;
    return o && json_object_object_get_ex(o, key, &v) ? json_object_get_int64(v) : 0;
}

static void sim_claim_error(sim_claims_t *R, const char *what, const char *why)
{
    if (R->errors++ < SIM_CLAIM_ERRORS_SHOWN)
        sim_errorf("claim: %s: %s", what, why);
}

/* ---- connections: one per claim under way, kept alive for the next ---- */

static struct evhttp_connection *sim_claims_conn(sim_claims_t *R)
{
    if (R->nidle > 0)
        return R->idle[--R->nidle];
    if (R->nconns >= SIM_CLAIM_MAX_CONNS)
        return NULL;
    struct evhttp_connection *c = sim_conn_new(&R->api->t, SIM_CLAIM_WAIT_S + 15);
    if (c)
        R->nconns++;
    return c;
}

/* Gives c back for the next claim; one whose last exchange failed is
 * closed instead. */
static void sim_claims_conn_put(sim_claims_t *R, struct evhttp_connection *c, bool failed)
{
    if (failed) {
        evhttp_connection_free(c);
        R->nconns--;
        return;
    }
    R->idle[R->nidle++] = c;
}

/* ---- the pool's counters ----------------------------------------------- */

static void sim_claims_check_done(sim_claims_t *R);
static void sim_pool_sample(sim_claims_t *R);

static void sim_pool_done(void *ud, const sim_resp_t *r)
{
    sim_claims_t *R = ud;
    R->pool_busy = false;
    json_object *p = r->status == 200 ? jobj(r->json, "pool") : NULL;
    if (p) {
        sim_pool_view_t v = { .size = jint(p, "size"), .ready = jint(p, "ready"), .hits = jint(p, "hits"),
                              .misses = jint(p, "misses"), .refills = jint(p, "refills"), .t_us = sim_now_us() };
        R->after = v;
        if (v.ready < R->ready_min)
            R->ready_min = v.ready;
    }
    if (R->draining_pool && !R->pool_final_sent)
        sim_pool_sample(R); /* the one sent before the last claim finished may be older */
    else if (R->draining_pool)
        event_base_loopbreak(R->api->base);
    else if (!R->stopped)
        sim_after_ms(R->pool_timer, SIM_CLAIM_POOL_EVERY_MS);
}

/* Asks for the pool's counters (one request at a time). */
static void sim_pool_sample(sim_claims_t *R)
{
    char path[128];
    if (R->pool_busy)
        return;
    snprintf(path, sizeof path, "/v1/pools/%s", R->pool);
    R->pool_final_sent = R->draining_pool;
    if (sim_http_send(R->pool_c, &R->api->t, EVHTTP_REQ_GET, path, R->api->token, NULL, sim_pool_done, R) == 0)
        R->pool_busy = true;
    else if (R->draining_pool)
        event_base_loopbreak(R->api->base);
}

static void sim_pool_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sim_pool_sample(arg);
}

/* ---- one claim: create → (a miss: wait) → delete ------------------------ */

static void sim_claim_finish(sim_claim_t *cl, bool conn_failed)
{
    sim_claims_t *R = cl->R;
    if (cl->prev)
        cl->prev->next = cl->next;
    else
        R->under_way = cl->next;
    if (cl->next)
        cl->next->prev = cl->prev;
    R->nunder_way--;
    sim_claims_conn_put(R, cl->c, conn_failed);
    event_free(cl->timer);
    free(cl);
    sim_claims_check_done(R);
}

static void sim_claim_step(sim_claim_t *cl);

/* A 429 on a wait or a delete: the same request after Retry-After. */
static void sim_claim_retry_later(sim_claim_t *cl, const sim_resp_t *r)
{
    if (++cl->tries > SIM_CLAIM_DELETE_TRIES) {
        char why[512];
        sim_claim_error(cl->R, cl->deleting ? "deleting a claimed sandbox" : "waiting for a miss's create",
                        sim_resp_error(r, why, sizeof why));
        cl->R->delete_failed += cl->deleting;
        sim_claim_finish(cl, false);
        return;
    }
    cl->R->retried++;
    sim_after_ms(cl->timer, r->retry_after > 0 ? (int64_t)r->retry_after * 1000 : 100);
}

static void sim_claim_delete_done(void *ud, const sim_resp_t *r)
{
    sim_claim_t *cl = ud;
    char why[512];
    if (r->status == 429) {
        sim_claim_retry_later(cl, r);
        return;
    }
    if (r->status == 202) {
        cl->R->deleted++;
    } else {
        cl->R->delete_failed++;
        sim_claim_error(cl->R, "deleting a claimed sandbox", sim_resp_error(r, why, sizeof why));
    }
    sim_claim_finish(cl, r->status < 0);
}

static void sim_claim_wait_done(void *ud, const sim_resp_t *r)
{
    sim_claim_t *cl = ud;
    sim_claims_t *R = cl->R;
    char why[512];
    if (r->status == 429) {
        sim_claim_retry_later(cl, r);
        return;
    }
    const char *state = sim_jstr(r->status == 200 ? jobj(r->json, "operation") : NULL, "state");
    if (!state) {
        sim_claim_error(R, "waiting for a miss's create", sim_resp_error(r, why, sizeof why));
        sim_claim_finish(cl, r->status < 0);
        return;
    }
    if (strcmp(state, "succeeded") == 0) {
        sim_samples_add(&R->miss_done_us, sim_now_us() - cl->t_due);
        cl->deleting = true;
        cl->tries = 0;
    } else if (strcmp(state, "failed") == 0 || strcmp(state, "cancelled") == 0) {
        snprintf(why, sizeof why, "create %s of sandbox %s %s", cl->op, cl->sbx, state);
        sim_claim_error(R, "a miss's create", why);
        cl->deleting = true; /* a failed sandbox is deleted like any */
        cl->tries = 0;
    }
    sim_claim_step(cl);
}

/* Sends the claim's next request: its wait (a miss) or its delete. */
static void sim_claim_step(sim_claim_t *cl)
{
    sim_claims_t *R = cl->R;
    char path[SBX_ID_MAX + 48];
    int rc;
    if (cl->deleting) {
        snprintf(path, sizeof path, "/v1/sandboxes/%s", cl->sbx);
        rc = sim_http_send(cl->c, &R->api->t, EVHTTP_REQ_DELETE, path, R->api->token, NULL, sim_claim_delete_done,
                           cl);
    } else {
        snprintf(path, sizeof path, "/v1/operations/%s?wait=%d", cl->op, SIM_CLAIM_WAIT_S);
        rc = sim_http_send(cl->c, &R->api->t, EVHTTP_REQ_GET, path, R->api->token, NULL, sim_claim_wait_done, cl);
    }
    if (rc < 0) {
        sim_claim_error(R, cl->deleting ? "deleting a claimed sandbox" : "waiting for a miss's create",
                        "the request could not be sent");
        R->delete_failed += cl->deleting;
        sim_claim_finish(cl, true);
    }
}

static void sim_claim_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sim_claim_step(arg);
}

static void sim_claims_record(sim_claims_t *R, const char *id, bool hit, int64_t due_us, int64_t took_us)
{
    if (R->nclaimed == R->capclaimed) {
        size_t cap = R->capclaimed ? R->capclaimed * 2 : 1024;
        sim_claimed_t *p = realloc(R->claimed, cap * sizeof *p);
        if (!p)
            return;
        R->claimed = p;
        R->capclaimed = cap;
    }
    sim_claimed_t *c = &R->claimed[R->nclaimed++];
    snprintf(c->id, sizeof c->id, "%s", id);
    c->hit = hit;
    c->due_us = due_us;
    c->took_us = took_us;
}

static void sim_claim_create_done(void *ud, const sim_resp_t *r)
{
    sim_claim_t *cl = ud;
    sim_claims_t *R = cl->R;
    int64_t now = sim_now_us();
    char why[512];
    if (r->status == 429) {
        /* An open loop does not send it again: the rate would no longer be the target's. */
        R->rate_limited++;
        sim_claim_finish(cl, false);
        return;
    }
    json_object *sbx = r->status == 202 ? jobj(r->json, "sandbox") : NULL, *op = jobj(r->json, "operation");
    const char *sbx_id = sim_jstr(sbx, "id"), *op_id = sim_jstr(op, "id");
    if (!sbx_id || !op_id || strlen(sbx_id) >= sizeof cl->sbx || strlen(op_id) >= sizeof cl->op) {
        sim_claim_error(R, "create", sim_resp_error(r, why, sizeof why));
        sim_claim_finish(cl, r->status < 0);
        return;
    }
    snprintf(cl->sbx, sizeof cl->sbx, "%s", sbx_id);
    snprintf(cl->op, sizeof cl->op, "%s", op_id);
    R->answered++;
    R->t_last_answer = now;
    const char *phase = sim_jstr(sbx, "phase"), *state = sim_jstr(op, "state");
    bool hit = phase && state && strcmp(phase, "running") == 0 && strcmp(state, "succeeded") == 0;
    sim_claims_record(R, sbx_id, hit, cl->t_due - R->t0, now - cl->t_due);
    if (hit) {
        R->hits++;
        sim_samples_add(&R->hit_us, now - cl->t_due);
        cl->deleting = true;
    } else {
        R->misses++;
        sim_samples_add(&R->miss_202_us, now - cl->t_due);
    }
    sim_claim_step(cl);
}

/* Sends the claim due at t_due (now or a moment ago). */
static void sim_claim_send(sim_claims_t *R, int64_t t_due, int64_t now)
{
    if (now - t_due > R->lag_max_us)
        R->lag_max_us = now - t_due;
    struct evhttp_connection *c = sim_claims_conn(R);
    sim_claim_t *cl = c ? calloc(1, sizeof *cl) : NULL;
    struct event *timer = cl ? evtimer_new(R->api->base, sim_claim_timer_cb, cl) : NULL;
    if (!timer) {
        free(cl);
        if (c)
            sim_claims_conn_put(R, c, false);
        if (R->not_sent++ == 0)
            sim_errorf(c ? "claim: out of memory: a claim not sent"
                         : "claim: %d claims under way: a claim not sent (the controller is far behind the rate)",
                       SIM_CLAIM_MAX_CONNS);
        return;
    }
    cl->R = R;
    cl->c = c;
    cl->timer = timer;
    cl->t_due = t_due;
    cl->next = R->under_way;
    if (R->under_way)
        R->under_way->prev = cl;
    R->under_way = cl;
    R->nunder_way++;
    if (sim_http_send(c, &R->api->t, EVHTTP_REQ_POST, "/v1/sandboxes", R->api->token, R->body,
                      sim_claim_create_done, cl) < 0) {
        sim_claim_error(R, "create", "the request could not be sent");
        sim_claim_finish(cl, true);
    }
}

/* ---- the schedule ------------------------------------------------------ */

/* When claim i is due: t0 + i/rate s, so the rate holds whatever the
 * timer's jitter. */
static int64_t sim_claims_due(const sim_claims_t *R, long i)
{
    return R->t0 + (int64_t)i * 1000000 / R->rate;
}

static void sim_claims_window_over(sim_claims_t *R)
{
    if (R->window_over)
        return;
    R->window_over = true;
    evtimer_del(R->tick);
    sim_after_ms(R->grace, SIM_CLAIM_GRACE_S * 1000);
    sim_claims_check_done(R);
}

static void sim_claims_tick_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sim_claims_t *R = arg;
    int64_t now = sim_now_us();
    while (R->sent < R->total && sim_claims_due(R, R->sent) <= now)
        sim_claim_send(R, sim_claims_due(R, R->sent++), now);
    if (R->sent >= R->total) {
        sim_claims_window_over(R);
        return;
    }
    int64_t wait_us = sim_claims_due(R, R->sent) - now;
    struct timeval tv = { .tv_sec = wait_us / 1000000, .tv_usec = wait_us % 1000000 };
    evtimer_add(R->tick, &tv);
}

/* Every claim sent and finished: one last look at the pool, then the end. */
static void sim_claims_check_done(sim_claims_t *R)
{
    if (!R->window_over || R->nunder_way > 0 || R->stopped)
        return;
    R->stopped = true;
    evtimer_del(R->grace);
    if (R->pool) {
        evtimer_del(R->pool_timer);
        R->draining_pool = true;
        if (!R->pool_busy)
            sim_pool_sample(R);
        return;
    }
    event_base_loopbreak(R->api->base);
}

static void sim_claims_grace_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sim_claims_t *R = arg;
    sim_errorf("claim: %ld claims still under way %d s after the window; stopping without them", R->nunder_way,
               SIM_CLAIM_GRACE_S);
    R->errors += R->nunder_way;
    event_base_loopbreak(R->api->base);
}

static void sim_claims_signal_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sim_claims_t *R = arg;
    R->total = R->sent; /* no more claims; those under way finish */
    sim_claims_window_over(R);
}

static void sim_claims_start(sim_claims_t *R)
{
    R->t0 = sim_now_us();
    sim_after_ms(R->tick, 0);
    if (R->pool)
        sim_after_ms(R->pool_timer, SIM_CLAIM_POOL_EVERY_MS);
}

/* The create body from the pool's spec: what a claim must match. */
static json_object *sim_claims_pool_body(const sim_claims_t *R, json_object *p)
{
    json_object *o = json_object_new_object();
    static const char *const strs[] = { "image", "network", "isolation", NULL };
    static const char *const ints[] = { "cpu_millis", "memory_mib", "disk_mib", NULL };
    for (const char *const *k = strs; *k; k++)
        if (sim_jstr(p, *k))
            json_object_object_add(o, *k, json_object_new_string(sim_jstr(p, *k)));
    for (const char *const *k = ints; *k; k++)
        if (jint(p, *k) > 0)
            json_object_object_add(o, *k, json_object_new_int64(jint(p, *k)));
    json_object *h = NULL;
    if (json_object_object_get_ex(p, "hardened", &h) && json_object_get_boolean(h))
        json_object_object_add(o, "hardened", json_object_new_boolean(true));
    if (json_object_object_get_ex(p, "read_only_root", &h) && json_object_get_boolean(h))
        json_object_object_add(o, "read_only_root", json_object_new_boolean(true));
    json_object_object_add(o, "ttl_seconds", json_object_new_int64(R->api->ttl_seconds));
    return o;
}

static void sim_claims_pool_first(void *ud, const sim_resp_t *r)
{
    sim_claims_t *R = ud;
    char why[512];
    json_object *p = r->status == 200 ? jobj(r->json, "pool") : NULL;
    if (!p || !sim_jstr(p, "image")) {
        sim_errorf("claim: pool %s: %s", R->pool, sim_resp_error(r, why, sizeof why));
        R->rc = 1;
        event_base_loopbreak(R->api->base);
        return;
    }
    R->body = sim_claims_pool_body(R, p);
    sim_pool_view_t v = { .size = jint(p, "size"), .ready = jint(p, "ready"), .hits = jint(p, "hits"),
                          .misses = jint(p, "misses"), .refills = jint(p, "refills"), .t_us = sim_now_us() };
    R->before = R->after = v;
    R->ready_min = v.ready;
    sim_claims_start(R);
}

/* ---- the figures ------------------------------------------------------- */

static int sim_cmp_claimed(const void *a, const void *b)
{
    return strcmp(((const sim_claimed_t *)a)->id, ((const sim_claimed_t *)b)->id);
}

/* Sandboxes that two claims got: the controller handed one out twice. */
static long sim_claims_duplicates(const sim_claims_t *R)
{
    if (R->nclaimed < 2)
        return 0;
    sim_claimed_t *s = malloc(R->nclaimed * sizeof *s);
    if (!s)
        return 0;
    memcpy(s, R->claimed, R->nclaimed * sizeof *s);
    qsort(s, R->nclaimed, sizeof *s, sim_cmp_claimed);
    long dup = 0;
    for (size_t i = 1; i < R->nclaimed; i++)
        if (strcmp(s[i].id, s[i - 1].id) == 0 && dup++ < SIM_CLAIM_ERRORS_SHOWN)
            sim_errorf("claim: sandbox %s was handed to two claims", s[i].id);
    free(s);
    return dup;
}

static double sim_claims_secs(const sim_claims_t *R)
{
    double secs = (double)R->duration, answered = (double)(R->t_last_answer - R->t0) / 1e6;
    return answered > secs ? answered : secs;
}

static void sim_claims_print(sim_claims_t *R, long dups)
{
    double secs = sim_claims_secs(R), per_s = (double)R->answered / secs;
    double pool_secs = (double)(R->after.t_us - R->before.t_us) / 1e6;
    int64_t refills = R->after.refills - R->before.refills;
    double refill_per_s = pool_secs > 0 ? (double)refills / pool_secs : 0;
    if (R->api->json) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "mode", json_object_new_string("claim"));
        json_object_object_add(o, "rate", json_object_new_int64(R->rate));
        json_object_object_add(o, "duration_s", json_object_new_int64(R->duration));
        json_object_object_add(o, "seconds", sim_json_num(secs, 3));
        json_object_object_add(o, "sent", json_object_new_int64(R->sent));
        json_object_object_add(o, "answered", json_object_new_int64(R->answered));
        json_object_object_add(o, "claims_per_s", sim_json_num(per_s, 1));
        json_object_object_add(o, "hits", json_object_new_int64(R->hits));
        json_object_object_add(o, "misses", json_object_new_int64(R->misses));
        json_object_object_add(o, "errors", json_object_new_int64(R->errors));
        json_object_object_add(o, "rate_limited", json_object_new_int64(R->rate_limited));
        json_object_object_add(o, "retried", json_object_new_int64(R->retried));
        json_object_object_add(o, "not_sent", json_object_new_int64(R->not_sent));
        json_object_object_add(o, "duplicates", json_object_new_int64(dups));
        json_object_object_add(o, "deleted", json_object_new_int64(R->deleted));
        json_object_object_add(o, "delete_failed", json_object_new_int64(R->delete_failed));
        json_object_object_add(o, "lag_max_ms", sim_json_num((double)R->lag_max_us / 1000.0, 2));
        json_object_object_add(o, "hit", sim_samples_json(&R->hit_us));
        json_object_object_add(o, "miss_answered", sim_samples_json(&R->miss_202_us));
        json_object_object_add(o, "miss_succeeded", sim_samples_json(&R->miss_done_us));
        if (R->pool) {
            json_object *p = json_object_new_object();
            json_object_object_add(p, "name", json_object_new_string(R->pool));
            json_object_object_add(p, "size", json_object_new_int64(R->after.size));
            json_object_object_add(p, "ready_before", json_object_new_int64(R->before.ready));
            json_object_object_add(p, "ready_min", json_object_new_int64(R->ready_min));
            json_object_object_add(p, "ready_after", json_object_new_int64(R->after.ready));
            json_object_object_add(p, "hits", json_object_new_int64(R->after.hits - R->before.hits));
            json_object_object_add(p, "misses", json_object_new_int64(R->after.misses - R->before.misses));
            json_object_object_add(p, "refills", json_object_new_int64(refills));
            json_object_object_add(p, "refills_per_s", sim_json_num(refill_per_s, 1));
            json_object_object_add(p, "seconds", sim_json_num(pool_secs, 3));
            json_object_object_add(o, "pool", p);
        }
        printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
        json_object_put(o);
        fflush(stdout);
        return;
    }
    printf("sandbox-sim claim: %ld/s for %ld s%s%s%s: %ld sent, %ld answered (%.1f claims/s); %ld hits, %ld misses, "
           "%ld errors, %ld rate-limited, %ld not sent, %ld handed out twice\n",
           R->rate, R->duration, R->pool ? " (pool " : "", R->pool ? R->pool : "", R->pool ? ")" : "", R->sent,
           R->answered, per_s, R->hits, R->misses, R->errors, R->rate_limited, R->not_sent, dups);
    printf("%-28s %6s %8s %8s %8s %8s\n", "latency from due", "n", "p50 ms", "p90 ms", "p99 ms", "max ms");
    struct { const char *what; sim_samples_t *s; } rows[] = {
        { "hit: -> 202 (running)", &R->hit_us },
        { "miss: -> 202", &R->miss_202_us },
        { "miss: -> create succeeded", &R->miss_done_us },
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        printf("%-28s %6zu %8.2f %8.2f %8.2f %8.2f\n", rows[i].what, rows[i].s->n, sim_samples_ms(rows[i].s, 0.5),
               sim_samples_ms(rows[i].s, 0.9), sim_samples_ms(rows[i].s, 0.99), sim_samples_ms(rows[i].s, 1));
    printf("deleted %ld (%ld failed); %ld 429s of waits and deletes waited out; the schedule's largest lag %.2f ms\n",
           R->deleted, R->delete_failed, R->retried, (double)R->lag_max_us / 1000.0);
    if (R->pool)
        printf("pool %s: size %lld; ready %lld before, %lld at least, %lld after; hits +%lld, misses +%lld, "
               "refills +%lld (%.1f/s over %.1f s)\n",
               R->pool, (long long)R->after.size, (long long)R->before.ready, (long long)R->ready_min,
               (long long)R->after.ready, (long long)(R->after.hits - R->before.hits),
               (long long)(R->after.misses - R->before.misses), (long long)refills, refill_per_s, pool_secs);
    fflush(stdout);
}

/* Writes "ID hit|miss DUE_S MS" a line for every claimed sandbox to path:
 * when its claim was due (seconds from the start) and its due → 202. */
static int sim_claims_write_ids(const sim_claims_t *R, const char *path)
{
    FILE *fp = fopen(path, "w");
    if (!fp)
        return SBX_EIO;
    for (size_t i = 0; i < R->nclaimed; i++)
        fprintf(fp, "%s %s %.3f %.2f\n", R->claimed[i].id, R->claimed[i].hit ? "hit" : "miss",
                (double)R->claimed[i].due_us / 1e6, (double)R->claimed[i].took_us / 1000.0);
    return fclose(fp) == 0 ? 0 : SBX_EIO;
}

/* ---- the command ------------------------------------------------------- */

static const char sim_claim_usage[] =
    "usage: sandbox-sim claim --controller URL --token T [--pool NAME] [--rate 100] [--duration 10]\n"
    "Warm pool claims at a fixed rate: one create every 1/rate s (an open loop: the next is sent when it\n"
    "is due, whatever the answers before it do) for --duration seconds. Each create matches the pool's\n"
    "spec (--pool: read from GET /v1/pools/NAME; else --image, --cpu-millis, --memory-mib, network none)\n"
    "and has no env and no selector, so a ready member serves it. A hit is a 202 with the sandbox running\n"
    "and its create succeeded; a miss is waited for (create succeeded). Every claimed sandbox is deleted\n"
    "at once (not timed). Prints hits, misses, the latency from when each claim was due to its 202 (and\n"
    "a miss's to succeeded) p50/p90/p99/max, claims/s answered and, with --pool, the pool's ready members\n"
    "(sampled every 0.5 s) and refills during the run. A 429 is counted, not sent again.\n"
    SIM_API_HELP
    "  --pool NAME          the pool whose spec the creates take, and whose counters are shown\n"
    "  --rate N             claims a second (1 to 10000, default 100)\n"
    "  --duration S         seconds of claims (default 10); rate x duration at most 1000000\n"
    "  --ids F              write a line per claimed sandbox to F: ID hit|miss DUE_S MS (when its claim was\n"
    "                       due, seconds from the start, and due -> 202 in ms)\n"
    "  --image I            without --pool: image of the creates (default sandbox/busybox:latest)\n"
    "  --cpu-millis N       without --pool: CPU of each sandbox (default 100)\n"
    "  --memory-mib N       without --pool: memory of each sandbox (default 64)\n"
    "  --ttl S              TTL the claims set (default 600)\n"
    "Exit: 0 every claim answered 202 and its sandbox deleted, none handed out twice; 1 otherwise (an error,\n"
    "a 429, a claim not sent, a sandbox claimed twice); 2 usage.\n";

/* The claims' loop and events; 0 or SBX_ENOMEM. */
static int sim_claims_setup(sim_claims_t *R)
{
    struct event_base *base = R->api->base;
    R->tick = evtimer_new(base, sim_claims_tick_cb, R);
    R->grace = evtimer_new(base, sim_claims_grace_cb, R);
    R->pool_timer = evtimer_new(base, sim_pool_timer_cb, R);
    R->idle = calloc(SIM_CLAIM_MAX_CONNS, sizeof *R->idle);
    R->pool_c = R->pool ? sim_conn_new(&R->api->t, 30) : NULL;
    if (!R->tick || !R->grace || !R->pool_timer || !R->idle || (R->pool && !R->pool_c))
        return SBX_ENOMEM;
    return 0;
}

static void sim_claims_release(sim_claims_t *R)
{
    while (R->under_way) {
        sim_claim_t *cl = R->under_way;
        R->under_way = cl->next;
        evhttp_connection_free(cl->c);
        event_free(cl->timer);
        free(cl);
    }
    for (size_t i = 0; i < R->nidle; i++)
        evhttp_connection_free(R->idle[i]);
    free(R->idle);
    if (R->pool_c)
        evhttp_connection_free(R->pool_c);
    sim_http_release_all();
    struct event *evs[] = { R->tick, R->grace, R->pool_timer };
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        if (evs[i])
            event_free(evs[i]);
    json_object_put(R->body);
    free(R->claimed);
    sim_samples_release(&R->hit_us);
    sim_samples_release(&R->miss_202_us);
    sim_samples_release(&R->miss_done_us);
}

int sim_claim_main(int argc, char **argv)
{
    sim_opts_t o = { .rate = 100, .duration = 10, .selector = "" };
    sim_api_t a = SIM_API_DEFAULTS;
    sim_claims_t R = { .api = &a };
    struct event *sigint = NULL, *sigterm = NULL;
    unsigned allowed = SIM_OPT(CTL) | SIM_OPT(TOKEN) | SIM_OPT(TOKFILE) | SIM_OPT(POOL) | SIM_OPT(RATE) |
                       SIM_OPT(DURATION) | SIM_OPT(IDS) | SIM_OPT(IMAGE) | SIM_OPT(CPU) | SIM_OPT(MEM) | SIM_OPT(TTL) |
                       SIM_OPT(JSON);
    int rc = sim_api_options(argc, argv, sim_claim_usage, allowed, &o, &a);
    if (rc >= 0)
        goto cleanup;
    rc = 2;
    if (o.pool && (o.seen & (SIM_OPT(IMAGE) | SIM_OPT(CPU) | SIM_OPT(MEM)))) {
        sim_errorf("claim: --pool takes the spec from the pool; leave out --image, --cpu-millis and --memory-mib");
        goto cleanup;
    }
    if (o.pool && (!*o.pool || strlen(o.pool) > SBX_POOL_NAME_MAX || strchr(o.pool, '/') || strchr(o.pool, '?'))) {
        sim_errorf("claim: --pool must be a pool's name (see sandbox pools list)");
        goto cleanup;
    }
    if ((long long)o.rate * o.duration > SIM_CLAIM_MAX_TOTAL) {
        sim_errorf("claim: --rate x --duration is over %d claims", SIM_CLAIM_MAX_TOTAL);
        goto cleanup;
    }
    rc = 1;
    R.pool = o.pool;
    R.rate = o.rate;
    R.duration = o.duration;
    R.total = o.rate * o.duration;
    sigint = evsignal_new(a.base, SIGINT, sim_claims_signal_cb, &R);
    sigterm = evsignal_new(a.base, SIGTERM, sim_claims_signal_cb, &R);
    if (!sigint || !sigterm || sim_claims_setup(&R) < 0) {
        sim_errorf("claim: out of memory for the event loop");
        goto cleanup;
    }
    event_add(sigint, NULL);
    event_add(sigterm, NULL);
    if (R.pool) {
        char path[128];
        snprintf(path, sizeof path, "/v1/pools/%s", R.pool);
        if (sim_http_send(R.pool_c, &a.t, EVHTTP_REQ_GET, path, a.token, NULL, sim_claims_pool_first, &R) < 0) {
            sim_errorf("claim: cannot ask for pool %s", R.pool);
            goto cleanup;
        }
    } else {
        R.body = json_object_new_object();
        json_object_object_add(R.body, "image", json_object_new_string(a.image));
        json_object_object_add(R.body, "cpu_millis", json_object_new_int64(a.cpu_millis));
        json_object_object_add(R.body, "memory_mib", json_object_new_int64(a.memory_mib));
        json_object_object_add(R.body, "network", json_object_new_string("none"));
        json_object_object_add(R.body, "ttl_seconds", json_object_new_int64(a.ttl_seconds));
        sim_claims_start(&R);
    }
    event_base_dispatch(a.base);
    if (R.rc != 0)
        goto cleanup;
    long dups = sim_claims_duplicates(&R);
    sim_claims_print(&R, dups);
    if (o.ids && sim_claims_write_ids(&R, o.ids) < 0) {
        sim_errorf("claim: --ids %s cannot be written", o.ids);
        goto cleanup;
    }
    rc = R.errors == 0 && R.rate_limited == 0 && R.not_sent == 0 && R.delete_failed == 0 && dups == 0 &&
                 R.answered > 0 && R.answered == R.sent
             ? 0
             : 1;
cleanup:
    if (sigint)
        event_free(sigint);
    if (sigterm)
        event_free(sigterm);
    sim_claims_release(&R);
    sim_api_release(&a);
    return rc;
}
