/* Structured logging on stderr: logfmt (default) or JSON lines. Library
 * code in common/ logs at debug at most; daemons log once where they decide.
 *
 * Each line carries ts, level, component and msg, plus whichever of
 * request_id, tenant, sandbox and operation are known: from the calling
 * thread's scope (log_scope_*, set by the HTTP server around a request) or
 * from an explicit log_ctx_t. Secrets never go into a log line: callers log
 * ids, never tokens, and the server never logs header values. */
#ifndef SBX_LOG_H
#define SBX_LOG_H

typedef enum { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR } log_level_t;
typedef enum { LOG_FORMAT_LOGFMT = 0, LOG_FORMAT_JSON } log_format_t;

/* The ids a line is about; any field may be NULL. */
typedef struct log_ctx {
    const char *request_id;
    const char *tenant;
    const char *sandbox;
    const char *operation;
} log_ctx_t;

/* Sets the lowest level written; thread-safe to call at start-up. */
void log_set_level(log_level_t level);
/* Parses "debug|info|warn|error"; returns 0 or SBX_EINVAL. */
int log_level_parse(const char *s, log_level_t *ret);
/* Sets the line format; call at start-up. */
void log_set_format(log_format_t format);
/* Parses "logfmt|json"; returns 0 or SBX_EINVAL. */
int log_format_parse(const char *s, log_format_t *ret);

/* The calling thread's scope: copied (ids are bounded to 64 bytes), kept
 * until log_scope_clear. NULL fields leave the current value. */
void log_scope_set(const log_ctx_t *ctx);
void log_scope_clear(void);

/* Writes one line with the thread's scope. */
void log_write(log_level_t level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Writes one line with ctx's ids (over the thread's scope). */
void log_write_ctx(log_level_t level, const char *component, const log_ctx_t *ctx, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Writes one line with the thread's scope plus extra fields: fields is
 * {key, value, key, value, ..., NULL}; keys are plain words, values any
 * text (NULL values are skipped). */
void log_write_fields(log_level_t level, const char *component, const char *const *fields, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define log_debug(comp, ...) log_write(LOG_DEBUG, comp, __VA_ARGS__)
#define log_info(comp, ...)  log_write(LOG_INFO, comp, __VA_ARGS__)
#define log_warn(comp, ...)  log_write(LOG_WARN, comp, __VA_ARGS__)
#define log_error(comp, ...) log_write(LOG_ERROR, comp, __VA_ARGS__)

#endif
