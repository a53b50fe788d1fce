/* libpq helpers shared by the HTTP threads and the reconcile loop. */
#include "db.h"
#include "dbcache.h"
#include "errors.h"
#include "limits.h"
#include "log.h"
#include "metrics.h"
#include "timeutil.h"

#include <libpq-events.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static __thread char last_error[512];
static __thread char last_sqlstate[8];

const char *db_last_error(void) { return last_error[0] ? last_error : "no database connection"; }
const char *db_last_sqlstate(void) { return last_sqlstate; }
bool db_last_unique_violation(void) { return strcmp(last_sqlstate, "23505") == 0; }

/* The connection of this thread whose BEGIN waits for the transaction's
 * first statement (db_begin), or NULL. A thread drives its connections one
 * statement at a time, so one is enough: a db_begin on another connection
 * first sends this one's. */
static __thread PGconn *begin_pending;
/* The connection whose next statement also commits (db_commit_with_next),
 * and the one whose COMMIT went with its last statement, successfully
 * (db_commit then only says so). */
static __thread PGconn *commit_next, *commit_sent;

static metric_family_t *m_connects, *m_errors, *m_trips;
static pthread_once_t metrics_once = PTHREAD_ONCE_INIT;

static void db_metrics_init(void)
{
    m_connects = metrics_family("sandbox_db_connects_total", METRIC_COUNTER,
                                "Connections to PostgreSQL opened, by result (ok or error).", NULL, 0);
    m_errors = metrics_family("sandbox_db_errors_total", METRIC_COUNTER,
                              "Statements PostgreSQL refused or could not run, by SQLSTATE class "
                              "(\"none\": no answer, e.g. the connection was lost).",
                              NULL, 0);
    m_trips = metrics_family("sandbox_db_round_trips_total", METRIC_COUNTER,
                             "Requests sent to PostgreSQL and waited for: a statement, with the BEGIN or COMMIT "
                             "pipelined with it, counts once (tests/bench/scale.sh divides it by operations).",
                             NULL, 0);
}

/* One more request to PostgreSQL waited for. */
static void db_trip(void)
{
    pthread_once(&metrics_once, db_metrics_init);
    metrics_add(m_trips, NULL, 1);
}

static void db_note_error(PGconn *c, PGresult *r)
{
    const char *msg = r ? PQresultErrorMessage(r) : NULL;
    if (!msg || !*msg)
        msg = c ? PQerrorMessage(c) : "no connection";
    snprintf(last_error, sizeof last_error, "%s", msg);
    size_t l = strlen(last_error);
    while (l > 0 && (last_error[l - 1] == '\n' || last_error[l - 1] == ' '))
        last_error[--l] = '\0';
    const char *st = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    snprintf(last_sqlstate, sizeof last_sqlstate, "%s", st ? st : "");
    pthread_once(&metrics_once, db_metrics_init);
    char cls[3] = { last_sqlstate[0], last_sqlstate[0] ? last_sqlstate[1] : '\0', '\0' };
    char labels[48];
    metrics_add(m_errors, metrics_labels(labels, sizeof labels, "class", cls[0] ? cls : "none", NULL), 1);
}

/* Each connection's prepared statements (dbcache.h) hang on the
 * connection as libpq instance data: created with it, emptied when libpq
 * resets it (the server forgot them), freed with it (PQfinish). */
static int db_stmt_event(PGEventId id, void *info, void *pass)
{
    (void)pass;
    if (id == PGEVT_CONNRESET) {
        dbcache_clear(PQinstanceData(((PGEventConnReset *)info)->conn, db_stmt_event));
    } else if (id == PGEVT_CONNDESTROY) {
        PGconn *c = ((PGEventConnDestroy *)info)->conn;
        dbcache_free(PQinstanceData(c, db_stmt_event));
        PQsetInstanceData(c, db_stmt_event, NULL);
    }
    return 1;
}

/* Gives c a statement cache; without one (no memory) it runs unprepared. */
static void db_stmt_cache_attach(PGconn *c)
{
    dbcache_t *cache = NULL;
    if (dbcache_new(SBX_DB_STMT_CACHE_MAX, &cache) < 0)
        return;
    if (!PQregisterEventProc(c, db_stmt_event, "sbx_stmt_cache", NULL) ||
        !PQsetInstanceData(c, db_stmt_event, cache))
        dbcache_free(cache);
}

PGconn *db_connect(const char *conninfo, char *err, size_t errlen)
{
    const char *keys[] = { "dbname", "connect_timeout", "application_name", "options", NULL };
    const char *vals[] = { conninfo, "5", "sandboxd", "-c TimeZone=UTC -c statement_timeout=30000", NULL };
    PGconn *c = PQconnectdbParams(keys, vals, 1);
    pthread_once(&metrics_once, db_metrics_init);
    metrics_add(m_connects, c && PQstatus(c) == CONNECTION_OK ? "result=\"ok\"" : "result=\"error\"", 1);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (PQstatus(c) != CONNECTION_OK) {
        snprintf(err, errlen, "%s", PQerrorMessage(c));
        size_t l = strlen(err);
        while (l > 0 && (err[l - 1] == '\n' || err[l - 1] == ' '))
            err[--l] = '\0';
        PQfinish(c);
        return NULL;
    }
    PGresult *r = PQexec(c, "SET client_min_messages = warning");
    PQclear(r);
    db_stmt_cache_attach(c);
    if (begin_pending == c) /* a freed connection's address, reused */
        begin_pending = NULL;
    if (commit_next == c)
        commit_next = NULL;
    if (commit_sent == c)
        commit_sent = NULL;
    return c;
}

bool db_conn_bad(PGconn *c) { return !c || PQstatus(c) != CONNECTION_OK; }

/* After a failed reconnect, this thread answers "unavailable" at once for a
 * while instead of blocking its loop on connection attempts. */
static __thread int64_t reconnect_not_before_ms;
static __thread int64_t reconnect_backoff_ms;

int db_ensure(PGconn **conn, const char *conninfo)
{
    if (!db_conn_bad(*conn))
        return 0;
    int64_t now = time_mono_ms();
    if (now < reconnect_not_before_ms)
        return SBX_EUNAVAIL;
    char err[512];
    PGconn *c = db_connect(conninfo, err, sizeof err);
    if (!c) {
        snprintf(last_error, sizeof last_error, "%s", err);
        reconnect_backoff_ms = reconnect_backoff_ms ? reconnect_backoff_ms * 2 : 100;
        if (reconnect_backoff_ms > 2000)
            reconnect_backoff_ms = 2000;
        reconnect_not_before_ms = time_mono_ms() + reconnect_backoff_ms;
        return SBX_EUNAVAIL;
    }
    reconnect_backoff_ms = 0;
    reconnect_not_before_ms = 0;
    if (*conn)
        PQfinish(*conn);
    *conn = c;
    return 0;
}

/* The name sql is prepared under on c, preparing it first when it is new:
 * 0 with ret_name filled, or left "" when it runs unprepared (no cache, the
 * cache full); SBX_EDB when PostgreSQL refused it (the error noted, as the
 * statement itself would have failed). */
static int db_stmt_prepared(PGconn *c, dbcache_t *cache, const char *sql, char ret_name[DBCACHE_NAME_MAX])
{
    if (!cache)
        return 0;
    const char *known = dbcache_find(cache, sql);
    if (known) {
        snprintf(ret_name, DBCACHE_NAME_MAX, "%s", known);
        return 0;
    }
    const char *added = NULL;
    if (dbcache_add(cache, sql, &added) < 0)
        return 0;
    char name[DBCACHE_NAME_MAX];
    snprintf(name, sizeof name, "%s", added);
    db_trip();
    PGresult *p = PQprepare(c, name, sql, 0, NULL);
    if (p && PQresultStatus(p) == PGRES_COMMAND_OK) {
        PQclear(p);
        snprintf(ret_name, DBCACHE_NAME_MAX, "%s", name);
        return 0;
    }
    dbcache_remove(cache, sql);
    db_note_error(c, p);
    log_debug("db", "statement failed: %s", last_error);
    PQclear(p);
    return SBX_EDB;
}

/* The statement with the BEGIN db_begin left for it and/or the COMMIT
 * db_commit_with_next asked for, in one round trip (pipeline mode): the
 * statement's result, or NULL with the error noted (BEGIN's or COMMIT's
 * when one of them failed; an error aborts what follows it, so a failed
 * statement leaves the transaction open and failed, for db_rollback). When
 * libpq refuses pipeline mode, one after the other. */
static PGresult *db_exec_piped(PGconn *c, bool begin, bool commit, const char *name, const char *sql, int nparams,
                               const char *const *params)
{
    PGresult *rq[3] = { NULL, NULL, NULL }; /* BEGIN, the statement, COMMIT */
    int first = begin ? 0 : 1, last = commit ? 2 : 1;
    if (PQenterPipelineMode(c) != 1) {
        for (int k = first; k <= last; k++) {
            rq[k] = k == 1 ? (*name ? PQexecPrepared(c, name, nparams, params, NULL, NULL, 0)
                                    : PQexecParams(c, sql, nparams, NULL, params, NULL, NULL, 0))
                           : PQexec(c, k == 0 ? "BEGIN" : "COMMIT");
            ExecStatusType st = rq[k] ? PQresultStatus(rq[k]) : PGRES_FATAL_ERROR;
            if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
                break;
        }
    } else {
        bool sent = true;
        for (int k = first; sent && k <= last; k++)
            sent = (k == 1 ? (*name ? PQsendQueryPrepared(c, name, nparams, params, NULL, NULL, 0)
                                    : PQsendQueryParams(c, sql, nparams, NULL, params, NULL, NULL, 0))
                           : PQsendQueryParams(c, k == 0 ? "BEGIN" : "COMMIT", 0, NULL, NULL, NULL, NULL, 0)) == 1;
        sent = sent && PQpipelineSync(c) == 1;
        /* The answer: each query's result and a NULL after it, then the
         * sync. */
        int k = first;
        for (int i = 0; sent && i < 16; i++) {
            PGresult *x = PQgetResult(c);
            if (!x) {
                if (++k > last + 1 && db_conn_bad(c))
                    break;
                continue;
            }
            if (PQresultStatus(x) == PGRES_PIPELINE_SYNC) {
                PQclear(x);
                break;
            }
            if (k <= last && !rq[k])
                rq[k] = x;
            else
                PQclear(x);
        }
        /* Something still owed means the answer broke off: a lost
         * connection is replaced by db_ensure; one still up cannot be
         * trusted with the next statement, so it starts afresh. */
        if (PQexitPipelineMode(c) != 1 && !db_conn_bad(c))
            PQreset(c);
    }
    for (int k = first; k <= last; k++) {
        ExecStatusType st = rq[k] ? PQresultStatus(rq[k]) : PGRES_FATAL_ERROR;
        if (k != 1 && st != PGRES_COMMAND_OK) {
            /* BEGIN or COMMIT failed (or never answered): the statement's
             * own error, if it has one, says more */
            PGresult *why = rq[1] && PQresultStatus(rq[1]) == PGRES_FATAL_ERROR ? rq[1] : rq[k];
            db_note_error(c, why);
            for (int j = 0; j < 3; j++)
                PQclear(rq[j]);
            return NULL;
        }
    }
    PQclear(rq[0]);
    PQclear(rq[2]);
    return rq[1];
}

PGresult *db_exec(PGconn *c, const char *sql, int nparams, const char *const *params)
{
    last_error[0] = '\0';
    last_sqlstate[0] = '\0';
    bool begin = c && begin_pending == c, commit = c && commit_next == c;
    if (begin)
        begin_pending = NULL;
    if (commit) {
        commit_next = NULL;
        commit_sent = c;
    }
    if (!c) {
        snprintf(last_error, sizeof last_error, "no database connection");
        return NULL;
    }
    /* BEGIN and COMMIT have nothing to plan: preparing them saves nothing
     * (and would hide them from pg_stat_statements' counts). */
    bool txn = strcmp(sql, "BEGIN") == 0 || strcmp(sql, "COMMIT") == 0;
    dbcache_t *cache = txn ? NULL : PQinstanceData(c, db_stmt_event);
    char name[DBCACHE_NAME_MAX] = "";
    if (db_stmt_prepared(c, cache, sql, name) < 0) {
        commit_sent = NULL; /* nothing was sent */
        return NULL;
    }
    db_trip(); /* the fallback without a pipeline counts once too: it is rare */
    PGresult *r = begin || commit ? db_exec_piped(c, begin, commit, name, sql, nparams, params)
                  : *name ? PQexecPrepared(c, name, nparams, params, NULL, NULL, 0)
                          : PQexecParams(c, sql, nparams, NULL, params, NULL, NULL, 0);
    if ((begin || commit) && !r) { /* noted */
        commit_sent = NULL;        /* the caller's db_rollback ends what is left */
        if (*name && (strcmp(last_sqlstate, "26000") == 0 || strcmp(last_sqlstate, "0A000") == 0))
            dbcache_remove(cache, sql);
        return NULL;
    }
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
        return r;
    db_note_error(c, r);
    /* The server no longer has it (26000) or its plan no longer fits the
     * tables (0A000, after a migration): prepared afresh next time. */
    if (*name && (strcmp(last_sqlstate, "26000") == 0 || strcmp(last_sqlstate, "0A000") == 0))
        dbcache_remove(cache, sql);
    log_debug("db", "statement failed: %s", last_error);
    PQclear(r);
    return NULL;
}

int db_run(PGconn *c, const char *sql, int nparams, const char *const *params)
{
    PGresult *r = db_exec(c, sql, nparams, params);
    if (!r)
        return SBX_EDB;
    PQclear(r);
    return 0;
}

int db_begin_now(PGconn *c) { return db_run(c, "BEGIN", 0, NULL); }

int db_begin(PGconn *c)
{
    if (!c) {
        snprintf(last_error, sizeof last_error, "no database connection");
        return SBX_EDB;
    }
    if (begin_pending && begin_pending != c) {
        PGconn *other = begin_pending;
        begin_pending = NULL; /* so that its BEGIN goes alone */
        if (db_begin_now(other) < 0)
            return SBX_EDB;
    }
    begin_pending = c;
    return 0;
}

void db_commit_with_next(PGconn *c) { commit_next = c; }

int db_commit(PGconn *c)
{
    if (c && commit_sent == c) { /* committed with its last statement */
        commit_sent = NULL;
        return 0;
    }
    if (c && commit_next == c)
        commit_next = NULL;
    if (c && begin_pending == c) { /* nothing ran: nothing to commit */
        begin_pending = NULL;
        return 0;
    }
    return db_run(c, "COMMIT", 0, NULL);
}

void db_rollback(PGconn *c)
{
    if (c && commit_next == c)
        commit_next = NULL;
    if (c && commit_sent == c) /* the COMMIT went: nothing is left open */
        commit_sent = NULL;
    if (c && begin_pending == c) {
        begin_pending = NULL;
        return;
    }
    if (!c || PQstatus(c) != CONNECTION_OK)
        return;
    db_trip();
    PGresult *r = PQexec(c, "ROLLBACK");
    PQclear(r);
}

const char *db_get(const PGresult *r, int row, int col)
{
    if (PQgetisnull(r, row, col))
        return NULL;
    return PQgetvalue(r, row, col);
}

long long db_get_ll(const PGresult *r, int row, int col)
{
    const char *v = db_get(r, row, col);
    return v ? strtoll(v, NULL, 10) : 0;
}

bool db_get_bool(const PGresult *r, int row, int col)
{
    const char *v = db_get(r, row, col);
    return v && v[0] == 't';
}
