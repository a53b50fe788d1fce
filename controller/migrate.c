/* Schema migrations: embedded files, checksummed, applied under an advisory lock. */
#include "migrate.h"
#include "db.h"
#include "errors.h"
#include "log.h"
#include "migrate_data.h"
#include "version.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>

/* Arbitrary constant shared by every sandboxd: "sbxmigr" */
#define MIGRATE_LOCK_KEY "7526746283465836"

static void migrate_checksum(const migration_file_t *m, char out[65])
{
    unsigned char h[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(h, (const unsigned char *)m->sql, m->len);
    sodium_bin2hex(out, 65, h, sizeof h);
}

static int migrate_version(const migration_file_t *m, char out[16])
{
    size_t i = 0;
    while (m->name[i] >= '0' && m->name[i] <= '9' && i < 15) {
        out[i] = m->name[i];
        i++;
    }
    out[i] = '\0';
    return i > 0 ? 0 : SBX_EINVAL;
}

static int migrate_compare(PGconn *c, int *ret_pending_from, char *err, size_t errlen)
{
    PGresult *r = db_exec(c, "SELECT version, checksum FROM schema_migrations ORDER BY version", 0, NULL);
    if (!r) {
        snprintf(err, errlen, "reading schema_migrations: %s", db_last_error());
        return SBX_EDB;
    }
    int applied = PQntuples(r);
    if (applied > migration_file_count) {
        snprintf(err, errlen, "the database has %d migrations but this sandboxd knows only %d: it is older than the schema",
                 applied, migration_file_count);
        PQclear(r);
        return SBX_ECONFLICT;
    }
    for (int i = 0; i < applied; i++) {
        char ver[16], sum[65];
        migrate_version(&migration_files[i], ver);
        migrate_checksum(&migration_files[i], sum);
        if (strcmp(db_get(r, i, 0), ver) != 0 || strcmp(db_get(r, i, 1), sum) != 0) {
            snprintf(err, errlen, "migration %s was changed after it was applied (recorded %.12s…, file %.12s…); "
                     "landed migrations must never be edited", migration_files[i].name, db_get(r, i, 1), sum);
            PQclear(r);
            return SBX_ECONFLICT;
        }
    }
    PQclear(r);
    *ret_pending_from = applied;
    return 0;
}

int migrate_apply(PGconn *c, int *ret_applied, char *err, size_t errlen)
{
    int applied_now = 0, from = 0, rc = 0;
    if (db_run(c, "CREATE TABLE IF NOT EXISTS schema_migrations ("
                  " version text PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,"
                  " applied_at timestamptz NOT NULL DEFAULT now())", 0, NULL) < 0) {
        snprintf(err, errlen, "creating schema_migrations: %s", db_last_error());
        return SBX_EDB;
    }
    const char *lk[] = { MIGRATE_LOCK_KEY };
    if (db_run(c, "SELECT pg_advisory_lock($1::bigint)", 1, lk) < 0) {
        snprintf(err, errlen, "taking the migration lock: %s", db_last_error());
        return SBX_EDB;
    }
    rc = migrate_compare(c, &from, err, errlen);
    if (rc < 0)
        goto cleanup;
    for (int i = from; i < migration_file_count; i++) {
        const migration_file_t *m = &migration_files[i];
        char ver[16], sum[65];
        if (migrate_version(m, ver) < 0) {
            snprintf(err, errlen, "migration file %s has no version number", m->name);
            rc = SBX_EINVAL;
            goto cleanup;
        }
        migrate_checksum(m, sum);
        if (db_begin_now(c) < 0) { /* the SQL goes to libpq directly */
            rc = SBX_EDB;
            snprintf(err, errlen, "%s", db_last_error());
            goto cleanup;
        }
        /* The SQL text may hold several statements: simple query protocol. */
        PGresult *r = PQexec(c, m->sql);
        if (!r || PQresultStatus(r) != PGRES_COMMAND_OK) {
            snprintf(err, errlen, "applying %s: %s", m->name, r ? PQresultErrorMessage(r) : PQerrorMessage(c));
            PQclear(r);
            db_rollback(c);
            rc = SBX_EDB;
            goto cleanup;
        }
        PQclear(r);
        const char *p[] = { ver, m->name, sum };
        if (db_run(c, "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)", 3, p) < 0 ||
            db_commit(c) < 0) {
            snprintf(err, errlen, "recording %s: %s", m->name, db_last_error());
            db_rollback(c);
            rc = SBX_EDB;
            goto cleanup;
        }
        applied_now++;
        log_debug("migrate", "applied %s", m->name);
    }
cleanup:
    db_run(c, "SELECT pg_advisory_unlock($1::bigint)", 1, lk);
    if (ret_applied)
        *ret_applied = applied_now;
    return rc;
}

/* One boolean from sql: 0 with *ret, or -1. */
static int db_run_one_bool(PGconn *c, const char *sql, bool *ret)
{
    PGresult *r = db_exec(c, sql, 0, NULL);
    if (!r)
        return -1;
    *ret = PQntuples(r) == 1 && strcmp(db_get(r, 0, 0), "t") == 0;
    PQclear(r);
    return 0;
}

int migrate_status(PGconn *c, FILE *out, bool dry_run, char *err, size_t errlen)
{
    bool exists = false;
    if (db_run_one_bool(c, "SELECT to_regclass('schema_migrations') IS NOT NULL", &exists) < 0) {
        snprintf(err, errlen, "reading the schema: %s", db_last_error());
        return SBX_EDB;
    }
    /* no table yet: nothing was ever applied */
    PGresult *r = !exists ? NULL
                          : db_exec(c, "SELECT version, name, checksum, to_char(applied_at AT TIME ZONE 'UTC', "
                                       "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') FROM schema_migrations ORDER BY version",
                                    0, NULL);
    if (exists && !r) {
        snprintf(err, errlen, "reading schema_migrations: %s", db_last_error());
        return SBX_EDB;
    }
    int recorded = r ? PQntuples(r) : 0, pending = 0, odd = 0;
    for (int i = 0; i < migration_file_count || i < recorded; i++) {
        char ver[16] = "", sum[65] = "";
        const migration_file_t *m = i < migration_file_count ? &migration_files[i] : NULL;
        if (m) {
            migrate_version(m, ver);
            migrate_checksum(m, sum);
        }
        if (i >= recorded) {
            fprintf(out, "%-34s pending\n", m->name);
            pending++;
        } else if (!m) {
            fprintf(out, "%-34s applied %s, unknown to this sandboxd %s (the schema is newer: upgrade it)\n",
                    db_get(r, i, 1), db_get(r, i, 3), SBX_VERSION);
            odd++;
        } else if (strcmp(db_get(r, i, 0), ver) != 0 || strcmp(db_get(r, i, 2), sum) != 0) {
            fprintf(out, "%-34s applied %s as %s, CHANGED since (recorded %.12s…, file %.12s…)\n", m->name,
                    db_get(r, i, 3), db_get(r, i, 1), db_get(r, i, 2), sum);
            odd++;
        } else {
            fprintf(out, "%-34s applied %s\n", m->name, db_get(r, i, 3));
        }
    }
    PQclear(r);
    if (odd) {
        fprintf(out, "schema: does not match this sandboxd %s (see above): a controller of this version refuses it\n",
                SBX_VERSION);
        return 1;
    }
    if (pending == 0) {
        fprintf(out, "schema: current (%d migrations, the newest %s)\n", migration_file_count,
                migration_file_count ? migration_files[migration_file_count - 1].name : "-");
        return 0;
    }
    fprintf(out, "schema: %d pending of %d (sandboxd migrate applies %s; so does a controller of this version at "
                 "its start)\n", pending, migration_file_count, pending == 1 ? "it" : "them");
    if (!dry_run)
        return 1;
    /* The pending ones in one transaction, then rolled back: PostgreSQL's
     * DDL is transactional, so nothing stays, and the lock keeps a real
     * migrate from running meanwhile. */
    const char *lk[] = { MIGRATE_LOCK_KEY };
    if (db_run(c, "SELECT pg_advisory_lock($1::bigint)", 1, lk) < 0) {
        snprintf(err, errlen, "taking the migration lock: %s", db_last_error());
        return SBX_EDB;
    }
    int rc = 1;
    if (db_begin_now(c) < 0) {
        snprintf(err, errlen, "%s", db_last_error());
        rc = SBX_EDB;
        goto unlock;
    }
    for (int i = migration_file_count - pending; i < migration_file_count; i++) {
        const migration_file_t *m = &migration_files[i];
        PGresult *q = PQexec(c, m->sql);
        if (!q || PQresultStatus(q) != PGRES_COMMAND_OK) {
            fprintf(out, "dry run: %s fails: %s", m->name, q ? PQresultErrorMessage(q) : PQerrorMessage(c));
            PQclear(q);
            db_rollback(c);
            rc = 2;
            goto unlock;
        }
        PQclear(q);
    }
    db_rollback(c);
    fprintf(out, "dry run: the %d pending migration%s appl%s cleanly (rolled back: nothing changed)\n", pending,
            pending == 1 ? "" : "s", pending == 1 ? "ies" : "y");
unlock:
    db_run(c, "SELECT pg_advisory_unlock($1::bigint)", 1, lk);
    return rc;
}

int migrate_check_current(PGconn *c, char *err, size_t errlen)
{
    int from = 0;
    int rc = migrate_compare(c, &from, err, errlen);
    if (rc < 0)
        return rc;
    if (from != migration_file_count) {
        snprintf(err, errlen, "%d migrations pending", migration_file_count - from);
        return SBX_ECONFLICT;
    }
    return 0;
}
