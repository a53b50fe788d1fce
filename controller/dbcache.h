/* The per-connection prepared-statement cache of controller/db.c: SQL text
 * → the name it was prepared under on that connection. Pure logic, no
 * libpq; bounded (SBX_DB_STMT_CACHE_MAX). */
#ifndef SBX_DBCACHE_H
#define SBX_DBCACHE_H

#include <stdbool.h>
#include <stddef.h>

/* Statement names are "sbx_" and a number: at most this many bytes. */
#define DBCACHE_NAME_MAX 24

typedef struct dbcache dbcache_t;

/* A new, empty cache holding at most cap statements (1 … 65536):
 * 0 with *ret, SBX_EINVAL, SBX_ENOMEM. */
int dbcache_new(size_t cap, dbcache_t **ret);

/* Frees the cache; NULL is fine. */
void dbcache_free(dbcache_t *c);

/* The name sql was added under, or NULL. The pointer is valid until the
 * cache next changes (add, remove, clear, free): copy it to keep it. */
const char *dbcache_find(const dbcache_t *c, const char *sql);

/* Adds sql (copied) and gives the name to prepare it under in ret_name
 * (valid as dbcache_find's answer). 0; SBX_ETOOBIG when the cache is full (the
 * caller runs the statement unprepared); SBX_ECONFLICT when sql is there
 * already; SBX_ENOMEM. */
int dbcache_add(dbcache_t *c, const char *sql, const char **ret_name);

/* Forgets sql (after the server dropped or refused its statement); no-op
 * when it is not there. */
void dbcache_remove(dbcache_t *c, const char *sql);

/* Forgets everything (the connection was reset: the server forgot too).
 * Names are not reused across a clear. */
void dbcache_clear(dbcache_t *c);

/* How many statements it holds. */
size_t dbcache_count(const dbcache_t *c);

#endif
