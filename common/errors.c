/* Internal return codes and the single API error table. */
#include "errors.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *sbx_strerror(int code)
{
    switch (code) {
    case SBX_OK:        return "ok";
    case SBX_ENOMEM:    return "out of memory";
    case SBX_EINVAL:    return "invalid input";
    case SBX_ETOOBIG:   return "too large";
    case SBX_EIO:       return "input/output error";
    case SBX_ENOTFOUND: return "not found";
    case SBX_ECONFLICT: return "conflict";
    case SBX_EDB:       return "database error";
    case SBX_ETIMEOUT:  return "timed out";
    case SBX_EUNAVAIL:  return "unavailable";
    case SBX_ERUNTIME:  return "runtime error";
    case SBX_EAUTH:     return "authentication failed";
    case SBX_EPERM:     return "not permitted";
    case SBX_ECANCELLED: return "cancelled";
    default:            return "unknown error";
    }
}

static const api_code_info_t api_codes[API__COUNT] = {
    [API_INVALID_ARGUMENT]      = { "invalid_argument", 400, EXIT_API },
    [API_INVALID_JSON]          = { "invalid_json", 400, EXIT_API },
    [API_UNAUTHORIZED]          = { "unauthorized", 401, EXIT_API },
    [API_FORBIDDEN]             = { "forbidden", 403, EXIT_API },
    [API_NOT_FOUND]             = { "not_found", 404, EXIT_API },
    [API_METHOD_NOT_ALLOWED]    = { "method_not_allowed", 405, EXIT_API },
    [API_CONFLICT]              = { "conflict", 409, EXIT_API },
    [API_STALE_LEASE]           = { "stale_lease", 409, EXIT_API },
    [API_PAYLOAD_TOO_LARGE]     = { "payload_too_large", 413, EXIT_API },
    [API_POLICY_DENIED]         = { "policy_denied", 422, EXIT_OP_FAILED },
    [API_ISOLATION_UNAVAILABLE] = { "isolation_unavailable", 422, EXIT_OP_FAILED },
    [API_QUOTA_EXCEEDED]        = { "quota_exceeded", 429, EXIT_OP_FAILED },
    [API_UNAVAILABLE]           = { "unavailable", 503, EXIT_API },
    [API_INTERNAL]              = { "internal", 500, EXIT_API },
    [API_IMAGE_UNAVAILABLE]     = { "image_unavailable", 422, EXIT_OP_FAILED },
    [API_RUNTIME_ERROR]         = { "runtime_error", 500, EXIT_OP_FAILED },
    [API_TIMEOUT]               = { "timeout", 504, EXIT_OP_FAILED },
    [API_WORKER_LOST]           = { "worker_lost", 503, EXIT_OP_FAILED },
    [API_CANCELLED]             = { "cancelled", 409, EXIT_OP_FAILED },
    [API_BAD_GATEWAY]           = { "bad_gateway", 502, EXIT_API },
    [API_HEADERS_TOO_LARGE]     = { "headers_too_large", 431, EXIT_API },
    [API_SANDBOX_EXITED]        = { "sandbox_exited", 422, EXIT_OP_FAILED },
    [API_RATE_LIMITED]          = { "rate_limited", 429, EXIT_API },
    [API_REQUEST_TIMEOUT]       = { "request_timeout", 408, EXIT_API },
};

const api_code_info_t *api_code_info(api_code_t code)
{
    if ((int)code < 0 || code >= API__COUNT)
        return &api_codes[API_INTERNAL];
    return &api_codes[code];
}

int api_code_parse(const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < API__COUNT; i++)
        if (strcmp(api_codes[i].name, name) == 0)
            return i;
    return -1;
}

int api_error_set(api_error_t *err, api_code_t code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        err->code = code;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return SBX_EINVAL;
}
