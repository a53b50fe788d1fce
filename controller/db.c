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

static metric_family_t *m_connects, *m_errors;
static pthread_once_t metrics_once = PTHREAD_ONCE_INIT;

static void db_metrics_init(void)
{
    m_connects = metrics_family("sandbox_db_connects_total", METRIC_COUNTER,
                                "Connections to PostgreSQL opened, by result (ok or error).", NULL, 0);
    m_errors = metrics_family("sandbox_db_errors_total", METRIC_COUNTER,
                              "Statements PostgreSQL refused or could not run, by SQLSTATE class "
                              "(\"none\": no answer, e.g. the connection was lost).",
                              NULL, 0);
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

PGresult *db_exec(PGconn *c, const char *sql, int nparams, const char *const *params)
{
    last_error[0] = '\0';
    last_sqlstate[0] = '\0';
    if (!c) {
        snprintf(last_error, sizeof last_error, "no database connection");
        return NULL;
    }
    /* BEGIN and COMMIT have nothing to plan: preparing them saves nothing
     * (and would hide them from pg_stat_statements' counts). */
    bool txn = strcmp(sql, "BEGIN") == 0 || strcmp(sql, "COMMIT") == 0;
    dbcache_t *cache = txn ? NULL : PQinstanceData(c, db_stmt_event);
    char name[DBCACHE_NAME_MAX] = "";
    if (db_stmt_prepared(c, cache, sql, name) < 0)
        return NULL;
    PGresult *r = *name ? PQexecPrepared(c, name, nparams, params, NULL, NULL, 0)
                        : PQexecParams(c, sql, nparams, NULL, params, NULL, NULL, 0);
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

int db_begin(PGconn *c) { return db_run(c, "BEGIN", 0, NULL); }
int db_commit(PGconn *c) { return db_run(c, "COMMIT", 0, NULL); }

void db_rollback(PGconn *c)
{
    if (!c || PQstatus(c) != CONNECTION_OK)
        return;
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
