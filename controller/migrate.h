/* Applies the embedded migrations in order under an advisory lock,
 * recording checksums; refuses a database whose landed migration changed. */
#ifndef SBX_MIGRATE_H
#define SBX_MIGRATE_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Applies every pending migration. ret_applied (may be NULL) gets how many
 * were applied now. Returns 0; SBX_ECONFLICT when a recorded migration's
 * checksum differs from the embedded file (err names it); SBX_EDB otherwise. */
int migrate_apply(PGconn *c, int *ret_applied, char *err, size_t errlen);

/* Prints every migration, applied (when) or pending, and what the database
 * holds that this sandboxd does not know or that changed; with dry_run
 * applies the pending ones in one transaction rolled back. Returns 0 when
 * the schema is current, 1 when migrations are pending (with dry_run: and
 * apply cleanly) or the schema does not match, 2 when a dry run failed
 * (printed), SBX_EDB with err. */
int migrate_status(PGconn *c, FILE *out, bool dry_run, char *err, size_t errlen);

/* True when every embedded migration is recorded with its checksum. */
int migrate_check_current(PGconn *c, char *err, size_t errlen);

#endif
