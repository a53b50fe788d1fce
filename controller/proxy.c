/* The route proxy (see proxy.h): its connections, the request head and the
 * listener; the relay is in proxy_relay.c, the pure parts in proxy_route.c.
 * A routed connection goes through:
 *
 *   HEAD      reading the request head from the client (bounded in size
 *             and time);
 *   WORKER    connected to the worker, the preamble and the rewritten head
 *             sent, waiting for the worker's one-line answer;
 *   PIPE      relaying bytes both ways until the upstream has answered and
 *             closed (or, for a WebSocket, until either side closes);
 *   CLOSING   an error answer being flushed to the client.
 *
 * Buffers are bounded: a side is not read while the other side's output
 * holds more than PROXY_HIGH_WATER bytes, and it is read again when that
 * output has drained, so a slow client slows its own upstream and nothing
 * else. Every few seconds each thread re-checks the routes of its open
 * connections and closes those whose route has gone. */
#include "proxy_internal.h"
#include "db.h"
#include "errors.h"
#include "fdutil.h"
#include "api.h"
#include "grant.h"
#include "jsonx.h"
#include "log.h"
#include "metrics.h"
#include "store.h"
#include "tlsbev.h"
#include "token.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/listener.h>
#include <event2/util.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <time.h>
#include <unistd.h>

/* ---- connections ---- */

static metric_family_t *m_conns, *m_requests, *m_bytes, *m_duration;
static pthread_once_t metrics_once = PTHREAD_ONCE_INIT;

static void proxy_metrics_init(void)
{
    m_conns = metrics_family("sandbox_route_connections", METRIC_GAUGE,
                             "Connections open on the route listener.", NULL, 0);
    m_requests = metrics_family("sandbox_route_requests_total", METRIC_COUNTER,
                                "Requests on the route listener, by answer: \"forwarded\" to a sandbox, or the "
                                "status the controller answered itself (404 no route, 401, 502 worker, ...).",
                                NULL, 0);
    m_bytes = metrics_family("sandbox_route_bytes_total", METRIC_COUNTER,
                             "Body bytes relayed through routes: \"in\" from clients, \"out\" to them.", NULL, 0);
    m_duration = metrics_family("sandbox_route_request_duration_seconds", METRIC_HISTOGRAM,
                                "Time from a routed connection's arrival to its end.", metrics_latency_buckets,
                                metrics_latency_nbuckets);
}

void proxy_conn_free(pconn_t *pc, const char *why)
{
    proxy_thread_t *pt = pc->pt;
    proxy_caps_remove(pc);
    metrics_add(m_conns, NULL, -1);
    if (pc->method[0]) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long ms = (long)((now.tv_sec - pc->started.tv_sec) * 1000 + (now.tv_nsec - pc->started.tv_nsec) / 1000000);
        char answer[16];
        if (pc->status)
            snprintf(answer, sizeof answer, "%d", pc->status);
        else
            snprintf(answer, sizeof answer, "forwarded");
        char labels[48];
        metrics_add(m_requests, metrics_labels(labels, sizeof labels, "answer", answer, NULL), 1);
        metrics_add(m_bytes, "direction=\"in\"", (double)pc->body_bytes);
        metrics_add(m_bytes, "direction=\"out\"", (double)pc->resp_bytes);
        metrics_observe(m_duration, NULL, (double)ms / 1000.0);
        char answered[32] = "";
        if (pc->status)
            snprintf(answered, sizeof answered, ", answered %d", pc->status);
        log_info("proxy", "route %s %s %s from %s: %s%s, %lld bytes in, %lld out, %ld ms",
                 pc->route_id[0] ? pc->route_id : "(none)", pc->method, pc->path, pc->peer_text, why, answered,
                 (long long)pc->body_bytes, (long long)pc->resp_bytes, ms);
    }
    tenantcap_release(&pc->tcap);
    if (pc->down)
        bufferevent_free(pc->down);
    if (pc->up)
        bufferevent_free(pc->up);
    if (pc->deadline)
        event_free(pc->deadline);
    if (pc->evict_ev)
        event_free(pc->evict_ev);
    TAILQ_REMOVE(&pt->conns, pc, link);
    pt->nconns--;
    free(pc);
}

/* After our answer is written: stop sending, and read (and drop) what the
 * client still sends for a moment before closing, so that closing with
 * unread input (a reset) cannot destroy the answer before the client has
 * read it. Bounded in time and bytes. */
#define PROXY_LINGER_SECONDS 2
#define PROXY_LINGER_BYTES   (1024 * 1024)

static void linger_read_cb(struct bufferevent *bev, void *arg)
{
    pconn_t *pc = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    pc->body_bytes += (int64_t)evbuffer_get_length(in);
    evbuffer_drain(in, evbuffer_get_length(in));
    if (pc->body_bytes > PROXY_LINGER_BYTES)
        proxy_conn_free(pc, "answered");
}

static void closing_event_cb(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    if (what == BEV_EVENT_CONNECTED) /* a TLS handshake done (route_tls_cert): not an end */
        return;
    proxy_conn_free(arg, "answered");
}

static void closing_write_cb(struct bufferevent *bev, void *arg)
{
    pconn_t *pc = arg;
    tls_bev_shutdown_write(bev);
    pc->body_bytes = 0;
    struct timeval tv = { PROXY_LINGER_SECONDS, 0 };
    bufferevent_set_timeouts(bev, &tv, NULL);
    bufferevent_setwatermark(bev, EV_READ, 0, PROXY_READ_CHUNK);
    bufferevent_setcb(bev, linger_read_cb, NULL, closing_event_cb, pc);
    bufferevent_disable(bev, EV_WRITE);
    bufferevent_enable(bev, EV_READ);
}

/* Answers the client ourselves and closes once it is written. */
static void pc_answer(pconn_t *pc, int status, const char *reason, const char *extra_headers, api_code_t code,
                      const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void pc_answer(pconn_t *pc, int status, const char *reason, const char *extra_headers, api_code_t code,
                      const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_object *o = json_object_new_object(), *e = json_object_new_object();
    jsonx_add_str(e, "code", api_code_info(code)->name);
    jsonx_add_str(e, "message", msg);
    jsonx_add(o, "error", e);
    const char *body = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
    struct evbuffer *out = bufferevent_get_output(pc->down);
    evbuffer_add_printf(out,
                        "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                        "Cache-Control: no-store\r\nConnection: close\r\n%s\r\n%s\n",
                        status, reason, strlen(body) + 1, extra_headers ? extra_headers : "", body);
    json_object_put(o);
    pc->status = status;
    pc->state = PC_CLOSING;
    proxy_caps_release(pc); /* nothing left but flushing this: evictable */
    if (pc->up) {
        bufferevent_free(pc->up);
        pc->up = NULL;
    }
    bufferevent_disable(pc->down, EV_READ);
    bufferevent_setwatermark(pc->down, EV_WRITE, 0, 0);
    bufferevent_setcb(pc->down, NULL, closing_write_cb, closing_event_cb, pc);
    bufferevent_enable(pc->down, EV_WRITE);
}

void proxy_conn_answer_error(pconn_t *pc, api_code_t code, const char *extra, const char *msg)
{
    static const struct { int status; const char *reason; } reasons[] = {
        { 400, "Bad Request" }, { 401, "Unauthorized" }, { 404, "Not Found" }, { 409, "Conflict" },
        { 413, "Payload Too Large" }, { 431, "Request Header Fields Too Large" }, { 500, "Internal Server Error" },
        { 501, "Not Implemented" }, { 502, "Bad Gateway" }, { 503, "Service Unavailable" },
    };
    int status = api_code_info(code)->http_status;
    const char *reason = "Error";
    for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++)
        if (reasons[i].status == status)
            reason = reasons[i].reason;
    pc_answer(pc, status, reason, extra, code, "%s", msg);
}

/* ---- the request head ---- */

static int head_count(const proxy_head_t *h, const char *name)
{
    int n = 0;
    for (int i = 0; i < h->nh; i++)
        n += strcasecmp(h->name[i], name) == 0;
    return n;
}

static bool token_list_has(const char *list, const char *tok)
{
    size_t tl = strlen(tok);
    for (const char *p = list; p && *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        size_t n = strcspn(p, ",");
        size_t m = n;
        while (m > 0 && (p[m - 1] == ' ' || p[m - 1] == '\t'))
            m--;
        if (m == tl && strncasecmp(p, tok, tl) == 0)
            return true;
        p += n;
    }
    return false;
}

/* Headers we never forward: hop-by-hop ones, what the Connection header
 * names, the route's own credentials and X-Forwarded-* (set anew). */
static bool drop_header(const proxy_head_t *h, int i, const char *connection, bool upgrade, bool cred_in_auth,
                        bool port_host)
{
    static const char *const hop[] = { "connection", "keep-alive", "proxy-connection", "te", "trailer",
                                       "proxy-authorization", "proxy-authenticate", "x-sandbox-route-token",
                                       "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host",
                                       "x-forwarded-prefix", "forwarded", NULL };
    const char *n = h->name[i];
    for (int k = 0; hop[k]; k++)
        if (strcasecmp(n, hop[k]) == 0)
            return true;
    if (strcasecmp(n, "upgrade") == 0)
        return !upgrade;
    if (strcasecmp(n, "authorization") == 0)
        return cred_in_auth;
    if (port_host && strcasecmp(n, "x-access-token") == 0)
        return true; /* the caller's API token (port_target) */
    return connection && token_list_has(connection, n) && strcasecmp(n, "upgrade") != 0;
}

static void first_value(const char *v, char *out, size_t outlen)
{
    if (!v) {
        out[0] = '\0';
        return;
    }
    while (*v == ' ')
        v++;
    size_t n = strcspn(v, ",");
    while (n > 0 && v[n - 1] == ' ')
        n--;
    snprintf(out, outlen, "%.*s", (int)n, v);
}

/* Framing we cannot vouch for is refused rather than passed on: a message,
 * or NULL with *ret_len the Content-Length (0 when none). */
static const char *framing_error(const proxy_head_t *h, int64_t *ret_len)
{
    *ret_len = 0;
    const char *host = proxy_head_get(h, "host");
    if (h->minor == 1 && (!host || head_count(h, "host") != 1))
        return "an HTTP/1.1 request needs exactly one Host header";
    const char *te = proxy_head_get(h, "transfer-encoding");
    const char *cl = proxy_head_get(h, "content-length");
    if (te && (cl || head_count(h, "transfer-encoding") != 1 || strcasecmp(te, "chunked") != 0))
        return "Transfer-Encoding must be chunked alone, without Content-Length";
    if (cl) {
        char *end = NULL;
        errno = 0;
        long long v = strtoll(cl, &end, 10);
        if (head_count(h, "content-length") != 1 || !isdigit((unsigned char)cl[0]) || *end || errno || v < 0)
            return "malformed Content-Length";
        *ret_len = v;
    }
    return NULL;
}

/* The access token the client presents, or NULL; *ret_in_auth when it came
 * as Authorization: Bearer (which is then not forwarded). */
static const char *route_credential(const proxy_head_t *h, bool *ret_in_auth)
{
    *ret_in_auth = false;
    const char *presented = proxy_head_get(h, "x-sandbox-route-token");
    const char *auth = proxy_head_get(h, "authorization");
    if (!presented && auth && strncasecmp(auth, "Bearer ", 7) == 0) {
        presented = auth + 7;
        while (*presented == ' ')
            presented++;
        *ret_in_auth = true;
    }
    return presented;
}

/* What the request says about where it came from, believed only from a
 * trusted proxy. */
typedef struct forwarded {
    char host[256];
    char proto[16];
    char chain[512];   /* X-Forwarded-For as received */
} forwarded_t;

static void forwarded_read(const pconn_t *pc, const proxy_head_t *h, forwarded_t *ret)
{
    memset(ret, 0, sizeof *ret);
    if (!pc->trusted_peer)
        return;
    first_value(proxy_head_get(h, "x-forwarded-host"), ret->host, sizeof ret->host);
    first_value(proxy_head_get(h, "x-forwarded-proto"), ret->proto, sizeof ret->proto);
    if (strspn(ret->proto, "abcdefghijklmnopqrstuvwxyz") != strlen(ret->proto))
        ret->proto[0] = '\0';
    const char *xff = proxy_head_get(h, "x-forwarded-for");
    if (xff && strlen(xff) < 400)
        snprintf(ret->chain, sizeof ret->chain, "%s", xff);
}

/* The preamble for the worker and the request head for the app. */
static struct evbuffer *upstream_head(const pconn_t *pc, const proxy_head_t *h, const char *target,
                                      bool by_path, bool cred_in_auth, const forwarded_t *fw, const char *host,
                                      const char *grant)
{
    struct evbuffer *hb = evbuffer_new();
    if (!hb)
        return NULL;
    const char *connection = proxy_head_get(h, "connection");
    evbuffer_add_printf(hb, "SANDBOX-FORWARD/1 %s\r\n", grant);
    evbuffer_add_printf(hb, "%s %s HTTP/1.%d\r\n", h->method, target, h->minor);
    for (int i = 0; i < h->nh; i++)
        if (!drop_header(h, i, connection, pc->upgrade, cred_in_auth, pc->port_host))
            evbuffer_add_printf(hb, "%s: %s\r\n", h->name[i], h->value[i]);
    evbuffer_add_printf(hb, "Connection: %s\r\n", pc->upgrade ? "Upgrade" : "close");
    if (fw->chain[0])
        evbuffer_add_printf(hb, "X-Forwarded-For: %s, %s\r\n", fw->chain, pc->peer_text);
    else
        evbuffer_add_printf(hb, "X-Forwarded-For: %s\r\n", pc->peer_text);
    evbuffer_add_printf(hb, "X-Forwarded-Proto: %s\r\n", fw->proto[0] ? fw->proto : "http");
    if (host && strlen(host) < 256)
        evbuffer_add_printf(hb, "X-Forwarded-Host: %s\r\n", host);
    if (by_path)
        evbuffer_add_printf(hb, "X-Forwarded-Prefix: /r/%s\r\n", pc->name);
    evbuffer_add(hb, "\r\n", 2);
    return hb;
}

/* Signs the grant for t. */
static int sign_grant(const route_target_t *t, char ret[GRANT_MAX])
{
    unsigned char key[GRANT_KEY_BYTES];
    grant_t g = { .port = t->port, .expires_unix = (int64_t)time(NULL) + PROXY_GRANT_SECONDS };
    snprintf(g.worker_id, sizeof g.worker_id, "%s", t->worker_id);
    snprintf(g.sandbox_id, sizeof g.sandbox_id, "%s", t->sandbox_id);
    int rc = grant_key_from_hash_hex(t->worker_token_hash, key);
    if (rc == 0)
        rc = grant_sign(key, &g, ret);
    sodium_memzero(key, sizeof key);
    return rc;
}

/* Connects to the worker and sends it hb (taken); then waits for its line. */
static void connect_worker(pconn_t *pc, const char *address, struct evbuffer *hb)
{
    const char *why = NULL;
    pc->up = proxy_worker_dial(pc->pt->ctl, pc->pt->base, address, hb, PROXY_WORKER_SECONDS, proxy_worker_read_cb,
                               NULL, proxy_worker_event_cb, pc, &why);
    evbuffer_free(hb);
    if (!pc->up) {
        proxy_conn_answer_error(pc, API_BAD_GATEWAY, NULL, why);
        return;
    }
    /* Until the worker agrees, the client is only watched for hanging up:
     * its body waits in the kernel (what came with the head stays in the
     * input buffer). */
    pc->state = PC_WORKER;
    bufferevent_setcb(pc->down, NULL, NULL, proxy_client_gone_cb, pc);
    bufferevent_disable(pc->down, EV_READ);
    bufferevent_set_timeouts(pc->down, NULL, NULL);
}

/* A port of a sandbox named by host (E2B's getHost: "{port}-{id}.{domain}"):
 * the sandbox running, the caller's API token (X-Access-Token, or Bearer,
 * or X-Sandbox-Route-Token) a member of its tenant or an admin, its tenant
 * allowing routes. True with *t; else answered. The token is not passed
 * on to the app. */
static bool port_target(pconn_t *pc, const proxy_head_t *h, int port, route_target_t *t, bool *ret_cred_in_auth)
{
    proxy_thread_t *pt = pc->pt;
    bool routes_allowed = false;
    int rc = db_ensure(pt->db, pt->ctl->conninfo) < 0 ? SBX_EDB
                                                       : store_port_target(*pt->db, pc->sandbox_id, port, t,
                                                                           &routes_allowed);
    if (rc < 0) {
        proxy_conn_answer_error(pc, rc == SBX_ENOTFOUND ? API_NOT_FOUND : API_UNAVAILABLE, NULL,
                                rc == SBX_ENOTFOUND ? "no such sandbox running" : "database unavailable");
        return false;
    }
    const char *presented = proxy_head_get(h, "x-access-token");
    if (!presented)
        presented = route_credential(h, ret_cred_in_auth);
    auth_info_t who;
    memset(&who, 0, sizeof who);
    rc = presented ? auth_token_check(*pt->db, presented, &who) : SBX_EAUTH;
    if (rc == SBX_EDB) {
        proxy_conn_answer_error(pc, API_UNAVAILABLE, NULL, "database unavailable");
        return false;
    }
    bool allowed = rc == 0 && (who.role == ROLE_ADMIN || (who.role == ROLE_MEMBER && strcmp(who.tenant_id, t->tenant_id) == 0));
    if (!allowed) {
        /* One answer whether the sandbox is another tenant's or the token
         * bad: a port host says nothing to a stranger. */
        proxy_conn_answer_error(pc, API_UNAUTHORIZED, "WWW-Authenticate: Bearer realm=\"sandbox-route\"\r\n",
                                presented ? "the token is not valid for this sandbox"
                                          : "a sandbox's port needs an API token of its tenant: X-Access-Token: sbt_...");
        return false;
    }
    if (!routes_allowed) {
        proxy_conn_answer_error(pc, API_POLICY_DENIED, NULL, "the tenant policy has routes: false");
        return false;
    }
    return true;
}

/* A whole request head arrived: find the route, check it and its token,
 * and hand the request to the worker. */
static void handle_head(pconn_t *pc, char *buf, size_t len)
{
    proxy_thread_t *pt = pc->pt;
    controller_t *ctl = pt->ctl;
    proxy_head_t h;
    int rc = proxy_parse_head(buf, len, &h);
    if (rc < 0) {
        proxy_conn_answer_error(pc, rc == SBX_ETOOBIG ? API_HEADERS_TOO_LARGE : API_INVALID_ARGUMENT, NULL,
                        rc == SBX_ETOOBIG ? "too many request headers" : "malformed HTTP request");
        return;
    }
    snprintf(pc->method, sizeof pc->method, "%s", h.method);
    int64_t content_length;
    const char *bad = framing_error(&h, &content_length);
    if (bad) {
        proxy_conn_answer_error(pc, API_INVALID_ARGUMENT, NULL, bad);
        return;
    }
    forwarded_t fw;
    forwarded_read(pc, &h, &fw);
    const char *host = fw.host[0] ? fw.host : proxy_head_get(&h, "host");
    const char *rest = NULL;
    int port_no = 0;
    pc->port_host = proxy_port_host(host, ctl->route_domain, pc->sandbox_id, &port_no);
    proxy_route_kind_t kind = pc->port_host ? PROXY_ROUTE_HOST
                                            : proxy_route_for(host, h.target, ctl->route_domain, pc->name, &rest);
    const char *app_path = kind == PROXY_ROUTE_PATH ? rest : kind == PROXY_ROUTE_REDIRECT ? "/" : h.target;
    size_t pl = strcspn(app_path, "?");
    if (pl >= sizeof pc->path)
        pl = sizeof pc->path - 1;
    memcpy(pc->path, app_path, pl);
    pc->path[pl] = '\0';
    if (kind == PROXY_ROUTE_NONE) {
        /* A client pointed at this port instead of the API (SANDBOX_URL set
         * to the route listener) learns where it is. */
        if (strncmp(h.target, "/v1/", 4) == 0 || strcmp(h.target, "/v1") == 0 || strncmp(h.target, "/healthz", 8) == 0)
            proxy_conn_answer_error(pc, API_NOT_FOUND, NULL,
                            "this is the route listener (route_listen), not the API: point SANDBOX_URL at the "
                            "controller's listen address (sandboxd --listen, default 127.0.0.1:8080)");
        else
            proxy_conn_answer_error(pc, API_NOT_FOUND, NULL,
                            "not a route address: routes are /r/{route}/ or {route}.{route_domain}");
        return;
    }
    if (kind == PROXY_ROUTE_REDIRECT) {
        char loc[600];
        snprintf(loc, sizeof loc, "Location: /r/%s/%.500s\r\n", pc->name, rest);
        pc_answer(pc, 308, "Permanent Redirect", loc, API_NOT_FOUND, "the route's address ends with a slash");
        return;
    }
    if (ctl->route_max_request > 0 && content_length > ctl->route_max_request) {
        char msg[160];
        snprintf(msg, sizeof msg, "the request body is larger than this server's route limit (%lld bytes)",
                 (long long)ctl->route_max_request);
        proxy_conn_answer_error(pc, API_PAYLOAD_TOO_LARGE, NULL, msg);
        return;
    }
    const char *connection = proxy_head_get(&h, "connection");
    pc->upgrade = proxy_head_get(&h, "upgrade") && connection && token_list_has(connection, "upgrade");
    pc->chunked = proxy_head_get(&h, "transfer-encoding") != NULL; /* framing_error: chunked alone */
    pc->body_left = content_length;
    pc->body_done = !pc->chunked && content_length == 0;

    route_target_t t;
    bool cred_in_auth = false;
    if (pc->port_host) {
        if (!port_target(pc, &h, port_no, &t, &cred_in_auth))
            return;
    } else {
        rc = db_ensure(pt->db, ctl->conninfo) < 0 ? SBX_EDB : store_route_target(*pt->db, pc->name, &t);
        if (rc < 0) {
            proxy_conn_answer_error(pc, rc == SBX_ENOTFOUND ? API_NOT_FOUND : API_UNAVAILABLE, NULL,
                                    rc == SBX_ENOTFOUND ? "no such route" : "database unavailable");
            return;
        }
        snprintf(pc->route_id, sizeof pc->route_id, "%s", t.route_id);
    }
    if (t.token_auth && !pc->port_host) {
        const char *presented = route_credential(&h, &cred_in_auth);
        if (!presented || !token_verify(presented, t.secret_hash)) {
            proxy_conn_answer_error(pc, API_UNAUTHORIZED, "WWW-Authenticate: Bearer realm=\"sandbox-route\"\r\n",
                            presented ? "the route's access token is not valid"
                                      : "this route needs its access token: Authorization: Bearer sbr_...");
            return;
        }
    }
    char grant[GRANT_MAX];
    if (t.paused) {
        proxy_conn_answer_error(pc, API_UNAVAILABLE, "Retry-After: 10\r\n",
                                "the sandbox behind this route is paused; it answers again once resumed");
        return;
    }
    if (t.unreachable[0]) {
        /* the reason alone: a public route's callers learn no worker name */
        char msg[160];
        snprintf(msg, sizeof msg, "the sandbox behind this route is unreachable for now (its worker: %s); retry "
                 "shortly", t.unreachable);
        proxy_conn_answer_error(pc, API_UNAVAILABLE, "Retry-After: 10\r\n", msg);
        return;
    }
    if (!t.worker_address[0] || !t.worker_token_hash[0]) {
        proxy_conn_answer_error(pc, API_BAD_GATEWAY, NULL, "the worker running this sandbox does not forward routes");
        return;
    }
    /* The route's tenant's fair share of connections to workers: a busy
     * route of one tenant cannot fill a worker's forwarder for the rest. */
    policy_t pol;
    policy_init(&pol);
    pol.max_worker_connections = t.max_worker_connections;
    tenantcap_limits_t lim;
    tenantcap_limits(&ctl->cfg, &pol, &lim);
    if (tenantcap_take(&pc->tcap, t.tenant_id, TCAP_BIT(TCAP_WORKER_CONNS), &lim, NULL) < 0) {
        proxy_conn_answer_error(pc, API_UNAVAILABLE, "Retry-After: 1\r\n",
                                "the sandbox's tenant holds its share of connections to workers; retry shortly");
        return;
    }
    if (sign_grant(&t, grant) < 0) {
        proxy_conn_answer_error(pc, API_INTERNAL, NULL, "cannot sign the worker grant");
        return;
    }
    struct evbuffer *hb = upstream_head(pc, &h, kind == PROXY_ROUTE_PATH ? rest : h.target,
                                        kind == PROXY_ROUTE_PATH, cred_in_auth, &fw, host, grant);
    if (!hb) {
        proxy_conn_answer_error(pc, API_INTERNAL, NULL, "out of memory");
        return;
    }
    connect_worker(pc, t.worker_address, hb);
}

static void head_read_cb(struct bufferevent *bev, void *arg)
{
    pconn_t *pc = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
    if (end.pos < 0) {
        if (evbuffer_get_length(in) >= PROXY_MAX_HEAD)
            proxy_conn_answer_error(pc, API_HEADERS_TOO_LARGE, NULL, "the request head is larger than 16 KiB");
        return;
    }
    size_t len = (size_t)end.pos + 4;
    if (len > PROXY_MAX_HEAD) {
        proxy_conn_answer_error(pc, API_HEADERS_TOO_LARGE, NULL, "the request head is larger than 16 KiB");
        return;
    }
    if (!proxy_caps_claim(pc)) { /* chosen to make room: its thread frees it next */
        bufferevent_disable(bev, EV_READ);
        return;
    }
    struct timeval max = { pc->pt->ctl->route_max_seconds, 0 };
    evtimer_add(pc->deadline, &max);
    char *buf = malloc(len + 1);
    if (!buf) {
        proxy_conn_answer_error(pc, API_INTERNAL, NULL, "out of memory");
        return;
    }
    evbuffer_remove(in, buf, len);
    buf[len] = '\0';
    handle_head(pc, buf, len);
    free(buf);
}

static void head_event_cb(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    pconn_t *pc = arg;
    if (what == BEV_EVENT_CONNECTED) /* a TLS handshake done (route_tls_cert): the head comes next */
        return;
    if (what & BEV_EVENT_TIMEOUT)
        proxy_conn_answer_error(pc, API_INVALID_ARGUMENT, NULL, "the request head did not arrive in time");
    else
        proxy_conn_free(pc, "client closed");
}

/* The whole head within PROXY_HEAD_SECONDS (a byte now and then does not
 * keep a connection), then the whole exchange within
 * route_max_duration_seconds. */
static void deadline_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    pconn_t *pc = arg;
    proxy_conn_free(pc, pc->state == PC_HEAD ? "the request head did not arrive in time"
                                     : "route_max_duration_seconds reached");
}

/* Another thread chose this connection to make room for one of its own. */
static void evict_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    proxy_conn_free(arg, "evicted to make room");
}

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
    (void)l;
    proxy_thread_t *pt = arg;
    controller_t *ctl = pt->ctl;
    pconn_t *pc = calloc(1, sizeof *pc);
    if (!pc) {
        close(fd);
        return;
    }
    pc->pt = pt;
    clock_gettime(CLOCK_MONOTONIC, &pc->started);
    if ((size_t)salen <= sizeof pc->peer)
        memcpy(&pc->peer, sa, (size_t)salen);
    const void *a = sa->sa_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)sa)->sin6_addr
                                              : (const void *)&((struct sockaddr_in *)sa)->sin_addr;
    if (!inet_ntop(sa->sa_family, a, pc->peer_text, sizeof pc->peer_text))
        snprintf(pc->peer_text, sizeof pc->peer_text, "unknown");
    pc->trusted_peer = proxy_nets_contain(ctl->trusted_proxies, ctl->ntrusted_proxies, sa);
    TAILQ_INSERT_TAIL(&pt->conns, pc, link);
    pt->nconns++;
    metrics_add(m_conns, NULL, 1);
    pc->down = ctl->route_tls ? tls_bev_accepting(pt->base, ctl->route_tls, fd)
                              : bufferevent_socket_new(pt->base, fd, BEV_OPT_CLOSE_ON_FREE);
    pc->deadline = evtimer_new(pt->base, deadline_cb, pc);
    pc->evict_ev = event_new(pt->base, -1, 0, evict_cb, pc);
    if (!pc->down || !pc->deadline || !pc->evict_ev) {
        if (!pc->down)
            close(fd);
        proxy_conn_free(pc, "out of memory");
        return;
    }
    struct timeval ht = { PROXY_HEAD_SECONDS, 0 };
    evtimer_add(pc->deadline, &ht);
    pconn_t *victim = NULL;
    proxy_admit_t admit = proxy_caps_admit(pc, &victim);
    if (victim)
        proxy_conn_free(victim, "evicted to make room");
    if (admit != PROXY_ADMIT_OK) {
        proxy_conn_answer_error(pc, API_UNAVAILABLE, "Retry-After: 1\r\n",
                                admit == PROXY_ADMIT_ADDRESS_FULL
                                    ? "too many routed connections from your address; try again"
                                    : "too many routed connections; try again");
        return;
    }
    bufferevent_set_timeouts(pc->down, &ht, &ht);
    bufferevent_setwatermark(pc->down, EV_READ, 0, PROXY_MAX_HEAD + 1);
    bufferevent_setcb(pc->down, head_read_cb, NULL, head_event_cb, pc);
    bufferevent_enable(pc->down, EV_READ | EV_WRITE);
}

/* Closes the connections of one kind (routes, or sandboxes' ports by
 * host) whose route or sandbox has gone, with one query. */
static void sweep_kind(proxy_thread_t *pt, bool port_host)
{
    int n = 0;
    pconn_t *pc;
    TAILQ_FOREACH(pc, &pt->conns, link)
        n += (pc->state == PC_PIPE || pc->state == PC_WORKER) && pc->port_host == port_host;
    if (n == 0)
        return;
    pconn_t **list = calloc((size_t)n, sizeof *list);
    const char **names = calloc((size_t)n, sizeof *names);
    bool *alive = calloc((size_t)n, sizeof *alive);
    int k = 0;
    if (list && names && alive) {
        TAILQ_FOREACH(pc, &pt->conns, link)
            if ((pc->state == PC_PIPE || pc->state == PC_WORKER) && pc->port_host == port_host && k < n) {
                list[k] = pc;
                names[k] = port_host ? pc->sandbox_id : pc->name;
                k++;
            }
        int rc = port_host ? store_sandboxes_running(*pt->db, names, k, alive)
                           : store_routes_alive(*pt->db, names, k, alive);
        if (rc == 0)
            for (int i = 0; i < k; i++)
                if (!alive[i])
                    proxy_conn_free(list[i], port_host ? "sandbox no longer running" : "route removed");
    }
    free(list);
    free(names);
    free(alive);
}

/* Closes the connections whose route has gone (unshared, expired, its
 * sandbox deleted or lost), or whose sandbox no longer runs (a port by
 * host), with one query per kind and thread. */
static void sweep_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    proxy_thread_t *pt = arg;
    int n = 0;
    pconn_t *pc;
    TAILQ_FOREACH(pc, &pt->conns, link)
        n += pc->state == PC_PIPE || pc->state == PC_WORKER;
    if (n == 0 || db_ensure(pt->db, pt->ctl->conninfo) < 0)
        return;
    sweep_kind(pt, false);
    sweep_kind(pt, true);
}

proxy_thread_t *proxy_thread_new(controller_t *ctl, struct event_base *base, PGconn **db, char *err, size_t errlen)
{
    pthread_once(&metrics_once, proxy_metrics_init);
    proxy_thread_t *pt = calloc(1, sizeof *pt);
    if (!pt) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pt->ctl = ctl;
    pt->base = base;
    pt->db = db;
    TAILQ_INIT(&pt->conns);
    int fd = fd_dup_cloexec(ctl->route_fd); /* no child may hold the listener */
    if (fd >= 0)
        evutil_make_socket_nonblocking(fd);
    pt->listener = fd >= 0 ? evconnlistener_new(base, accept_cb, pt, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC,
                                                0, fd)
                           : NULL;
    pt->sweep = event_new(base, -1, EV_PERSIST, sweep_cb, pt);
    pt->resume = evtimer_new(base, proxy_accept_resume_cb, pt);
    if (pt->listener)
        evconnlistener_set_error_cb(pt->listener, proxy_accept_error_cb);
    struct timeval tv = { PROXY_SWEEP_SECONDS, 0 };
    if (!pt->listener || !pt->sweep || !pt->resume || event_add(pt->sweep, &tv) < 0) {
        if (!pt->listener && fd >= 0)
            close(fd);
        snprintf(err, errlen, "cannot accept on the route listener");
        proxy_thread_free(pt);
        return NULL;
    }
    return pt;
}

void proxy_thread_free(proxy_thread_t *pt)
{
    if (!pt)
        return;
    if (pt->listener)
        evconnlistener_free(pt->listener);
    while (!TAILQ_EMPTY(&pt->conns))
        proxy_conn_free(TAILQ_FIRST(&pt->conns), "controller stopping");
    if (pt->sweep)
        event_free(pt->sweep);
    if (pt->resume)
        event_free(pt->resume);
    free(pt);
}
