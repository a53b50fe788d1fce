/* Capped growable buffer. */
#include "sbuf.h"
#include "errors.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sbuf_init(sbuf_t *b, size_t limit)
{
    memset(b, 0, sizeof *b);
    b->limit = limit ? limit : SIZE_MAX - 1;
}

static int sbuf_reserve(sbuf_t *b, size_t extra)
{
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return 0;
    size_t ncap = b->cap ? b->cap : 256;
    while (ncap < need)
        ncap = ncap > SIZE_MAX / 2 ? need : ncap * 2;
    char *p = realloc(b->data, ncap);
    if (!p)
        return SBX_ENOMEM;
    b->data = p;
    b->cap = ncap;
    return 0;
}

/* Appends n bytes that the caller checked fit under the limit. */
static int sbuf_put(sbuf_t *b, const void *p, size_t n)
{
    if (sbuf_reserve(b, n) < 0)
        return SBX_ENOMEM;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int sbuf_append(sbuf_t *b, const void *p, size_t n)
{
    b->seen += n;
    if (n > b->limit - b->len) {
        b->truncated = true;
        return SBX_ETOOBIG;
    }
    return sbuf_put(b, p, n);
}

int sbuf_append_bounded(sbuf_t *b, const void *p, size_t n)
{
    size_t room = b->limit - b->len;
    size_t take = n < room ? n : room;
    b->seen += n;
    if (take < n)
        b->truncated = true;
    return sbuf_put(b, p, take);
}

int sbuf_printf(sbuf_t *b, const char *fmt, ...)
{
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return SBX_EINVAL;
    if ((size_t)n < sizeof small)
        return sbuf_append(b, small, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big)
        return SBX_ENOMEM;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int r = sbuf_append(b, big, (size_t)n);
    free(big);
    return r;
}

const char *sbuf_cstr(const sbuf_t *b)
{
    return b->data ? b->data : "";
}

char *sbuf_detach(sbuf_t *b, size_t *ret_len)
{
    char *p = b->data;
    size_t len = b->len;
    if (!p) {
        p = strdup("");
        if (!p)
            return NULL;
        len = 0;
    }
    b->data = NULL;
    b->len = b->cap = 0;
    b->seen = 0;
    b->truncated = false;
    if (ret_len)
        *ret_len = len;
    return p;
}

void sbuf_reset(sbuf_t *b)
{
    b->len = 0;
    b->seen = 0;
    b->truncated = false;
    if (b->data)
        b->data[0] = '\0';
}

void sbuf_release(sbuf_t *b)
{
    if (!b)
        return;
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
