/* sandbox-sim's latency samples and their percentiles. */
#include "sim.h"

#include <stdio.h>
#include <stdlib.h>

void sim_samples_add(sim_samples_t *s, int64_t us)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 1024;
        int64_t *p = realloc(s->us, cap * sizeof *p);
        if (!p)
            return;
        s->us = p;
        s->cap = cap;
    }
    s->us[s->n++] = us;
}

static int sim_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

double sim_samples_ms(sim_samples_t *s, double q)
{
    if (s->n == 0)
        return 0;
    qsort(s->us, s->n, sizeof *s->us, sim_cmp_i64);
    /* Nearest rank: the smallest sample with at least q of them at or below. */
    size_t k = (size_t)(q * (double)s->n + 0.999999);
    k = k == 0 ? 0 : k - 1;
    if (k >= s->n)
        k = s->n - 1;
    return (double)s->us[k] / 1000.0;
}

json_object *sim_json_num(double v, int decimals)
{
    char text[48];
    snprintf(text, sizeof text, "%.*f", decimals, v);
    return json_object_new_double_s(v, text);
}

json_object *sim_samples_json(sim_samples_t *s)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "n", json_object_new_int64((int64_t)s->n));
    json_object_object_add(o, "p50_ms", sim_json_num(sim_samples_ms(s, 0.50), 2));
    json_object_object_add(o, "p90_ms", sim_json_num(sim_samples_ms(s, 0.90), 2));
    json_object_object_add(o, "p99_ms", sim_json_num(sim_samples_ms(s, 0.99), 2));
    json_object_object_add(o, "max_ms", sim_json_num(sim_samples_ms(s, 1.0), 2));
    return o;
}

void sim_samples_release(sim_samples_t *s)
{
    free(s->us);
    s->us = NULL;
    s->n = s->cap = 0;
}
