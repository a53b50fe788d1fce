/* sandbox-sim load, populate and probe: clients of the real API that loop
 * create → wait → exec → wait → delete → wait, make N live sandboxes, or
 * time GET and list of sandboxes; they print throughput and latency. The
 * option table of every client subcommand (claim.c's too) is here. */
#include "sim.h"
#include "errors.h"
#include "limits.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIM_WAIT_S              30
#define SIM_MAX_CLIENTS         4096
#define SIM_ERRORS_SHOWN        10
#define SIM_DRAIN_GRACE_S       60
#define SIM_MAX_STEPS           8

enum { K_CREATE, K_EXEC, K_DELETE, K_N };
static const char *const sim_kind_names[K_N] = { "create", "exec", "delete" };

typedef struct sim_kind_stats {
    uint64_t ops;               /* succeeded inside the window */
    sim_samples_t total;        /* submit → succeeded seen */
    sim_samples_t submit;       /* the request's round trip (202) */
    sim_samples_t accepted;     /* 202 → succeeded seen */
} sim_kind_stats_t;

typedef struct sim_load sim_load_t;

typedef struct sim_client {
    sim_load_t *L;
    struct evhttp_connection *c;
    struct event *timer;
    int step;
    bool waiting, finished;
    char sbx[SBX_ID_MAX];
    char op[SBX_ID_MAX];
    int64_t t_submit, t_accept;
} sim_client_t;

struct sim_load {
    sim_api_t *api;
    int steps[SIM_MAX_STEPS];
    int nsteps;
    bool has_delete;
    sim_client_t *cl;
    int nclients, nfinished;
    int64_t t0, t_end;          /* the measured window */
    bool stopping;
    long target;                /* populate: sandboxes to make (0: load) */
    long started, created;
    sim_kind_stats_t k[K_N];
    uint64_t errors, rate_limited;
    struct event *stop_timer, *grace_timer;
};

static json_object *jobj(json_object *o, const char *key)
{
    json_object *v = NULL;
    return o && json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_object) ? v : NULL;
}

static json_object *sim_create_body(const sim_api_t *a)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "image", json_object_new_string(a->image));
    json_object_object_add(o, "ttl_seconds", json_object_new_int64(a->ttl_seconds));
    json_object_object_add(o, "cpu_millis", json_object_new_int64(a->cpu_millis));
    json_object_object_add(o, "memory_mib", json_object_new_int64(a->memory_mib));
    json_object_object_add(o, "network", json_object_new_string("none"));
    if (json_object_object_length(a->selector) > 0)
        json_object_object_add(o, "selector", json_object_get(a->selector));
    return o;
}

/* ---- the client loop --------------------------------------------------- */

static void sim_client_next(sim_client_t *c);
static void sim_client_wait(sim_client_t *c);

static void sim_client_finish(sim_client_t *c)
{
    if (c->finished)
        return;
    c->finished = true;
    if (++c->L->nfinished == c->L->nclients)
        event_base_loopbreak(c->L->api->base);
}

static void sim_load_error(sim_client_t *c, const char *what, const char *why)
{
    sim_load_t *L = c->L;
    if (L->errors++ < SIM_ERRORS_SHOWN)
        sim_errorf("client %d: %s %s: %s", (int)(c - L->cl), what, c->sbx[0] ? c->sbx : "", why);
    /* A sandbox left behind is deleted next (when the mix deletes). */
    int kind = L->steps[c->step];
    c->op[0] = '\0';
    c->waiting = false;
    if (c->sbx[0] && kind != K_DELETE && L->has_delete)
        c->step = L->nsteps - 1;
    else {
        c->step = 0;
        c->sbx[0] = '\0';
    }
    sim_after_ms(c->timer, 200);
}

static void sim_client_retry_later(sim_client_t *c, const sim_resp_t *r)
{
    c->L->rate_limited++;
    sim_after_ms(c->timer, r->retry_after > 0 ? (int64_t)r->retry_after * 1000 : 100);
}

static void sim_wait_done(void *ud, const sim_resp_t *r)
{
    sim_client_t *c = ud;
    sim_load_t *L = c->L;
    char why[512];
    int kind = L->steps[c->step];
    if (r->status == 429) {
        sim_client_retry_later(c, r);
        return;
    }
    json_object *op = r->status == 200 ? jobj(r->json, "operation") : NULL;
    const char *state = sim_jstr(op, "state");
    if (!state) {
        sim_load_error(c, "waiting for the operation of", sim_resp_error(r, why, sizeof why));
        return;
    }
    if (strcmp(state, "succeeded") != 0 && strcmp(state, "failed") != 0 && strcmp(state, "cancelled") != 0) {
        sim_client_wait(c);
        return;
    }
    if (strcmp(state, "succeeded") != 0) {
        json_object *e = jobj(op, "error");
        snprintf(why, sizeof why, "%s %s: %.300s", state, sim_jstr(e, "code") ? sim_jstr(e, "code") : "-",
                 sim_jstr(e, "message") ? sim_jstr(e, "message") : "");
        sim_load_error(c, sim_kind_names[kind], why);
        return;
    }
    int64_t now = sim_now_us();
    sim_kind_stats_t *ks = &L->k[kind];
    if (!L->stopping || L->target > 0) {
        ks->ops++;
        sim_samples_add(&ks->total, now - c->t_submit);
        sim_samples_add(&ks->submit, c->t_accept - c->t_submit);
        sim_samples_add(&ks->accepted, now - c->t_accept);
    }
    if (kind == K_CREATE)
        L->created++;
    if (kind == K_DELETE)
        c->sbx[0] = '\0';
    c->waiting = false;
    c->op[0] = '\0';
    c->step = (c->step + 1) % L->nsteps;
    if (c->step == 0 && L->target == 0)
        c->sbx[0] = '\0';
    sim_client_next(c);
}

static void sim_client_wait(sim_client_t *c)
{
    char path[SBX_ID_MAX + 48];
    snprintf(path, sizeof path, "/v1/operations/%s?wait=%d", c->op, SIM_WAIT_S);
    c->waiting = true;
    if (sim_http_send(c->c, &c->L->api->t, EVHTTP_REQ_GET, path, c->L->api->token, NULL, sim_wait_done, c) < 0)
        sim_after_ms(c->timer, 100);
}

static void sim_submit_done(void *ud, const sim_resp_t *r)
{
    sim_client_t *c = ud;
    sim_load_t *L = c->L;
    char why[512];
    int kind = L->steps[c->step];
    if (r->status == 429) {
        if (kind == K_CREATE && L->target > 0)
            L->started--;
        sim_client_retry_later(c, r);
        return;
    }
    json_object *op = r->status == 202 ? jobj(r->json, "operation") : NULL;
    const char *op_id = sim_jstr(op, "id");
    const char *sbx = kind == K_CREATE ? sim_jstr(jobj(r->json, "sandbox"), "id") : c->sbx;
    if (!op_id || strlen(op_id) >= sizeof c->op || !sbx || strlen(sbx) >= sizeof c->sbx) {
        sim_load_error(c, sim_kind_names[kind], sim_resp_error(r, why, sizeof why));
        return;
    }
    c->t_accept = sim_now_us();
    snprintf(c->op, sizeof c->op, "%s", op_id);
    if (kind == K_CREATE)
        snprintf(c->sbx, sizeof c->sbx, "%s", sbx);
    sim_client_wait(c);
}

/* Starts the client's current step (or its wait, after a 429). */
static void sim_client_next(sim_client_t *c)
{
    sim_load_t *L = c->L;
    if (c->waiting) {
        sim_client_wait(c);
        return;
    }
    if (c->step == 0 && (L->stopping || (L->target > 0 && L->started >= L->target))) {
        sim_client_finish(c);
        return;
    }
    int kind = L->steps[c->step];
    char path[SBX_ID_MAX + 48];
    json_object *body = NULL;
    enum evhttp_cmd_type m = EVHTTP_REQ_POST;
    if (kind == K_CREATE) {
        snprintf(path, sizeof path, "/v1/sandboxes");
        body = sim_create_body(L->api);
        if (L->target > 0)
            L->started++;
    } else if (kind == K_EXEC) {
        snprintf(path, sizeof path, "/v1/sandboxes/%s/exec", c->sbx);
        body = json_object_new_object();
        json_object *argv = json_object_new_array();
        json_object_array_add(argv, json_object_new_string("true"));
        json_object_object_add(body, "argv", argv);
    } else {
        snprintf(path, sizeof path, "/v1/sandboxes/%s", c->sbx);
        m = EVHTTP_REQ_DELETE;
    }
    c->t_submit = sim_now_us();
    if (sim_http_send(c->c, &L->api->t, m, path, L->api->token, body, sim_submit_done, c) < 0)
        sim_after_ms(c->timer, 100);
    json_object_put(body);
}

static void sim_client_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sim_client_next(arg);
}

static void sim_load_stop_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sim_load_t *L = arg;
    if (!L->stopping) {
        L->stopping = true;
        L->t_end = sim_now_us();
        sim_after_ms(L->grace_timer, SIM_DRAIN_GRACE_S * 1000);
        for (int i = 0; i < L->nclients; i++)
            if (!L->cl[i].finished && L->cl[i].step == 0 && !L->cl[i].waiting &&
                evtimer_pending(L->cl[i].timer, NULL)) {
                event_del(L->cl[i].timer);
                sim_client_finish(&L->cl[i]);
            }
    }
}

static void sim_load_grace_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sim_load_t *L = arg;
    sim_errorf("%d clients still busy %d s after the end; stopping without them", L->nclients - L->nfinished,
               SIM_DRAIN_GRACE_S);
    event_base_loopbreak(L->api->base);
}

static void sim_sig_cb(evutil_socket_t fd, short what, void *arg)
{
    sim_load_stop_cb(fd, what, arg);
}

/* Runs the clients until the window ends (load) or target sandboxes exist
 * (populate). 0, or a negative code. */
static int sim_load_run(sim_load_t *L, long duration_s)
{
    int rc = 0;
    struct event_base *base = L->api->base;
    L->cl = calloc((size_t)L->nclients, sizeof *L->cl);
    L->stop_timer = evtimer_new(base, sim_load_stop_cb, L);
    L->grace_timer = evtimer_new(base, sim_load_grace_cb, L);
    struct event *sigint = evsignal_new(base, SIGINT, sim_sig_cb, L);
    struct event *sigterm = evsignal_new(base, SIGTERM, sim_sig_cb, L);
    if (!L->cl || !L->stop_timer || !L->grace_timer || !sigint || !sigterm) {
        rc = SBX_ENOMEM;
        goto cleanup;
    }
    event_add(sigint, NULL);
    event_add(sigterm, NULL);
    for (int i = 0; i < L->nclients; i++) {
        sim_client_t *c = &L->cl[i];
        c->L = L;
        c->c = sim_conn_new(&L->api->t, SIM_WAIT_S + 15);
        c->timer = evtimer_new(base, sim_client_timer_cb, c);
        if (!c->c || !c->timer) {
            rc = SBX_ENOMEM;
            goto cleanup;
        }
    }
    L->t0 = sim_now_us();
    if (duration_s > 0)
        sim_after_ms(L->stop_timer, duration_s * 1000);
    for (int i = 0; i < L->nclients; i++)
        sim_client_next(&L->cl[i]);
    if (L->nfinished < L->nclients)
        event_base_dispatch(base);
    if (!L->stopping)
        L->t_end = sim_now_us();
cleanup:
    for (int i = 0; L->cl && i < L->nclients; i++) {
        if (L->cl[i].timer)
            event_free(L->cl[i].timer);
        if (L->cl[i].c)
            evhttp_connection_free(L->cl[i].c);
    }
    free(L->cl);
    L->cl = NULL;
    sim_http_release_all();
    if (L->stop_timer)
        event_free(L->stop_timer);
    if (L->grace_timer)
        event_free(L->grace_timer);
    if (sigint)
        event_free(sigint);
    if (sigterm)
        event_free(sigterm);
    return rc;
}

static double sim_secs(const sim_load_t *L)
{
    double s = (double)(L->t_end - L->t0) / 1e6;
    return s > 0 ? s : 1e-6;
}

static void sim_load_print(sim_load_t *L, const char *title)
{
    double secs = sim_secs(L);
    uint64_t total = 0;
    for (int k = 0; k < K_N; k++)
        total += L->k[k].ops;
    if (L->api->json) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "mode", json_object_new_string(title));
        json_object_object_add(o, "clients", json_object_new_int(L->nclients));
        json_object_object_add(o, "seconds", sim_json_num(secs, 3));
        json_object_object_add(o, "ops", json_object_new_int64((int64_t)total));
        json_object_object_add(o, "ops_per_s", sim_json_num((double)total / secs, 1));
        json_object_object_add(o, "errors", json_object_new_int64((int64_t)L->errors));
        json_object_object_add(o, "rate_limited", json_object_new_int64((int64_t)L->rate_limited));
        if (L->target > 0)
            json_object_object_add(o, "created", json_object_new_int64(L->created));
        json_object *kinds = json_object_new_object();
        for (int k = 0; k < K_N; k++) {
            if (L->k[k].ops == 0)
                continue;
            json_object *ko = json_object_new_object();
            json_object_object_add(ko, "ops", json_object_new_int64((int64_t)L->k[k].ops));
            json_object_object_add(ko, "ops_per_s",
                                   sim_json_num((double)L->k[k].ops / secs, 1));
            json_object_object_add(ko, "latency", sim_samples_json(&L->k[k].total));
            json_object_object_add(ko, "submit", sim_samples_json(&L->k[k].submit));
            json_object_object_add(ko, "accepted_to_succeeded", sim_samples_json(&L->k[k].accepted));
            json_object_object_add(kinds, sim_kind_names[k], ko);
        }
        json_object_object_add(o, "kinds", kinds);
        printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
        json_object_put(o);
        fflush(stdout);
        return;
    }
    printf("sandbox-sim %s: %d clients, %.1f s: %llu operations, %.1f ops/s, %llu errors, %llu rate-limited retries\n",
           title, L->nclients, secs, (unsigned long long)total, (double)total / secs, (unsigned long long)L->errors,
           (unsigned long long)L->rate_limited);
    printf("%-7s %8s %9s | %-35s | %-35s\n", "kind", "ops", "ops/s", "submit->succeeded ms p50/p90/p99/max",
           "accepted->succeeded ms p50/p90/p99/max");
    for (int k = 0; k < K_N; k++) {
        sim_kind_stats_t *s = &L->k[k];
        if (s->ops == 0)
            continue;
        printf("%-7s %8llu %9.1f | %7.1f %7.1f %7.1f %9.1f | %7.1f %7.1f %7.1f %9.1f\n", sim_kind_names[k],
               (unsigned long long)s->ops, (double)s->ops / secs, sim_samples_ms(&s->total, 0.5),
               sim_samples_ms(&s->total, 0.9), sim_samples_ms(&s->total, 0.99), sim_samples_ms(&s->total, 1),
               sim_samples_ms(&s->accepted, 0.5), sim_samples_ms(&s->accepted, 0.9),
               sim_samples_ms(&s->accepted, 0.99), sim_samples_ms(&s->accepted, 1));
    }
    fflush(stdout);
}

static void sim_load_release(sim_load_t *L)
{
    for (int k = 0; k < K_N; k++) {
        sim_samples_release(&L->k[k].total);
        sim_samples_release(&L->k[k].submit);
        sim_samples_release(&L->k[k].accepted);
    }
}

/* ---- options ----------------------------------------------------------- */

/* The option table of the client subcommands, indexed by SIM_O_ - 1. */
static const struct option sim_api_opts[] = {
    { "controller", required_argument, NULL, SIM_O_CTL }, { "token", required_argument, NULL, SIM_O_TOKEN },
    { "token-file", required_argument, NULL, SIM_O_TOKFILE }, { "clients", required_argument, NULL, SIM_O_CLIENTS },
    { "duration", required_argument, NULL, SIM_O_DURATION }, { "mix", required_argument, NULL, SIM_O_MIX },
    { "image", required_argument, NULL, SIM_O_IMAGE }, { "selector", required_argument, NULL, SIM_O_SELECTOR },
    { "ttl", required_argument, NULL, SIM_O_TTL }, { "cpu-millis", required_argument, NULL, SIM_O_CPU },
    { "memory-mib", required_argument, NULL, SIM_O_MEM }, { "json", no_argument, NULL, SIM_O_JSON },
    { "help", no_argument, NULL, SIM_O_HELP }, { "count", required_argument, NULL, SIM_O_COUNT },
    { "get", required_argument, NULL, SIM_O_GET }, { "list", required_argument, NULL, SIM_O_LIST },
    { "list-limit", required_argument, NULL, SIM_O_LIMIT }, { "rate", required_argument, NULL, SIM_O_RATE },
    { "pool", required_argument, NULL, SIM_O_POOL }, { "ids", required_argument, NULL, SIM_O_IDS },
    { NULL, 0, NULL, 0 },
};

static const char sim_load_usage[] =
    "usage: sandbox-sim load --controller URL --token T [--clients 32] [--duration 30] [--mix create,exec,delete]\n"
    "Each client loops create -> wait -> exec true -> wait -> delete -> wait (long-polling each operation) for\n"
    "--duration seconds, then finishes its loop. Prints throughput (ops/s) and, per kind, the latency from the\n"
    "request to the operation seen succeeded and from accepted (202) to succeeded: p50/p90/p99/max.\n"
    "A 429 is waited out (Retry-After) and retried, counted as rate-limited, not as an error.\n"
    SIM_API_HELP
    "  --clients N          concurrent clients (default 32)\n"
    "  --duration S         seconds to measure (default 30)\n"
    "  --mix K,...          the loop's steps, create first: create, exec, delete (default create,exec,delete)\n"
    SIM_CREATE_HELP
    "Exit: 0 every operation succeeded, 1 an operation failed (or none ran), 2 usage.\n";

static const char sim_populate_usage[] =
    "usage: sandbox-sim populate --controller URL --token T --count N [--clients 32]\n"
    "Creates N live sandboxes (parallel clients, each create waited for) and leaves them running; prints\n"
    "how many and how fast.\n" SIM_API_HELP
    "  --count N            sandboxes to create (1 to 1000000)\n"
    "  --clients N          concurrent clients (default 32)\n" SIM_CREATE_HELP
    "Exit: 0 all created, 1 a create failed, 2 usage.\n";

static const char sim_probe_usage[] =
    "usage: sandbox-sim probe --controller URL --token T [--get N] [--list N] [--list-limit 100]\n"
    "Times GET /v1/sandboxes/{id} (over the sandboxes of the first page, in turn) N times and\n"
    "GET /v1/sandboxes?limit=L N times, one request at a time; prints p50/p90/p99/max.\n" SIM_API_HELP
    "  --get N              GETs of one sandbox (default 200)\n"
    "  --list N             list requests (default 50)\n"
    "  --list-limit L       page size of the list (1 to 1000, default 100)\n"
    "With no sandbox in the token's tenant only the list is timed (get n 0).\n"
    "Exit: 0, 1 a request failed, 2 usage.\n";

int sim_api_options(int argc, char **argv, const char *usage, unsigned allowed, sim_opts_t *o, sim_api_t *a)
{
    int c, idx = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", sim_api_opts, &idx)) != -1) {
        if (c == SIM_O_HELP) {
            fputs(usage, stdout);
            return 0;
        }
        if (c == '?' || !(allowed & (1u << c))) {
            if (c != '?')
                sim_errorf("--%s is not an option of this subcommand (see --help)", sim_api_opts[c - 1].name);
            else
                fputs(usage, stderr);
            return 2;
        }
        bool bad = false;
        o->seen |= 1u << c;
        switch (c) {
        case SIM_O_CTL: o->url = optarg; break;
        case SIM_O_TOKEN: o->token = optarg; break;
        case SIM_O_TOKFILE: o->tokfile = optarg; break;
        case SIM_O_CLIENTS: bad = sim_parse_int(optarg, 1, SIM_MAX_CLIENTS, &o->clients) < 0; break;
        case SIM_O_DURATION: bad = sim_parse_int(optarg, 1, 86400, &o->duration) < 0; break;
        case SIM_O_MIX: o->mix = optarg; break;
        case SIM_O_IMAGE: a->image = optarg; break;
        case SIM_O_SELECTOR: o->selector = optarg; break;
        case SIM_O_TTL: bad = sim_parse_int(optarg, SBX_TTL_SECONDS_MIN, SBX_TTL_SECONDS_MAX, &a->ttl_seconds) < 0; break;
        case SIM_O_CPU: bad = sim_parse_int(optarg, SBX_CPU_MILLIS_MIN, SBX_CPU_MILLIS_MAX, &a->cpu_millis) < 0; break;
        case SIM_O_MEM: bad = sim_parse_int(optarg, SBX_MEMORY_MIB_MIN, SBX_MEMORY_MIB_MAX, &a->memory_mib) < 0; break;
        case SIM_O_JSON: a->json = true; break;
        case SIM_O_COUNT: bad = sim_parse_int(optarg, 1, 1000000, &o->count) < 0; break;
        case SIM_O_GET: bad = sim_parse_int(optarg, 0, 10000000, &o->get) < 0; break;
        case SIM_O_LIST: bad = sim_parse_int(optarg, 0, 10000000, &o->list) < 0; break;
        case SIM_O_LIMIT: bad = sim_parse_int(optarg, 1, SBX_LIST_MAX, &o->limit) < 0; break;
        case SIM_O_RATE: bad = sim_parse_int(optarg, 1, 10000, &o->rate) < 0; break;
        case SIM_O_POOL: o->pool = optarg; break;
        case SIM_O_IDS: o->ids = optarg; break;
        default: bad = true;
        }
        if (bad) {
            sim_errorf("bad value for --%s: %s (see --help)", sim_api_opts[c - 1].name, optarg);
            return 2;
        }
    }
    if (optind < argc) {
        sim_errorf("unexpected argument %s (see --help)", argv[optind]);
        return 2;
    }
    if (!o->url || (!o->token && !o->tokfile)) {
        sim_errorf("--controller and --token (or --token-file) are required (see --help)");
        return 2;
    }
    if (o->tokfile) {
        FILE *fp = fopen(o->tokfile, "r");
        char line[SBX_TOKEN_MAX + 4] = "";
        if (!fp || !fgets(line, sizeof line, fp)) {
            if (fp)
                fclose(fp);
            sim_errorf("--token-file %s cannot be read", o->tokfile);
            return 1;
        }
        fclose(fp);
        line[strcspn(line, "\r\n")] = '\0';
        if (strlen(line) > SBX_TOKEN_MAX) {
            sim_errorf("--token-file %s: its first line is longer than a token", o->tokfile);
            return 2;
        }
        memcpy(a->token, line, strlen(line) + 1);
    } else {
        if (strlen(o->token) > SBX_TOKEN_MAX) {
            sim_errorf("--token is longer than a token");
            return 2;
        }
        snprintf(a->token, sizeof a->token, "%s", o->token);
    }
    a->selector = json_object_new_object();
    if (o->selector && *o->selector) {
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", o->selector);
        char *save = NULL;
        for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            char *eq = strchr(tok, '=');
            if (!eq || eq == tok) {
                sim_errorf("--selector must be K=V,...");
                return 2;
            }
            *eq = '\0';
            json_object_object_add(a->selector, tok, json_object_new_string(eq + 1));
        }
    }
    a->base = event_base_new();
    char why[256];
    if (!a->base) {
        sim_errorf("cannot create the event loop");
        return 1;
    }
    if (sim_target_parse(o->url, a->base, &a->t, why, sizeof why) < 0) {
        sim_errorf("%s", why);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    return -1;
}

void sim_api_release(sim_api_t *a)
{
    json_object_put(a->selector);
    if (a->base)
        event_base_free(a->base);
}

static int sim_parse_mix(sim_load_t *L, const char *mix)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%s", mix);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int k = -1;
        for (int i = 0; i < K_N; i++)
            if (strcmp(tok, sim_kind_names[i]) == 0)
                k = i;
        if (k < 0 || L->nsteps == SIM_MAX_STEPS || (k == K_CREATE) != (L->nsteps == 0) || L->has_delete)
            return SBX_EINVAL;
        L->has_delete = k == K_DELETE;
        L->steps[L->nsteps++] = k;
    }
    return L->nsteps > 0 ? 0 : SBX_EINVAL;
}

int sim_load_main(int argc, char **argv)
{
    sim_opts_t o = { .clients = 32, .duration = 30, .mix = "create,exec,delete", .selector = "sim=hollow" };
    sim_api_t a = SIM_API_DEFAULTS;
    sim_load_t L = { .api = &a };
    unsigned allowed = SIM_OPT(CTL) | SIM_OPT(TOKEN) | SIM_OPT(TOKFILE) | SIM_OPT(CLIENTS) | SIM_OPT(DURATION) |
                       SIM_OPT(MIX) | SIM_OPT(IMAGE) | SIM_OPT(SELECTOR) | SIM_OPT(TTL) | SIM_OPT(CPU) | SIM_OPT(MEM) |
                       SIM_OPT(JSON);
    int rc = sim_api_options(argc, argv, sim_load_usage, allowed, &o, &a);
    if (rc >= 0)
        goto cleanup;
    if (sim_parse_mix(&L, o.mix) < 0) {
        sim_errorf("--mix must list create first, then exec (any number) and at most one delete, last");
        rc = 2;
        goto cleanup;
    }
    L.nclients = (int)o.clients;
    if (sim_load_run(&L, o.duration) < 0) {
        sim_errorf("out of memory for %d clients", L.nclients);
        rc = 1;
        goto cleanup;
    }
    sim_load_print(&L, "load");
    rc = L.errors == 0 && L.k[K_CREATE].ops > 0 ? 0 : 1;
cleanup:
    sim_load_release(&L);
    sim_api_release(&a);
    return rc;
}

int sim_populate_main(int argc, char **argv)
{
    sim_opts_t o = { .clients = 32, .selector = "sim=hollow" };
    sim_api_t a = SIM_API_DEFAULTS;
    a.ttl_seconds = 24 * 3600;
    sim_load_t L = { .api = &a };
    unsigned allowed = SIM_OPT(CTL) | SIM_OPT(TOKEN) | SIM_OPT(TOKFILE) | SIM_OPT(CLIENTS) | SIM_OPT(COUNT) |
                       SIM_OPT(IMAGE) | SIM_OPT(SELECTOR) | SIM_OPT(TTL) | SIM_OPT(CPU) | SIM_OPT(MEM) | SIM_OPT(JSON);
    int rc = sim_api_options(argc, argv, sim_populate_usage, allowed, &o, &a);
    if (rc >= 0)
        goto cleanup;
    if (o.count == 0) {
        sim_errorf("populate needs --count N (see --help)");
        rc = 2;
        goto cleanup;
    }
    L.steps[0] = K_CREATE;
    L.nsteps = 1;
    L.target = o.count;
    L.nclients = (int)(o.clients < o.count ? o.clients : o.count);
    if (sim_load_run(&L, 0) < 0) {
        sim_errorf("out of memory for %d clients", L.nclients);
        rc = 1;
        goto cleanup;
    }
    sim_load_print(&L, "populate");
    rc = L.errors == 0 && L.created >= o.count ? 0 : 1;
cleanup:
    sim_load_release(&L);
    sim_api_release(&a);
    return rc;
}

/* ---- probe ------------------------------------------------------------- */

typedef struct sim_probe {
    sim_api_t *api;
    struct evhttp_connection *c;
    char (*ids)[SBX_ID_MAX];
    size_t nids;
    long get_left, list_left, limit, gets, lists;
    int64_t t_sent;
    sim_samples_t get, list;
    int rc;
} sim_probe_t;

static void sim_probe_next(sim_probe_t *p);

static void sim_probe_done(void *ud, const sim_resp_t *r)
{
    sim_probe_t *p = ud;
    int64_t us = sim_now_us() - p->t_sent;
    char why[512];
    if (r->status != 200) {
        sim_errorf("probe: %s", sim_resp_error(r, why, sizeof why));
        p->rc = 1;
        event_base_loopbreak(p->api->base);
        return;
    }
    if (p->list_left > 0) {
        p->list_left--;
        sim_samples_add(&p->list, us);
    } else {
        p->get_left--;
        sim_samples_add(&p->get, us);
    }
    sim_probe_next(p);
}

static void sim_probe_next(sim_probe_t *p)
{
    char path[SBX_ID_MAX + 48];
    if (p->list_left > 0)
        snprintf(path, sizeof path, "/v1/sandboxes?limit=%ld", p->limit);
    else if (p->get_left > 0 && p->nids > 0)
        snprintf(path, sizeof path, "/v1/sandboxes/%s", p->ids[(size_t)p->get_left % p->nids]);
    else {
        event_base_loopbreak(p->api->base);
        return;
    }
    p->t_sent = sim_now_us();
    if (sim_http_send(p->c, &p->api->t, EVHTTP_REQ_GET, path, p->api->token, NULL, sim_probe_done, p) < 0) {
        p->rc = 1;
        event_base_loopbreak(p->api->base);
    }
}

static void sim_probe_ids_done(void *ud, const sim_resp_t *r)
{
    sim_probe_t *p = ud;
    json_object *arr = NULL;
    char why[512];
    if (r->status != 200 || !r->json || !json_object_object_get_ex(r->json, "sandboxes", &arr) ||
        !json_object_is_type(arr, json_type_array)) {
        sim_errorf("probe: listing the sandboxes: %s", sim_resp_error(r, why, sizeof why));
        p->rc = 1;
        event_base_loopbreak(p->api->base);
        return;
    }
    size_t n = json_object_array_length(arr);
    p->ids = calloc(n ? n : 1, sizeof *p->ids);
    for (size_t i = 0; p->ids && i < n; i++) {
        const char *id = sim_jstr(json_object_array_get_idx(arr, i), "id");
        if (id && strlen(id) < SBX_ID_MAX)
            snprintf(p->ids[p->nids++], SBX_ID_MAX, "%s", id);
    }
    if (p->nids == 0 && p->get_left > 0) {
        /* Nothing to GET: the lists are still timed (n 0 for get). */
        sim_errorf("probe: the token's tenant has no sandbox to GET; timing the list only");
        p->get_left = 0;
    }
    sim_probe_next(p);
}

int sim_probe_main(int argc, char **argv)
{
    sim_opts_t o = { .get = 200, .list = 50, .limit = SBX_LIST_DEFAULT };
    sim_api_t a = SIM_API_DEFAULTS;
    sim_probe_t p = { .api = &a };
    unsigned allowed = SIM_OPT(CTL) | SIM_OPT(TOKEN) | SIM_OPT(TOKFILE) | SIM_OPT(GET) | SIM_OPT(LIST) |
                       SIM_OPT(LIMIT) | SIM_OPT(JSON);
    int rc = sim_api_options(argc, argv, sim_probe_usage, allowed, &o, &a);
    if (rc >= 0)
        goto cleanup;
    p.get_left = p.gets = o.get;
    p.list_left = p.lists = o.list;
    p.limit = o.limit;
    p.c = sim_conn_new(&a.t, 30);
    char path[64];
    snprintf(path, sizeof path, "/v1/sandboxes?limit=%d", SBX_LIST_DEFAULT);
    if (!p.c || sim_http_send(p.c, &a.t, EVHTTP_REQ_GET, path, a.token, NULL, sim_probe_ids_done, &p) < 0) {
        sim_errorf("cannot start the probe");
        rc = 1;
        goto cleanup;
    }
    event_base_dispatch(a.base);
    rc = p.rc;
    if (rc == 0 && a.json) {
        json_object *out = json_object_new_object();
        json_object_object_add(out, "get", sim_samples_json(&p.get));
        json_object_object_add(out, "list", sim_samples_json(&p.list));
        json_object_object_add(out, "list_limit", json_object_new_int64(p.limit));
        printf("%s\n", json_object_to_json_string_ext(out, JSON_C_TO_STRING_PLAIN));
        json_object_put(out);
    } else if (rc == 0) {
        printf("%-28s %6s %8s %8s %8s %8s\n", "request", "n", "p50 ms", "p90 ms", "p99 ms", "max ms");
        printf("%-28s %6zu %8.2f %8.2f %8.2f %8.2f\n", "GET /v1/sandboxes/{id}", p.get.n, sim_samples_ms(&p.get, 0.5),
               sim_samples_ms(&p.get, 0.9), sim_samples_ms(&p.get, 0.99), sim_samples_ms(&p.get, 1));
        char what[48];
        snprintf(what, sizeof what, "GET /v1/sandboxes?limit=%ld", p.limit);
        printf("%-28s %6zu %8.2f %8.2f %8.2f %8.2f\n", what, p.list.n, sim_samples_ms(&p.list, 0.5),
               sim_samples_ms(&p.list, 0.9), sim_samples_ms(&p.list, 0.99), sim_samples_ms(&p.list, 1));
    }
    fflush(stdout);
cleanup:
    if (p.c)
        evhttp_connection_free(p.c);
    sim_http_release_all();
    free(p.ids);
    sim_samples_release(&p.get);
    sim_samples_release(&p.list);
    sim_api_release(&a);
    return rc;
}
