/* Internal return codes and the API error table (code -> HTTP status -> CLI exit). */
#ifndef SBX_ERRORS_H
#define SBX_ERRORS_H

#include <stddef.h>

/* Functions that can fail return 0 or one of these (negative). */
enum {
    SBX_OK        = 0,
    SBX_ENOMEM    = -1,  /* allocation failed */
    SBX_EINVAL    = -2,  /* invalid input */
    SBX_ETOOBIG   = -3,  /* a bound was hit */
    SBX_EIO       = -4,  /* I/O or transport failure */
    SBX_ENOTFOUND = -5,  /* no such object */
    SBX_ECONFLICT = -6,  /* state changed underneath (compare-and-set lost) */
    SBX_EDB       = -7,  /* database error */
    SBX_ETIMEOUT  = -8,  /* deadline passed */
    SBX_EUNAVAIL  = -9,  /* a dependency is unavailable */
    SBX_ERUNTIME  = -10, /* the container runtime refused or failed */
    SBX_EAUTH     = -11, /* authentication failed */
    SBX_EPERM     = -12, /* not allowed */
    SBX_ECANCELLED = -13, /* the caller (or a signal) stopped it */
};

/* A short name for an internal code ("invalid", "io", ...). */
const char *sbx_strerror(int code);

/* The API error codes. One table maps each to its HTTP status and the CLI
 * exit code a client uses when the API answers with it. */
typedef enum {
    API_INVALID_ARGUMENT = 0,
    API_INVALID_JSON,
    API_UNAUTHORIZED,
    API_FORBIDDEN,
    API_NOT_FOUND,
    API_METHOD_NOT_ALLOWED,
    API_CONFLICT,
    API_STALE_LEASE,
    API_PAYLOAD_TOO_LARGE,
    API_POLICY_DENIED,
    API_ISOLATION_UNAVAILABLE,
    API_QUOTA_EXCEEDED,
    API_UNAVAILABLE,
    API_INTERNAL,
    API_IMAGE_UNAVAILABLE,
    API_RUNTIME_ERROR,
    API_TIMEOUT,
    API_WORKER_LOST,
    API_CANCELLED,
    API_BAD_GATEWAY,
    API_HEADERS_TOO_LARGE,
    API_SANDBOX_EXITED,   /* the sandbox's main process is not running (exited, killed, never started) */
    API_RATE_LIMITED,     /* a token's request rate or a tenant's operation rate was passed: retry after Retry-After */
    API_REQUEST_TIMEOUT,  /* the request's head did not arrive within api_head_timeout_seconds */
    API__COUNT
} api_code_t;

typedef struct api_code_info {
    const char *name;    /* snake_case, on the wire */
    int http_status;
    int cli_exit;        /* exit code of `sandbox` when a request answers this */
} api_code_info_t;

/* Never NULL for a valid code. */
const api_code_info_t *api_code_info(api_code_t code);
/* Returns the code for a wire name, or -1. */
int api_code_parse(const char *name);

/* An API error being built: a code and a human message. */
typedef struct api_error {
    api_code_t code;
    char message[512];
} api_error_t;

/* Fills err (if not NULL) with code and a printf-formatted message; returns
 * SBX_EINVAL so callers can `return api_error_set(...)`. */
int api_error_set(api_error_t *err, api_code_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* CLI exit codes (docs/cli.md#exit-codes): a stable contract. */
enum {
    EXIT_OK = 0,
    EXIT_OP_FAILED = 1,
    EXIT_USAGE = 2,
    EXIT_API = 3,
    EXIT_TIMEOUT = 124,
};

#endif
