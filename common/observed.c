/* Reading and judging what a runtime observed of a container. */
#include "observed.h"
#include "jsonx.h"
#include "utf8.h"

#include <stdio.h>
#include <string.h>

/* A string field: absent is fine (*ret NULL); otherwise a string of at most
 * max bytes, valid UTF-8 without NUL (and without control characters when
 * !controls). */
static int observed_str(json_object *o, const char *key, const char *what, size_t max, bool controls,
                        const char **ret, size_t *ret_len, api_error_t *err)
{
    json_object *v;
    *ret = NULL;
    if (ret_len)
        *ret_len = 0;
    if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
        return 0;
    if (!json_object_is_type(v, json_type_string))
        return api_error_set(err, API_INVALID_ARGUMENT, "%s.%s must be a string", what, key);
    const char *s = json_object_get_string(v);
    size_t n = (size_t)json_object_get_string_len(v);
    if (n > max)
        return api_error_set(err, API_INVALID_ARGUMENT, "%s.%s is longer than %zu bytes", what, key, max);
    if (strlen(s) != n || !utf8_valid(s, n))
        return api_error_set(err, API_INVALID_ARGUMENT, "%s.%s must be UTF-8 text without NUL", what, key);
    if (!controls && utf8_has_control(s))
        return api_error_set(err, API_INVALID_ARGUMENT, "%s.%s holds a control character", what, key);
    *ret = s;
    if (ret_len)
        *ret_len = n;
    return 0;
}

int observed_from_json(json_object *o, const char *what, observed_t *ret, api_error_t *err)
{
    observed_t ob;
    memset(&ob, 0, sizeof ob);
    if (!o || !json_object_is_type(o, json_type_object))
        return api_error_set(err, API_INVALID_ARGUMENT, "%s must be an object", what);
    const char *s;
    if (observed_str(o, "state", what, OBSERVED_STATE_MAX - 1, false, &s, NULL, err) < 0)
        return SBX_EINVAL;
    if (!s || !*s || strspn(s, "abcdefghijklmnopqrstuvwxyz_") != strlen(s))
        return api_error_set(err, API_INVALID_ARGUMENT, "%s.state must be a lower-case word", what);
    snprintf(ob.state, sizeof ob.state, "%s", s);

    json_object *v;
    if (json_object_object_get_ex(o, "exit_code", &v) && !json_object_is_type(v, json_type_null)) {
        int64_t code = json_object_get_int64(v);
        if (!json_object_is_type(v, json_type_int) || code < -1 || code > INT32_MAX)
            return api_error_set(err, API_INVALID_ARGUMENT, "%s.exit_code must be an integer from -1 to %d", what,
                                 INT32_MAX);
        ob.has_exit_code = true;
        ob.exit_code = code;
    }
    const char *bools[] = { "oom_killed", "disk_quota_exceeded" };
    bool *dst[] = { &ob.oom_killed, &ob.disk_quota_exceeded };
    for (size_t i = 0; i < 2; i++)
        if (json_object_object_get_ex(o, bools[i], &v) && !json_object_is_type(v, json_type_null)) {
            if (!json_object_is_type(v, json_type_boolean))
                return api_error_set(err, API_INVALID_ARGUMENT, "%s.%s must be a boolean", what, bools[i]);
            *dst[i] = json_object_get_boolean(v);
        }
    if (observed_str(o, "finished_at", what, OBSERVED_TIME_MAX - 1, false, &s, NULL, err) < 0)
        return SBX_EINVAL;
    if (s && !observed_time_ok(s))
        return api_error_set(err, API_INVALID_ARGUMENT, "%s.finished_at must be an RFC 3339 time", what);
    snprintf(ob.finished_at, sizeof ob.finished_at, "%s", s ? s : "");
    if (observed_str(o, "error", what, SBX_OBSERVED_ERROR_MAX - 1, false, &s, NULL, err) < 0)
        return SBX_EINVAL;
    snprintf(ob.error, sizeof ob.error, "%s", s ? s : "");
    if (observed_str(o, "output_tail", what, SBX_OUTPUT_TAIL_MAX, true, &ob.output_tail, &ob.output_tail_len, err) <
        0)
        return SBX_EINVAL;
    *ret = ob;
    return 0;
}

bool observed_stopped(const char *state)
{
    return state && (strcmp(state, "exited") == 0 || strcmp(state, "dead") == 0);
}

/* n digits at s as a number, or -1. */
static int observed_digits(const char *s, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

bool observed_time_ok(const char *s)
{
    if (!s || strlen(s) < 20 || s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't') || s[13] != ':' ||
        s[16] != ':')
        return false;
    int y = observed_digits(s, 4), mo = observed_digits(s + 5, 2), d = observed_digits(s + 8, 2);
    int h = observed_digits(s + 11, 2), mi = observed_digits(s + 14, 2), se = observed_digits(s + 17, 2);
    static const int mdays[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
    if (y < 1 || mo < 1 || mo > 12 || d < 1 || h < 0 || h > 23 || mi < 0 || mi > 59 || se < 0 || se > 59)
        return false;
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (d > mdays[mo - 1] + (mo == 2 && leap ? 1 : 0))
        return false;
    const char *p = s + 19;
    if (*p == '.') {
        size_t f = strspn(p + 1, "0123456789");
        if (f < 1 || f > 9)
            return false;
        p += 1 + f;
    }
    if ((*p == 'Z' || *p == 'z') && p[1] == '\0')
        return true;
    if ((*p == '+' || *p == '-') && strlen(p) == 6 && p[3] == ':') {
        int oh = observed_digits(p + 1, 2), om = observed_digits(p + 4, 2);
        return oh >= 0 && oh <= 23 && om >= 0 && om <= 59;
    }
    return false;
}

bool observed_time_known(const char *s)
{
    return s && observed_time_ok(s) && strncmp(s, "0001-", 5) != 0;
}

const char *observed_reason(const observed_t *o)
{
    if (o->disk_quota_exceeded && observed_stopped(o->state))
        return OBSERVED_DISK_QUOTA;
    if (o->oom_killed)
        return OBSERVED_OOM_KILLED;
    /* Docker keeps a container whose process could not start in "created"
     * with State.Error saying why. */
    if (o->error[0] && !observed_stopped(o->state))
        return OBSERVED_START_FAILED;
    if (o->error[0] && !observed_time_known(o->finished_at))
        return OBSERVED_START_FAILED;
    return OBSERVED_EXITED;
}

static const char *observed_signal_name(int sig)
{
    static const struct { int n; const char *name; } names[] = {
        { 1, "SIGHUP" },  { 2, "SIGINT" },   { 3, "SIGQUIT" },  { 4, "SIGILL" },  { 6, "SIGABRT" },
        { 7, "SIGBUS" },  { 8, "SIGFPE" },   { 9, "SIGKILL" },  { 11, "SIGSEGV" }, { 13, "SIGPIPE" },
        { 14, "SIGALRM" }, { 15, "SIGTERM" }, { 10, "SIGUSR1" }, { 12, "SIGUSR2" },
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].n == sig)
            return names[i].name;
    return NULL;
}

/* The last non-empty line of the tail, at most max bytes of it (its end). */
static void observed_last_line(const char *t, size_t n, char *out, size_t outlen)
{
    out[0] = '\0';
    while (n > 0 && (t[n - 1] == '\n' || t[n - 1] == '\r' || t[n - 1] == ' ' || t[n - 1] == '\t'))
        n--;
    size_t b = n;
    while (b > 0 && t[b - 1] != '\n')
        b--;
    while (b < n && (t[b] == ' ' || t[b] == '\t'))
        b++;
    size_t len = n - b;
    if (len >= outlen) {
        b = n - (outlen - 1);
        while (b < n && ((unsigned char)t[b] & 0xC0) == 0x80)
            b++;
        len = n - b;
    }
    size_t o = 0;
    for (size_t i = 0; i < len && o + 1 < outlen; i++) {
        unsigned char c = (unsigned char)t[b + i];
        out[o++] = c < 0x20 || c == 0x7f ? ' ' : (char)c;
    }
    out[o] = '\0';
}

void observed_message(const observed_t *o, char *out, size_t outlen)
{
    const char *reason = observed_reason(o);
    int code = o->has_exit_code ? (int)o->exit_code : -1;
    int n;
    if (strcmp(reason, OBSERVED_DISK_QUOTA) == 0)
        n = snprintf(out, outlen, "the sandbox wrote more than its disk quota (disk_mib) to its filesystem and the "
                                  "worker stopped it (exit code %d)", code);
    else if (strcmp(reason, OBSERVED_OOM_KILLED) == 0)
        n = snprintf(out, outlen, "the main process was killed by the kernel's OOM killer: the sandbox ran out of "
                                  "memory (exit code %d)", code);
    else if (strcmp(reason, OBSERVED_START_FAILED) == 0)
        n = snprintf(out, outlen, "the runtime could not start the main process: %s", o->error);
    else if (code > 128 && code <= 128 + 64 && observed_signal_name(code - 128))
        n = snprintf(out, outlen, "the main process exited with code %d (killed by signal %d, %s)", code,
                     code - 128, observed_signal_name(code - 128));
    else if (code >= 0)
        n = snprintf(out, outlen, "the main process exited with code %d", code);
    else
        n = snprintf(out, outlen, "the main process is no longer running (state %s)", o->state);
    if (n < 0 || (size_t)n >= outlen || !o->output_tail)
        return;
    char line[240];
    observed_last_line(o->output_tail, o->output_tail_len, line, sizeof line);
    if (line[0])
        snprintf(out + n, outlen - (size_t)n, "; last output: %s", line);
}

json_object *observed_failure_json(const observed_t *o)
{
    char msg[1024];
    observed_message(o, msg, sizeof msg);
    /* A cut at the buffer's end must not leave half a character. */
    size_t l = strlen(msg);
    while (l > 0 && !utf8_valid(msg, l))
        msg[--l] = '\0';
    json_object *f = json_object_new_object();
    jsonx_add_str(f, "reason", observed_reason(o));
    if (o->has_exit_code)
        jsonx_add_int(f, "exit_code", o->exit_code);
    jsonx_add_str(f, "message", msg);
    return f;
}

json_object *observed_removed_failure_json(void)
{
    json_object *f = json_object_new_object();
    jsonx_add_str(f, "reason", OBSERVED_REMOVED);
    jsonx_add_str(f, "message", "the container was removed outside Sandbox: it is no longer in its worker's "
                                "inventory");
    return f;
}
