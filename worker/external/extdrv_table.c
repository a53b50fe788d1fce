/* The table of a driver's calls in flight: ids, deadlines, the answers the
 * reader hands over and the waits of the callers (extdrv.h). */
#include "extdrv.h"
#include "timeutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void extdrv_table_init(extdrv_table_t *t)
{
    memset(t, 0, sizeof *t);
    pthread_mutex_init(&t->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->cv, &ca);
    pthread_condattr_destroy(&ca);
    t->next_id = 1;
}

void extdrv_table_release(extdrv_table_t *t)
{
    extdrv_table_fail_all(t, API_CANCELLED, "the runtime is closing");
    pthread_mutex_lock(&t->mu);
    while (t->head) {
        extdrv_call_t *c = t->head;
        t->head = c->next;
        if (c->result)
            json_object_put(c->result);
        free(c);
    }
    pthread_mutex_unlock(&t->mu);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
}

extdrv_call_t *extdrv_table_add(extdrv_table_t *t, int64_t deadline_ms)
{
    extdrv_call_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    pthread_mutex_lock(&t->mu);
    c->id = t->next_id++;
    c->deadline_ms = deadline_ms;
    c->next = t->head;
    t->head = c;
    t->n++;
    pthread_mutex_unlock(&t->mu);
    return c;
}

int extdrv_table_complete(extdrv_table_t *t, extdrv_msg_t *msg)
{
    int r = SBX_ENOTFOUND;
    pthread_mutex_lock(&t->mu);
    for (extdrv_call_t *c = t->head; c; c = c->next) {
        if (c->id != msg->id || c->done)
            continue;
        c->done = true;
        if (msg->is_error) {
            c->rc = SBX_ERUNTIME;
            c->err = msg->err;
        } else {
            c->result = msg->result;
            msg->result = NULL;
        }
        r = 0;
        pthread_cond_broadcast(&t->cv);
        break;
    }
    pthread_mutex_unlock(&t->mu);
    return r;
}

void extdrv_table_fail_all(extdrv_table_t *t, api_code_t code, const char *msg)
{
    pthread_mutex_lock(&t->mu);
    for (extdrv_call_t *c = t->head; c; c = c->next) {
        if (c->done)
            continue;
        c->done = true;
        c->rc = SBX_ERUNTIME;
        api_error_set(&c->err, code, "%s", msg);
    }
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

int extdrv_table_wait(extdrv_table_t *t, extdrv_call_t *c, const atomic_int *cancel)
{
    int r = 0;
    pthread_mutex_lock(&t->mu);
    while (!c->done) {
        if (cancel && atomic_load(cancel)) {
            r = SBX_ECANCELLED;
            break;
        }
        int64_t now = time_mono_ms();
        if (now >= c->deadline_ms) {
            r = SBX_ETIMEOUT;
            break;
        }
        int64_t until = c->deadline_ms < now + 100 ? c->deadline_ms : now + 100;
        struct timespec ts = { .tv_sec = (time_t)(until / 1000), .tv_nsec = (long)(until % 1000) * 1000000L };
        pthread_cond_timedwait(&t->cv, &t->mu, &ts);
    }
    pthread_mutex_unlock(&t->mu);
    return r;
}

bool extdrv_table_done(extdrv_table_t *t, extdrv_call_t *c)
{
    pthread_mutex_lock(&t->mu);
    bool done = c->done;
    pthread_mutex_unlock(&t->mu);
    return done;
}

void extdrv_table_remove(extdrv_table_t *t, extdrv_call_t *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&t->mu);
    for (extdrv_call_t **pp = &t->head; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            t->n--;
            break;
        }
    pthread_mutex_unlock(&t->mu);
    if (c->result)
        json_object_put(c->result);
    free(c);
}

int64_t extdrv_table_next_deadline(extdrv_table_t *t)
{
    int64_t d = INT64_MAX;
    pthread_mutex_lock(&t->mu);
    for (extdrv_call_t *c = t->head; c; c = c->next)
        if (!c->done && c->deadline_ms < d)
            d = c->deadline_ms;
    pthread_mutex_unlock(&t->mu);
    return d;
}

void extdrv_table_set_deadline(extdrv_table_t *t, extdrv_call_t *c, int64_t deadline_ms)
{
    pthread_mutex_lock(&t->mu);
    c->deadline_ms = deadline_ms;
    pthread_mutex_unlock(&t->mu);
}
