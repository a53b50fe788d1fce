/* The level-triggered reconcile loop: on its own thread and database
 * connection it admits, places, expires leases, fails overdue operations,
 * expires TTLs and marks silent workers lost — every tick, and at once when
 * kicked. */
#ifndef SBX_RECONCILE_H
#define SBX_RECONCILE_H

#include "controller.h"

/* Starts the loop thread. Returns 0 or a negative code (err says why). */
int reconcile_start(controller_t *ctl, reconcile_t **ret, char *err, size_t errlen);
/* Makes the loop run a pass now (coalesced). Thread-safe. */
void reconcile_kick(reconcile_t *r);
/* Stops and joins the loop; accepts NULL. */
void reconcile_stop(reconcile_t *r);

#endif
