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

#include "limits.h"

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

/* ---- the client subcommands' options (load.c) ---- */

/* What the client subcommands (load, populate, probe, claim) share: the
 * controller, the token, the create body's fields. */
typedef struct sim_api {
    sim_target_t t;
    struct event_base *base;
    char token[SBX_TOKEN_MAX + 1];
    const char *image;
    json_object *selector;      /* owned */
    long ttl_seconds, cpu_millis, memory_mib;
    bool json;
} sim_api_t;

#define SIM_API_DEFAULTS { .image = "sandbox/busybox:latest", .ttl_seconds = 600, .cpu_millis = 100, .memory_mib = 64 }

/* The client options, one row each in load.c's option table. */
enum sim_opt {
    SIM_O_CTL = 1, SIM_O_TOKEN, SIM_O_TOKFILE, SIM_O_CLIENTS, SIM_O_DURATION, SIM_O_MIX, SIM_O_IMAGE, SIM_O_SELECTOR,
    SIM_O_TTL, SIM_O_CPU, SIM_O_MEM, SIM_O_JSON, SIM_O_HELP, SIM_O_COUNT, SIM_O_GET, SIM_O_LIST, SIM_O_LIMIT,
    SIM_O_RATE, SIM_O_POOL, SIM_O_IDS,
};

/* The bit of option SIM_O_name in a subcommand's mask of allowed options. */
#define SIM_OPT(name) (1u << SIM_O_##name)

/* The command line's values beyond sim_api_t's; seen has the SIM_OPT bit
 * of every option given. */
typedef struct sim_opts {
    const char *url, *token, *tokfile, *mix, *selector, *pool, *ids;
    long clients, duration, count, get, list, limit, rate;
    unsigned seen;
} sim_opts_t;

/* The --help lines of the options every client subcommand takes, and of
 * the create body's. */
#define SIM_API_HELP                                                                                              \
    "  --controller URL     http://HOST:PORT of the controller\n"                                                 \
    "  --token T            a member or admin token (its tenant gets the sandboxes)\n"                            \
    "  --token-file F       the token from the first line of F instead\n"                                         \
    "  --json               print the figures as one JSON object\n"
#define SIM_CREATE_HELP                                                                                           \
    "  --image I            image of the creates (default sandbox/busybox:latest; hollow workers pull nothing)\n" \
    "  --selector K=V,...   worker labels the creates need (default sim=hollow: only sandbox-sim workers;\n"      \
    "                       \"\" for none)\n"                                                                     \
    "  --ttl S              sandbox TTL (default 600)\n"                                                          \
    "  --cpu-millis N       CPU of each sandbox (default 100)\n"                                                  \
    "  --memory-mib N       memory of each sandbox (default 64)\n"

/* Parses a client subcommand's command line into o and a (defaults set by
 * the caller); allowed is the mask of SIM_OPT bits it takes. Reads the
 * token (file), makes a's event loop and target. Returns -1 to go on,
 * else the exit code, the error already said (0 after --help). Release a
 * with sim_api_release either way. */
int sim_api_options(int argc, char **argv, const char *usage, unsigned allowed, sim_opts_t *o, sim_api_t *a);
/* Frees what sim_api_options made in a. */
void sim_api_release(sim_api_t *a);

/* ---- the subcommands ---- */

/* sandbox-sim workers ARGS: exit code (0, 1 failure, 2 usage). */
int sim_workers_main(int argc, char **argv);
/* sandbox-sim load|populate|probe ARGS. */
int sim_load_main(int argc, char **argv);
int sim_populate_main(int argc, char **argv);
int sim_probe_main(int argc, char **argv);
/* sandbox-sim claim ARGS (claim.c). */
int sim_claim_main(int argc, char **argv);

#endif
