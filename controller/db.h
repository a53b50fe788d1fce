/* Thin libpq helpers: connect, parameterised statements, transactions. */
#ifndef SBX_DB_H
#define SBX_DB_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

/* Connects with a short connect timeout and UTC session time zone.
 * Returns NULL with a one-line reason in err. */
PGconn *db_connect(const char *conninfo, char *err, size_t errlen);

/* Makes sure *conn is usable, reconnecting when it went bad (server
 * restart). Returns 0 or SBX_EUNAVAIL. */
int db_ensure(PGconn **conn, const char *conninfo);

/* Runs sql with text parameters (NULL entries are SQL NULL), prepared once
 * per connection and SQL text (a connection from db_connect keeps up to
 * SBX_DB_STMT_CACHE_MAX; text built at run time is keyed by the text, and
 * past the bound statements run unprepared). Returns the
 * result when it is PGRES_COMMAND_OK or PGRES_TUPLES_OK (caller PQclear()s),
 * otherwise NULL after logging the error at debug level; db_last_error()
 * then says why and db_last_sqlstate() gives the SQLSTATE. */
PGresult *db_exec(PGconn *c, const char *sql, int nparams, const char *const *params);

/* Like db_exec for statements whose result is not needed: 0 or SBX_EDB. */
int db_run(PGconn *c, const char *sql, int nparams, const char *const *params);

const char *db_last_error(void);
const char *db_last_sqlstate(void);
/* True when the last failure was a unique violation (23505). */
bool db_last_unique_violation(void);
/* True when the connection is unusable (server gone). */
bool db_conn_bad(PGconn *c);

/* Begins a transaction. The BEGIN is sent with the transaction's first
 * statement through db_exec, in one round trip (libpq pipeline mode), so
 * statements must go through db_exec/db_run; before libpq is used on c
 * directly, use db_begin_now. A transaction that ends before any
 * statement costs nothing. */
int db_begin(PGconn *c);
/* Begins a transaction at once (one round trip). */
int db_begin_now(PGconn *c);
/* The transaction's next statement through db_exec is its last: the
 * COMMIT goes with it in one round trip, and db_commit afterwards only
 * says how it went. Only where exactly one statement follows. */
void db_commit_with_next(PGconn *c);
int db_commit(PGconn *c);
/* Rolls back, ignoring errors (the connection may be gone). */
void db_rollback(PGconn *c);

/* The value of a column, NULL when SQL NULL. */
const char *db_get(const PGresult *r, int row, int col);
/* Column as int64 (0 when NULL). */
long long db_get_ll(const PGresult *r, int row, int col);
bool db_get_bool(const PGresult *r, int row, int col);

#endif
