/* envd's WatchDir as a polling watcher: no runtime tells the worker of
 * changes inside a sandbox, so the directory is walked (envd_walk: the
 * runtime's archive of it) every ENVD_WATCH_POLL_MS or more (a slow walk
 * spaces the next ones) and each walk compared with the one before: a new
 * name is a create, a gone one a remove, a changed size, modification
 * time or type a write, changed permission bits a chmod. A rename is a
 * remove and a create; a change that keeps the size within the pause
 * between walks is missed (docs/worker.md "E2B envd"). */
#include "envd.h"
#include "envd_internal.h"
#include "errors.h"
#include "jsonx.h"
#include "timeutil.h"
#include "utf8.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The pause between two walks, at least; and at least this many times
 * the last walk's time, so a tree that is slow to read is read less often. */
#define ENVD_WATCH_POLL_MS      1000
#define ENVD_WATCH_POLL_FACTOR  4
/* What a watch keeps of one walk, at most (it holds two). */
#define ENVD_WATCH_SNAP_BYTES   (8 * 1024 * 1024)
/* A recursive watch walks this many levels at most. */
#define ENVD_WATCH_DEPTH_MAX    64
/* A keepalive message after this long without one. */
#define ENVD_WATCH_KEEPALIVE_MS 15000

/* What a walk saw of one entry. */
typedef struct watch_entry {
    char *rel;                /* its path below the watched directory */
    char *link;               /* a symlink's target, else NULL */
    char type;                /* the archive's typeflag */
    int64_t size, mtime;
    unsigned mode;
} watch_entry_t;

typedef struct watch_snap {
    watch_entry_t *v;
    size_t n, cap;
    bool links;               /* keep symlink targets: only an event's entry shows them */
    size_t bytes;             /* held, at most ENVD_WATCH_SNAP_BYTES */
} watch_snap_t;

static void watch_snap_release(watch_snap_t *s)
{
    for (size_t i = 0; i < s->n; i++) {
        free(s->v[i].rel);
        free(s->v[i].link);
    }
    free(s->v);
    memset(s, 0, sizeof *s);
}

static int watch_snap_add(void *ud, const char *rel, const tarstream_entry_t *e)
{
    watch_snap_t *s = ud;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        watch_entry_t *v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return SBX_ENOMEM;
        s->v = v;
        s->cap = cap;
    }
    bool link = s->links && e->type == '2';
    s->bytes += sizeof(watch_entry_t) + strlen(rel) + 1 + (link ? strlen(e->link) + 1 : 0);
    if (s->bytes > ENVD_WATCH_SNAP_BYTES)
        return SBX_ETOOBIG;
    watch_entry_t *w = &s->v[s->n];
    memset(w, 0, sizeof *w);
    if (!(w->rel = strdup(rel)) || (link && !(w->link = strdup(e->link)))) {
        free(w->rel);
        return SBX_ENOMEM;
    }
    w->type = e->type;
    w->size = e->size;
    w->mtime = e->mtime;
    w->mode = e->mode;
    s->n++;
    return 0;
}

static int watch_cmp(const void *a, const void *b)
{
    return strcmp(((const watch_entry_t *)a)->rel, ((const watch_entry_t *)b)->rel);
}

/* A walk of the directory into s (sorted by name; symlink targets kept
 * when links): 0, or < 0 with the Connect code and message. */
static int watch_walk(envd_call_t *k, const char *path, int64_t depth, bool links, watch_snap_t *s,
                      const char **code, char *msg, size_t msglen)
{
    memset(s, 0, sizeof *s);
    s->links = links;
    int r = envd_walk(k, path, depth, ENVD_WALK_WATCH_BYTES, watch_snap_add, s, code, msg, msglen);
    if (r == SBX_ETOOBIG) {
        *code = "resource_exhausted";
        snprintf(msg, msglen, "the names below %.200s take more than the %d bytes a watch keeps of one walk: watch "
                 "a smaller directory, or without recursive", path, ENVD_WATCH_SNAP_BYTES);
    }
    if (r < 0) {
        watch_snap_release(s);
        return r;
    }
    if (s->n > 1)
        qsort(s->v, s->n, sizeof *s->v, watch_cmp);
    return 0;
}

/* Sends one FilesystemEvent (with the entry when asked for): 0;
 * SBX_ETOOBIG when it does not fit a frame; SBX_EIO, SBX_ENOMEM. */
static int watch_send_one(envd_call_t *k, const char *base, const watch_entry_t *w, const char *type,
                          bool with_entry)
{
    json_object *o = json_object_new_object(), *ev = json_object_new_object();
    char *name = utf8_sanitize(w->rel, strlen(w->rel));   /* as an entry's name is */
    int r = SBX_ENOMEM;
    if (o && ev && name) {
        jsonx_add_str(ev, "name", name);
        jsonx_add_str(ev, "type", type);
        if (with_entry) {
            tarstream_entry_t *e = calloc(1, sizeof *e);
            if (e) {
                e->type = w->type;
                e->size = w->size;
                e->mtime = w->mtime;
                e->mode = w->mode;
                snprintf(e->link, sizeof e->link, "%s", w->link ? w->link : "");
                jsonx_add(ev, "entry", envd_entry_of_tar(base, w->rel, e));
                free(e);
            }
        }
        jsonx_add(o, "filesystem", ev);
        ev = NULL;
        char *js = jsonx_dump(o);
        r = js ? envd_stream_send(k, js, strlen(js)) : SBX_ENOMEM;
        free(js);
    }
    if (ev)
        json_object_put(ev);
    if (o)
        json_object_put(o);
    free(name);
    return r;
}

/* An event whose entry does not fit a frame (a long name and symlink
 * target of control bytes, each escaped to 6 bytes) goes without it. */
static int watch_send(envd_call_t *k, const char *base, const watch_entry_t *w, const char *type, bool with_entry)
{
    int r = watch_send_one(k, base, w, type, with_entry);
    return r == SBX_ETOOBIG && with_entry ? watch_send_one(k, base, w, type, false) : r;
}

/* Sends the events that lead from walk a to walk b (both sorted). */
static int watch_diff(envd_call_t *k, const char *base, const watch_snap_t *a, const watch_snap_t *b, bool with_entry,
                      int *ret_sent)
{
    size_t i = 0, j = 0;
    int r = 0;
    while (r == 0 && (i < a->n || j < b->n)) {
        int c = i == a->n ? 1 : j == b->n ? -1 : strcmp(a->v[i].rel, b->v[j].rel);
        if (c < 0) {
            r = watch_send(k, base, &a->v[i++], "EVENT_TYPE_REMOVE", false);
        } else if (c > 0) {
            r = watch_send(k, base, &b->v[j++], "EVENT_TYPE_CREATE", with_entry);
        } else {
            const watch_entry_t *x = &a->v[i++], *y = &b->v[j++];
            if (x->size != y->size || x->mtime != y->mtime || x->type != y->type)
                r = watch_send(k, base, y, "EVENT_TYPE_WRITE", with_entry);
            else if (x->mode != y->mode)
                r = watch_send(k, base, y, "EVENT_TYPE_CHMOD", with_entry);
            else
                continue;
        }
        if (r == 0)
            ++*ret_sent;
    }
    return r;
}

/* The pause after a walk that took walk_ms. */
static int64_t watch_pause(int64_t walk_ms)
{
    return ENVD_WATCH_POLL_FACTOR * walk_ms > ENVD_WATCH_POLL_MS ? ENVD_WATCH_POLL_FACTOR * walk_ms
                                                                 : ENVD_WATCH_POLL_MS;
}

void envd_fs_watch_dir(envd_call_t *k, json_object *msg)
{
    forward_conn_t *c = k->c;
    char path[SBX_FILES_PATH_MAX + 1], why[400];
    const char *code = NULL, *p = NULL;
    bool recursive = false, with_entry = false;
    watch_snap_t prev = { 0 }, cur = { 0 };
    jsonx_get_bool(msg, "recursive", &recursive);
    jsonx_get_bool(msg, "includeEntry", &with_entry);
    int64_t depth = recursive ? ENVD_WATCH_DEPTH_MAX : 1;
    if (!envd_msg_str(msg, "path", &p) || !p || envd_path_resolve(p, path) < 0) {
        if (envd_stream_begin(k) == 0)
            envd_stream_end(k, "invalid_argument", "the request's path must be a path without control bytes (NUL "
                            "included)");
        return;
    }
    /* The first walk before the start message: a path that cannot be
     * watched is the stream's error. */
    int64_t t0 = time_mono_ms();
    int r = watch_walk(k, path, depth, with_entry, &prev, &code, why, sizeof why);
    int64_t walk_ms = time_mono_ms() - t0;
    if (k->gone || envd_stream_begin(k) < 0)
        goto cleanup;
    if (r < 0) {
        envd_stream_end(k, code, why);
        goto cleanup;
    }
    static const char start[] = "{\"start\":{}}", keepalive[] = "{\"keepalive\":{}}";
    if (envd_stream_send(k, start, sizeof start - 1) < 0)
        goto cleanup;
    int64_t last = time_mono_ms();
    int64_t next = last + watch_pause(walk_ms);
    for (;;) {
        int64_t now = time_mono_ms();
        if (k->deadline_ms && now >= k->deadline_ms) {
            envd_stream_end(k, "deadline_exceeded", "the call's timeout (connect-timeout-ms) passed");
            break;
        }
        if (now - last >= ENVD_WATCH_KEEPALIVE_MS) {
            if (envd_stream_send(k, keepalive, sizeof keepalive - 1) < 0)
                break;
            last = now;
        }
        int64_t wake = next < last + ENVD_WATCH_KEEPALIVE_MS ? next : last + ENVD_WATCH_KEEPALIVE_MS;
        if (k->deadline_ms && k->deadline_ms < wake)
            wake = k->deadline_ms;
        int64_t wait = wake > now ? wake - now : 0;
        bool pending = forward_client_pending(c);
        struct pollfd pf[2] = { { .fd = c->client, .events = POLLIN },
                                { .fd = c->f->stop_pipe[0], .events = POLLIN } };
        int n = poll(pf, 2, pending ? 0 : (int)wait);
        if (n < 0 && errno != EINTR)
            break;
        if (n > 0 && pf[1].revents) {
            envd_stream_end(k, "unavailable", "the worker is shutting down");
            break;
        }
        if (pending || (n > 0 && pf[0].revents))
            break;                /* the controller closed: the watch ends */
        if (time_mono_ms() < next)
            continue;
        t0 = time_mono_ms();
        r = watch_walk(k, path, depth, with_entry, &cur, &code, why, sizeof why);
        walk_ms = time_mono_ms() - t0;
        next = time_mono_ms() + watch_pause(walk_ms);
        if (r < 0 && k->gone)
            break;                /* the controller closed during the walk */
        if (r < 0) {
            if (strcmp(code, "not_found") == 0)
                snprintf(why, sizeof why, "the watched directory %.300s is gone", path);
            envd_stream_end(k, code, why);
            break;
        }
        int sent = 0;
        if ((r = watch_diff(k, path, &prev, &cur, with_entry, &sent)) < 0) {
            if (r == SBX_ENOMEM)
                envd_stream_end(k, "resource_exhausted", "the worker is out of memory");
            else if (r == SBX_ETOOBIG)
                envd_stream_end(k, "resource_exhausted", "an event's name is too long to send");
            break;
        }
        watch_snap_release(&prev);
        prev = cur;
        memset(&cur, 0, sizeof cur);
        if (sent > 0)
            last = time_mono_ms();
    }
cleanup:
    watch_snap_release(&prev);
    watch_snap_release(&cur);
}
