/* libFuzzer harness: the worker's readers of E2B envd calls (worker/envd.h),
 * which a tenant's client chooses byte for byte through the controller:
 * the request line, a query parameter, a streaming call's one envelope, and
 * a multipart upload fed whole and in pieces of the input's own size, which
 * must give the same parts, names and bytes both ways. The first byte picks
 * the reader (and the piece size). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "envd.h"
#include "errors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What a multipart parse saw: meta holds each part's name, filename and
 * (at its end) its content's length, content every part's bytes in order. */
typedef struct buf {
    char *p;
    size_t len, cap;
} buf_t;

typedef struct seen {
    buf_t meta, content;
    size_t part_bytes;       /* the current part's content so far */
    bool in_part;
} seen_t;

static void buf_add(buf_t *b, const void *p, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            abort();
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

static int on_begin(void *ud, const char *name, const char *filename)
{
    seen_t *s = ud;
    if (s->in_part)
        abort(); /* a part begins only after the last one ended */
    s->in_part = true;
    s->part_bytes = 0;
    size_t a = strlen(name), b = strlen(filename);
    buf_add(&s->meta, &a, sizeof a);
    buf_add(&s->meta, name, a);
    buf_add(&s->meta, &b, sizeof b);
    buf_add(&s->meta, filename, b);
    return 0;
}

static int on_data(void *ud, const char *p, size_t n)
{
    seen_t *s = ud;
    if (!s->in_part || n == 0)
        abort();
    s->part_bytes += n;
    buf_add(&s->content, p, n);
    return 0;
}

static int on_end(void *ud)
{
    seen_t *s = ud;
    if (!s->in_part)
        abort();
    s->in_part = false;
    buf_add(&s->meta, &s->part_bytes, sizeof s->part_bytes);
    return 0;
}

/* Parses body with boundary in pieces of piece bytes (0: whole) into s;
 * the parse's outcome. */
static int mp_run(const char *boundary, const uint8_t *body, size_t n, size_t piece, seen_t *s)
{
    static const envd_mp_callbacks_t cb = { on_begin, on_data, on_end };
    envd_mp_t m;
    memset(s, 0, sizeof *s);
    if (envd_mp_init(&m, boundary, &cb, s) < 0)
        abort();
    int r = 0;
    size_t off = 0;
    while (r == 0 && off < n) {
        size_t k = piece == 0 || n - off < piece ? n - off : piece;
        r = envd_mp_push(&m, (const char *)body + off, k);
        off += k;
    }
    if (r == 0)
        r = envd_mp_finish(&m);
    if (r < 0 && !m.error[0])
        abort(); /* a refusal says why */
    envd_mp_release(&m);
    return r;
}

static bool buf_eq(const buf_t *a, const buf_t *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->p, b->p, a->len) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t sel = data[0];
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    char err[256];
    switch (sel & 3) {
    case 0: {
        envd_req_t q;
        memset(&q, 0, sizeof q);
        err[0] = '\0';
        int r = envd_request_parse((const char *)p, n, &q, err, sizeof err);
        if (r == 0) {
            if (q.path[0] != '/' || q.max_bytes <= 0 || q.body < -1 || q.nheaders > ENVD_HEADERS_MAX)
                abort();
            envd_req_release(&q);
        } else if (!err[0]) {
            abort();
        }
        break;
    }
    case 1: {
        /* "name\0query": a parameter of a raw query */
        const uint8_t *z = memchr(p, 0, n);
        if (!z)
            break;
        char name[64], *query = malloc(n + 1), out[256];
        size_t nl = (size_t)(z - p);
        if (!query || nl >= sizeof name) {
            free(query);
            break;
        }
        memcpy(name, p, nl);
        name[nl] = '\0';
        memcpy(query, z + 1, n - nl - 1);
        query[n - nl - 1] = '\0';
        int r = envd_query_param(query, name, out, sizeof out);
        if (r == 1 && strlen(out) >= sizeof out)
            abort();
        free(query);
        break;
    }
    case 2: {
        const char *msg = NULL;
        size_t len = 0;
        err[0] = '\0';
        if (envd_envelope_one((const char *)p, n, &msg, &len, err, sizeof err) == 0) {
            if (!msg || msg < (const char *)p || msg + len > (const char *)p + n)
                abort();
        } else if (!err[0]) {
            abort();
        }
        break;
    }
    default: {
        /* a multipart body with the boundary "xYz", whole and in pieces of
         * 1..64 bytes (the selector's upper bits): the same outcome */
        size_t piece = (size_t)(sel >> 2) + 1;
        seen_t a, b;
        int ra = mp_run("xYz", p, n, 0, &a);
        int rb = mp_run("xYz", p, n, piece, &b);
        if (a.content.len > n || b.content.len > n)
            abort(); /* never more content than was given */
        if ((ra == 0) != (rb == 0) || (ra == 0 && (!buf_eq(&a.meta, &b.meta) || !buf_eq(&a.content, &b.content))))
            abort();
        free(a.meta.p);
        free(a.content.p);
        free(b.meta.p);
        free(b.content.p);
        break;
    }
    }
    return 0;
}
