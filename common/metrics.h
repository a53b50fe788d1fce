/* Process-wide Prometheus metrics: counters, gauges and histograms with
 * label sets, rendered in the text exposition format (version 0.0.4).
 * Every function is thread-safe; none logs. */
#ifndef SBX_METRICS_H
#define SBX_METRICS_H

#include <stddef.h>

#include "sbuf.h"

typedef enum { METRIC_COUNTER = 0, METRIC_GAUGE, METRIC_HISTOGRAM } metric_type_t;

typedef struct metric_family metric_family_t;

/* Most series one family keeps; further label sets are dropped and counted
 * in sandbox_metrics_series_dropped_total. Labels only ever come from fixed
 * sets (route templates, kinds, states), never from client input. */
#define SBX_METRICS_MAX_SERIES 2048

/* Buckets for latencies in seconds: 1 ms to 5 min. */
extern const double metrics_latency_buckets[];
extern const int metrics_latency_nbuckets;

/* Registers the family `name` or returns the one already registered under
 * that name (same type expected). buckets: ascending upper bounds for a
 * histogram (+Inf is implicit), copied; NULL/0 otherwise. NULL on OOM. */
metric_family_t *metrics_family(const char *name, metric_type_t type, const char *help, const double *buckets,
                                int nbuckets);

/* labels is a rendered label set without braces, e.g. `kind="create",state="leased"`
 * (see metrics_labels), or NULL/"" for none. */
void metrics_add(metric_family_t *f, const char *labels, double v);     /* counter or gauge */
void metrics_set(metric_family_t *f, const char *labels, double v);     /* gauge */
void metrics_observe(metric_family_t *f, const char *labels, double v); /* histogram */
/* Forgets every series of the family (a gauge refreshed from a snapshot
 * whose label sets may have vanished). */
void metrics_reset(metric_family_t *f);

/* Renders `k1="v1",k2="v2"` from NULL-terminated key/value pairs, escaping
 * values; truncates to buflen. Returns buf. */
const char *metrics_labels(char *buf, size_t buflen, ...) __attribute__((sentinel));

/* Appends every family to out in the text format. Returns 0 or SBX_ENOMEM /
 * SBX_ETOOBIG from the buffer. */
int metrics_render(sbuf_t *out);

#endif
