/* Applies the embedded migrations in order under an advisory lock,
 * recording checksums; refuses a database whose landed migration changed. */
#ifndef SBX_MIGRATE_H
#define SBX_MIGRATE_H

#include <libpq-fe.h>
#include <stddef.h>

/* Applies every pending migration. ret_applied (may be NULL) gets how many
 * were applied now. Returns 0; SBX_ECONFLICT when a recorded migration's
 * checksum differs from the embedded file (err names it); SBX_EDB otherwise. */
int migrate_apply(PGconn *c, int *ret_applied, char *err, size_t errlen);

/* True when every embedded migration is recorded with its checksum. */
int migrate_check_current(PGconn *c, char *err, size_t errlen);

#endif
