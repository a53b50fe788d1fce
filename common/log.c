/* logfmt lines on stderr, one write(2) per line so threads do not interleave. */
#include "log.h"
#include "errors.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static volatile log_level_t log_min = LOG_INFO;

void log_set_level(log_level_t level) { log_min = level; }

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

void log_write(log_level_t level, const char *component, const char *fmt, ...)
{
    static const char *names[] = { "debug", "info", "warn", "error" };
    if (level < log_min)
        return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char line[2400];
    int n = snprintf(line, sizeof line, "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s component=%s msg=\"",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, names[level], component ? component : "-");
    for (const char *p = msg; *p && n < (int)sizeof line - 3; p++) {
        if (*p == '"' || *p == '\\') {
            line[n++] = '\\';
            line[n++] = *p;
        } else if (*p == '\n') {
            line[n++] = ' ';
        } else {
            line[n++] = *p;
        }
    }
    if (n > (int)sizeof line - 3)
        n = (int)sizeof line - 3;
    line[n++] = '"';
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}
