/* sandboxd backup and restore (backup.h): pg_dump and pg_restore of the
 * controller's database, spawned without a shell, the connection in their
 * environment. */
#include "backup.h"
#include "db.h"
#include "errors.h"
#include "fdutil.h"
#include "migrate.h"
#include "pgembed.h"

#include <errno.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <linux/limits.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define BACKUP_ASIDE "sandbox_pre_restore"

typedef struct child_env {
    char **vars;       /* pgembed_env_without_pg()'s, then the connection's PG* (owned, from own_from on) */
    size_t n, own_from;
    PQconninfoOption *opts;
} child_env_t;

/* The environment without PG* variables, plus the connection's options as
 * PGHOST, PGUSER, PGPASSWORD… (options without a variable are left out). */
static int child_env_make(const char *conninfo, child_env_t *ce, char *err, size_t errlen)
{
    memset(ce, 0, sizeof *ce);
    char *perr = NULL;
    ce->opts = PQconninfoParse(conninfo, &perr);
    if (!ce->opts) {
        snprintf(err, errlen, "the database URL does not parse: %s", perr ? perr : "out of memory");
        PQfreemem(perr);
        return SBX_EINVAL;
    }
    size_t k = 0;
    for (PQconninfoOption *o = ce->opts; o->keyword; o++)
        k++;
    char **base = pgembed_env_without_pg();
    while (base && base[ce->n])
        ce->n++;
    char **vars = base ? realloc(base, (ce->n + k + 1) * sizeof *vars) : NULL;
    if (!vars) {
        free(base);
        ce->n = 0;
        snprintf(err, errlen, "out of memory");
        return SBX_ENOMEM;
    }
    ce->vars = vars;
    ce->own_from = ce->n;
    for (PQconninfoOption *o = ce->opts; o->keyword; o++) {
        if (!o->val || !*o->val || !o->envvar)
            continue;
        size_t l = strlen(o->envvar) + strlen(o->val) + 2;
        char *v = malloc(l);
        if (!v) {
            ce->vars[ce->n] = NULL;
            snprintf(err, errlen, "out of memory");
            return SBX_ENOMEM;
        }
        snprintf(v, l, "%s=%s", o->envvar, o->val);
        ce->vars[ce->n++] = v;
    }
    ce->vars[ce->n] = NULL;
    return 0;
}

/* The database's name as the connection gives it (libpq's default: the
 * user's name). */
static const char *child_env_dbname(const child_env_t *ce)
{
    const char *db = NULL, *user = NULL;
    for (const PQconninfoOption *o = ce->opts; o && o->keyword; o++) {
        if (strcmp(o->keyword, "dbname") == 0 && o->val && *o->val)
            db = o->val;
        else if (strcmp(o->keyword, "user") == 0 && o->val && *o->val)
            user = o->val;
    }
    return db ? db : user ? user : "postgres";
}

static void child_env_free(child_env_t *ce)
{
    for (size_t i = ce->own_from; ce->vars && i < ce->n; i++) {
        if (strncmp(ce->vars[i], "PGPASSWORD=", 11) == 0)
            explicit_bzero(ce->vars[i], strlen(ce->vars[i]));
        free(ce->vars[i]);
    }
    free(ce->vars);
    PQconninfoFree(ce->opts);
    memset(ce, 0, sizeof *ce);
}

/* Runs prog argv with stdout on out_fd (-1: ours), stderr ours, nothing
 * else open. The exit status, -1 when killed, or a negative SBX_E* code. */
static int run_tool(const char *prog, char *const argv[], child_env_t *ce, int out_fd, int *ret_status)
{
    pid_t pid = fork();
    if (pid < 0)
        return SBX_EIO;
    if (pid == 0) {
        if (out_fd >= 0 && dup2(out_fd, STDOUT_FILENO) < 0)
            _exit(126);
        fd_close_from(3);
        execve(prog, argv, ce->vars);
        if (errno == ENOENT && !strchr(prog, '/'))
            execvpe(prog, argv, ce->vars);
        fprintf(stderr, "sandboxd: cannot run %s: %s\n", prog, strerror(errno));
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return SBX_EIO;
    *ret_status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return 0;
}

int backup_dump(const char *conninfo, const char *bindir, const char *file, int64_t *ret_bytes, char *err,
                size_t errlen)
{
    char prog[PATH_MAX], partial[PATH_MAX];
    pgembed_tool(bindir, "pg_dump", prog, sizeof prog);
    bool to_stdout = strcmp(file, "-") == 0;
    if (!to_stdout && snprintf(partial, sizeof partial, "%s.partial", file) >= (int)sizeof partial) {
        snprintf(err, errlen, "the file name is too long");
        return SBX_ETOOBIG;
    }
    child_env_t ce;
    int rc = child_env_make(conninfo, &ce, err, errlen);
    if (rc < 0) {
        child_env_free(&ce);
        return rc;
    }
    int fd = STDOUT_FILENO;
    if (!to_stdout) {
        fd = open(partial, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
            snprintf(err, errlen, "cannot write %s: %s", partial, strerror(errno));
            child_env_free(&ce);
            return SBX_EIO;
        }
        fchmod(fd, 0600); /* a file that was there keeps no wider mode */
    }
    /* custom format: compressed, and pg_restore can check it and restore
     * all of it in one transaction */
    char *argv[] = { prog, "--format=custom", "--no-owner", "--no-privileges", "--schema=public", NULL };
    int st = 0;
    rc = run_tool(prog, argv, &ce, fd, &st);
    child_env_free(&ce);
    struct stat sb;
    int64_t bytes = (!to_stdout && fstat(fd, &sb) == 0) ? (int64_t)sb.st_size : 0;
    bool synced = to_stdout || fsync(fd) == 0;
    if (!to_stdout)
        close(fd);
    if (rc < 0 || st != 0 || !synced) {
        if (!to_stdout)
            unlink(partial);
        if (rc < 0)
            snprintf(err, errlen, "cannot start %s: %s", prog, sbx_strerror(rc));
        else if (st != 0)
            snprintf(err, errlen, "%s exited with %d (its message is above)", prog, st);
        else
            snprintf(err, errlen, "cannot write %s: %s", partial, strerror(errno));
        return rc < 0 ? rc : SBX_EIO;
    }
    if (!to_stdout && rename(partial, file) < 0) {
        snprintf(err, errlen, "cannot rename %s to %s: %s", partial, file, strerror(errno));
        unlink(partial);
        return SBX_EIO;
    }
    *ret_bytes = bytes;
    return 0;
}

/* pg_restore --list of file names the table schema_migrations: a backup of
 * a sandboxd database. */
static int restore_check_file(const char *prog, const char *file, child_env_t *ce, bool *ret_makes_schema, char *err,
                              size_t errlen)
{
    char tmpl[] = "/tmp/sandboxd-restore-list.XXXXXX";
    int fd = mkostemp(tmpl, O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "cannot make a temporary file: %s", strerror(errno));
        return SBX_EIO;
    }
    unlink(tmpl);
    char *argv[] = { (char *)prog, "--list", (char *)file, NULL };
    int st = 0, rc = run_tool(prog, argv, ce, fd, &st);
    bool found = false;
    if (rc == 0 && st == 0 && lseek(fd, 0, SEEK_SET) == 0) {
        FILE *f = fdopen(fd, "r");
        char line[1024];
        while (f && fgets(line, sizeof line, f))
            if (strstr(line, " TABLE public schema_migrations "))
                found = true;
            else if (strstr(line, " SCHEMA - public "))
                *ret_makes_schema = true;
        if (f)
            fclose(f);
        else
            close(fd);
    } else {
        close(fd);
    }
    if (rc < 0) {
        snprintf(err, errlen, "cannot start %s: %s", prog, sbx_strerror(rc));
        return rc;
    }
    if (st != 0 || !found) {
        snprintf(err, errlen, "%s is not a sandboxd backup (%s); make one with: sandboxd backup FILE", file,
                 st != 0 ? "pg_restore cannot read it, see above" : "it has no schema_migrations table");
        return SBX_EINVAL;
    }
    return 0;
}

/* How many other sandboxd connections the database has (-1: unknown). */
static int restore_other_sandboxds(PGconn *c)
{
    PGresult *r = db_exec(c, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                             "AND pid <> pg_backend_pid() AND application_name = 'sandboxd'", 0, NULL);
    int n = r && PQntuples(r) == 1 ? atoi(PQgetvalue(r, 0, 0)) : -1;
    PQclear(r);
    return n;
}

int backup_restore(const char *conninfo, const char *bindir, const char *file, int *ret_migrated, char *err,
                   size_t errlen)
{
    char prog[PATH_MAX];
    pgembed_tool(bindir, "pg_restore", prog, sizeof prog);
    *ret_migrated = 0;
    if (access(file, R_OK) != 0) {
        snprintf(err, errlen, "cannot read %s: %s", file, strerror(errno));
        return SBX_EINVAL;
    }
    child_env_t ce;
    bool makes_schema = false; /* the archive creates schema public itself (pg_dump --schema=public) */
    int rc = child_env_make(conninfo, &ce, err, errlen);
    if (rc == 0)
        rc = restore_check_file(prog, file, &ce, &makes_schema, err, errlen);
    if (rc < 0) {
        child_env_free(&ce);
        return rc;
    }
    PGconn *c = db_connect(conninfo, err, errlen);
    if (!c) {
        child_env_free(&ce);
        return SBX_EDB;
    }
    int others = restore_other_sandboxds(c);
    if (others != 0) {
        if (others < 0)
            snprintf(err, errlen, "cannot read pg_stat_activity: %s", db_last_error());
        else
            snprintf(err, errlen,
                     "%d other sandboxd connection(s) to this database are open: stop every controller (and "
                     "sandboxd all) using it first, then restore",
                     others);
        PQfinish(c);
        child_env_free(&ce);
        return others < 0 ? SBX_EDB : SBX_ECONFLICT;
    }
    PGresult *r = db_exec(c, "SELECT 1 FROM pg_namespace WHERE nspname = '" BACKUP_ASIDE "'", 0, NULL);
    bool aside = r && PQntuples(r) == 1;
    PQclear(r);
    if (aside) {
        snprintf(err, errlen,
                 "schema " BACKUP_ASIDE " exists: it holds the tables from before a restore that was "
                 "interrupted; look at it, then drop it (DROP SCHEMA " BACKUP_ASIDE " CASCADE) to restore again");
        PQfinish(c);
        child_env_free(&ce);
        return SBX_ECONFLICT;
    }
    /* The old tables aside; schema public the backup's (made here when
     * the archive does not make it). */
    if (db_run(c, "BEGIN", 0, NULL) < 0 || db_run(c, "ALTER SCHEMA public RENAME TO " BACKUP_ASIDE, 0, NULL) < 0 ||
        (!makes_schema && db_run(c, "CREATE SCHEMA public", 0, NULL) < 0) || db_run(c, "COMMIT", 0, NULL) < 0) {
        snprintf(err, errlen, "cannot set the current tables aside: %s", db_last_error());
        db_run(c, "ROLLBACK", 0, NULL);
        PQfinish(c);
        child_env_free(&ce);
        return SBX_EDB;
    }
    /* pg_restore needs --dbname to restore rather than print SQL: only
     * the database's name, the rest of the connection is in PG* */
    char dbarg[PATH_MAX];
    snprintf(dbarg, sizeof dbarg, "--dbname=%s", child_env_dbname(&ce));
    char *argv[] = { prog, "--no-owner", "--no-privileges", "--single-transaction", "--exit-on-error",
                     dbarg, (char *)file, NULL };
    int st = 0;
    rc = run_tool(prog, argv, &ce, -1, &st);
    child_env_free(&ce);
    if (rc < 0 || st != 0) {
        if (rc < 0)
            snprintf(err, errlen, "cannot start %s: %s", prog, sbx_strerror(rc));
        else
            snprintf(err, errlen, "%s exited with %d (its message is above); the database is as it was", prog, st);
        if (db_run(c, "BEGIN", 0, NULL) < 0 || db_run(c, "DROP SCHEMA IF EXISTS public CASCADE", 0, NULL) < 0 ||
            db_run(c, "ALTER SCHEMA " BACKUP_ASIDE " RENAME TO public", 0, NULL) < 0 ||
            db_run(c, "COMMIT", 0, NULL) < 0) {
            snprintf(err, errlen, "the restore failed and the old tables could not be put back (%s): they are in "
                     "schema " BACKUP_ASIDE, db_last_error());
            db_run(c, "ROLLBACK", 0, NULL);
        }
        PQfinish(c);
        return rc < 0 ? rc : SBX_EIO;
    }
    if (db_run(c, "DROP SCHEMA " BACKUP_ASIDE " CASCADE", 0, NULL) < 0) {
        snprintf(err, errlen, "restored, but the old tables in schema " BACKUP_ASIDE " could not be dropped: %s",
                 db_last_error());
        PQfinish(c);
        return SBX_EDB;
    }
    rc = migrate_apply(c, ret_migrated, err, errlen);
    PQfinish(c);
    return rc < 0 ? SBX_EDB : 0;
}
