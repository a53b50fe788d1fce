/* The pure parts of serving E2B's envd (envd.h): the controller's request
 * line, query strings, Connect envelopes and errors, and the proto3-JSON
 * forms of times, permissions and paths. No I/O. */
#include "envd.h"
#include "errors.h"
#include "jsonx.h"
#include "observed.h"
#include "tarstream.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the request line -------------------------------------------------- */

static int envd_bad(char *err, size_t errlen, const char *msg)
{
    snprintf(err, errlen, "%s", msg);
    return SBX_EINVAL;
}

void envd_req_release(envd_req_t *q)
{
    for (size_t i = 0; i < q->nheaders; i++) {
        free(q->names[i]);
        free(q->values[i]);
    }
    q->nheaders = 0;
    free(q->query);
    q->query = NULL;
}

const char *envd_req_header(const envd_req_t *q, const char *name)
{
    for (size_t i = 0; i < q->nheaders; i++)
        if (strcmp(q->names[i], name) == 0)
            return q->values[i];
    return NULL;
}

/* A JSON string member without NUL: its text, else NULL. */
static const char *envd_str(json_object *v)
{
    if (!json_object_is_type(v, json_type_string))
        return NULL;
    const char *s = json_object_get_string(v);
    return strlen(s) == (size_t)json_object_get_string_len(v) ? s : NULL;
}

static bool envd_printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
            return false;
    return true;
}

static bool envd_header_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > ENVD_HEADER_NAME_MAX)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-' || *s == '_' || *s == '.'))
            return false;
    return true;
}

static int envd_headers(json_object *h, envd_req_t *ret, char *err, size_t errlen)
{
    if (!json_object_is_type(h, json_type_object) || json_object_object_length(h) > ENVD_HEADERS_MAX)
        return envd_bad(err, errlen, "the request's headers must be an object of at most 16 strings");
    json_object_object_foreach(h, key, val) {
        const char *v = envd_str(val);
        if (!envd_header_name_ok(key) || !v || strlen(v) > ENVD_HEADER_VALUE_MAX)
            return envd_bad(err, errlen, "each header must be a lower-case name and a string of at most 1024 bytes");
        for (const char *p = v; *p; p++)
            if (((unsigned char)*p < 0x20 && *p != '\t') || *p == 0x7f)
                return envd_bad(err, errlen, "a header value has a control byte");
        size_t i = ret->nheaders;
        ret->names[i] = strdup(key);
        ret->values[i] = strdup(v);
        ret->nheaders++;
        if (!ret->names[i] || !ret->values[i])
            return envd_bad(err, errlen, "out of memory");
    }
    return 0;
}

static bool envd_int(json_object *v, int64_t *ret)
{
    if (!json_object_is_type(v, json_type_int))
        return false;
    errno = 0;
    *ret = json_object_get_int64(v);
    return errno == 0;
}

/* An id of the request line (caller, tenant): 1..max letters, digits and '_'. */
static bool envd_id(const char *s, size_t max)
{
    size_t n = s ? strlen(s) : 0;
    bool ok = n >= 1 && n <= max;
    for (size_t i = 0; ok && i < n; i++)
        ok = (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
             s[i] == '_';
    return ok;
}

int envd_request_parse(const char *line, size_t len, envd_req_t *ret, char *err, size_t errlen)
{
    api_error_t je;
    json_object *o = NULL;
    int r = 0;
    bool have_method = false, have_path = false, have_headers = false, have_body = false, have_max = false;
    memset(ret, 0, sizeof *ret);
    if (jsonx_parse(line, len, &o, &je) < 0 || !json_object_is_type(o, json_type_object)) {
        r = envd_bad(err, errlen, "the request line must be one JSON object");
        goto cleanup;
    }
    const char *op = jsonx_get_str(o, "op");
    if (!op || strcmp(op, "envd") != 0) {
        r = envd_bad(err, errlen, "the request's op must be \"envd\"");
        goto cleanup;
    }
    json_object_object_foreach(o, key, val) {
        const char *s = envd_str(val);
        if (strcmp(key, "op") == 0)
            continue;
        if (strcmp(key, "method") == 0 && !have_method) {
            static const char *const methods[] = { "GET", "POST", "PUT", "DELETE", "HEAD" };
            for (size_t i = 0; s && i < sizeof methods / sizeof *methods && !have_method; i++)
                have_method = strcmp(s, methods[i]) == 0;
            if (!have_method) {
                r = envd_bad(err, errlen, "the request's method must be GET, POST, PUT, DELETE or HEAD");
                goto cleanup;
            }
            snprintf(ret->method, sizeof ret->method, "%s", s);
        } else if (strcmp(key, "path") == 0 && !have_path) {
            if (!s || s[0] != '/' || strlen(s) > ENVD_PATH_MAX || strchr(s, '?') || !envd_printable(s)) {
                r = envd_bad(err, errlen, "the request's path must begin with '/', be printable ASCII without a "
                             "query, at most 256 bytes");
                goto cleanup;
            }
            snprintf(ret->path, sizeof ret->path, "%s", s);
            have_path = true;
        } else if (strcmp(key, "query") == 0 && !ret->query) {
            if (!s || strlen(s) > SBX_FILES_REQUEST_MAX || !envd_printable(s)) {
                r = envd_bad(err, errlen, "the request's query must be printable ASCII");
                goto cleanup;
            }
            if (!(ret->query = strdup(s))) {
                r = envd_bad(err, errlen, "out of memory");
                goto cleanup;
            }
        } else if (strcmp(key, "headers") == 0 && !have_headers) {
            if ((r = envd_headers(val, ret, err, errlen)) < 0)
                goto cleanup;
            have_headers = true;
        } else if (strcmp(key, "body") == 0 && !have_body) {
            if (!envd_int(val, &ret->body) || ret->body < -1) {
                r = envd_bad(err, errlen, "the request's body must be a byte count, or -1 when unknown");
                goto cleanup;
            }
            have_body = true;
        } else if (strcmp(key, "caller") == 0 && !ret->caller[0]) {
            if (!envd_id(s, ENVD_CALLER_MAX)) {
                r = envd_bad(err, errlen, "the request's caller must be a token id");
                goto cleanup;
            }
            memcpy(ret->caller, s, strlen(s) + 1);
        } else if (strcmp(key, "tenant") == 0 && !ret->tenant[0]) {
            if (!envd_id(s, ENVD_TENANT_MAX)) {
                r = envd_bad(err, errlen, "the request's tenant must be a tenant id: 1..64 letters, digits and '_'");
                goto cleanup;
            }
            memcpy(ret->tenant, s, strlen(s) + 1);
        } else if (strcmp(key, "max_bytes") == 0 && !have_max) {
            if (!envd_int(val, &ret->max_bytes) || ret->max_bytes < 1) {
                r = envd_bad(err, errlen, "the request's max_bytes must be a positive byte count");
                goto cleanup;
            }
            have_max = true;
        } else {
            char msg[160];
            snprintf(msg, sizeof msg, "the request has a key \"%.40s\" an envd request does not take", key);
            r = envd_bad(err, errlen, msg);
            goto cleanup;
        }
    }
    if (!have_method || !have_path || !ret->query || !have_headers || !have_body || !have_max)
        r = envd_bad(err, errlen, "an envd request must say its method, path, query, headers, body and max_bytes");
cleanup:
    if (o)
        json_object_put(o);
    if (r < 0)
        envd_req_release(ret);
    return r;
}

static int envd_hex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decodes n bytes of a query component into out (cap with the NUL). */
static int envd_query_decode(const char *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int ch = (unsigned char)s[i];
        if (ch == '+') {
            ch = ' ';
        } else if (ch == '%') {
            if (i + 2 >= n)
                return SBX_EINVAL;
            int hi = envd_hex(s[i + 1]), lo = envd_hex(s[i + 2]);
            if (hi < 0 || lo < 0)
                return SBX_EINVAL;
            ch = hi << 4 | lo;
            i += 2;
        }
        if (ch < 0x20 || ch == 0x7f)
            return SBX_EINVAL;
        if (o + 1 >= cap)
            return SBX_EINVAL;
        out[o++] = (char)ch;
    }
    out[o] = '\0';
    return 0;
}

int envd_query_param(const char *query, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name);
    char key[64];
    for (const char *p = query ? query : ""; *p;) {
        size_t n = strcspn(p, "&");
        const char *eq = memchr(p, '=', n);
        size_t kl = eq ? (size_t)(eq - p) : n;
        if (kl < sizeof key && envd_query_decode(p, kl, key, sizeof key) == 0 && strlen(key) == nl &&
            memcmp(key, name, nl) == 0) {
            if (!eq) {
                if (cap < 1)
                    return SBX_EINVAL;
                out[0] = '\0';
                return 1;
            }
            return envd_query_decode(eq + 1, n - kl - 1, out, cap) < 0 ? SBX_EINVAL : 1;
        }
        p += n + (p[n] == '&');
    }
    return 0;
}

/* ---- Connect ----------------------------------------------------------- */

void envd_envelope_header(unsigned char out[ENVD_ENVELOPE_HEADER], unsigned flags, uint32_t len)
{
    out[0] = (unsigned char)flags;
    out[1] = (unsigned char)(len >> 24);
    out[2] = (unsigned char)(len >> 16);
    out[3] = (unsigned char)(len >> 8);
    out[4] = (unsigned char)len;
}

int envd_envelope_one(const char *body, size_t n, const char **ret_msg, size_t *ret_len, char *err, size_t errlen)
{
    const unsigned char *b = (const unsigned char *)body;
    if (n < ENVD_ENVELOPE_HEADER)
        return envd_bad(err, errlen, "the request body is not a Connect envelope");
    uint32_t len = (uint32_t)b[1] << 24 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 8 | b[4];
    if (b[0] & ENVD_FLAG_COMPRESSED)
        return envd_bad(err, errlen, "compressed messages are not served: send them uncompressed");
    if (b[0] != 0)
        return envd_bad(err, errlen, "the request's envelope has flags a request message does not carry");
    if ((size_t)len != n - ENVD_ENVELOPE_HEADER)
        return envd_bad(err, errlen, "the request body must be exactly one Connect envelope");
    *ret_msg = body + ENVD_ENVELOPE_HEADER;
    *ret_len = len;
    return 0;
}

int envd_connect_http_status(const char *code)
{
    static const struct {
        const char *code;
        int status;
    } table[] = {
        { "canceled", 499 },          { "unknown", 500 },         { "invalid_argument", 400 },
        { "deadline_exceeded", 504 }, { "not_found", 404 },       { "already_exists", 409 },
        { "permission_denied", 403 }, { "resource_exhausted", 429 }, { "failed_precondition", 400 },
        { "aborted", 409 },           { "out_of_range", 400 },    { "unimplemented", 501 },
        { "internal", 500 },          { "unavailable", 503 },     { "data_loss", 500 },
        { "unauthenticated", 401 },
    };
    for (size_t i = 0; code && i < sizeof table / sizeof *table; i++)
        if (strcmp(code, table[i].code) == 0)
            return table[i].status;
    return 500;
}

char *envd_connect_error_json(const char *code, const char *message, bool end_stream)
{
    if (!code)
        return strdup("{}");
    json_object *e = json_object_new_object();
    if (!e)
        return NULL;
    jsonx_add_str(e, "code", code);
    jsonx_add_str(e, "message", message ? message : "");
    json_object *o = e;
    if (end_stream) {
        o = json_object_new_object();
        if (!o) {
            json_object_put(e);
            return NULL;
        }
        jsonx_add(o, "error", e);
    }
    char *s = jsonx_dump(o);
    json_object_put(o);
    return s;
}

/* ---- proto3 JSON pieces ------------------------------------------------ */

/* n decimal digits at s (checked by observed_time_ok): their value. */
static int envd_digits(const char *s, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++)
        v = v * 10 + (s[i] - '0');
    return v;
}

int envd_timestamp_normalize(const char *s, char *out, size_t outlen)
{
    /* its shape and fields in range, as the controller checks a worker's times */
    if (!observed_time_ok(s))
        return SBX_EINVAL;
    int y = envd_digits(s, 4), mo = envd_digits(s + 5, 2), d = envd_digits(s + 8, 2);
    int h = envd_digits(s + 11, 2), mi = envd_digits(s + 14, 2), se = envd_digits(s + 17, 2);
    const char *p = s + 19;
    long nanos = 0;
    if (*p == '.') {
        int k = 0;
        for (p++; *p >= '0' && *p <= '9'; p++, k++)
            nanos = nanos * 10 + (*p - '0');
        for (; k < 9; k++)
            nanos *= 10;
    }
    long off = 0;
    if (*p == '+' || *p == '-')
        off = (envd_digits(p + 1, 2) * 3600L + envd_digits(p + 4, 2) * 60L) * (*p == '-' ? -1 : 1);
    struct tm tm = { .tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h, .tm_min = mi,
                     .tm_sec = se };
    time_t t = timegm(&tm) - off;
    struct tm u;
    if (!gmtime_r(&t, &u) || u.tm_year + 1900 < 1 || u.tm_year + 1900 > 9999)
        return SBX_EINVAL;
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &u);
    if (nanos == 0)
        snprintf(out, outlen, "%sZ", base);
    else if (nanos % 1000000 == 0)
        snprintf(out, outlen, "%s.%03ldZ", base, nanos / 1000000);
    else if (nanos % 1000 == 0)
        snprintf(out, outlen, "%s.%06ldZ", base, nanos / 1000);
    else
        snprintf(out, outlen, "%s.%09ldZ", base, nanos);
    return 0;
}

void envd_permissions(const char *type, unsigned mode, char *out, size_t outlen)
{
    /* Go's letters, in its order ("dalTLDpSugct?"): the type, then
     * setuid, setgid and sticky; "-" when there are none. */
    char s[16];
    size_t n = 0;
    if (strcmp(type, "dir") == 0)
        s[n++] = 'd';
    else if (strcmp(type, "symlink") == 0)
        s[n++] = 'L';
    else if (strcmp(type, "file") != 0)
        s[n++] = '?';
    if (mode & 04000)
        s[n++] = 'u';
    if (mode & 02000)
        s[n++] = 'g';
    if (mode & 01000)
        s[n++] = 't';
    if (n == 0)
        s[n++] = '-';
    static const char rwx[] = "rwxrwxrwx";
    for (int i = 0; i < 9; i++)
        s[n++] = mode & (0400u >> i) ? rwx[i] : '-';
    s[n] = '\0';
    snprintf(out, outlen, "%s", s);
}

int envd_path_resolve(const char *path, char *out)
{
    size_t n = path ? strlen(path) : 0;
    if (n == 0 || n >= SBX_FILES_PATH_MAX)
        return SBX_EINVAL;
    char abs[SBX_FILES_PATH_MAX + 2];
    snprintf(abs, sizeof abs, "%s%s", path[0] == '/' ? "" : "/", path);
    return tarstream_path_clean(abs, out) < 0 ? SBX_EINVAL : 0;
}
