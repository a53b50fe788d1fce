/* The embedded PostgreSQL cluster `sandboxd all` runs when no database URL
 * is configured: initdb on first use, pg_ctl start/stop of the installed server. */
#ifndef SBX_PGEMBED_H
#define SBX_PGEMBED_H

#include <stdbool.h>
#include <stddef.h>

typedef struct pgembed pgembed_t;

/* Starts (initdb on first use) a private PostgreSQL cluster for `sandboxd all`
 * under data_dir/postgres, listening only on a unix socket in data_dir/run
 * (listen_addresses=''), and creates database "sandbox". bindir "" (or NULL)
 * finds the newest /usr/lib/postgresql/<N>/bin with initdb and pg_ctl (the
 * version of an existing cluster wins when it is installed). When the process
 * runs as root, the cluster runs as the unprivileged `postgres` system user;
 * if that user cannot reach data_dir (e.g. it is under /root, mode 700) or the
 * socket path would be too long, the cluster lives in
 * /var/lib/sandbox/embedded/<hash of the absolute data dir> instead and
 * pgembed_location() says so. A cluster left running by a killed run is
 * reused; a stale postmaster.pid is handled by pg_ctl. The server log is
 * <location>/postgres.log. Never runs a shell.
 * Returns 0 with *ret set (free with pgembed_stop), or a negative SBX_E* code
 * with a one-line reason in err: SBX_EUNAVAIL when PostgreSQL is not
 * installed or does not start, SBX_EIO for file-system errors, SBX_EDB when
 * the database cannot be created, SBX_ENOMEM. */
int pgembed_start(const char *data_dir, const char *bindir, pgembed_t **ret, char *err, size_t errlen);

/* A libpq conninfo string for the cluster
 * (host=<socket dir> port=<port> dbname=sandbox user=<superuser>); owned by pg. */
const char *pgembed_conninfo(const pgembed_t *pg);

/* Where the cluster lives, for the log line, never NULL; when the fallback
 * location is used it ends with a parenthesised reason. Owned by pg. */
const char *pgembed_location(const pgembed_t *pg);

/* The bin directory of the PostgreSQL it runs (pg_dump, pg_restore). */
const char *pgembed_bindir(const pgembed_t *pg);

/* True when the cluster already ran when pgembed_start came: another
 * process's (a running `sandboxd all`), not to be stopped by this one. */
bool pgembed_reused(const pgembed_t *pg);

/* The path of PostgreSQL's program name (pg_dump, pg_restore…): in bindir
 * when it is set, else in the newest /usr/lib/postgresql/<N>/bin that has
 * it, else name alone (the PATH's). */
void pgembed_tool(const char *bindir, const char *name, char *out, size_t outlen);

/* The environment without PG* variables (a caller's PGHOST or PGDATA must
 * not steer PostgreSQL's programs): a malloc'd array of environ's own
 * strings, NULL-terminated; free the array only. NULL when out of memory. */
char **pgembed_env_without_pg(void);

/* Frees pg without stopping its cluster. Accepts NULL. */
void pgembed_release(pgembed_t *pg);

/* pg_ctl stop -m fast (then immediate if that fails), waits, frees.
 * Accepts NULL. */
void pgembed_stop(pgembed_t *pg);

#endif
