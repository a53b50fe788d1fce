/* The NATS publisher thread: one leader among the controllers (advisory
 * lock), reads the events table after its cursor, publishes, flushes, then
 * advances the cursor in event_publisher; at least once, in id order. */
#include "publish.h"
#include "db.h"
#include "store.h"
#include "errors.h"
#include "limits.h"
#include "log.h"
#include "metrics.h"
#include "timeutil.h"

#include <fcntl.h>
#include <nats/nats.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A non-leader asks for the lock this often. */
#define PUBLISH_LEADER_RETRY_MS 1000
/* Longest quiet wait; new events usually wake the leader at once (NOTIFY). */
#define PUBLISH_IDLE_MS 1000
/* While a missing id blocks the batch, look again this often. */
#define PUBLISH_HOLE_POLL_MS 50
/* NATS: connect timeout per server, and how long a flush may take. Both
 * bound how long publish_stop waits. */
#define PUBLISH_CONNECT_MS 1000
#define PUBLISH_FLUSH_MS 1000
/* Retry backoff for NATS and for the database: 100 ms doubling to 5 s. */
#define PUBLISH_BACKOFF_MIN_MS 100
#define PUBLISH_BACKOFF_MAX_MS 5000
#define PUBLISH_PREFIX_MAX 200
#define PUBLISH_SUBJECT_MAX 1024

struct publisher {
    controller_t *ctl;
    pthread_t tid;
    atomic_int stop;
    int wake_fd[2];      /* publish_stop writes to [1] to cut every wait short */
    char **servers;      /* nats_url split at commas; may hold credentials: never logged */
    int nservers;
    char url_safe[512];  /* nats_url redacted, for logs */
    char *prefix;
    PGconn *db;          /* own connection; holds the advisory lock while leader */
    bool leader;
    bool standby_logged, db_down_logged;
    int64_t db_backoff_ms, db_retry_at_ms;
    int64_t cursor;      /* last event id published or passed */
    publish_gap_t gap;
    bool blocked;        /* the last round stopped at a missing id */
    natsConnection *nc;
    int64_t nats_backoff_ms, nats_retry_at_ms;
    int64_t nats_down_since_ms; /* 0: not in an outage */
    bool nats_back;              /* reconnected after an outage, catching up */
    int64_t caught_up;           /* events published since the outage began */
    metric_family_t *m_published, *m_errors, *m_skipped, *m_connected, *m_leader, *m_lag_events, *m_lag_seconds;
};

/* ------------------------------------------------------------ pure parts */

void publish_plan_batch(publish_gap_t *gap, int64_t cursor, const int64_t *ids, int n, int64_t now_ms,
                        int64_t grace_ms, publish_plan_t *ret)
{
    if (gap->seen_below && now_ms - gap->seen_ms >= grace_ms) {
        if (gap->seen_below > gap->graced_below)
            gap->graced_below = gap->seen_below;
        gap->seen_below = 0;
    }
    int64_t limit = gap->settled_below > gap->graced_below ? gap->settled_below : gap->graced_below;
    int64_t next = cursor + 1, missing = 0, graced = 0, blocked = 0;
    int i;
    for (i = 0; i < n; i++) {
        int64_t id = ids[i];
        if (id < next)
            break; /* not strictly ascending after the cursor: stop here */
        if (id > next && next < limit) {
            int64_t upto = id - 1 < limit - 1 ? id - 1 : limit - 1;
            int64_t from_graced = next > gap->settled_below ? next : gap->settled_below;
            missing += upto - next + 1;
            if (upto >= from_graced)
                graced += upto - from_graced + 1;
            next = upto + 1;
        }
        if (id > next) {
            blocked = next;
            break;
        }
        next = id + 1;
    }
    /* Start the grace clock for every hole of this batch at once, unless an
     * earlier sighting already covers the one we stopped at. */
    if (blocked && gap->seen_below <= blocked) {
        gap->seen_below = ids[n - 1];
        gap->seen_ms = now_ms;
    }
    ret->nrows = i;
    ret->cursor = next - 1;
    ret->missing = missing;
    ret->graced = graced;
    ret->blocked_at = blocked;
}

void publish_gap_settle(publish_gap_t *gap, int64_t below)
{
    if (below > gap->settled_below)
        gap->settled_below = below;
}

static bool token_byte(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

bool publish_prefix_valid(const char *prefix)
{
    if (!prefix || !*prefix || strlen(prefix) > PUBLISH_PREFIX_MAX)
        return false;
    size_t tok = 0;
    for (const unsigned char *s = (const unsigned char *)prefix; *s; s++) {
        if (*s == '.') {
            if (tok == 0)
                return false;
            tok = 0;
        } else if (!token_byte(*s)) {
            return false;
        } else {
            tok++;
        }
    }
    return tok > 0;
}

int publish_subject(char *buf, size_t buflen, const char *prefix, const char *tenant, const char *kind)
{
    size_t o = 0;
#define PUT(ch)                                                                                                   \
    do {                                                                                                          \
        if (o + 1 >= buflen)                                                                                      \
            return SBX_ETOOBIG;                                                                                   \
        buf[o++] = (char)(ch);                                                                                    \
    } while (0)
    for (const char *s = prefix; *s; s++)
        PUT(*s);
    PUT('.');
    if (!tenant) {
        for (const char *s = "_system"; *s; s++)
            PUT(*s);
    } else if (!*tenant) {
        PUT('_');
    } else {
        for (const unsigned char *s = (const unsigned char *)tenant; *s; s++)
            PUT(token_byte(*s) ? *s : '_');
    }
    PUT('.');
    size_t tok = 0;
    for (const unsigned char *s = (const unsigned char *)(kind ? kind : ""); *s; s++) {
        if (*s == '.') {
            if (tok == 0)
                PUT('_');
            PUT('.');
            tok = 0;
        } else {
            PUT(token_byte(*s) ? *s : '_');
            tok++;
        }
    }
    if (tok == 0)
        PUT('_');
#undef PUT
    buf[o] = '\0';
    return 0;
}

const char *publish_url_redact(const char *url, char *buf, size_t buflen)
{
    size_t o = 0;
    if (buflen == 0)
        return buf;
#define OUT(ch)                                                                                                   \
    do {                                                                                                          \
        if (o + 1 < buflen)                                                                                       \
            buf[o++] = (ch);                                                                                      \
    } while (0)
    const char *s = url ? url : "";
    while (*s) {
        const char *end = strchr(s, ',');
        if (!end)
            end = s + strlen(s);
        const char *auth = s;
        for (const char *q = s; q + 2 < end; q++)
            if (q[0] == ':' && q[1] == '/' && q[2] == '/') {
                auth = q + 3;
                break;
            }
        const char *auth_end = auth;
        while (auth_end < end && *auth_end != '/' && *auth_end != '?' && *auth_end != '#')
            auth_end++;
        const char *at = NULL;
        for (const char *q = auth; q < auth_end; q++)
            if (*q == '@')
                at = q;
        for (const char *q = s; q < auth; q++)
            OUT(*q);
        const char *rest = auth;
        if (at) {
            OUT('*');
            OUT('*');
            OUT('*');
            rest = at;
        }
        for (const char *q = rest; q < end; q++)
            OUT(*q);
        if (*end == ',') {
            OUT(',');
            end++;
        }
        s = end;
    }
#undef OUT
    buf[o] = '\0';
    return buf;
}

/* ------------------------------------------------------------ the thread */

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Waits up to ms for a stop request or for input on the database
 * connection (notifications, which it drains). */
static void publish_wait(struct publisher *p, int64_t ms)
{
    if (ms <= 0 || atomic_load(&p->stop))
        return;
    /* A notification that came in while a query ran is already inside
     * libpq: the socket would not look readable, and it would wait. */
    int queued = 0;
    PGnotify *note;
    while (p->db && (note = PQnotifies(p->db)) != NULL) {
        PQfreemem(note);
        queued++;
    }
    if (queued)
        return;
    struct pollfd pfd[2] = { { .fd = p->wake_fd[0], .events = POLLIN },
                             { .fd = p->db ? PQsocket(p->db) : -1, .events = POLLIN } };
    if (poll(pfd, 2, (int)ms) <= 0 || !(pfd[1].revents & (POLLIN | POLLHUP | POLLERR)))
        return;
    if (!PQconsumeInput(p->db))
        return; /* the connection broke: the next statement notices */
    while ((note = PQnotifies(p->db)) != NULL)
        PQfreemem(note);
}

static void publish_nats_close(struct publisher *p)
{
    if (p->nc) {
        natsConnection_Destroy(p->nc);
        p->nc = NULL;
    }
    metrics_set(p->m_connected, NULL, 0);
}

/* NATS is unreachable (or failed mid-batch): close, count, schedule a retry,
 * and say so once per outage. */
static void publish_nats_down(struct publisher *p, const char *why)
{
    publish_nats_close(p);
    metrics_add(p->m_errors, NULL, 1);
    int64_t now = time_mono_ms();
    if (!p->nats_down_since_ms) {
        p->nats_down_since_ms = now;
        p->nats_back = false;
        p->caught_up = 0;
        p->nats_backoff_ms = PUBLISH_BACKOFF_MIN_MS;
        log_warn("publish", "NATS at %s is unreachable (%s): events wait in PostgreSQL; retrying with backoff",
                 p->url_safe, why);
    } else {
        p->nats_backoff_ms = p->nats_backoff_ms ? min64(p->nats_backoff_ms * 2, PUBLISH_BACKOFF_MAX_MS)
                                                : PUBLISH_BACKOFF_MIN_MS;
        if (p->nats_back) /* it went again while catching up: still the same outage */
            p->nats_back = false;
    }
    p->nats_retry_at_ms = now + p->nats_backoff_ms;
}

/* True when there is a connected NATS connection; connects when a retry is
 * due. Never leaves a connection that is not CONNECTED in use: libnats'
 * reconnect (and its buffer) is off, so what it accepted reached a server. */
static bool publish_nats_ready(struct publisher *p)
{
    if (p->nc && natsConnection_Status(p->nc) == NATS_CONN_STATUS_CONNECTED)
        return true;
    if (p->nc) {
        publish_nats_down(p, "connection lost");
        return false;
    }
    if (time_mono_ms() < p->nats_retry_at_ms)
        return false;
    natsOptions *o = NULL;
    natsStatus s = natsOptions_Create(&o);
    if (s == NATS_OK)
        s = natsOptions_SetServers(o, (const char **)p->servers, p->nservers);
    if (s == NATS_OK)
        s = natsOptions_SetTimeout(o, PUBLISH_CONNECT_MS);
    if (s == NATS_OK)
        s = natsOptions_SetAllowReconnect(o, false);
    if (s == NATS_OK)
        s = natsOptions_SetName(o, "sandboxd events");
    natsConnection *nc = NULL;
    if (s == NATS_OK)
        s = natsConnection_Connect(&nc, o);
    natsOptions_Destroy(o);
    if (s != NATS_OK) {
        if (nc)
            natsConnection_Destroy(nc);
        /* natsStatus_GetText: fixed strings, never the URL (credentials). */
        publish_nats_down(p, natsStatus_GetText(s));
        return false;
    }
    p->nc = nc;
    metrics_set(p->m_connected, NULL, 1);
    p->nats_backoff_ms = 0;
    if (p->nats_down_since_ms) {
        p->nats_back = true;
    } else {
        log_info("publish", "connected to NATS at %s", p->url_safe);
    }
    return true;
}

/* After a database error: closes the connection, and with it leadership
 * (the lock is released when its session ends), and schedules a reconnect
 * with backoff. Says so once per streak of errors. */
static void publish_drop_db(struct publisher *p)
{
    if (p->leader) {
        log_warn("publish", "no longer publishing events to NATS (database error: %s); "
                            "another controller may take over",
                 db_last_error());
        p->leader = false;
        metrics_set(p->m_leader, NULL, 0);
        metrics_set(p->m_lag_events, NULL, 0); /* the lag is the leader's to report */
        metrics_set(p->m_lag_seconds, NULL, 0);
        publish_nats_close(p);
    } else if (!p->db_down_logged) {
        log_warn("publish", "database error, retrying: %s", db_last_error());
    }
    p->db_down_logged = true;
    if (p->db) {
        PQfinish(p->db);
        p->db = NULL;
    }
    p->standby_logged = false;
    p->db_retry_at_ms = time_mono_ms() + p->db_backoff_ms;
    p->db_backoff_ms = min64(p->db_backoff_ms * 2, PUBLISH_BACKOFF_MAX_MS);
}

/* A statement worked: the next error starts a new streak. */
static void publish_db_ok(struct publisher *p)
{
    if (p->db_down_logged)
        log_info("publish", "database reachable again");
    p->db_down_logged = false;
    p->db_backoff_ms = PUBLISH_BACKOFF_MIN_MS;
}

/* 1 when this connection now holds the lock (cursor loaded), 0 when another
 * controller holds it, < 0 on a database error. */
static int publish_try_lead(struct publisher *p)
{
    bool led = false, first = false;
    int64_t cursor = 0;
    if (store_publisher_lead(p->db, PUBLISH_LOCK_KEY, &led, &cursor, &first) < 0)
        return SBX_EDB;
    if (!led)
        return 0;
    p->cursor = cursor;
    memset(&p->gap, 0, sizeof p->gap);
    p->blocked = false;
    p->leader = true;
    metrics_set(p->m_leader, NULL, 1);
    log_info("publish", "publishing events to NATS as the leader: %s, subjects %s.<tenant>.<kind>, after event %lld%s",
             p->url_safe, p->prefix, (long long)p->cursor, first ? " (first start: earlier events are not sent)" : "");
    return 1;
}

/* The newest event id and the age of the oldest unpublished one. */
static int publish_refresh_lag(struct publisher *p)
{
    int64_t newest = 0;
    double secs = 0;
    if (store_publisher_lag(p->db, p->cursor, &newest, &secs) < 0)
        return SBX_EDB;
    metrics_set(p->m_lag_events, NULL, newest > p->cursor ? (double)(newest - p->cursor) : 0);
    metrics_set(p->m_lag_seconds, NULL, secs > 0 ? secs : 0);
    return 0;
}

enum { ROUND_NATS_DOWN = 1 };

/* What one round passed without publishing, by reason. */
typedef struct round_counts {
    int64_t sent, expired, too_big;
} round_counts_t;

/* Publishes the first plan->nrows events of b and flushes. Returns 0 or
 * ROUND_NATS_DOWN (NATS marked down). */
static int publish_send(struct publisher *p, const store_pub_batch_t *b, const publish_plan_t *plan,
                        round_counts_t *ret)
{
    for (int i = 0; i < plan->nrows; i++) {
        const store_pub_event_t *e = &b->ev[i];
        if (e->expired) {
            ret->expired++;
            continue;
        }
        char subj[PUBLISH_SUBJECT_MAX];
        size_t len = e->payload ? strlen(e->payload) : 0;
        if (publish_subject(subj, sizeof subj, p->prefix, e->tenant, e->kind) < 0) {
            log_warn("publish", "event %lld: its subject would be longer than %d bytes: not published",
                     (long long)e->id, PUBLISH_SUBJECT_MAX - 1);
            ret->too_big++;
            continue;
        }
        natsStatus s = natsConnection_Publish(p->nc, subj, e->payload, (int)len);
        if (s == NATS_MAX_PAYLOAD) {
            log_warn("publish", "event %lld (%zu bytes) is larger than the NATS server accepts: not published",
                     (long long)e->id, len);
            ret->too_big++;
            continue;
        }
        if (s != NATS_OK) {
            publish_nats_down(p, natsStatus_GetText(s));
            return ROUND_NATS_DOWN;
        }
        ret->sent++;
    }
    if (ret->sent > 0) {
        /* The server has everything once it answers the PING: only then may
         * the cursor move. */
        natsStatus s = natsConnection_FlushTimeout(p->nc, PUBLISH_FLUSH_MS);
        if (s != NATS_OK) {
            publish_nats_down(p, natsStatus_GetText(s));
            return ROUND_NATS_DOWN;
        }
    }
    return 0;
}

/* After the cursor moved to plan->cursor: the skipped and published
 * counters, and the log lines for what was passed. */
static void publish_account(struct publisher *p, const publish_plan_t *plan, const round_counts_t *n)
{
    char lb[64];
    if (plan->missing) {
        metrics_add(p->m_skipped, metrics_labels(lb, sizeof lb, "reason", "missing", NULL), (double)plan->missing);
        if (plan->graced)
            log_info("publish", "passed %lld event id(s) up to %lld after waiting %d ms for transactions that "
                                "may still commit them; events they commit later are not published",
                     (long long)plan->graced, (long long)plan->cursor, SBX_PUBLISH_HOLE_GRACE_MS);
        log_debug("publish", "passed %lld event id(s) no committed event holds, up to %lld",
                  (long long)plan->missing, (long long)plan->cursor);
    }
    if (n->expired) {
        metrics_add(p->m_skipped, metrics_labels(lb, sizeof lb, "reason", "expired", NULL), (double)n->expired);
        log_warn("publish", "skipped %lld event(s) older than retention_events_seconds, up to event %lld",
                 (long long)n->expired, (long long)plan->cursor);
    }
    if (n->too_big)
        metrics_add(p->m_skipped, metrics_labels(lb, sizeof lb, "reason", "too_large", NULL), (double)n->too_big);
    metrics_add(p->m_published, NULL, (double)n->sent);
    if (p->nats_down_since_ms)
        p->caught_up += n->sent;
}

/* One batch: read, plan, publish, flush, advance the cursor. Returns 0,
 * ROUND_NATS_DOWN (nothing advanced), or < 0 on a database error.
 * *ret_more: read again at once. */
static int publish_round(struct publisher *p, bool *ret_more)
{
    *ret_more = false;
    p->blocked = false;
    /* Only events at or below the horizon (migration 0007): no transaction
     * can still commit an id there, so every hole below it is final (a
     * rollback, or pruned) and is passed at once, as the events API does. */
    int64_t horizon = 0, newest = 0;
    if (store_events_horizon(p->db, &horizon, &newest) < 0)
        return SBX_EDB;
    publish_gap_settle(&p->gap, horizon + 1);
    store_pub_batch_t b;
    if (store_publish_read(p->db, p->cursor, horizon, cfg_int(&p->ctl->cfg, CFG_RETENTION_EVENTS_SECONDS), &b) < 0)
        return SBX_EDB;
    int64_t ids[SBX_PUBLISH_BATCH];
    for (int i = 0; i < b.n; i++)
        ids[i] = b.ev[i].id;
    publish_plan_t plan;
    publish_plan_batch(&p->gap, p->cursor, ids, b.n, time_mono_ms(), SBX_PUBLISH_HOLE_GRACE_MS, &plan);
    round_counts_t n = { 0, 0, 0 };
    int rc = publish_send(p, &b, &plan, &n);
    if (rc == 0 && plan.cursor > p->cursor) {
        rc = store_publisher_advance(p->db, plan.cursor, plan.missing + n.expired + n.too_big);
        if (rc == 0) {
            publish_account(p, &plan, &n);
            p->cursor = plan.cursor;
        }
    }
    if (rc == 0) {
        /* Held back: events above the horizon wait for a transaction below
         * them (its commit wakes us; a rollback does not, hence the short
         * poll). Below the horizon a hole cannot stay open; should one, the
         * grace period still passes it. */
        if (plan.blocked_at)
            p->blocked = true;
        else if (b.n == SBX_PUBLISH_BATCH)
            *ret_more = true;
        else if (newest > horizon)
            p->blocked = true;
    }
    store_pub_batch_release(&b);
    return rc;
}

static void *publish_main(void *arg)
{
    struct publisher *p = arg;
    while (!atomic_load(&p->stop)) {
        if (!p->db) {
            int64_t due = p->db_retry_at_ms - time_mono_ms();
            if (due > 0) {
                publish_wait(p, due);
                continue;
            }
            char err[256];
            p->db = db_connect(p->ctl->conninfo, err, sizeof err);
            if (!p->db) {
                if (!p->db_down_logged)
                    log_warn("publish", "cannot connect to the database, retrying: %s", err);
                p->db_down_logged = true;
                p->db_retry_at_ms = time_mono_ms() + p->db_backoff_ms;
                p->db_backoff_ms = min64(p->db_backoff_ms * 2, PUBLISH_BACKOFF_MAX_MS);
                continue;
            }
        }
        if (!p->leader) {
            int rc = publish_try_lead(p);
            if (rc < 0) {
                publish_drop_db(p);
                continue;
            }
            publish_db_ok(p);
            if (rc == 0) {
                if (!p->standby_logged)
                    log_info("publish", "another controller publishes events to NATS; standing by");
                p->standby_logged = true;
                publish_wait(p, PUBLISH_LEADER_RETRY_MS);
                continue;
            }
        }
        if (!publish_nats_ready(p)) {
            if (publish_refresh_lag(p) < 0) {
                publish_drop_db(p);
                continue;
            }
            publish_db_ok(p);
            publish_wait(p, min64(p->nats_retry_at_ms - time_mono_ms(), PUBLISH_IDLE_MS));
            continue;
        }
        bool more = false;
        int rc = publish_round(p, &more);
        if (rc == ROUND_NATS_DOWN)
            continue;
        if (rc < 0 || publish_refresh_lag(p) < 0) {
            publish_drop_db(p);
            continue;
        }
        publish_db_ok(p);
        if (more)
            continue;
        if (p->nats_back && !p->blocked) {
            log_info("publish", "NATS at %s is back after %.1f s: published the %lld event(s) that waited",
                     p->url_safe, (double)(time_mono_ms() - p->nats_down_since_ms) / 1000.0,
                     (long long)p->caught_up);
            p->nats_back = false;
            p->nats_down_since_ms = 0;
        }
        publish_wait(p, p->blocked ? PUBLISH_HOLE_POLL_MS : PUBLISH_IDLE_MS);
    }
    publish_nats_close(p);
    if (p->db) {
        PQfinish(p->db); /* releases the lock: another controller takes over */
        p->db = NULL;
    }
    if (p->leader) {
        log_info("publish", "stopped publishing events to NATS");
        p->leader = false;
    }
    metrics_set(p->m_leader, NULL, 0);
    return NULL;
}

static void publish_free(struct publisher *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->nservers; i++)
        free(p->servers[i]);
    free(p->servers);
    free(p->prefix);
    if (p->wake_fd[0] >= 0)
        close(p->wake_fd[0]);
    if (p->wake_fd[1] >= 0)
        close(p->wake_fd[1]);
    free(p);
}

/* Splits a comma-separated URL list, trimming spaces; 0 or SBX_EINVAL/ENOMEM. */
static int publish_split_servers(struct publisher *p, const char *url)
{
    int count = 1;
    for (const char *s = url; *s; s++)
        count += *s == ',';
    p->servers = calloc((size_t)count, sizeof *p->servers);
    if (!p->servers)
        return SBX_ENOMEM;
    const char *s = url;
    while (*s) {
        while (*s == ' ' || *s == ',')
            s++;
        const char *e = s;
        while (*e && *e != ',')
            e++;
        const char *t = e;
        while (t > s && t[-1] == ' ')
            t--;
        if (t > s) {
            p->servers[p->nservers] = strndup(s, (size_t)(t - s));
            if (!p->servers[p->nservers])
                return SBX_ENOMEM;
            p->nservers++;
        }
        s = e;
    }
    return p->nservers > 0 ? 0 : SBX_EINVAL;
}

int publish_start(controller_t *ctl, publisher_t **ret, char *err, size_t errlen)
{
    const char *url = cfg_str(&ctl->cfg, CFG_NATS_URL);
    const char *prefix = cfg_str(&ctl->cfg, CFG_NATS_SUBJECT_PREFIX);
    *ret = NULL;
    if (!url || !*url)
        return 0;
    if (!publish_prefix_valid(prefix)) {
        snprintf(err, errlen,
                 "nats_subject_prefix must be dot-separated tokens of letters, digits, '_' and '-' "
                 "(at most %d bytes), not \"%s\"",
                 PUBLISH_PREFIX_MAX, prefix ? prefix : "");
        return SBX_EINVAL;
    }
    struct publisher *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return SBX_ENOMEM;
    }
    p->wake_fd[0] = p->wake_fd[1] = -1;
    p->ctl = ctl;
    p->db_backoff_ms = PUBLISH_BACKOFF_MIN_MS;
    atomic_init(&p->stop, 0);
    publish_url_redact(url, p->url_safe, sizeof p->url_safe);
    int rc = publish_split_servers(p, url);
    if (rc == SBX_EINVAL) {
        snprintf(err, errlen, "nats_url names no server: \"%s\"", p->url_safe);
        publish_free(p);
        return rc;
    }
    p->prefix = strdup(prefix);
    if (rc < 0 || !p->prefix || pipe2(p->wake_fd, O_CLOEXEC | O_NONBLOCK) < 0) {
        snprintf(err, errlen, "out of memory");
        publish_free(p);
        return SBX_ENOMEM;
    }
    p->m_published = metrics_family("sandbox_nats_published_total", METRIC_COUNTER,
                                    "Events published to NATS (and flushed)", NULL, 0);
    p->m_errors = metrics_family("sandbox_nats_publish_errors_total", METRIC_COUNTER,
                                 "Failed NATS connects, publishes and flushes", NULL, 0);
    p->m_skipped = metrics_family("sandbox_nats_events_skipped_total", METRIC_COUNTER,
                                  "Event ids passed without publishing: missing (no committed event holds the id, "
                                  "or it was pruned), expired (older than the retention), too_large",
                                  NULL, 0);
    p->m_connected = metrics_family("sandbox_nats_connected", METRIC_GAUGE,
                                    "1 while this controller's publisher has a NATS connection", NULL, 0);
    p->m_leader = metrics_family("sandbox_nats_publisher_leader", METRIC_GAUGE,
                                 "1 while this controller is the one that publishes events to NATS", NULL, 0);
    p->m_lag_events = metrics_family("sandbox_nats_publish_lag_events", METRIC_GAUGE,
                                     "Newest event id minus the publisher's cursor, as seen by the leader", NULL, 0);
    p->m_lag_seconds = metrics_family("sandbox_nats_publish_lag_seconds", METRIC_GAUGE,
                                      "Age of the oldest unpublished event (0 when caught up), as seen by the leader",
                                      NULL, 0);
    if (!p->m_published || !p->m_errors || !p->m_skipped || !p->m_connected || !p->m_leader || !p->m_lag_events ||
        !p->m_lag_seconds) {
        snprintf(err, errlen, "out of memory");
        publish_free(p);
        return SBX_ENOMEM;
    }
    /* Every series exists from the start, at 0. */
    char lb[64];
    static const char *const reasons[] = { "missing", "expired", "too_large" };
    for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++)
        metrics_add(p->m_skipped, metrics_labels(lb, sizeof lb, "reason", reasons[i], NULL), 0);
    metrics_add(p->m_published, NULL, 0);
    metrics_add(p->m_errors, NULL, 0);
    metrics_set(p->m_connected, NULL, 0);
    metrics_set(p->m_leader, NULL, 0);
    metrics_set(p->m_lag_events, NULL, 0);
    metrics_set(p->m_lag_seconds, NULL, 0);
    if (pthread_create(&p->tid, NULL, publish_main, p) != 0) {
        snprintf(err, errlen, "cannot start the NATS publisher thread");
        publish_free(p);
        return SBX_ENOMEM;
    }
    log_info("publish", "NATS publisher enabled for %s (subjects %s.<tenant>.<kind>); it publishes while this "
                        "controller holds the leader lock",
             p->url_safe, p->prefix);
    *ret = p;
    return 0;
}

void publish_stop(publisher_t *p)
{
    if (!p)
        return;
    atomic_store(&p->stop, 1);
    ssize_t w = write(p->wake_fd[1], "x", 1);
    (void)w;
    pthread_join(p->tid, NULL);
    publish_free(p);
}
