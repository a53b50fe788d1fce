/* sandbox-sim: hollow workers and a client load generator against a real
 * controller, in one process on one libevent loop (tools/sandbox-sim.c). */
#ifndef SBX_SIM_H
#define SBX_SIM_H

#include <event2/event.h>
#include <event2/http.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the controller's address and one HTTP exchange (simhttp.c) ---- */

typedef struct sim_target {
    struct event_base *base;
    char host[256];
    int port;
} sim_target_t;

/* An answer: status is the HTTP status, or -1 when the exchange failed
 * (connection refused, reset, timed out); json is the parsed body (NULL
 * when not JSON), borrowed for the callback; retry_after is the
 * Retry-After header in seconds (0 when absent). */
typedef struct sim_resp {
    int status;
    json_object *json;
    int retry_after;
} sim_resp_t;

typedef void (*sim_http_done_fn)(void *ud, const sim_resp_t *resp);

/* Parses "http://HOST:PORT" (a trailing "/" allowed; no path, no TLS) into
 * t. 0, or SBX_EINVAL with why set. */
int sim_target_parse(const char *url, struct event_base *base, sim_target_t *t, char *why, size_t whylen);

/* A kept-alive connection to the target; requests on it are sent one after
 * the other. timeout_s bounds each exchange. NULL when out of memory. */
struct evhttp_connection *sim_conn_new(const sim_target_t *t, int timeout_s);

/* Sends METHOD path with the bearer token and body (borrowed; NULL: none)
 * on conn; done runs once with the answer. 0, or a negative code (then done
 * never runs). */
int sim_http_send(struct evhttp_connection *conn, const sim_target_t *t, enum evhttp_cmd_type method,
                  const char *path, const char *token, json_object *body, sim_http_done_fn done, void *ud);

/* Frees what the exchanges still under way hold; call after freeing
 * every connection (their callbacks never run). */
void sim_http_release_all(void);

/* The answer's error message ("HTTP 503 unavailable: ..."), into buf. */
const char *sim_resp_error(const sim_resp_t *r, char *buf, size_t buflen);

/* ---- latency samples (simstats.c) ---- */

typedef struct sim_samples {
    int64_t *us;
    size_t n, cap;
} sim_samples_t;

/* Adds one sample in microseconds (dropped when out of memory). */
void sim_samples_add(sim_samples_t *s, int64_t us);
/* The q-quantile (0..1) in milliseconds; 0 when there is none. Sorts s. */
double sim_samples_ms(sim_samples_t *s, double q);
/* {"n","p50_ms","p90_ms","p99_ms","max_ms"} (sorts s). */
json_object *sim_samples_json(sim_samples_t *s);
void sim_samples_release(sim_samples_t *s);
/* A JSON number printed with that many decimals. */
json_object *sim_json_num(double v, int decimals);

/* The string member key of o; NULL when o is NULL or it is absent or not a
 * string (borrowed from o). */
const char *sim_jstr(json_object *o, const char *key);

/* Arms the timer ev to fire once in ms milliseconds. */
void sim_after_ms(struct event *ev, int64_t ms);

/* Microseconds on the monotonic clock. */
int64_t sim_now_us(void);

/* ---- options shared by the subcommands (sandbox-sim.c) ---- */

/* Parses a whole number in [lo, hi] from s. 0 or SBX_EINVAL. */
int sim_parse_int(const char *s, long lo, long hi, long *ret);

/* One line to stderr, "sandbox-sim: ..." */
void sim_errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- the subcommands ---- */

/* sandbox-sim workers ARGS: exit code (0, 1 failure, 2 usage). */
int sim_workers_main(int argc, char **argv);
/* sandbox-sim load|populate|probe ARGS. */
int sim_load_main(int argc, char **argv);
int sim_populate_main(int argc, char **argv);
int sim_probe_main(int argc, char **argv);

#endif
