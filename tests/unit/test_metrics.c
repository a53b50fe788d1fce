/* Unit tests for the metrics registry and its text format (common/metrics.c)
 * and for log lines in both formats (common/log.c). */
#include "check_util.h"
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "metrics.h"
#include "sbuf.h"

/* The registry rendered, as a malloc'd string. */
static char *render(void)
{
    sbuf_t b;
    sbuf_init(&b, 1 << 20);
    ck_assert_int_eq(metrics_render(&b), 0);
    char *s = sbuf_detach(&b, NULL);
    ck_assert_ptr_nonnull(s);
    return s;
}

static void assert_line(const char *text, const char *line)
{
    char want[512];
    snprintf(want, sizeof want, "\n%s\n", line);
    ck_assert_msg(strstr(text, want) != NULL, "no line [%s] in:\n%s", line, text);
}

START_TEST(test_counter_gauge_and_labels)
{
    metric_family_t *c = metrics_family("t_requests_total", METRIC_COUNTER, "Requests.", NULL, 0);
    metric_family_t *g = metrics_family("t_open", METRIC_GAUGE, "Open things.", NULL, 0);
    ck_assert_ptr_eq(metrics_family("t_requests_total", METRIC_COUNTER, "again", NULL, 0), c);
    char l[128];
    metrics_add(c, metrics_labels(l, sizeof l, "route", "/v1/x/{id}", "status", "200", NULL), 1);
    metrics_add(c, l, 2);
    metrics_add(c, metrics_labels(l, sizeof l, "route", "a\"b\\c\nd", NULL), 1);
    metrics_set(g, NULL, 5);
    metrics_add(g, NULL, -2);
    metrics_set(c, NULL, 99);        /* not a gauge: ignored */
    metrics_observe(c, NULL, 1);     /* not a histogram: ignored */
    char *t = render();
    assert_line(t, "# TYPE t_requests_total counter");
    assert_line(t, "t_requests_total{route=\"/v1/x/{id}\",status=\"200\"} 3");
    assert_line(t, "t_requests_total{route=\"a\\\"b\\\\c\\nd\"} 1");
    assert_line(t, "# TYPE t_open gauge");
    assert_line(t, "t_open 3");
    ck_assert_ptr_null(strstr(t, "99"));
    free(t);
}
END_TEST

START_TEST(test_histogram_is_cumulative)
{
    static const double b[] = { 0.1, 1 };
    metric_family_t *h = metrics_family("t_seconds", METRIC_HISTOGRAM, "Time.", b, 2);
    metrics_observe(h, "k=\"x\"", 0.05);
    metrics_observe(h, "k=\"x\"", 0.1);  /* le is inclusive */
    metrics_observe(h, "k=\"x\"", 0.5);
    metrics_observe(h, "k=\"x\"", 7);
    char *t = render();
    assert_line(t, "# TYPE t_seconds histogram");
    assert_line(t, "t_seconds_bucket{k=\"x\",le=\"0.1\"} 2");
    assert_line(t, "t_seconds_bucket{k=\"x\",le=\"1\"} 3");
    assert_line(t, "t_seconds_bucket{k=\"x\",le=\"+Inf\"} 4");
    assert_line(t, "t_seconds_sum{k=\"x\"} 7.65");
    assert_line(t, "t_seconds_count{k=\"x\"} 4");
    free(t);
}
END_TEST

START_TEST(test_series_are_bounded_and_reset)
{
    metric_family_t *g = metrics_family("t_many", METRIC_GAUGE, "Many.", NULL, 0);
    char l[64];
    for (int i = 0; i < SBX_METRICS_MAX_SERIES + 10; i++) {
        char v[16];
        snprintf(v, sizeof v, "%d", i);
        metrics_set(g, metrics_labels(l, sizeof l, "i", v, NULL), i);
    }
    char *t = render();
    assert_line(t, "sandbox_metrics_series_dropped_total 10");
    ck_assert_ptr_null(strstr(t, "t_many{i=\"2048\"}"));
    free(t);
    metrics_reset(g);
    t = render();
    ck_assert_ptr_null(strstr(t, "t_many{"));
    assert_line(t, "# TYPE t_many gauge");
    free(t);
}
END_TEST

/* Runs f with stderr sent to a pipe; returns what it wrote (malloc'd). */
static char *capture_stderr(void (*f)(void))
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    int saved = dup(STDERR_FILENO);
    dup2(p[1], STDERR_FILENO);
    f();
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(p[1]);
    char *buf = calloc(1, 65536);
    ck_assert_ptr_nonnull(buf);
    size_t n = 0;
    ssize_t r;
    while (n < 65535 && (r = read(p[0], buf + n, 65535 - n)) > 0)
        n += (size_t)r;
    close(p[0]);
    return buf;
}

static void write_lines(void)
{
    log_ctx_t scope = { .request_id = "ci-42", .tenant = "tnt_a" };
    log_scope_set(&scope);
    const char *fields[] = { "status", "404", "path", "/v1/x y", NULL };
    log_write_fields(LOG_INFO, "http", fields, "request \"quoted\"\nnext");
    log_ctx_t ctx = { .sandbox = "sbx_b", .operation = "op_c" };
    log_write_ctx(LOG_WARN, "store", &ctx, "tab\there");
    log_scope_clear();
    log_debug("x", "dropped at info");
    log_info("x", "no scope");
}

START_TEST(test_log_logfmt)
{
    log_set_format(LOG_FORMAT_LOGFMT);
    char *out = capture_stderr(write_lines);
    ck_assert_msg(strstr(out, "level=info component=http request_id=\"ci-42\" tenant=\"tnt_a\" status=404 "
                              "path=\"/v1/x y\" msg=\"request \\\"quoted\\\" next\"\n") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "level=warn component=store request_id=\"ci-42\" tenant=\"tnt_a\" sandbox=\"sbx_b\" "
                              "operation=\"op_c\" msg=\"tab here\"\n") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "component=x msg=\"no scope\"\n") != NULL, "%s", out);
    ck_assert_ptr_null(strstr(out, "dropped"));
    free(out);
}
END_TEST

START_TEST(test_log_json_lines_parse)
{
    log_set_format(LOG_FORMAT_JSON);
    char *out = capture_stderr(write_lines);
    int lines = 0;
    for (char *line = out, *nl; *line; line = nl + 1, lines++) {
        nl = strchr(line, '\n');
        ck_assert_ptr_nonnull(nl);
        *nl = '\0';
        json_object *o = json_tokener_parse(line);
        ck_assert_msg(o != NULL, "not JSON: %s", line);
        ck_assert_ptr_nonnull(json_object_object_get(o, "ts"));
        ck_assert_ptr_nonnull(json_object_object_get(o, "level"));
        ck_assert_ptr_nonnull(json_object_object_get(o, "msg"));
        if (lines == 0) {
            ck_assert_str_eq(json_object_get_string(json_object_object_get(o, "msg")), "request \"quoted\"\nnext");
            ck_assert_str_eq(json_object_get_string(json_object_object_get(o, "request_id")), "ci-42");
            ck_assert_str_eq(json_object_get_string(json_object_object_get(o, "path")), "/v1/x y");
        }
        json_object_put(o);
    }
    ck_assert_int_eq(lines, 3);
    free(out);
    log_set_format(LOG_FORMAT_LOGFMT);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("metrics");
    unit_tcase_add(s, "registry", UNIT_TESTS(
        test_counter_gauge_and_labels,
        test_histogram_is_cumulative,
        test_series_are_bounded_and_reset,
    ));
    unit_tcase_add(s, "log", UNIT_TESTS(
        test_log_logfmt,
        test_log_json_lines_parse,
    ));
    return s;
}
