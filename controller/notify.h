/* Cross-controller wake-ups: a thread LISTENs on the database's
 * "sandbox_wake" channel (notified by a trigger whenever events are written)
 * and wakes this controller's parked long-polls and reconcile loop. */
#ifndef SBX_NOTIFY_H
#define SBX_NOTIFY_H

#include "controller.h"

typedef struct notify_listener notify_listener_t;

/* Starts the listener thread; it reconnects with backoff on its own. */
int notify_start(controller_t *ctl, notify_listener_t **ret, char *err, size_t errlen);
/* Stops and joins it; accepts NULL. */
void notify_stop(notify_listener_t *n);

#endif
