/* `sandboxd backup` and `sandboxd restore`: the controller's database to a
 * file and back, with PostgreSQL's own pg_dump and pg_restore (custom
 * format), run without a shell. The connection reaches them through PG*
 * environment variables, never their command line, where ps would show a
 * password. */
#ifndef SBX_BACKUP_H
#define SBX_BACKUP_H

#include <stddef.h>
#include <stdint.h>

/* Writes a consistent copy of the database conninfo names to file (mode
 * 0600, through file.partial renamed at the end, so a failed backup never
 * leaves a file that looks whole), or to stdout for "-". It may run while
 * controllers do: pg_dump reads one snapshot. bindir holds pg_dump ("": the
 * newest /usr/lib/postgresql/N/bin, else the PATH's). 0 with *ret_bytes, or
 * a negative SBX_E* code with a one-line reason in err. */
int backup_dump(const char *conninfo, const char *bindir, const char *file, int64_t *ret_bytes, char *err,
                size_t errlen);

/* Replaces what the database holds with a backup_dump file, all or
 * nothing: refused (SBX_ECONFLICT) while another sandboxd is connected to it (a
 * controller must not run against a database changing under it) and for a
 * file that is not a sandboxd backup (SBX_EINVAL); the old tables are kept
 * aside in schema sandbox_pre_restore until the restore succeeded, and put
 * back when it failed. The schema is then migrated to this sandboxd's
 * (*ret_migrated: how many migrations that applied). 0, or a negative SBX_E*
 * code with a one-line reason in err. */
int backup_restore(const char *conninfo, const char *bindir, const char *file, int *ret_migrated, char *err,
                   size_t errlen);

#endif
