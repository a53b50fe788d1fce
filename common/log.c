/* Log lines on stderr, one write(2) per line so threads do not interleave. */
#include "log.h"
#include "errors.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_BYTES 16384 /* a 2 KiB message escaped six-fold still fits */

/* Set at start-up (and by tests), read by every thread. */
static _Atomic(log_level_t) log_min = LOG_INFO;
static _Atomic(log_format_t) log_fmt = LOG_FORMAT_LOGFMT;

static _Thread_local struct {
    char request_id[65], tenant[65], sandbox[65], operation[65];
} scope;

void log_set_level(log_level_t level) { log_min = level; }
void log_set_format(log_format_t format) { log_fmt = format; }

int log_level_parse(const char *s, log_level_t *ret)
{
    static const char *names[] = { "debug", "info", "warn", "error" };
    for (int i = 0; i < 4; i++)
        if (strcasecmp(s, names[i]) == 0) {
            *ret = (log_level_t)i;
            return 0;
        }
    return SBX_EINVAL;
}

int log_format_parse(const char *s, log_format_t *ret)
{
    if (strcasecmp(s, "logfmt") == 0)
        *ret = LOG_FORMAT_LOGFMT;
    else if (strcasecmp(s, "json") == 0)
        *ret = LOG_FORMAT_JSON;
    else
        return SBX_EINVAL;
    return 0;
}

void log_scope_set(const log_ctx_t *ctx)
{
    if (ctx->request_id)
        snprintf(scope.request_id, sizeof scope.request_id, "%s", ctx->request_id);
    if (ctx->tenant)
        snprintf(scope.tenant, sizeof scope.tenant, "%s", ctx->tenant);
    if (ctx->sandbox)
        snprintf(scope.sandbox, sizeof scope.sandbox, "%s", ctx->sandbox);
    if (ctx->operation)
        snprintf(scope.operation, sizeof scope.operation, "%s", ctx->operation);
}

void log_scope_clear(void) { memset(&scope, 0, sizeof scope); }

typedef struct {
    char b[LINE_MAX_BYTES];
    size_t n;
} line_t;

static void put(line_t *l, const char *s, size_t len)
{
    if (len > sizeof l->b - 2 - l->n)
        len = sizeof l->b - 2 - l->n;
    memcpy(l->b + l->n, s, len);
    l->n += len;
}

static void puts_(line_t *l, const char *s) { put(l, s, strlen(s)); }

/* Appends s quoted for the format: JSON string rules, or logfmt's "…" with
 * \" and \\ (newlines become spaces there). Control bytes become \u00XX or
 * spaces; other bytes pass (the caller's text is UTF-8). */
static void put_quoted(line_t *l, const char *s)
{
    put(l, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            put(l, esc, 2);
        } else if (*p < 0x20 || *p == 0x7f) {
            if (log_fmt == LOG_FORMAT_JSON) {
                snprintf(esc, sizeof esc, "\\u%04x", *p);
                put(l, esc, 6);
            } else {
                put(l, " ", 1);
            }
        } else {
            put(l, (const char *)p, 1);
        }
    }
    put(l, "\"", 1);
}

static void put_field(line_t *l, const char *key, const char *value, bool quote)
{
    if (!value || !*value)
        return;
    if (log_fmt == LOG_FORMAT_JSON) {
        puts_(l, ",\"");
        puts_(l, key);
        puts_(l, "\":");
        put_quoted(l, value);
    } else {
        puts_(l, " ");
        puts_(l, key);
        puts_(l, "=");
        if (quote)
            put_quoted(l, value);
        else
            puts_(l, value);
    }
}

/* logfmt values need quotes when they hold spaces, quotes, '=' or nothing. */
static bool needs_quotes(const char *v)
{
    if (!*v)
        return true;
    for (const unsigned char *p = (const unsigned char *)v; *p; p++)
        if (*p <= ' ' || *p == '"' || *p == '=' || *p == '\\' || *p == 0x7f)
            return true;
    return false;
}

static void log_vwrite(log_level_t level, const char *component, const log_ctx_t *ctx, const char *const *fields,
                       const char *fmt, va_list ap)
{
    static const char *names[] = { "debug", "info", "warn", "error" };
    if (level < log_min)
        return;
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[96];
    snprintf(when, sizeof when, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
    const char *rid = ctx && ctx->request_id ? ctx->request_id : scope.request_id;
    const char *tenant = ctx && ctx->tenant ? ctx->tenant : scope.tenant;
    const char *sbx = ctx && ctx->sandbox ? ctx->sandbox : scope.sandbox;
    const char *op = ctx && ctx->operation ? ctx->operation : scope.operation;

    line_t l;
    l.n = 0;
    bool json = log_fmt == LOG_FORMAT_JSON;
    if (json) {
        puts_(&l, "{\"ts\":\"");
        puts_(&l, when);
        puts_(&l, "\"");
    } else {
        puts_(&l, "ts=");
        puts_(&l, when);
    }
    put_field(&l, "level", names[level], false);
    put_field(&l, "component", component ? component : "-", false);
    put_field(&l, "request_id", rid, true);
    put_field(&l, "tenant", tenant, true);
    put_field(&l, "sandbox", sbx, true);
    put_field(&l, "operation", op, true);
    for (int i = 0; fields && fields[i]; i += 2)
        if (fields[i + 1])
            put_field(&l, fields[i], fields[i + 1], needs_quotes(fields[i + 1]));
    put_field(&l, "msg", msg[0] ? msg : "-", true);
    if (json)
        puts_(&l, "}");
    l.b[l.n++] = '\n';
    ssize_t w = write(STDERR_FILENO, l.b, l.n);
    (void)w;
}

void log_write(log_level_t level, const char *component, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vwrite(level, component, NULL, NULL, fmt, ap);
    va_end(ap);
}

void log_write_fields(log_level_t level, const char *component, const char *const *fields, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vwrite(level, component, NULL, fields, fmt, ap);
    va_end(ap);
}

void log_write_ctx(log_level_t level, const char *component, const log_ctx_t *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vwrite(level, component, ctx, NULL, fmt, ap);
    va_end(ap);
}
