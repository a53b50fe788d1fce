/* sandbox-sim's HTTP client: kept-alive evhttp connections to one
 * controller, JSON bodies in and out, one callback per exchange. */
#include "sim.h"
#include "errors.h"
#include "limits.h"

#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int sim_target_parse(const char *url, struct event_base *base, sim_target_t *t, char *why, size_t whylen)
{
    static const char scheme[] = "http://";
    memset(t, 0, sizeof *t);
    t->base = base;
    if (!url || strncmp(url, scheme, sizeof scheme - 1) != 0) {
        snprintf(why, whylen, "--controller must be http://HOST:PORT (sandbox-sim speaks plain HTTP on loopback)");
        return SBX_EINVAL;
    }
    const char *h = url + sizeof scheme - 1;
    const char *colon = strrchr(h, ':');
    if (!colon || colon == h || (size_t)(colon - h) >= sizeof t->host) {
        snprintf(why, whylen, "--controller must be http://HOST:PORT");
        return SBX_EINVAL;
    }
    char port[16];
    snprintf(port, sizeof port, "%.*s", (int)strcspn(colon + 1, "/"), colon + 1);
    const char *rest = colon + 1 + strlen(port);
    long p = 0;
    if (sim_parse_int(port, 1, 65535, &p) < 0 || (*rest && strcmp(rest, "/") != 0)) {
        snprintf(why, whylen, "--controller must be http://HOST:PORT (a port from 1 to 65535, no path)");
        return SBX_EINVAL;
    }
    snprintf(t->host, sizeof t->host, "%.*s", (int)(colon - h), h);
    t->port = (int)p;
    return 0;
}

struct evhttp_connection *sim_conn_new(const sim_target_t *t, int timeout_s)
{
    struct evhttp_connection *c = evhttp_connection_base_new(t->base, NULL, t->host, (unsigned short)t->port);
    if (!c)
        return NULL;
    evhttp_connection_set_timeout(c, timeout_s);
    evhttp_connection_set_retries(c, 0);
    return c;
}

/* An exchange under way. They are listed so that those a freed connection
 * drops (evhttp frees its requests without calling back) are freed too. */
typedef struct sim_call {
    sim_http_done_fn done;
    void *ud;
    struct sim_call *prev, *next;
} sim_call_t;

static sim_call_t *sim_calls;

static void sim_call_unlink(sim_call_t *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        sim_calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
}

void sim_http_release_all(void)
{
    while (sim_calls) {
        sim_call_t *c = sim_calls;
        sim_call_unlink(c);
        free(c);
    }
}

static void sim_http_cb(struct evhttp_request *req, void *arg)
{
    sim_call_t call = *(sim_call_t *)arg;
    sim_call_unlink(arg);
    free(arg);
    sim_resp_t r = { .status = -1 };
    if (req && evhttp_request_get_response_code(req) > 0) {
        r.status = evhttp_request_get_response_code(req);
        struct evbuffer *in = evhttp_request_get_input_buffer(req);
        size_t len = evbuffer_get_length(in);
        if (len > 0) {
            const char *data = (const char *)evbuffer_pullup(in, -1);
            json_tokener *tok = json_tokener_new();
            if (tok && data) {
                r.json = json_tokener_parse_ex(tok, data, (int)(len > INT32_MAX ? INT32_MAX : len));
                if (json_tokener_get_error(tok) != json_tokener_success && r.json) {
                    json_object_put(r.json);
                    r.json = NULL;
                }
            }
            json_tokener_free(tok);
        }
        const char *ra = evhttp_find_header(evhttp_request_get_input_headers(req), "Retry-After");
        long v = 0;
        if (ra && sim_parse_int(ra, 0, 3600, &v) == 0)
            r.retry_after = (int)v;
    }
    call.done(call.ud, &r);
    json_object_put(r.json);
}

int sim_http_send(struct evhttp_connection *conn, const sim_target_t *t, enum evhttp_cmd_type method,
                  const char *path, const char *token, json_object *body, sim_http_done_fn done, void *ud)
{
    sim_call_t *call = malloc(sizeof *call);
    if (!call)
        return SBX_ENOMEM;
    call->done = done;
    call->ud = ud;
    call->prev = NULL;
    call->next = sim_calls;
    if (sim_calls)
        sim_calls->prev = call;
    sim_calls = call;
    struct evhttp_request *req = evhttp_request_new(sim_http_cb, call);
    if (!req) {
        sim_call_unlink(call);
        free(call);
        return SBX_ENOMEM;
    }
    struct evkeyvalq *hd = evhttp_request_get_output_headers(req);
    char auth[SBX_TOKEN_MAX + 16], host[300];
    snprintf(auth, sizeof auth, "Bearer %s", token);
    snprintf(host, sizeof host, "%s:%d", t->host, t->port);
    evhttp_add_header(hd, "Host", host);
    evhttp_add_header(hd, "Authorization", auth);
    evhttp_add_header(hd, "Accept", "application/json");
    if (body) {
        const char *text = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN);
        evhttp_add_header(hd, "Content-Type", "application/json");
        evbuffer_add(evhttp_request_get_output_buffer(req), text, strlen(text));
    }
    /* On failure evhttp_make_request frees req (and so never calls back). */
    if (evhttp_make_request(conn, req, method, path) != 0) {
        sim_call_unlink(call);
        free(call);
        return SBX_EUNAVAIL;
    }
    return 0;
}

const char *sim_resp_error(const sim_resp_t *r, char *buf, size_t buflen)
{
    if (r->status < 0) {
        snprintf(buf, buflen, "the exchange failed (connection refused, reset or timed out)");
        return buf;
    }
    json_object *e = NULL, *code = NULL, *msg = NULL;
    if (r->json && json_object_object_get_ex(r->json, "error", &e)) {
        json_object_object_get_ex(e, "code", &code);
        json_object_object_get_ex(e, "message", &msg);
    }
    snprintf(buf, buflen, "HTTP %d %s: %.300s", r->status, code ? json_object_get_string(code) : "-",
             msg ? json_object_get_string(msg) : "(no error body)");
    return buf;
}

int sim_parse_int(const char *s, long lo, long hi, long *ret)
{
    if (!s || !*s)
        return SBX_EINVAL;
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return SBX_EINVAL;
    *ret = v;
    return 0;
}

void sim_errorf(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "sandbox-sim: %s\n", line);
}

int64_t sim_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

const char *sim_jstr(json_object *o, const char *key)
{
    json_object *v = NULL;
    if (!o || !json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
        return NULL;
    return json_object_get_string(v);
}

void sim_after_ms(struct event *ev, int64_t ms)
{
    struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
    evtimer_add(ev, &tv);
}
