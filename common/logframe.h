/* The bytes of `sandbox logs` on their way: the frames a worker writes on a
 * logs connection (worker/forward.c) after its "200 ok" line, and the
 * NDJSON lines the controller turns them into (GET /v1/sandboxes/{id}/logs).
 *
 * A frame is a 5-byte header, a type byte and the payload's length as a
 * big-endian uint32, then the payload:
 *   LOGFRAME_STDOUT / LOGFRAME_STDERR  bytes the main process wrote there;
 *   LOGFRAME_END                       the last frame: an empty payload when
 *                                      the stream ended as asked (all of it
 *                                      was read, or the container stopped),
 *                                      else a one-line reason. */
#ifndef SBX_LOGFRAME_H
#define SBX_LOGFRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sbuf.h"

#define LOGFRAME_HEADER_BYTES 5
/* A frame's payload is at most this: a writer splits longer pieces, and a
 * reader refuses a longer one (so it buffers at most one frame). */
#define LOGFRAME_PAYLOAD_MAX  (64u * 1024u)

enum {
    LOGFRAME_STDOUT = 1,
    LOGFRAME_STDERR = 2,
    LOGFRAME_END = 3,
};

typedef struct logframe {
    int type;                 /* LOGFRAME_* */
    const unsigned char *data; /* the payload, inside the parsed buffer */
    uint32_t len;
    size_t size;              /* header + payload: the bytes to consume */
} logframe_t;

/* Writes the header of a frame of type with len payload bytes. */
void logframe_header(unsigned char ret[LOGFRAME_HEADER_BYTES], int type, uint32_t len);

/* Looks at the n bytes at buf: 1 when they start with a whole frame (*ret
 * filled, pointing into buf); 0 when more bytes are needed (n may be
 * anything; only the header is needed to know how many); SBX_EINVAL for an
 * unknown type or a payload over LOGFRAME_PAYLOAD_MAX. */
int logframe_parse(const unsigned char *buf, size_t n, logframe_t *ret);

/* The length of the longest prefix of the n bytes that does not end inside
 * a UTF-8 sequence that more bytes could still complete: the rest (at most
 * 3 bytes) is to be held back until the next piece of the same stream. */
size_t logframe_utf8_prefix(const char *s, size_t n);

/* Appends one NDJSON line {"stream":"<stream>","data":"<text>"}\n to b,
 * the text being the n bytes with invalid UTF-8 (and NUL) replaced by
 * U+FFFD. Returns 0, SBX_ENOMEM or SBX_ETOOBIG (b's limit). */
int logframe_ndjson_chunk(sbuf_t *b, const char *stream, const char *data, size_t n);

#endif
