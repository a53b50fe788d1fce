/* Incremental demultiplexer for Docker's attach/exec stream framing (used
 * when a container or exec runs without a TTY). */
#ifndef SBX_DOCKER_STREAM_H
#define SBX_DOCKER_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sbuf.h"

/* Docker's stream ids in byte 0 of a frame header. */
enum {
    DOCKER_STREAM_STDIN = 0,
    DOCKER_STREAM_STDOUT = 1,
    DOCKER_STREAM_STDERR = 2,
    DOCKER_STREAM_SYSTEMERR = 3,
};

#define DOCKER_STREAM_HEADER_BYTES 8

/* Parser state. Each frame is an 8-byte header (byte 0 the stream id, bytes
 * 4..7 the big-endian payload size) followed by the payload. Routing:
 * stdout (1) and stdin (0, which Docker documents as written on stdout) go
 * to `out`, stderr (2) to `err`; any other id (3 = Docker's own "system
 * error" stream, or garbage) is skipped and only counted in `ignored`. */
typedef struct docker_stream {
    sbuf_t *out;                                   /* not owned */
    sbuf_t *err;                                   /* not owned */
    unsigned char header[DOCKER_STREAM_HEADER_BYTES];
    size_t header_len;                             /* header bytes collected so far */
    uint32_t remaining;                            /* payload bytes left in this frame */
    int stream;                                    /* stream id of the current frame */
    uint64_t frames;                               /* complete headers parsed */
    uint64_t ignored;                              /* payload bytes of unknown streams */
    /* When set, also given every stdout (1) and stderr (2) payload byte as
     * it is parsed, kept or not (live output). */
    void (*tap)(void *ud, int stream, const char *p, size_t n);
    void *tap_ud;
} docker_stream_t;

/* Starts a parser writing into out and err (both initialised by the caller,
 * typically with sbuf_init(b, max_output)). Payload is added with
 * sbuf_append_bounded, so each buffer keeps at most its limit while its
 * `seen` counts every byte of its stream and `truncated` says when some were
 * dropped. */
void docker_stream_init(docker_stream_t *d, sbuf_t *out, sbuf_t *err);

/* Feeds the next n bytes of the stream; input may be split at any byte
 * boundary, including inside a header. Returns 0, or SBX_ENOMEM when a
 * buffer could not grow (then the stream should be abandoned). */
int docker_stream_push(docker_stream_t *d, const void *p, size_t n);

/* True when the parser is between frames (no partial header or payload),
 * i.e. the stream may end here without losing data. */
bool docker_stream_at_boundary(const docker_stream_t *d);

#endif
