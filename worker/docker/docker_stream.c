/* Push parser for Docker's multiplexed stdout/stderr stream framing. */
#include "docker_stream.h"
#include "errors.h"

#include <string.h>

void docker_stream_init(docker_stream_t *d, sbuf_t *out, sbuf_t *err)
{
    memset(d, 0, sizeof *d);
    d->out = out;
    d->err = err;
}

static sbuf_t *docker_stream_target(docker_stream_t *d)
{
    switch (d->stream) {
    case DOCKER_STREAM_STDIN:
    case DOCKER_STREAM_STDOUT:
        return d->out;
    case DOCKER_STREAM_STDERR:
        return d->err;
    default:
        return NULL;
    }
}

int docker_stream_push(docker_stream_t *d, const void *p, size_t n)
{
    const unsigned char *s = p;
    while (n > 0) {
        if (d->remaining == 0) {
            size_t take = DOCKER_STREAM_HEADER_BYTES - d->header_len;
            if (take > n)
                take = n;
            memcpy(d->header + d->header_len, s, take);
            d->header_len += take;
            s += take;
            n -= take;
            if (d->header_len < DOCKER_STREAM_HEADER_BYTES)
                break;
            d->stream = d->header[0];
            d->remaining = (uint32_t)d->header[4] << 24 | (uint32_t)d->header[5] << 16 |
                           (uint32_t)d->header[6] << 8 | (uint32_t)d->header[7];
            d->frames++;
            /* A zero-length frame is complete as soon as its header is. */
            d->header_len = 0;
            continue;
        }
        size_t take = n < d->remaining ? n : d->remaining;
        sbuf_t *b = docker_stream_target(d);
        if (b) {
            if (sbuf_append_bounded(b, s, take) < 0)
                return SBX_ENOMEM;
            if (d->tap)
                d->tap(d->tap_ud, b == d->err ? 2 : 1, (const char *)s, take);
        } else {
            d->ignored += take;
        }
        d->remaining -= (uint32_t)take;
        s += take;
        n -= take;
    }
    return 0;
}

bool docker_stream_at_boundary(const docker_stream_t *d)
{
    return d->header_len == 0 && d->remaining == 0;
}
