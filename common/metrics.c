/* The metrics registry: a fixed array of families, each a small hash table
 * of series, all under one mutex (updates are a few per request). */
#include "metrics.h"
#include "errors.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FAMILIES 128
#define NSLOTS 64

const double metrics_latency_buckets[] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                           0.5,   1,      2.5,   5,    10,    30,   60,  300 };
const int metrics_latency_nbuckets = (int)(sizeof metrics_latency_buckets / sizeof metrics_latency_buckets[0]);

typedef struct series {
    struct series *next;
    char *labels;
    double value;      /* counter, gauge */
    double sum;        /* histogram */
    uint64_t count;
    uint64_t *buckets; /* histogram: per bucket (not cumulative), nbuckets + 1 */
} series_t;

struct metric_family {
    char *name;
    char *help;
    metric_type_t type;
    double *bounds;
    int nbounds;
    int nseries;
    series_t *slots[NSLOTS];
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static metric_family_t *families[MAX_FAMILIES];
static int nfamilies;
static double series_dropped;

static uint32_t hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

metric_family_t *metrics_family(const char *name, metric_type_t type, const char *help, const double *buckets,
                                int nbuckets)
{
    pthread_mutex_lock(&mu);
    metric_family_t *f = NULL;
    for (int i = 0; i < nfamilies; i++)
        if (strcmp(families[i]->name, name) == 0) {
            f = families[i];
            goto out;
        }
    if (nfamilies >= MAX_FAMILIES || !(f = calloc(1, sizeof *f)))
        goto out;
    f->name = strdup(name);
    f->help = strdup(help ? help : "");
    f->type = type;
    if (type == METRIC_HISTOGRAM && nbuckets > 0) {
        f->bounds = malloc((size_t)nbuckets * sizeof *f->bounds);
        if (f->bounds) {
            memcpy(f->bounds, buckets, (size_t)nbuckets * sizeof *f->bounds);
            f->nbounds = nbuckets;
        }
    }
    if (!f->name || !f->help || (type == METRIC_HISTOGRAM && nbuckets > 0 && !f->bounds)) {
        free(f->name);
        free(f->help);
        free(f->bounds);
        free(f);
        f = NULL;
        goto out;
    }
    families[nfamilies++] = f;
out:
    pthread_mutex_unlock(&mu);
    return f;
}

/* Finds or creates the series; caller holds mu. NULL when dropped. */
static series_t *series_get(metric_family_t *f, const char *labels)
{
    if (!labels)
        labels = "";
    uint32_t slot = hash(labels) % NSLOTS;
    for (series_t *s = f->slots[slot]; s; s = s->next)
        if (strcmp(s->labels, labels) == 0)
            return s;
    if (f->nseries >= SBX_METRICS_MAX_SERIES) {
        series_dropped++;
        return NULL;
    }
    series_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->labels = strdup(labels);
    if (f->type == METRIC_HISTOGRAM)
        s->buckets = calloc((size_t)f->nbounds + 1, sizeof *s->buckets);
    if (!s->labels || (f->type == METRIC_HISTOGRAM && !s->buckets)) {
        free(s->labels);
        free(s->buckets);
        free(s);
        return NULL;
    }
    s->next = f->slots[slot];
    f->slots[slot] = s;
    f->nseries++;
    return s;
}

void metrics_add(metric_family_t *f, const char *labels, double v)
{
    if (!f || f->type == METRIC_HISTOGRAM)
        return;
    pthread_mutex_lock(&mu);
    series_t *s = series_get(f, labels);
    if (s)
        s->value += v;
    pthread_mutex_unlock(&mu);
}

void metrics_set(metric_family_t *f, const char *labels, double v)
{
    if (!f || f->type != METRIC_GAUGE)
        return;
    pthread_mutex_lock(&mu);
    series_t *s = series_get(f, labels);
    if (s)
        s->value = v;
    pthread_mutex_unlock(&mu);
}

void metrics_observe(metric_family_t *f, const char *labels, double v)
{
    if (!f || f->type != METRIC_HISTOGRAM || isnan(v))
        return;
    pthread_mutex_lock(&mu);
    series_t *s = series_get(f, labels);
    if (s) {
        int i = 0;
        while (i < f->nbounds && v > f->bounds[i])
            i++;
        s->buckets[i]++;
        s->sum += v;
        s->count++;
    }
    pthread_mutex_unlock(&mu);
}

void metrics_reset(metric_family_t *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < NSLOTS; i++) {
        series_t *s = f->slots[i];
        while (s) {
            series_t *next = s->next;
            free(s->labels);
            free(s->buckets);
            free(s);
            s = next;
        }
        f->slots[i] = NULL;
    }
    f->nseries = 0;
    pthread_mutex_unlock(&mu);
}

const char *metrics_labels(char *buf, size_t buflen, ...)
{
    va_list ap;
    va_start(ap, buflen);
    size_t n = 0;
    if (buflen)
        buf[0] = '\0';
    const char *k;
    bool first = true;
    while ((k = va_arg(ap, const char *)) != NULL) {
        const char *v = va_arg(ap, const char *);
        if (!v)
            v = "";
        char tmp[512];
        size_t t = 0;
        for (const char *p = v; *p && t + 2 < sizeof tmp; p++) {
            if (*p == '\\' || *p == '"') {
                tmp[t++] = '\\';
                tmp[t++] = *p;
            } else if (*p == '\n') {
                tmp[t++] = '\\';
                tmp[t++] = 'n';
            } else {
                tmp[t++] = *p;
            }
        }
        tmp[t] = '\0';
        int w = snprintf(buf + n, n < buflen ? buflen - n : 0, "%s%s=\"%s\"", first ? "" : ",", k, tmp);
        if (w < 0 || n + (size_t)w >= buflen)
            break;
        n += (size_t)w;
        first = false;
    }
    va_end(ap);
    return buf;
}

static const char *type_name(metric_type_t t)
{
    return t == METRIC_COUNTER ? "counter" : t == METRIC_GAUGE ? "gauge" : "histogram";
}

/* Prometheus floats: integers without a fraction, +Inf/-Inf/NaN spelled out. */
static void fmt_value(char *buf, size_t n, double v)
{
    if (isnan(v))
        snprintf(buf, n, "NaN");
    else if (isinf(v))
        snprintf(buf, n, v > 0 ? "+Inf" : "-Inf");
    else if (v == floor(v) && fabs(v) < 1e15)
        snprintf(buf, n, "%.0f", v);
    else
        snprintf(buf, n, "%.9g", v);
}

static int render_series(sbuf_t *out, const metric_family_t *f, const series_t *s)
{
    char v[64];
    const char *sep = s->labels[0] ? "," : "";
    if (f->type != METRIC_HISTOGRAM) {
        fmt_value(v, sizeof v, s->value);
        return s->labels[0] ? sbuf_printf(out, "%s{%s} %s\n", f->name, s->labels, v)
                            : sbuf_printf(out, "%s %s\n", f->name, v);
    }
    uint64_t cum = 0;
    for (int i = 0; i <= f->nbounds; i++) {
        cum += s->buckets[i];
        char le[64];
        if (i == f->nbounds)
            snprintf(le, sizeof le, "+Inf");
        else
            fmt_value(le, sizeof le, f->bounds[i]);
        int rc = sbuf_printf(out, "%s_bucket{%s%sle=\"%s\"} %llu\n", f->name, s->labels, sep, le,
                             (unsigned long long)cum);
        if (rc < 0)
            return rc;
    }
    fmt_value(v, sizeof v, s->sum);
    int rc = s->labels[0] ? sbuf_printf(out, "%s_sum{%s} %s\n%s_count{%s} %llu\n", f->name, s->labels, v, f->name,
                                        s->labels, (unsigned long long)s->count)
                          : sbuf_printf(out, "%s_sum %s\n%s_count %llu\n", f->name, v, f->name,
                                        (unsigned long long)s->count);
    return rc;
}

int metrics_render(sbuf_t *out)
{
    int rc = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nfamilies && rc == 0; i++) {
        const metric_family_t *f = families[i];
        rc = sbuf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name, type_name(f->type));
        for (int k = 0; k < NSLOTS && rc == 0; k++)
            for (const series_t *s = f->slots[k]; s && rc == 0; s = s->next)
                rc = render_series(out, f, s);
    }
    if (rc == 0) {
        char v[64];
        fmt_value(v, sizeof v, series_dropped);
        rc = sbuf_printf(out,
                         "# HELP sandbox_metrics_series_dropped_total Label sets dropped because a family was full.\n"
                         "# TYPE sandbox_metrics_series_dropped_total counter\n"
                         "sandbox_metrics_series_dropped_total %s\n",
                         v);
    }
    pthread_mutex_unlock(&mu);
    return rc;
}
