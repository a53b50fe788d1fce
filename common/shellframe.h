/* The frames of `sandbox shell` (an interactive terminal in a sandbox), in
 * both directions after the worker's "200 ok" line: client -> controller ->
 * worker and back. The controller checks them and passes them on; the
 * worker turns them into the terminal's input, resizes and its end.
 *
 * A frame is a 5-byte header, a type byte and the payload's length as a
 * big-endian uint32, then the payload:
 *   SHELLFRAME_DATA    either way: keystrokes (client -> worker) or the
 *                      terminal's output (worker -> client), 1..PAYLOAD_MAX bytes;
 *   SHELLFRAME_RESIZE  client -> worker: 4 bytes, cols and rows as
 *                      big-endian uint16, each 1..SHELLFRAME_SIZE_MAX;
 *   SHELLFRAME_EOF     client -> worker: empty; the client's input ended;
 *   SHELLFRAME_EXIT    worker -> client, the last frame: 4 bytes, the exit
 *                      code as a big-endian int32 (-1: unknown);
 *   SHELLFRAME_STDERR  worker -> client, only without a terminal (tty=false):
 *                      the command's stderr, 1..PAYLOAD_MAX bytes (DATA is
 *                      then its stdout alone).
 * Without a terminal EOF closes the command's stdin (it reads end of file)
 * and RESIZE is ignored. */
#ifndef SBX_SHELLFRAME_H
#define SBX_SHELLFRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHELLFRAME_HEADER_BYTES 5
/* A DATA frame's payload is at most this: a writer splits longer pieces. */
#define SHELLFRAME_PAYLOAD_MAX  (16u * 1024u)
/* A terminal's columns and rows are 1..this. */
#define SHELLFRAME_SIZE_MAX     1000
/* The longest frame. */
#define SHELLFRAME_MAX          (SHELLFRAME_HEADER_BYTES + SHELLFRAME_PAYLOAD_MAX)

enum {
    SHELLFRAME_DATA = 1,
    SHELLFRAME_RESIZE = 2,
    SHELLFRAME_EOF = 3,
    SHELLFRAME_EXIT = 4,
    SHELLFRAME_STDERR = 5,
};

/* Which direction a decoder reads: the types it accepts. */
typedef enum {
    SHELLFRAME_TO_WORKER = 0, /* DATA, RESIZE, EOF */
    SHELLFRAME_TO_CLIENT,     /* DATA, STDERR, EXIT */
} shellframe_dir_t;

typedef struct shellframe {
    int type;                 /* SHELLFRAME_* */
    const unsigned char *data; /* the payload, inside the decoder */
    uint32_t len;
    unsigned cols, rows;      /* RESIZE */
    int32_t exit_code;        /* EXIT */
} shellframe_t;

/* An incremental decoder: holds at most one frame. */
typedef struct shellframe_dec {
    shellframe_dir_t dir;
    unsigned char buf[SHELLFRAME_MAX];
    size_t len;               /* bytes of the current frame held */
    bool ready;               /* buf holds a whole frame handed out last */
} shellframe_dec_t;

/* Starts a decoder for frames going in direction dir. */
void shellframe_dec_init(shellframe_dec_t *d, shellframe_dir_t dir);

/* Takes bytes from the n at data, *ret_used of them: 1 once a whole frame
 * is decoded (*ret points into d, valid until the next call); 0 when all n
 * were taken and no frame is complete; SBX_EINVAL for a type the direction
 * does not take, a DATA or STDERR frame that is empty or over SHELLFRAME_PAYLOAD_MAX,
 * a RESIZE not 4 bytes or with a size outside 1..SHELLFRAME_SIZE_MAX, an
 * EOF with a payload, an EXIT not 4 bytes (the decoder is then useless). */
int shellframe_next(shellframe_dec_t *d, const void *data, size_t n, size_t *ret_used, shellframe_t *ret);

/* Writes the header of a frame of type with len payload bytes. */
void shellframe_header(unsigned char ret[SHELLFRAME_HEADER_BYTES], int type, uint32_t len);

/* Writes a whole RESIZE frame (cols, rows clamped to 1..SHELLFRAME_SIZE_MAX). */
void shellframe_resize(unsigned char ret[SHELLFRAME_HEADER_BYTES + 4], unsigned cols, unsigned rows);

/* Writes a whole EXIT frame. */
void shellframe_exit(unsigned char ret[SHELLFRAME_HEADER_BYTES + 4], int32_t code);

#endif
