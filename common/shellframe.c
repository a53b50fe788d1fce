/* The frames of an interactive shell (see shellframe.h). */
#include "shellframe.h"
#include "errors.h"
#include "logframe.h"

#include <string.h>

void shellframe_dec_init(shellframe_dec_t *d, shellframe_dir_t dir)
{
    d->dir = dir;
    d->len = 0;
    d->ready = false;
}

_Static_assert(SHELLFRAME_HEADER_BYTES == LOGFRAME_HEADER_BYTES, "one header layout for both kinds of frames");

void shellframe_header(unsigned char ret[SHELLFRAME_HEADER_BYTES], int type, uint32_t len)
{
    logframe_header(ret, type, len); /* the same 5-byte header: a type, a big-endian length */
}

static unsigned clamp_size(unsigned v)
{
    return v < 1 ? 1 : v > SHELLFRAME_SIZE_MAX ? SHELLFRAME_SIZE_MAX : v;
}

void shellframe_resize(unsigned char ret[SHELLFRAME_HEADER_BYTES + 4], unsigned cols, unsigned rows)
{
    cols = clamp_size(cols);
    rows = clamp_size(rows);
    shellframe_header(ret, SHELLFRAME_RESIZE, 4);
    ret[5] = (unsigned char)(cols >> 8);
    ret[6] = (unsigned char)cols;
    ret[7] = (unsigned char)(rows >> 8);
    ret[8] = (unsigned char)rows;
}

void shellframe_exit(unsigned char ret[SHELLFRAME_HEADER_BYTES + 4], int32_t code)
{
    uint32_t u = (uint32_t)code;
    shellframe_header(ret, SHELLFRAME_EXIT, 4);
    ret[5] = (unsigned char)(u >> 24);
    ret[6] = (unsigned char)(u >> 16);
    ret[7] = (unsigned char)(u >> 8);
    ret[8] = (unsigned char)u;
}

/* Checks a header: SBX_EINVAL unless the direction takes its type and length. */
static int header_check(shellframe_dir_t dir, int type, uint32_t len)
{
    switch (type) {
    case SHELLFRAME_DATA:
        return len >= 1 && len <= SHELLFRAME_PAYLOAD_MAX ? 0 : SBX_EINVAL;
    case SHELLFRAME_RESIZE:
        return dir == SHELLFRAME_TO_WORKER && len == 4 ? 0 : SBX_EINVAL;
    case SHELLFRAME_EOF:
        return dir == SHELLFRAME_TO_WORKER && len == 0 ? 0 : SBX_EINVAL;
    case SHELLFRAME_EXIT:
        return dir == SHELLFRAME_TO_CLIENT && len == 4 ? 0 : SBX_EINVAL;
    case SHELLFRAME_STDERR:
        return dir == SHELLFRAME_TO_CLIENT && len >= 1 && len <= SHELLFRAME_PAYLOAD_MAX ? 0 : SBX_EINVAL;
    default:
        return SBX_EINVAL;
    }
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int shellframe_next(shellframe_dec_t *d, const void *data, size_t n, size_t *ret_used, shellframe_t *ret)
{
    const unsigned char *in = data;
    size_t used = 0;
    *ret_used = 0;
    if (d->ready) {
        d->len = 0;
        d->ready = false;
    }
    /* The header first (checked before a payload byte is held), then the payload. */
    for (int part = 0; part < 2; part++) {
        size_t want = part == 0 ? SHELLFRAME_HEADER_BYTES : SHELLFRAME_HEADER_BYTES + be32(d->buf + 1);
        if (d->len < want) {
            size_t k = want - d->len;
            if (k > n - used)
                k = n - used;
            memcpy(d->buf + d->len, in + used, k);
            d->len += k;
            used += k;
            *ret_used = used;
            if (d->len < want)
                return 0;
        }
        if (part == 0 && header_check(d->dir, d->buf[0], be32(d->buf + 1)) < 0)
            return SBX_EINVAL;
    }
    memset(ret, 0, sizeof *ret);
    ret->type = d->buf[0];
    ret->len = be32(d->buf + 1);
    ret->data = d->buf + SHELLFRAME_HEADER_BYTES;
    if (ret->type == SHELLFRAME_RESIZE) {
        ret->cols = (unsigned)ret->data[0] << 8 | ret->data[1];
        ret->rows = (unsigned)ret->data[2] << 8 | ret->data[3];
        if (ret->cols < 1 || ret->cols > SHELLFRAME_SIZE_MAX || ret->rows < 1 || ret->rows > SHELLFRAME_SIZE_MAX)
            return SBX_EINVAL;
    } else if (ret->type == SHELLFRAME_EXIT) {
        ret->exit_code = (int32_t)be32(ret->data);
    }
    d->ready = true;
    *ret_used = used;
    return 1;
}
