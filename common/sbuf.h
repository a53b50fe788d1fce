/* A growable byte buffer with a hard cap, used for all untrusted input and
 * for exec output. Always NUL-terminated after a successful append. */
#ifndef SBX_SBUF_H
#define SBX_SBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sbuf {
    char *data;      /* NULL until the first append; owned */
    size_t len;      /* bytes kept */
    size_t cap;      /* bytes allocated (excluding nothing; data[len] is NUL) */
    size_t limit;    /* most bytes ever kept; 0 means SIZE_MAX */
    uint64_t seen;   /* bytes offered, kept or not */
    bool truncated;  /* some offered bytes were dropped by the limit */
} sbuf_t;

/* Initialises an empty buffer that keeps at most `limit` bytes. */
void sbuf_init(sbuf_t *b, size_t limit);

/* Appends all n bytes, or nothing: SBX_ETOOBIG when they would pass the
 * limit (and sets truncated), SBX_ENOMEM on allocation failure. */
int sbuf_append(sbuf_t *b, const void *p, size_t n);

/* Appends as many of the n bytes as the limit allows and drops the rest,
 * setting truncated. Returns 0, or SBX_ENOMEM. */
int sbuf_append_bounded(sbuf_t *b, const void *p, size_t n);

/* printf-style append, all or nothing like sbuf_append. */
int sbuf_printf(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The contents as a C string ("" when empty). Valid until the next append. */
const char *sbuf_cstr(const sbuf_t *b);

/* Hands the data to the caller (free() it); the buffer is empty afterwards.
 * Returns a malloc'd "" when empty, NULL only on allocation failure. */
char *sbuf_detach(sbuf_t *b, size_t *ret_len);

/* Empties the buffer, keeping its limit. */
void sbuf_reset(sbuf_t *b);

/* Frees the data; the buffer may be reused after sbuf_init. Accepts NULL. */
void sbuf_release(sbuf_t *b);

#endif
