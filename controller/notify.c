/* LISTEN sandbox_wake on a dedicated connection; every notification wakes
 * the parked long-polls and kicks the reconcile loop. Losing notifications
 * (while reconnecting) only delays work until the next reconcile tick. */
#include "notify.h"
#include "db.h"
#include "log.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct notify_listener {
    controller_t *ctl;
    pthread_t tid;
    atomic_int stop;
};

static PGconn *notify_connect(controller_t *ctl)
{
    char err[256];
    PGconn *c = db_connect(ctl->conninfo, err, sizeof err);
    if (!c)
        return NULL;
    if (db_run(c, "LISTEN sandbox_wake", 0, NULL) < 0) {
        PQfinish(c);
        return NULL;
    }
    return c;
}

static void *notify_main(void *arg)
{
    struct notify_listener *n = arg;
    PGconn *c = NULL;
    int backoff_ms = 100;
    bool logged_down = false;
    while (!n->stop) {
        if (!c || PQstatus(c) != CONNECTION_OK) {
            if (c) {
                PQfinish(c);
                c = NULL;
            }
            c = notify_connect(n->ctl);
            if (!c) {
                if (!logged_down)
                    log_warn("notify", "cannot LISTEN for wake-ups, retrying: %s", db_last_error());
                logged_down = true;
                for (int waited = 0; waited < backoff_ms && !n->stop; waited += 50)
                    usleep(50 * 1000);
                backoff_ms = backoff_ms * 2 > 5000 ? 5000 : backoff_ms * 2;
                continue;
            }
            if (logged_down)
                log_info("notify", "listening for wake-ups again");
            logged_down = false;
            backoff_ms = 100;
            /* Whatever happened while we were away: look now. */
            controller_wake_waiters(n->ctl);
            controller_kick_reconcile(n->ctl);
        }
        struct pollfd pfd = { .fd = PQsocket(c), .events = POLLIN };
        int pr = poll(&pfd, 1, 250);
        if (pr < 0)
            continue;
        if (pr == 0)
            continue;
        if (!PQconsumeInput(c)) {
            PQfinish(c);
            c = NULL;
            continue;
        }
        int got = 0, work = 0;
        PGnotify *note;
        while ((note = PQnotifies(c)) != NULL) {
            got++;
            /* Live exec output ("output") only concerns its followers. */
            if (!note->extra || strcmp(note->extra, "output") != 0)
                work++;
            PQfreemem(note);
        }
        if (got)
            controller_wake_waiters(n->ctl);
        if (work)
            controller_kick_reconcile(n->ctl);
    }
    if (c)
        PQfinish(c);
    return NULL;
}

int notify_start(controller_t *ctl, notify_listener_t **ret, char *err, size_t errlen)
{
    struct notify_listener *n = calloc(1, sizeof *n);
    if (!n) {
        snprintf(err, errlen, "out of memory");
        return SBX_ENOMEM;
    }
    n->ctl = ctl;
    if (pthread_create(&n->tid, NULL, notify_main, n) != 0) {
        free(n);
        snprintf(err, errlen, "cannot start the notify thread");
        return SBX_ENOMEM;
    }
    *ret = n;
    return 0;
}

void notify_stop(notify_listener_t *n)
{
    if (!n)
        return;
    n->stop = 1;
    pthread_join(n->tid, NULL);
    free(n);
}
