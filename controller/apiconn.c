/* The API listener's connections under a flood: see apiconn.h.
 *
 * Each connection's bufferevent is ours (evhttp_set_bevcb); a callback on
 * its input buffer runs when bytes arrive, before evhttp's read callback
 * looks at them. It keeps the stream's framing as evhttp will see it:
 * a head is taken out of the buffer until it is complete, then parsed
 * (common/httphead.c) and either handed on, or replaced by a head of our
 * own that evhttp answers as a refusal; a body's bytes are counted as they
 * pass. Since evhttp never holds part of a head, it always waits for a
 * first line when we inject one. evhttp's close callback (set once the
 * connection is set up, on the next turn of the loop) ends our record; the
 * caps' lock is held from the moment another thread chooses a connection
 * to evict until it has shut the socket down, and our close callback
 * removes the record under that lock before evhttp closes the socket, so
 * the descriptor shut is always the connection's own. */
#include "apiconn.h"
#include "apiconn_int.h"
#include "api.h"
#include "conncap.h"
#include "db.h"
#include "http_errpage.h"
#include "httphead.h"
#include "limits.h"
#include "log.h"
#include "metrics.h"
#include "proxy.h"
#include "store.h"
#include "token.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>

static conncap_t api_caps;
static bool api_caps_ready;
static atomic_llong budget_used;
static int64_t budget_max, min_rate;
static int head_timeout_s, idle_timeout_s;
static metric_family_t *m_refused, *m_closed;
static _Thread_local apiconn_thread_t *tl_at;

#define AC_OF(e) ((apiconn_t *)((char *)(e) - offsetof(apiconn_t, cap)))

int64_t apiconn__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Lifts the soft open files limit to the hard one (a listener under a
 * flood needs descriptors; the hard limit is the operator's word). */
static void nofile_raise(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
            log_debug("apiconn", "cannot raise the open files limit: %s", strerror(errno));
    }
}

int apiconn_setup(controller_t *ctl, char *err, size_t errlen)
{
    nofile_raise();
    const cfg_t *cfg = &ctl->cfg;
    int max = (int)cfg_int(cfg, CFG_API_MAX_CONNECTIONS);
    long long nofile = conncap_nofile();
    long long fit = nofile < 0 ? max : (nofile - SBX_API_FD_RESERVE) / 3;
    if (fit < 1)
        fit = 1;
    if (fit < max) {
        log_warn("apiconn", "API listener: serving at most %lld connections, not api_max_connections %d: the open "
                            "files limit (RLIMIT_NOFILE) is %lld and the route listener needs its share; raise it "
                            "(ulimit -n, LimitNOFILE=) to serve more",
                 fit, max, nofile);
        max = (int)fit;
    }
    head_timeout_s = (int)cfg_int(cfg, CFG_API_HEAD_TIMEOUT_SECONDS);
    idle_timeout_s = (int)cfg_int(cfg, CFG_API_IDLE_TIMEOUT_SECONDS);
    min_rate = cfg_int(cfg, CFG_API_BODY_MIN_BYTES_PER_SECOND);
    apiconn__files_max = cfg_int(cfg, CFG_FILES_MAX_BYTES);
    budget_max = cfg_int(cfg, CFG_API_BODY_BUDGET_MIB) * 1024 * 1024;
    atomic_store(&budget_used, 0);
    if (!m_refused) {
        m_refused = metrics_family("sandbox_api_requests_refused_total", METRIC_COUNTER,
                                   "API requests answered before their body was read, by reason: auth (a large "
                                   "body without a valid token), budget (the body budget is spent: 503), too_large, "
                                   "head (malformed), head_timeout, full (no connection could be evicted: 503).",
                                   NULL, 0);
        m_closed = metrics_family("sandbox_api_connections_closed_total", METRIC_COUNTER,
                                  "API connections the controller closed itself, by reason: idle, head_timeout, "
                                  "slow_body, evicted.",
                                  NULL, 0);
    }
    metric_family_t *shed = metrics_family("sandbox_api_connections_shed_total", METRIC_COUNTER,
                                           "API connections shed over a cap: action \"evicted\" (an idle one made "
                                           "room) or \"refused\" (503, none was idle); cap \"listener\" "
                                           "(api_max_connections) or \"address\" (api_max_connections_per_address).",
                                           NULL, 0);
    if (api_caps_ready) {
        api_caps.max = max;
        api_caps.max_per_addr = (int)cfg_int(cfg, CFG_API_MAX_CONNECTIONS_PER_ADDRESS);
        return 0;
    }
    if (conncap_init(&api_caps, "API listener", "api_max_connections", "api_max_connections_per_address", max,
                     (int)cfg_int(cfg, CFG_API_MAX_CONNECTIONS_PER_ADDRESS), shed) < 0) {
        snprintf(err, errlen, "out of memory");
        return SBX_ENOMEM;
    }
    api_caps_ready = true;
    return 0;
}

void apiconn_cleanup(void)
{
    if (!api_caps_ready)
        return;
    conncap_destroy(&api_caps);
    api_caps_ready = false;
}

static void note(metric_family_t *m, const char *reason)
{
    char labels[64];
    metrics_add(m, metrics_labels(labels, sizeof labels, "reason", reason, NULL), 1);
}

static unsigned conn_hash(const void *p) { return (unsigned)(((uintptr_t)p >> 4) % SBX_API_CONN_BUCKETS); }

static apiconn_t *conn_find(apiconn_thread_t *at, const struct evhttp_connection *evcon)
{
    if (!at || !evcon)
        return NULL;
    for (apiconn_t *ac = at->table[conn_hash(evcon)]; ac; ac = ac->hnext)
        if (ac->evcon == evcon)
            return ac;
    return NULL;
}

static void budget_return(apiconn_t *ac)
{
    if (ac->reserved > 0)
        atomic_fetch_sub(&budget_used, ac->reserved);
    ac->reserved = 0;
}

static bool budget_take(apiconn_t *ac, int64_t n)
{
    if (n <= 0)
        return true;
    if (atomic_fetch_add(&budget_used, n) + n > budget_max) {
        atomic_fetch_sub(&budget_used, n);
        return false;
    }
    ac->reserved += n;
    return true;
}

/* A refusal is on its way and the connection closes after it: the sweep
 * shuts it down api_head_timeout_seconds from now if it is still open
 * (counted from the refusal, not from an earlier body's start, which a
 * first request never had: with that 0, a sweep between the refusal and
 * evhttp's answer shut the socket before the answer went out, and a
 * loaded controller's refused clients saw the connection close without
 * their 401). */
static void closing_from_now(apiconn_t *ac)
{
    ac->state = AC_CLOSING;
    ac->body_since_ms = apiconn__now_ms();
}

/* Shuts the socket down: evhttp reads EOF next and frees the connection
 * (our close callback runs then). */
static void conn_shut(apiconn_t *ac, const char *reason)
{
    if (atomic_exchange(&ac->shut, true))
        return;
    shutdown(ac->fd, SHUT_RDWR);
    if (reason)
        note(m_closed, reason);
}

/* The input buffer's front and end as ours to change for a moment (a
 * bufferevent freezes them between its own reads and writes). */
static void input_unfreeze(struct evbuffer *in, bool *ret_front, bool *ret_end)
{
    *ret_front = evbuffer_drain(in, 0) < 0;
    *ret_end = evbuffer_add(in, "", 0) < 0;
    if (*ret_front)
        evbuffer_unfreeze(in, 1);
    if (*ret_end)
        evbuffer_unfreeze(in, 0);
}

static void input_refreeze(struct evbuffer *in, bool front, bool end)
{
    if (front)
        evbuffer_freeze(in, 1);
    if (end)
        evbuffer_freeze(in, 0);
}

/* Appends to out a head of our own asking evhttp for the refusal: code,
 * Retry-After, message (made printable), keeping the connection open
 * unless close. */
static void refusal_head(struct evbuffer *out, int minor, api_code_t code, int retry_after, const char *msg,
                         bool close)
{
    char clean[256];
    size_t n = 0;
    for (const char *p = msg; *p && n + 1 < sizeof clean; p++)
        clean[n++] = (*p >= 0x20 && *p < 0x7f) ? *p : '?';
    clean[n] = '\0';
    evbuffer_add_printf(out, "GET %s HTTP/1.%d\r\n%s: %d %d %s\r\n%sContent-Length: 0\r\n\r\n",
                        APICONN_REFUSED_PATH, minor, APICONN_REFUSAL_HEADER, (int)code, retry_after, clean,
                        close ? "Connection: close\r\n" : "");
}

bool apiconn_refusal(struct evhttp_request *ev, api_code_t *ret_code, int *ret_retry_after, char *msg,
                     size_t msglen)
{
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(ev);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (!path || strcmp(path, APICONN_REFUSED_PATH) != 0)
        return false;
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(ev), APICONN_REFUSAL_HEADER);
    int code = API_INVALID_ARGUMENT, ra = 0, off = 0;
    if (!h || sscanf(h, "%d %d %n", &code, &ra, &off) < 2 || code < 0 || code >= API__COUNT || off <= 0) {
        code = API_INVALID_ARGUMENT;
        ra = 0;
        off = 0;
        h = "malformed HTTP request";
    }
    *ret_code = (api_code_t)code;
    *ret_retry_after = ra;
    snprintf(msg, msglen, "%s", h + off);
    return true;
}

/* ---- a complete head: hand it on, or refuse it ---- */


/* The methods evhttp never reads a body for: bytes after such a head would
 * be read as the next request, so a body on one is refused. evhttp reads
 * one for every other method it parses (GET and DELETE included), so those
 * are framed, counted and timed here like a POST's. */
static bool method_takes_no_body(const char *m)
{
    return strcmp(m, "HEAD") == 0 || strcmp(m, "TRACE") == 0 || strcmp(m, "CONNECT") == 0;
}

/* Whether the head's bearer token is one we know (live, its secret
 * right); false too when the database cannot say, with *ret_unavail. */
bool apiconn__token_good(apiconn_thread_t *at, const httphead_t *h, bool *ret_unavail, role_t *ret_role)
{
    *ret_unavail = false;
    const char *token = auth_bearer(httphead_get(h, "Authorization"));
    /* E2B's clients send their key in headers of their own (controller/e2b.c). */
    if (!token && strncmp(h->target, "/e2b/", 5) == 0) {
        token = httphead_get(h, "X-Access-Token");
        if (!token || !*token)
            token = httphead_get(h, "X-API-Key");
    }
    if (!token || !*token)
        return false;
    if (db_ensure(at->db, at->ctl->conninfo) < 0) {
        *ret_unavail = true;
        return false;
    }
    auth_info_t auth;
    memset(&auth, 0, sizeof auth);
    int rc = auth_token_check(*at->db, token, &auth);
    *ret_unavail = rc == SBX_EDB;
    *ret_role = auth.role;
    return rc == 0;
}

int apiconn__header_count(const httphead_t *h, const char *name)
{
    int n = 0;
    for (int i = 0; i < h->nh; i++)
        n += strcasecmp(h->name[i], name) == 0;
    return n;
}

/* Decides on a parsed head: 0 and the body's framing in ac, or < 0 with
 * why in *rf. */
static int head_judge(apiconn_t *ac, const httphead_t *h, refusal_t *rf)
{
    ac->chunked = false;
    ac->body_left = 0;
    ac->discard_max = SBX_API_DISCARD_MAX_BYTES;
    memset(&ac->chunks, 0, sizeof ac->chunks);
    if (strncmp(h->target, "/_sbx/", 6) == 0 || strcmp(h->target, "/_sbx") == 0) {
        *rf = (refusal_t){ API_NOT_FOUND, 0, "head", "no such path" };
        snprintf(rf->msg, sizeof rf->msg, "no such path");
        return SBX_EINVAL;
    }
    for (int i = 0; i < h->nh; i++)
        if (strncasecmp(h->name[i], "X-Sbx-", 6) == 0) {
            *rf = (refusal_t){ API_INVALID_ARGUMENT, 0, "head", "" };
            snprintf(rf->msg, sizeof rf->msg, "headers named X-Sbx-* are the controller's own");
            return SBX_EINVAL;
        }
    if (apiconn__header_count(h, "Content-Length") > 1 || apiconn__header_count(h, "Transfer-Encoding") > 1) {
        *rf = (refusal_t){ API_INVALID_ARGUMENT, 0, "head", "" };
        snprintf(rf->msg, sizeof rf->msg, "malformed HTTP request: more than one Content-Length or "
                                          "Transfer-Encoding header");
        return SBX_EINVAL;
    }
    const char *te = httphead_get(h, "Transfer-Encoding");
    const char *cl = httphead_get(h, "Content-Length");
    int64_t len = 0;
    if (te && strcasecmp(te, "chunked") == 0) {
        ac->chunked = true;
    } else if (cl) {
        char *end = NULL;
        errno = 0;
        long long v = strtoll(cl, &end, 10);
        if (!*cl || *end || errno || v < 0 || cl[0] == '-' || cl[0] == '+') {
            *rf = (refusal_t){ API_INVALID_ARGUMENT, 0, "head", "" };
            snprintf(rf->msg, sizeof rf->msg, "malformed HTTP request: Content-Length is not a number");
            return SBX_EINVAL;
        }
        len = v;
    }
    if ((ac->chunked || len > 0) && method_takes_no_body(h->method)) {
        *rf = (refusal_t){ API_INVALID_ARGUMENT, 0, "head", "" };
        snprintf(rf->msg, sizeof rf->msg, "malformed HTTP request: a %s request has no body", h->method);
        ac->chunked = false;
        return SBX_EINVAL;
    }
    if (apiconn__stream_route(h) && (ac->chunked || len > 0))
        return apiconn__stream_judge(ac, h, len, rf);
    if (apiconn__shell_route(h))
        return apiconn__shell_judge(ac, h, len, rf);
    if (len > (int64_t)SBX_MAX_BODY_BYTES) {
        *rf = (refusal_t){ API_PAYLOAD_TOO_LARGE, 0, "too_large", "" };
        snprintf(rf->msg, sizeof rf->msg, "request body over the limit of %u MiB",
                 SBX_MAX_BODY_BYTES / (1024u * 1024u));
        return SBX_ETOOBIG;
    }
    if (ac->chunked || len > SBX_API_ANON_BODY_BYTES) {
        bool unavail = false;
        role_t role = ROLE_MEMBER;
        bool good = apiconn__token_good(ac->at, h, &unavail, &role);
        if (good)
            ac->discard_max = SBX_API_DISCARD_TOKEN_MAX_BYTES;
        /* A client's bodies are bounded by max_body_bytes, a worker's
         * reports by SBX_MAX_BODY_BYTES: say so before reading one. */
        if (good && role != ROLE_WORKER && len > ac->at->ctl->max_body_client) {
            *rf = (refusal_t){ API_PAYLOAD_TOO_LARGE, 0, "too_large", "" };
            snprintf(rf->msg, sizeof rf->msg, "request body of %lld bytes is over the limit of %lld bytes (max_body_bytes)", (long long)len,
                     (long long)ac->at->ctl->max_body_client);
            ac->body_left = len;
            return SBX_ETOOBIG;
        }
        if (!good) {
            if (unavail) {
                *rf = (refusal_t){ API_UNAVAILABLE, 1, "auth", "" };
                snprintf(rf->msg, sizeof rf->msg, "database unavailable: cannot check the token of a large body");
            } else {
                *rf = (refusal_t){ API_UNAUTHORIZED, 0, "auth", "" };
                snprintf(rf->msg, sizeof rf->msg, "a body over %d KiB needs a valid bearer token "
                                                  "(Authorization: Bearer TOKEN)",
                         SBX_API_ANON_BODY_BYTES / 1024);
            }
            ac->body_left = len;
            return SBX_EAUTH;
        }
    }
    if (!budget_take(ac, len)) {
        *rf = (refusal_t){ API_UNAVAILABLE, 1, "budget", "" };
        snprintf(rf->msg, sizeof rf->msg, "the controller is receiving too many request bodies (api_body_budget_mib); "
                                          "retry shortly");
        ac->body_left = len;
        return SBX_EUNAVAIL;
    }
    ac->body_left = len;
    return 0;
}

/* The head held in ac->held is complete (hlen bytes): parse and judge it,
 * then append to in what evhttp is to see. */
static void head_complete(apiconn_t *ac, size_t hlen, struct evbuffer *in)
{
    char *buf = malloc(hlen + 1), *work = malloc(hlen + 1);
    httphead_t *h = calloc(1, sizeof *h);
    refusal_t rf = { API_INVALID_ARGUMENT, 0, "head", "" };
    int minor = 1;
    int rc = SBX_ENOMEM;
    if (buf && work && h && evbuffer_remove(ac->held, buf, hlen) == (int)hlen) {
        buf[hlen] = '\0';
        memcpy(work, buf, hlen + 1); /* parsed in place; buf goes on as it came */
        httphead_opts_t opts = { .bare_lf = true, .keep_headers = true };
        char why[160] = "";
        size_t skip = 0; /* (empty lines before it were dropped already) */
        while (skip < hlen && (work[skip] == '\r' || work[skip] == '\n'))
            skip++;
        rc = httphead_parse(work + skip, hlen - skip, &opts, h, why, sizeof why);
        if (rc == 0) {
            minor = h->minor;
            rc = head_judge(ac, h, &rf);
        } else {
            snprintf(rf.msg, sizeof rf.msg, "malformed HTTP request: %s", why[0] ? why : "unreadable head");
            if (rc == SBX_ETOOBIG)
                rf.code = API_HEADERS_TOO_LARGE;
        }
        if (rc == 0 && ac->stream_next)
            apiconn__stream_head(in, h, ac->stream_raw, ac->chunked, ac->body_left, ac->stream_expect);
        else if (rc == 0)
            evbuffer_add(in, buf, hlen);
    } else if (buf && work && h) {
        snprintf(rf.msg, sizeof rf.msg, "malformed HTTP request");
    } else {
        rf = (refusal_t){ API_UNAVAILABLE, 1, "budget", "" };
        snprintf(rf.msg, sizeof rf.msg, "out of memory");
    }
    free(buf);
    free(work);
    free(h);
    ac->head_since_ms = 0;
    ac->busy = true;
    ac->pending++;
    ac->fresh = false;
    conncap_claim(&api_caps, &ac->cap);
    if (rc == 0 && ac->stream_next) {
        ac->stream_next = false;
        ac->body_got = 0;
        ac->body_since_ms = apiconn__now_ms();
        ac->stream_status = 0;
        ac->stream_paused = false;
        if (!ac->sbuf)
            ac->sbuf = evbuffer_new();
        ac->state = ac->sbuf ? AC_STREAM : AC_CLOSING;
        return;
    }
    if (rc == 0) {
        ac->body_got = 0;
        ac->body_since_ms = apiconn__now_ms();
        ac->state = (ac->chunked || ac->body_left > 0) ? AC_BODY : AC_HEAD;
        return;
    }
    ac->stream_next = false;
    ac->stream_raw = false;
    note(m_refused, rf.reason);
    bool close = ac->chunked || ac->body_left > ac->discard_max || rf.code == API_INVALID_ARGUMENT ||
                 rf.code == API_HEADERS_TOO_LARGE;
    refusal_head(in, minor, rf.code, rf.retry_after, rf.msg, close);
    if (close) {
        closing_from_now(ac);
    } else {
        ac->discard_left = ac->body_left;
        ac->body_since_ms = apiconn__now_ms();
        ac->body_got = 0;
        ac->state = ac->discard_left > 0 ? AC_DISCARD : AC_HEAD;
    }
}

/* The latest request is answered and its bytes all read: the connection
 * waits for the next head, idle (evictable) unless part of one is held. */
static void conn_maybe_idle(apiconn_t *ac)
{
    if (ac->state != AC_HEAD || ac->pending > 0 || !ac->busy)
        return;
    ac->busy = false;
    if (!(ac->held && evbuffer_get_length(ac->held) > 0)) {
        ac->idle_since_ms = apiconn__now_ms();
        conncap_release(&api_caps, &ac->cap);
    }
}

/* ---- bytes as they arrive ---- */

/* Passes the body bytes at the front of tmp on to in; false when the
 * budget ran out mid-body (a chunked one): the connection is shut. */
static bool body_pass(apiconn_t *ac, struct evbuffer *tmp, struct evbuffer *in)
{
    size_t avail = evbuffer_get_length(tmp);
    if (!ac->chunked) {
        size_t n = (int64_t)avail < ac->body_left ? avail : (size_t)ac->body_left;
        evbuffer_remove_buffer(tmp, in, n);
        ac->body_left -= (int64_t)n;
        ac->body_got += (int64_t)n;
        if (ac->body_left == 0)
            ac->state = AC_HEAD;
        return true;
    }
    size_t take = avail < 16384 ? avail : 16384;
    unsigned char *p = evbuffer_pullup(tmp, (ev_ssize_t)take);
    size_t used = take;
    int rc = p ? proxy_chunked_scan(&ac->chunks, (const char *)p, take, &used) : SBX_EINVAL;
    if (rc < 0) {
        /* evhttp would refuse it as well: let it, with what it has. */
        evbuffer_remove_buffer(tmp, in, evbuffer_get_length(tmp));
        ac->state = AC_CLOSING;
        return true;
    }
    if (ac->body_got + (int64_t)used > (int64_t)SBX_MAX_BODY_BYTES || !budget_take(ac, (int64_t)used)) {
        conn_shut(ac, "slow_body");
        return false;
    }
    evbuffer_remove_buffer(tmp, in, used);
    ac->body_got += (int64_t)used;
    if (rc == 1)
        ac->state = AC_HEAD;
    return true;
}

/* Takes what tmp holds of a head into ac->held; true when a whole head
 * was handled (more of tmp may follow). */
static bool head_gather(apiconn_t *ac, struct evbuffer *tmp, struct evbuffer *in)
{
    if (!ac->held && !(ac->held = evbuffer_new())) {
        conn_shut(ac, NULL);
        return false;
    }
    if (evbuffer_get_length(ac->held) == 0) {
        /* Empty lines before a request line are allowed (RFC 9112 2.2):
         * dropped, as evhttp would. */
        unsigned char *c;
        while (evbuffer_get_length(tmp) > 0 && (c = evbuffer_pullup(tmp, 1)) && (*c == '\r' || *c == '\n'))
            evbuffer_drain(tmp, 1);
        if (evbuffer_get_length(tmp) == 0)
            return false;
        ac->head_since_ms = apiconn__now_ms();
    }
    evbuffer_remove_buffer(tmp, ac->held, evbuffer_get_length(tmp));
    size_t len = evbuffer_get_length(ac->held);
    size_t scan = len < SBX_API_MAX_HEAD_BYTES + 4 ? len : SBX_API_MAX_HEAD_BYTES + 4;
    const char *p = (const char *)evbuffer_pullup(ac->held, (ev_ssize_t)scan);
    size_t hlen = p ? httphead_end(p, scan, true) : 0;
    if (hlen == 0) {
        if (len <= SBX_API_MAX_HEAD_BYTES)
            return false;
        note(m_refused, "head");
        evbuffer_drain(ac->held, len);
        refusal_head(in, 1, API_HEADERS_TOO_LARGE, 0, "request head over 64 KiB", true);
        ac->busy = true;
        conncap_claim(&api_caps, &ac->cap);
        closing_from_now(ac);
        return false;
    }
    head_complete(ac, hlen, in);
    /* What followed the head goes back to be read as body or next head. */
    evbuffer_prepend_buffer(tmp, ac->held);
    return true;
}

static void in_cb(struct evbuffer *in, const struct evbuffer_cb_info *info, void *arg)
{
    apiconn_t *ac = arg;
    if (ac->in_cb || info->n_added == 0 || ac->broken)
        return;
    ac->last_byte_ms = apiconn__now_ms();
    if (ac->stalled) {
        /* a stalled body moves again: busy, no longer evictable */
        ac->stalled = false;
        if (ac->state == AC_BODY || ac->state == AC_DISCARD)
            conncap_claim(&api_caps, &ac->cap);
    }
    size_t len = evbuffer_get_length(in);
    size_t added = info->n_added < len ? info->n_added : len;
    struct evbuffer *tmp = evbuffer_new();
    if (!tmp) {
        conn_shut(ac, NULL);
        return;
    }
    ac->in_cb = true;
    bool front, end;
    input_unfreeze(in, &front, &end);
    /* The new bytes are at the end: take them out, leave what was there. */
    evbuffer_remove_buffer(in, tmp, len);
    evbuffer_remove_buffer(tmp, in, len - added);
    while (evbuffer_get_length(tmp) > 0 && !atomic_load(&ac->shut)) {
        if (ac->state == AC_BODY) {
            if (!body_pass(ac, tmp, in))
                break;
        } else if (ac->state == AC_STREAM) {
            apiconn__stream_pass(ac, tmp);
        } else if (ac->state == AC_DISCARD) {
            size_t n = evbuffer_get_length(tmp);
            if ((int64_t)n > ac->discard_left)
                n = (size_t)ac->discard_left;
            evbuffer_drain(tmp, n);
            ac->discard_left -= (int64_t)n;
            ac->body_got += (int64_t)n;
            if (ac->discard_left == 0) {
                ac->state = AC_HEAD;
                conn_maybe_idle(ac);
            }
        } else if (ac->state == AC_CLOSING) {
            evbuffer_drain(tmp, evbuffer_get_length(tmp));
        } else if (!head_gather(ac, tmp, in)) {
            break;
        }
    }
    if (ac->state == AC_CLOSING || atomic_load(&ac->shut))
        evbuffer_drain(tmp, evbuffer_get_length(tmp));
    input_refreeze(in, front, end);
    evbuffer_free(tmp);
    ac->in_cb = false;
}

/* ---- a connection's life ---- */

/* Injects a refusal for a connection evhttp is waiting on for a first
 * line, and has it read now. */
static void refuse_now(apiconn_t *ac, api_code_t code, int retry_after, const char *msg, const char *reason)
{
    struct evbuffer *in = bufferevent_get_input(ac->bev);
    ac->in_cb = true;
    bool front, end;
    input_unfreeze(in, &front, &end);
    if (ac->held)
        evbuffer_drain(ac->held, evbuffer_get_length(ac->held));
    refusal_head(in, 1, code, retry_after, msg, true);
    input_refreeze(in, front, end);
    ac->in_cb = false;
    closing_from_now(ac);
    ac->busy = true;
    note(m_refused, reason);
    bufferevent_trigger(ac->bev, EV_READ, BEV_TRIG_IGNORE_WATERMARKS);
}

static void close_cb(struct evhttp_connection *evcon, void *arg)
{
    apiconn_t *ac = arg;
    if (ac->user_cb) {
        void (*cb)(struct evhttp_connection *, void *) = ac->user_cb;
        ac->user_cb = NULL;
        cb(evcon, ac->user_arg);
    }
    evhttp_connection_set_closecb(evcon, NULL, NULL);
    apiconn_thread_t *at = ac->at;
    conncap_remove(&api_caps, &ac->cap);
    budget_return(ac);
    for (apiconn_t **pp = &at->table[conn_hash(ac->evcon)]; *pp; pp = &(*pp)->hnext)
        if (*pp == ac) {
            *pp = ac->hnext;
            break;
        }
    TAILQ_REMOVE(&at->conns, ac, link);
    if (ac->slot)
        *ac->slot = NULL;
    if (ac->in_entry)
        evbuffer_remove_cb_entry(bufferevent_get_input(ac->bev), ac->in_entry);
    if (ac->held)
        evbuffer_free(ac->held);
    apiconn__stream_release(ac);
    free(ac);
}

static void evict_locked(conncap_entry_t *e, void *arg)
{
    (void)arg;
    conn_shut(AC_OF(e), "evicted");
}

/* The loop's next turn after evhttp took the connection: its socket and
 * its evhttp_connection are known now. */
static void setup_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    apiconn_t *ac = arg;
    apiconn_thread_t *at = ac->at;
    void *cbarg = NULL;
    bufferevent_getcb(ac->bev, NULL, NULL, NULL, &cbarg);
    ac->evcon = cbarg;
    ac->fd = bufferevent_getfd(ac->bev);
    socklen_t sl = sizeof ac->peer;
    if (!ac->evcon || ac->fd < 0 || getpeername(ac->fd, (struct sockaddr *)&ac->peer, &sl) < 0) {
        /* Not an evhttp connection after all (it failed while being made):
         * leave it alone; it is freed with the thread. */
        ac->broken = true;
        return;
    }
    /* Answers go out as soon as they are written: without this, an answer
     * past one segment waits for the client's delayed ACK (≈ 40 ms) on a
     * kept-alive connection. Not a TCP socket (a test's socketpair): no-op. */
    int one = 1;
    (void)setsockopt(ac->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ac->ready = true;
    evhttp_connection_set_closecb(ac->evcon, close_cb, ac);
    unsigned b = conn_hash(ac->evcon);
    ac->hnext = at->table[b];
    at->table[b] = ac;
    ac->idle_since_ms = ac->last_byte_ms = apiconn__now_ms();
    bool exempt = proxy_nets_contain(at->ctl->trusted_proxies, at->ctl->ntrusted_proxies,
                                     (const struct sockaddr *)&ac->peer);
    conncap_admit_t res = conncap_admit(&api_caps, &ac->cap, &ac->peer, exempt, evict_locked, NULL);
    if (res != CONNCAP_OK)
        refuse_now(ac, API_UNAVAILABLE, 1,
                   res == CONNCAP_ADDRESS_FULL ? "too many API connections from your address; try again"
                                               : "too many API connections; try again",
                   "full");
}

/* The turn after accepting: libevent's listener accepts in a loop until
 * accept() has nothing more, which under a flood of connections could
 * hold the thread for as long as they keep coming; at most
 * SBX_API_ACCEPTS_PER_TURN are taken before the rest of the loop (the
 * requests of connections already open) runs. */
static void turn_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    apiconn_thread_t *at = arg;
    at->accepted = 0;
    if (at->turn_paused && at->listener) {
        at->turn_paused = false;
        evconnlistener_enable(at->listener);
    }
}

static void accept_count(apiconn_thread_t *at)
{
    if (!at->turn)
        return;
    if (at->accepted++ == 0)
        event_active(at->turn, EV_TIMEOUT, 1);
    if (at->accepted >= SBX_API_ACCEPTS_PER_TURN && at->listener && !at->turn_paused) {
        at->turn_paused = true;
        evconnlistener_disable(at->listener);
    }
}

struct bufferevent *apiconn_bev(struct event_base *base, void *arg)
{
    apiconn_thread_t *at = arg;
    accept_count(at);
    struct bufferevent *bev = http_errpage_bev(base, at->bev_arg);
    apiconn_t *ac = bev ? calloc(1, sizeof *ac) : NULL;
    if (!ac)
        return bev;
    ac->at = at;
    ac->bev = bev;
    ac->fd = -1;
    ac->fresh = true;
    ac->in_entry = evbuffer_add_cb(bufferevent_get_input(bev), in_cb, ac);
    TAILQ_INSERT_TAIL(&at->conns, ac, link);
    /* evhttp sets the socket and its callbacks once we return; an event
     * made active now runs before the loop next reads any socket. */
    if (!ac->in_entry || event_base_once(base, -1, EV_TIMEOUT, setup_cb, ac, NULL) < 0) {
        if (ac->in_entry)
            evbuffer_remove_cb_entry(bufferevent_get_input(bev), ac->in_entry);
        TAILQ_REMOVE(&at->conns, ac, link);
        free(ac);
    }
    return bev;
}

void apiconn_request_begin(apiconn_thread_t *at, struct evhttp_request *ev, apiconn_t **slot)
{
    tl_at = at;
    apiconn_t *ac = conn_find(at, evhttp_request_get_connection(ev));
    *slot = ac;
    if (!ac)
        return;
    if (ac->slot)
        *ac->slot = NULL;
    ac->slot = slot;
    ac->busy = true;
}

void apiconn_request_end(apiconn_t *ac)
{
    if (!ac)
        return;
    ac->slot = NULL;
    if (ac->pending > 0)
        ac->pending--;
    budget_return(ac);
    conn_maybe_idle(ac);
}

void apiconn_set_closecb(struct evhttp_connection *evcon, void (*cb)(struct evhttp_connection *, void *), void *arg)
{
    apiconn_t *ac = conn_find(tl_at, evcon);
    if (!ac) {
        evhttp_connection_set_closecb(evcon, cb, arg);
        return;
    }
    ac->user_cb = cb;
    ac->user_arg = arg;
}

/* ---- deadlines ---- */

static void sweep_one(apiconn_t *ac, int64_t now)
{
    if (!ac->ready || atomic_load(&ac->shut))
        return;
    bool holding = ac->held && evbuffer_get_length(ac->held) > 0;
    /* Waiting on the peer (a head begun, a body due) and silent: evictable
     * like an idle connection, so stalled connections cannot hold the caps
     * until their deadline (a byte more makes it busy again: in_cb). */
    bool on_peer = (ac->state == AC_HEAD && !ac->busy && holding) ||
                   ((ac->state == AC_BODY || ac->state == AC_DISCARD) && ac->pending <= 1);
    if (on_peer && !ac->stalled && now - ac->last_byte_ms >= SBX_API_STALL_MS) {
        ac->stalled = true;
        conncap_release(&api_caps, &ac->cap);
    }
    if (ac->state == AC_HEAD && !ac->busy) {
        if (holding && now - ac->head_since_ms > (int64_t)head_timeout_s * 1000) {
            char msg[96];
            snprintf(msg, sizeof msg, "request head not complete within %d s (api_head_timeout_seconds)",
                     head_timeout_s);
            refuse_now(ac, API_REQUEST_TIMEOUT, 0, msg, "head_timeout");
            note(m_closed, "head_timeout");
        } else if (!holding && now - ac->idle_since_ms > (int64_t)(ac->fresh ? head_timeout_s : idle_timeout_s) * 1000) {
            conn_shut(ac, ac->fresh ? "head_timeout" : "idle");
        }
        return;
    }
    if ((ac->state == AC_BODY || ac->state == AC_DISCARD) && min_rate > 0) {
        int64_t late = now - ac->body_since_ms - (int64_t)SBX_API_BODY_GRACE_SECONDS * 1000;
        if (late > 0 && ac->body_got < min_rate * late / 1000)
            conn_shut(ac, "slow_body");
    } else if (ac->state == AC_CLOSING && now - ac->body_since_ms > (int64_t)head_timeout_s * 1000 && !ac->slot) {
        conn_shut(ac, NULL);
    }
}

static void sweep_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    apiconn_thread_t *at = arg;
    int64_t now = apiconn__now_ms();
    apiconn_t *ac, *next;
    for (ac = TAILQ_FIRST(&at->conns); ac; ac = next) {
        next = TAILQ_NEXT(ac, link);
        sweep_one(ac, now);
    }
}

/* ---- the listener ---- */

static void resume_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    apiconn_thread_t *at = arg;
    if (at->listener)
        evconnlistener_enable(at->listener);
}

/* The threads' records, to find a listener's thread from its loop (the
 * listener's own argument is evhttp's). */
#define APICONN_MAX_THREADS 256
static apiconn_thread_t *all_threads[APICONN_MAX_THREADS];
static pthread_mutex_t all_lock = PTHREAD_MUTEX_INITIALIZER;

static apiconn_thread_t *thread_of_base(struct event_base *base)
{
    apiconn_thread_t *at = NULL;
    pthread_mutex_lock(&all_lock);
    for (int i = 0; i < APICONN_MAX_THREADS && !at; i++)
        if (all_threads[i] && all_threads[i]->base == base)
            at = all_threads[i];
    pthread_mutex_unlock(&all_lock);
    return at;
}

/* accept() failed (EMFILE, ENFILE, ...): accepting again at once would fail
 * the same way as fast as the loop spins, so pause, then try again. */
static void accept_error_cb(struct evconnlistener *l, void *arg)
{
    static atomic_llong last_log;
    static atomic_long suppressed;
    (void)arg;
    int err = EVUTIL_SOCKET_ERROR();
    apiconn_thread_t *at = thread_of_base(evconnlistener_get_base(l));
    struct timeval tv = { 0, SBX_API_ACCEPT_BACKOFF_MS * 1000 };
    if (at && at->resume) {
        evconnlistener_disable(l);
        evtimer_add(at->resume, &tv);
    }
    long n = 0;
    if (conncap_log_due(&last_log, &suppressed, &n))
        log_warn("apiconn", "API listener: accept failed: %s; not accepting for %d ms (%ld more since the last such "
                            "line)",
                 evutil_socket_error_to_string(err), SBX_API_ACCEPT_BACKOFF_MS, n);
}

void apiconn_thread_listener(apiconn_thread_t *at, struct evconnlistener *l)
{
    at->listener = l;
    if (l)
        evconnlistener_set_error_cb(l, accept_error_cb);
}

apiconn_thread_t *apiconn_thread_new(controller_t *ctl, struct event_base *base, PGconn **db, void *bev_arg)
{
    apiconn_thread_t *at = calloc(1, sizeof *at);
    if (!at)
        return NULL;
    at->ctl = ctl;
    at->base = base;
    at->db = db;
    at->bev_arg = bev_arg;
    TAILQ_INIT(&at->conns);
    at->sweep = event_new(base, -1, EV_PERSIST, sweep_cb, at);
    at->resume = evtimer_new(base, resume_cb, at);
    at->turn = event_new(base, -1, 0, turn_cb, at);
    struct timeval tv = { SBX_API_SWEEP_MS / 1000, (SBX_API_SWEEP_MS % 1000) * 1000 };
    bool placed = false;
    pthread_mutex_lock(&all_lock);
    for (int i = 0; i < APICONN_MAX_THREADS && !placed; i++)
        if (!all_threads[i]) {
            all_threads[i] = at;
            placed = true;
        }
    pthread_mutex_unlock(&all_lock);
    if (!placed || !at->sweep || !at->resume || !at->turn || event_add(at->sweep, &tv) < 0) {
        apiconn_thread_free(at);
        return NULL;
    }
    return at;
}

void apiconn_thread_free(apiconn_thread_t *at)
{
    if (!at)
        return;
    pthread_mutex_lock(&all_lock);
    for (int i = 0; i < APICONN_MAX_THREADS; i++)
        if (all_threads[i] == at)
            all_threads[i] = NULL;
    pthread_mutex_unlock(&all_lock);
    /* evhttp_free closed the rest (our close callback freed them); what
     * is left never became a connection. */
    while (!TAILQ_EMPTY(&at->conns)) {
        apiconn_t *ac = TAILQ_FIRST(&at->conns);
        TAILQ_REMOVE(&at->conns, ac, link);
        conncap_remove(&api_caps, &ac->cap);
        budget_return(ac);
        if (ac->held)
            evbuffer_free(ac->held);
        apiconn__stream_release(ac);
        free(ac);
    }
    if (at->sweep)
        event_free(at->sweep);
    if (at->resume)
        event_free(at->resume);
    if (at->turn)
        event_free(at->turn);
    free(at);
}
