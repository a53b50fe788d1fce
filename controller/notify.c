/* LISTEN sandbox_wake on a dedicated connection; a notification wakes the
 * parked long-polls it can have answered, and kicks the reconcile loop when
 * it says the loop may have work. Losing notifications
 * (while reconnecting) only delays work until the next reconcile tick. */
#include "notify.h"
#include "api.h"
#include "db.h"
#include "limits.h"
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

/* The ids of a payload's list "ID,ID…" at p into ops (room for
 * SBX_WAKE_OPS_MAX, *nops used); one that does not fit sets all in *mask
 * (every wait of its kind is re-checked). Returns where the list ends (at
 * the next ";" or the end). */
static const char *notify_ids(const char *p, unsigned all, unsigned *mask, char ops[][SBX_ID_MAX], int *nops)
{
    while (*p && *p != ';') {
        size_t len = strcspn(p, ",;");
        if (len == 0 || len >= SBX_ID_MAX || *nops >= SBX_WAKE_OPS_MAX)
            *mask |= all;
        else
            snprintf(ops[(*nops)++], SBX_ID_MAX, "%.*s", (int)len, p);
        p += len;
        if (*p == ',')
            p++;
    }
    return p;
}

/* What one notification says changed, added to *mask and ops (room for
 * SBX_WAKE_OPS_MAX, *nops used; more: WAKE_OPERATIONS). Returns true when
 * the reconcile loop may have work: room was freed or a worker came
 * (";room"), or the payload does not say. Payloads: "" (anything: all),
 * "output" (live exec output), "ev[;lease[=WORKER,…]][;room][;ops=ID,ID…]"
 * (migrations 0015, 0016, 0018; the workers' ids go into ops too). Other
 * events need no turn of this loop: the controller that took the request
 * placed its operation there or kicked its own loop. */
static bool notify_parse(const char *extra, unsigned *mask, char ops[][SBX_ID_MAX], int *nops)
{
    if (!extra || strcmp(extra, "output") == 0) {
        *mask |= extra ? WAKE_OUTPUT : WAKE_ALL;
        return !extra;
    }
    if (strncmp(extra, "ev", 2) != 0 || (extra[2] != '\0' && extra[2] != ';')) {
        *mask |= WAKE_ALL;
        return true;
    }
    *mask |= WAKE_EVENTS;
    const char *p = extra + 2;
    bool work = false;
    if (strncmp(p, ";lease", 6) == 0 && (p[6] == '\0' || p[6] == ';')) {
        *mask |= WAKE_LEASES;
        p += 6;
    } else if (strncmp(p, ";lease=", 7) == 0) {
        /* the workers leased to (0018): their polls alone */
        *mask |= WAKE_LEASES_NAMED;
        p = notify_ids(p + 7, WAKE_LEASES, mask, ops, nops);
    }
    if (strncmp(p, ";room", 5) == 0 && (p[5] == '\0' || p[5] == ';')) {
        work = true;
        p += 5;
    }
    if (strncmp(p, ";ops=", 5) == 0)
        p = notify_ids(p + 5, WAKE_OPERATIONS, mask, ops, nops);
    if (*p) {
        *mask |= WAKE_ALL; /* a form this controller does not know */
        work = true;
    }
    return work;
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
            /* A revocation may have gone by unheard. */
            auth_cache_forget_all();
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
        bool work = false;
        unsigned mask = 0;
        static char ops[SBX_WAKE_OPS_MAX][SBX_ID_MAX];
        int nops = 0;
        PGnotify *note;
        while ((note = PQnotifies(c)) != NULL) {
            /* A revoked token (store_token_revoke): only its cached lookup. */
            if (note->extra && strncmp(note->extra, "token:", 6) == 0)
                auth_cache_forget(note->extra + 6);
            else if (notify_parse(note->extra && *note->extra ? note->extra : NULL, &mask, ops, &nops))
                work = true;
            PQfreemem(note);
        }
        if (mask) {
            const char *names[SBX_WAKE_OPS_MAX];
            for (int i = 0; i < nops; i++)
                names[i] = ops[i];
            controller_wake(n->ctl, mask, names, nops);
        }
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
