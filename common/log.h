/* Structured logging (logfmt on stderr). Library code in common/ logs at
 * debug at most; daemons log once where they decide. */
#ifndef SBX_LOG_H
#define SBX_LOG_H

typedef enum { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR } log_level_t;

/* Sets the lowest level written; thread-safe to call at start-up. */
void log_set_level(log_level_t level);
/* Parses "debug|info|warn|error"; returns 0 or SBX_EINVAL. */
int log_level_parse(const char *s, log_level_t *ret);
/* Writes one logfmt line: ts=... level=... component=... msg="..." plus the
 * caller's extra `key=value` pairs (already formatted, may be NULL). */
void log_write(log_level_t level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define log_debug(comp, ...) log_write(LOG_DEBUG, comp, __VA_ARGS__)
#define log_info(comp, ...)  log_write(LOG_INFO, comp, __VA_ARGS__)
#define log_warn(comp, ...)  log_write(LOG_WARN, comp, __VA_ARGS__)
#define log_error(comp, ...) log_write(LOG_ERROR, comp, __VA_ARGS__)

#endif
