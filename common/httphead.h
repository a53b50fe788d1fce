/* One HTTP/1.x request-head parser, for the route proxy (controller/proxy.c)
 * and the worker's health server (worker/health.c): the request line
 * "METHOD SP origin-form SP HTTP/1.0|1.1", then "Name: value" lines up to
 * the blank line. Bounded by common/limits.h (SBX_HTTP_MAX_HEADERS,
 * SBX_HTTP_METHOD_MAX); every malformed case is refused with a reason. */
#ifndef SBX_HTTPHEAD_H
#define SBX_HTTPHEAD_H

#include <stdbool.h>
#include <stddef.h>

#include "limits.h"

/* How strict a caller is about line ends, and whether it keeps headers. */
typedef struct httphead_opts {
    bool bare_lf;            /* a bare LF ends a line too (else only CRLF) */
    bool keep_headers;       /* fill name/value: more than SBX_HTTP_MAX_HEADERS
                              * lines is SBX_ETOOBIG; else they are only checked */
} httphead_opts_t;

/* A parsed head: pointers into the caller's buffer, NUL-terminated in place. */
typedef struct httphead {
    char *method;
    char *target;            /* origin-form: starts with '/' */
    int minor;               /* HTTP/1.minor */
    int nh;                  /* headers kept (keep_headers), in order */
    char *name[SBX_HTTP_MAX_HEADERS];
    char *value[SBX_HTTP_MAX_HEADERS];   /* without surrounding spaces and tabs */
} httphead_t;

/* The length of the head at the start of buf[0, len): up to and including
 * the blank line that ends it (CRLF; also bare LF when bare_lf), or 0 when
 * it has not ended yet. */
size_t httphead_end(const char *buf, size_t len, bool bare_lf);

/* Parses the complete head buf[0, len) (httphead_end bytes) in place: buf
 * must be writable and NUL-terminated at len; *ret points into it. Returns
 * 0, SBX_EINVAL with the reason in why (a NUL byte, a request line that is
 * not METHOD SP TARGET SP HTTP/1.x with single spaces, a method that is not
 * a token, a target that is not a printable path, a line end not allowed
 * by opts, a folded, nameless or badly named header line, a control byte
 * in a value, bytes after the blank line), or SBX_ETOOBIG (too many
 * headers, with keep_headers). why may be NULL. */
int httphead_parse(char *buf, size_t len, const httphead_opts_t *opts, httphead_t *ret, char *why, size_t whylen);

/* The last value of header name (case-insensitive) or NULL. */
const char *httphead_get(const httphead_t *h, const char *name);

#endif
