/* The Docker backend of the runtime interface (runtime_docker.h): the Engine
 * API (v1.41) over its unix socket with libcurl. Never shells out to the
 * docker CLI. */
#include "runtime_docker.h"
#include "docker_config.h"
#include "docker_stream.h"
#include "jsonx.h"
#include "limits.h"
#include "metrics.h"
#include "observed.h"
#include "runsc.h"
#include "tarball.h"
#include "timeutil.h"
#include "utf8.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define DOCKER_BASE_URL          "http://localhost/v1.41"
/* An ordinary Engine call (inspect, create, start, remove, list). */
#define DOCKER_CALL_TIMEOUT_MS   60000L
/* Removing a running container with force may wait for it to die. */
#define DOCKER_REMOVE_TIMEOUT_MS 120000L
/* A pull of a large image over a slow link. */
#define DOCKER_PULL_TIMEOUT_MS   (30L * 60L * 1000L)
/* Each step of the gVisor probe (import, create, start, logs, remove); the
 * wait for the probe container to exit is bounded separately. */
#define DOCKER_PROBE_CALL_MS     30000L
#define DOCKER_PROBE_WAIT_MS     30000L
/* A probe container left by a worker that died mid-probe is removed once
 * it is this old (a younger one may be another worker's running probe). */
#define DOCKER_PROBE_STALE_S     600
/* The probe image, made locally from an in-memory tar. */
#define DOCKER_PROBE_REPO        "sandbox-probe"
#define DOCKER_PROBE_TAG         "1"
#define DOCKER_PROBE_IMAGE       DOCKER_PROBE_REPO ":" DOCKER_PROBE_TAG
/* Docker network names (and the worker's settings for them). */
#define DOCKER_NETWORK_NAME_MAX  128
/* One line of the pull progress stream; longer lines are skipped. */
#define DOCKER_PULL_LINE_BYTES   (64u * 1024u)
/* Processes of one exec the timeout kill walks at most. */
#define DOCKER_KILL_MAX_PIDS     4096
/* How long to wait for Docker to record an exec's exit code after its
 * stream ended. */
#define DOCKER_EXIT_WAIT_MS      3000
/* The inspect behind a routed connection: the controller is waiting. */
#define DOCKER_ROUTE_TIMEOUT_MS  10000L

/* The details of a stopped container (inspect, logs): a heartbeat waits
 * for them. */
#define DOCKER_DETAIL_TIMEOUT_MS 5000L
/* All the details one inventory fetches: past this, the rest wait for the
 * next heartbeat (a slow Docker must not make a beat late). */
#define DOCKER_DETAILS_BUDGET_MS 2000
/* Log entries asked of Docker for a stopped container's output tail (of
 * which the last SBX_OUTPUT_TAIL_MAX bytes are kept). */
#define DOCKER_LOGS_TAIL_LINES   100
/* After a start, how long the worker waits at most for docker-init to have
 * exec'd the main process (or for the container to stop), and how often it
 * looks meanwhile. */
#define DOCKER_START_CONFIRM_MS  2000
#define DOCKER_START_POLL_US     5000

#define DOCKER_CLASSES 3   /* isolation_t values */
#define DOCKER_MODES   3   /* net_mode_t values */

/* Written by runtime_docker_open, read-only afterwards (so shared by the
 * executor threads without a lock). */
typedef struct docker_runtime {
    runtime_t base;   /* first: ops = docker_ops */
    char *socket_path;
    const volatile int *cancel;
    char gvisor_runtime[DOCKER_NETWORK_NAME_MAX];   /* "" when disabled */
    char worker_name[160];                          /* labels the probe; "" when not given */
    char runsc_exe[RUNSC_PATH_MAX];                 /* dockerd's path of it, when found here */
    char net_name[DOCKER_MODES][DOCKER_NETWORK_NAME_MAX]; /* [NET_RESTRICTED], [NET_OPEN] */
    bool offered[DOCKER_CLASSES];
    bool considered[DOCKER_CLASSES];                 /* has a probe line */
    unsigned net_modes[DOCKER_CLASSES];
    char probe[DOCKER_CLASSES][RUNTIME_PROBE_TEXT_MAX];
    char net_why[DOCKER_CLASSES][DOCKER_MODES][RUNTIME_PROBE_TEXT_MAX];
} docker_runtime_t;

typedef struct docker_reply {
    long status;
    sbuf_t body;      /* bounded by SBX_MAX_DOCKER_REPLY_BYTES */
} docker_reply_t;

/* ---- plumbing ---------------------------------------------------------- */

static int docker_xferinfo_cb(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt; (void)dn; (void)ut; (void)un;
    const docker_runtime_t *rt = ud;
    return rt->cancel && *rt->cancel ? 1 : 0;
}

static size_t docker_reply_write_cb(char *p, size_t size, size_t nmemb, void *ud)
{
    sbuf_t *b = ud;
    size_t n = size * nmemb;
    if (sbuf_append_bounded(b, p, n) < 0)
        return 0;
    return n;
}

/* A new easy handle for method path on the Engine socket; body (body_len
 * bytes of content_type, may be NULL) must outlive the transfer. The caller
 * owns *ret_headers. */
static CURL *docker_handle_new(const docker_runtime_t *rt, const char *method, const char *path, const void *body,
                               size_t body_len, const char *content_type, long timeout_ms,
                               struct curl_slist **ret_headers)
{
    char url[2048];
    int n = snprintf(url, sizeof url, "%s%s", DOCKER_BASE_URL, path);
    if (n < 0 || (size_t)n >= sizeof url)
        return NULL;
    CURL *h = curl_easy_init();
    if (!h)
        return NULL;
    struct curl_slist *hl = NULL;
    hl = curl_slist_append(hl, "Expect:");
    if (body) {
        char ct[128];
        snprintf(ct, sizeof ct, "Content-Type: %s", content_type ? content_type : "application/json");
        hl = curl_slist_append(hl, ct);
    }
    curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, rt->socket_path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (strcmp(method, "GET") == 0)
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)body_len);
    } else if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, 0L);
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 0L);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, docker_xferinfo_cb);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, (void *)rt);
    *ret_headers = hl;
    return h;
}

static bool docker_cancelled(const docker_runtime_t *rt) { return rt->cancel && *rt->cancel; }

/* Maps a failed transfer to an error. */
static int docker_transport_error(const docker_runtime_t *rt, CURLcode cr, api_error_t *err)
{
    if (cr == CURLE_ABORTED_BY_CALLBACK && docker_cancelled(rt))
    {
        api_error_set(err, API_CANCELLED, "the worker is shutting down");
        return SBX_EUNAVAIL;
    }
    api_error_set(err, API_RUNTIME_ERROR, "docker engine at %s: %s", rt->socket_path, curl_easy_strerror(cr));
    return cr == CURLE_OPERATION_TIMEDOUT ? SBX_ETIMEOUT : SBX_EUNAVAIL;
}

/* Engine API requests: sandbox_worker_docker_requests_total{result} and
 * sandbox_worker_docker_request_duration_seconds (every request but the
 * exec output stream, whose length is the command's). */
static pthread_once_t docker_metrics_once = PTHREAD_ONCE_INIT;
static metric_family_t *docker_m_requests, *docker_m_seconds;

static void docker_metrics_init(void)
{
    docker_m_requests = metrics_family("sandbox_worker_docker_requests_total", METRIC_COUNTER,
                                       "Docker Engine API requests by result: ok (answered below 500), error "
                                       "(answered 5xx), transport_error (no answer: socket, timeout), cancelled "
                                       "(worker shutdown).",
                                       NULL, 0);
    docker_m_seconds = metrics_family("sandbox_worker_docker_request_duration_seconds", METRIC_HISTOGRAM,
                                      "Docker Engine API request duration (image pulls included).",
                                      metrics_latency_buckets, metrics_latency_nbuckets);
}

static void docker_metrics_count(const char *result, int64_t t0_ms)
{
    char labels[64];
    pthread_once(&docker_metrics_once, docker_metrics_init);
    metrics_add(docker_m_requests, metrics_labels(labels, sizeof labels, "result", result, NULL), 1);
    metrics_observe(docker_m_seconds, NULL, (double)(time_mono_ms() - t0_ms) / 1000.0);
}

/* Sends one request with an optional body (len bytes of content_type) and
 * hands the reply to write_cb. Returns 0 when Docker answered, whatever the
 * status. */
static int docker_call_raw(const docker_runtime_t *rt, const char *method, const char *path, const void *data,
                           size_t len, const char *content_type, long timeout_ms,
                           size_t (*write_cb)(char *, size_t, size_t, void *), void *write_ud, long *ret_status,
                           api_error_t *err)
{
    int r = 0;
    struct curl_slist *hl = NULL;
    CURL *h = docker_handle_new(rt, method, path, data, len, content_type, timeout_ms, &hl);
    if (!h) {
        api_error_set(err, API_INTERNAL, "cannot build a docker request for %.200s", path);
        r = SBX_ENOMEM;
        goto cleanup;
    }
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, write_ud);
    int64_t t0 = time_mono_ms();
    CURLcode cr = curl_easy_perform(h);
    if (cr != CURLE_OK) {
        r = docker_transport_error(rt, cr, err);
        bool cancelled = cr == CURLE_ABORTED_BY_CALLBACK && docker_cancelled(rt);
        docker_metrics_count(cancelled ? "cancelled" : "transport_error", t0);
        goto cleanup;
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, ret_status);
    docker_metrics_count(*ret_status >= 500 ? "error" : "ok", t0);
cleanup:
    if (h)
        curl_easy_cleanup(h);
    curl_slist_free_all(hl);
    return r;
}

/* docker_call_raw with an optional JSON body. */
static int docker_call_ex(const docker_runtime_t *rt, const char *method, const char *path, json_object *body,
                          long timeout_ms, size_t (*write_cb)(char *, size_t, size_t, void *), void *write_ud,
                          long *ret_status, api_error_t *err)
{
    char *payload = NULL;
    if (body && !(payload = jsonx_dump(body))) {
        api_error_set(err, API_INTERNAL, "out of memory");
        return SBX_ENOMEM;
    }
    int r = docker_call_raw(rt, method, path, payload, payload ? strlen(payload) : 0, "application/json", timeout_ms,
                            write_cb, write_ud, ret_status, err);
    free(payload);
    return r;
}

static int docker_call(const docker_runtime_t *rt, const char *method, const char *path, json_object *body,
                       long timeout_ms, docker_reply_t *ret, api_error_t *err)
{
    memset(ret, 0, sizeof *ret);
    sbuf_init(&ret->body, SBX_MAX_DOCKER_REPLY_BYTES);
    return docker_call_ex(rt, method, path, body, timeout_ms, docker_reply_write_cb, &ret->body, &ret->status,
                          err);
}

static void docker_reply_release(docker_reply_t *r) { sbuf_release(&r->body); }

/* The reply as JSON (new reference), or NULL. */
static json_object *docker_reply_json(const docker_reply_t *r)
{
    json_object *o = NULL;
    if (r->body.truncated || r->body.len == 0)
        return NULL;
    if (jsonx_parse(r->body.data, r->body.len, &o, NULL) < 0)
        return NULL;
    return o;
}

/* Docker's error message ({"message":...}) or the start of the raw body. */
static void docker_reply_message(const docker_reply_t *r, char *out, size_t outlen)
{
    json_object *o = docker_reply_json(r);
    const char *m = jsonx_get_str(o, "message");
    if (m)
        snprintf(out, outlen, "%s", m);
    else if (r->body.len)
        snprintf(out, outlen, "%.300s", sbuf_cstr(&r->body));
    else
        snprintf(out, outlen, "HTTP status %ld", r->status);
    size_t l = strlen(out);
    while (l > 0 && (out[l - 1] == '\n' || out[l - 1] == '\r'))
        out[--l] = '\0';
    if (o)
        json_object_put(o);
}

/* Names that go into a URL path unescaped: container ids and names. */
static bool docker_name_ok(const char *s, size_t max)
{
    size_t n = 0;
    if (!s || !*s)
        return false;
    for (; s[n]; n++) {
        char c = s[n];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '-' || c == '.'))
            return false;
    }
    return n < max;
}

/* Image references: what Docker's reference grammar allows, so the name can
 * go into a URL path as is. */
static bool docker_image_ok(const char *s)
{
    size_t n = 0;
    if (!s || !*s)
        return false;
    for (; s[n]; n++) {
        char c = s[n];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              strchr("_-./:@", c)))
            return false;
    }
    return n <= SBX_MAX_IMAGE_BYTES;
}

/* Splits "repo[:tag]" or "repo@digest" (repo may carry a registry with a
 * port) into repo and tag; the tag defaults to "latest". */
static int docker_image_split(const char *image, char *repo, size_t repolen, char *tag, size_t taglen)
{
    const char *at = strchr(image, '@');
    const char *slash = strrchr(image, '/');
    const char *colon = strrchr(image, ':');
    size_t rl;
    const char *t;
    if (at) {
        rl = (size_t)(at - image);
        t = at + 1;
    } else if (colon && (!slash || colon > slash)) {
        rl = (size_t)(colon - image);
        t = colon + 1;
    } else {
        rl = strlen(image);
        t = "latest";
    }
    if (rl == 0 || rl >= repolen || !*t || strlen(t) >= taglen)
        return SBX_EINVAL;
    memcpy(repo, image, rl);
    repo[rl] = '\0';
    snprintf(tag, taglen, "%s", t);
    return 0;
}

/* ---- what this runtime offers ------------------------------------------ */

static void docker_runtime_free(docker_runtime_t *rt)
{
    if (!rt)
        return;
    free(rt->socket_path);
    free(rt);
}

static void docker_rt_free(runtime_t *base) { docker_runtime_free((docker_runtime_t *)base); }

static void docker_rt_set_cancel_flag(runtime_t *base, const volatile int *flag)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    rt->cancel = flag;
}

static size_t docker_rt_isolation_classes(const runtime_t *base, isolation_t *ret, size_t max)
{
    const docker_runtime_t *rt = (const docker_runtime_t *)base;
    size_t n = 0;
    for (int c = 0; c < DOCKER_CLASSES && n < max; c++)
        if (rt->offered[c])
            ret[n++] = (isolation_t)c;
    return n;
}

static unsigned docker_rt_network_modes(const runtime_t *base, isolation_t cls)
{
    const docker_runtime_t *rt = (const docker_runtime_t *)base;
    if ((int)cls < 0 || (int)cls >= DOCKER_CLASSES || !rt->offered[cls])
        return 0;
    return rt->net_modes[cls];
}

static const char *docker_rt_probe_result(const runtime_t *base, isolation_t cls)
{
    const docker_runtime_t *rt = (const docker_runtime_t *)base;
    if ((int)cls < 0 || (int)cls >= DOCKER_CLASSES || !rt->considered[cls])
        return NULL;
    return rt->probe[cls];
}

static const char *docker_rt_network_unavailable(const runtime_t *base, isolation_t cls, net_mode_t mode)
{
    const docker_runtime_t *rt = (const docker_runtime_t *)base;
    if ((int)cls < 0 || (int)cls >= DOCKER_CLASSES || (int)mode < 0 || (int)mode >= DOCKER_MODES)
        return "unknown class or network mode";
    if (!rt->offered[cls])
        return rt->considered[cls] ? rt->probe[cls] : "the class is not offered by this worker";
    return rt->net_modes[cls] & (1u << mode) ? "" : rt->net_why[cls][mode];
}

/* ---- images ------------------------------------------------------------ */

typedef struct docker_pull {
    sbuf_t line;
    char error[400];
    bool failed;
} docker_pull_t;

static void docker_pull_line(docker_pull_t *p)
{
    json_object *o = NULL;
    if (!p->line.truncated && p->line.len > 0 && jsonx_parse(p->line.data, p->line.len, &o, NULL) == 0) {
        const char *e = jsonx_get_str(o, "error");
        if (!e)
            e = jsonx_get_str(jsonx_get_obj(o, "errorDetail"), "message");
        if (!e && jsonx_get_obj(o, "errorDetail"))
            e = "pull failed";
        if (!e && !jsonx_get_str(o, "status"))
            e = jsonx_get_str(o, "message"); /* a non-200 answer is {"message":...} */
        if (e && !p->failed) {
            snprintf(p->error, sizeof p->error, "%s", e);
            p->failed = true;
        }
        json_object_put(o);
    }
    sbuf_reset(&p->line);
}

/* The pull reply is a stream of JSON objects, one per line; only the first
 * error is kept, so the stream itself is never stored. */
static size_t docker_pull_write_cb(char *s, size_t size, size_t nmemb, void *ud)
{
    docker_pull_t *p = ud;
    size_t n = size * nmemb;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\n') {
            docker_pull_line(p);
        } else if (sbuf_append_bounded(&p->line, &s[i], 1) < 0) {
            return 0;
        }
    }
    return n;
}

static int docker_image_pull(docker_runtime_t *rt, const char *image, api_error_t *err)
{
    int r = 0;
    char repo[SBX_MAX_IMAGE_BYTES + 1], tag[SBX_MAX_IMAGE_BYTES + 1], path[2048];
    char *erepo = NULL, *etag = NULL;
    docker_pull_t p;
    memset(&p, 0, sizeof p);
    sbuf_init(&p.line, DOCKER_PULL_LINE_BYTES);
    if (docker_image_split(image, repo, sizeof repo, tag, sizeof tag) < 0) {
        r = api_error_set(err, API_IMAGE_UNAVAILABLE, "image reference \"%.200s\" is not valid", image);
        goto cleanup;
    }
    erepo = curl_easy_escape(NULL, repo, 0);
    etag = curl_easy_escape(NULL, tag, 0);
    if (!erepo || !etag) {
        api_error_set(err, API_INTERNAL, "out of memory");
        r = SBX_ENOMEM;
        goto cleanup;
    }
    snprintf(path, sizeof path, "/images/create?fromImage=%s&tag=%s", erepo, etag);
    long status = 0;
    r = docker_call_ex(rt, "POST", path, NULL, DOCKER_PULL_TIMEOUT_MS, docker_pull_write_cb, &p, &status, err);
    if (r < 0)
        goto cleanup;
    docker_pull_line(&p); /* a last line without a newline */
    if (status != 200 || p.failed) {
        r = api_error_set(err, API_IMAGE_UNAVAILABLE, "cannot pull image %.200s: %s", image,
                          p.failed ? p.error : "docker answered without a reason");
        goto cleanup;
    }
cleanup:
    curl_free(erepo);
    curl_free(etag);
    sbuf_release(&p.line);
    return r;
}

/* Makes sure the image is present, pulling it when Docker does not have it. */
static int docker_image_ensure(docker_runtime_t *rt, const char *image, api_error_t *err)
{
    int r = 0;
    char path[SBX_MAX_IMAGE_BYTES + 64];
    docker_reply_t rep;
    memset(&rep, 0, sizeof rep);
    if (!docker_image_ok(image))
        return api_error_set(err, API_IMAGE_UNAVAILABLE, "image reference \"%.200s\" is not valid", image);
    snprintf(path, sizeof path, "/images/%s/json", image);
    r = docker_call(rt, "GET", path, NULL, DOCKER_CALL_TIMEOUT_MS, &rep, err);
    if (r < 0)
        goto cleanup;
    if (rep.status == 200)
        goto cleanup;
    if (rep.status != 404) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "docker image inspect %.200s: %s", image, msg);
        goto cleanup;
    }
    r = docker_image_pull(rt, image, err);
cleanup:
    docker_reply_release(&rep);
    return r;
}

/* ---- what a stopped container left ------------------------------------ */

static int docker_container_inspect(docker_runtime_t *rt, const char *name, long timeout_ms, json_object **ret,
                                    const char **ret_id, api_error_t *err);
static bool docker_pid_in_container(pid_t pid, const char *container_id);
static void docker_pid_children(pid_t pid, pid_t *pids, size_t *n, size_t max);

/* The last bytes of a demultiplexed log stream: each write is
 * demultiplexed into `chunk`, whose end is then kept in `keep`. */
typedef struct docker_tail {
    docker_stream_t demux;
    sbuf_t chunk;
    char *keep;          /* 2 * max bytes */
    size_t len, max;
    bool failed;
} docker_tail_t;

static size_t docker_tail_write_cb(char *p, size_t size, size_t nmemb, void *ud)
{
    docker_tail_t *t = ud;
    size_t n = size * nmemb;
    sbuf_reset(&t->chunk);
    if (docker_stream_push(&t->demux, p, n) < 0) {
        t->failed = true;
        return 0;
    }
    const char *d = t->chunk.data;
    size_t m = t->chunk.len;
    if (m >= t->max) {
        memcpy(t->keep, d + m - t->max, t->max);
        t->len = t->max;
    } else {
        if (t->len + m > 2 * t->max) {
            memmove(t->keep, t->keep + t->len - (t->max - m), t->max - m);
            t->len = t->max - m;
        }
        memcpy(t->keep + t->len, d, m);
        t->len += m;
    }
    return n;
}

/* The last at most max bytes of container id's main process output (stdout
 * and stderr in the order written), UTF-8 repaired: GET
 * /containers/{id}/logs?stdout=1&stderr=1&tail=N, demultiplexed. *ret is
 * malloc'd, or NULL when the container wrote nothing. Reusable for any
 * container of ours; bounded to DOCKER_DETAIL_TIMEOUT_MS. */
static int docker_container_logs_tail(docker_runtime_t *rt, const char *id, size_t max, char **ret, api_error_t *err)
{
    int r = 0;
    char path[256];
    long status = 0;
    docker_tail_t t;
    memset(&t, 0, sizeof t);
    *ret = NULL;
    if (!docker_name_ok(id, 80) || max == 0)
        return api_error_set(err, API_INVALID_ARGUMENT, "malformed container id");
    t.max = max;
    t.keep = malloc(2 * max);
    /* One write of libcurl is at most CURL_MAX_WRITE_SIZE; the chunk never
     * has to drop anything. */
    sbuf_init(&t.chunk, 4 * CURL_MAX_WRITE_SIZE);
    docker_stream_init(&t.demux, &t.chunk, &t.chunk);
    if (!t.keep) {
        r = api_error_set(err, API_INTERNAL, "out of memory");
        goto cleanup;
    }
    snprintf(path, sizeof path, "/containers/%s/logs?stdout=1&stderr=1&tail=%d", id, DOCKER_LOGS_TAIL_LINES);
    r = docker_call_raw(rt, "GET", path, NULL, 0, NULL, DOCKER_DETAIL_TIMEOUT_MS, docker_tail_write_cb, &t, &status,
                        err);
    if (r < 0)
        goto cleanup;
    if (status != 200 || t.failed) {
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot read the logs of container %.12s: HTTP status %ld", id,
                          status);
        goto cleanup;
    }
    if (t.len > 0 && !(*ret = utf8_tail(t.keep, t.len, max)))
        r = api_error_set(err, API_INTERNAL, "out of memory");
cleanup:
    free(t.keep);
    sbuf_release(&t.chunk);
    return r;
}

/* The runtime's error text, made one line of valid UTF-8 that fits out. */
static void docker_text_line(const char *s, char *out, size_t outlen)
{
    out[0] = '\0';
    if (!s || outlen == 0)
        return;
    char *fixed = utf8_sanitize(s, strlen(s));
    if (!fixed)
        return;
    size_t n = strlen(fixed);
    if (n >= outlen) {
        n = outlen - 1;
        while (n > 0 && ((unsigned char)fixed[n] & 0xC0) == 0x80)
            n--;
    }
    for (size_t i = 0; i < n; i++)
        out[i] = (unsigned char)fixed[i] < 0x20 || fixed[i] == 0x7f ? ' ' : fixed[i];
    out[n] = '\0';
    while (n > 0 && out[n - 1] == ' ')
        out[--n] = '\0';
    free(fixed);
}

/* Fills ret from an inspect answer's State (not the output tail). */
static void docker_exit_from_inspect(json_object *inspect, runtime_exit_t *ret)
{
    json_object *st = jsonx_get_obj(inspect, "State");
    const char *status = jsonx_get_str(st, "Status");
    const char *fin = jsonx_get_str(st, "FinishedAt");
    int64_t code = -1;
    bool oom = false;
    if (!jsonx_get_int(st, "ExitCode", &code) || code < -1 || code > INT32_MAX)
        code = -1;
    jsonx_get_bool(st, "OOMKilled", &oom);
    ret->known = st != NULL;
    snprintf(ret->state, sizeof ret->state, "%s",
             status && strlen(status) < sizeof ret->state && strspn(status, "abcdefghijklmnopqrstuvwxyz_") ==
                 strlen(status) && *status ? status : "unknown");
    ret->exit_code = (int)code;
    ret->oom_killed = oom;
    snprintf(ret->finished_at, sizeof ret->finished_at, "%s", fin && observed_time_ok(fin) ? fin : "");
    docker_text_line(jsonx_get_str(st, "Error"), ret->error, sizeof ret->error);
}

/* How container id ended: its State (one inspect) and its output tail (one
 * logs call). A tail that cannot be read is only left out. */
static int docker_container_exit(docker_runtime_t *rt, const char *id, runtime_exit_t *ret, api_error_t *err)
{
    json_object *o = NULL;
    const char *cid = NULL;
    int r = docker_container_inspect(rt, id, DOCKER_DETAIL_TIMEOUT_MS, &o, &cid, err);
    if (r < 0)
        return r;
    docker_exit_from_inspect(o, ret);
    json_object_put(o);
    api_error_t ignored;
    free(ret->output_tail);
    ret->output_tail = NULL;
    docker_container_logs_tail(rt, id, SBX_OUTPUT_TAIL_MAX, &ret->output_tail, &ignored);
    return 0;
}

/* One line on how the container ended (common/observed's wording). */
static void docker_exit_message(const runtime_exit_t *e, char *out, size_t outlen)
{
    observed_t ob;
    memset(&ob, 0, sizeof ob);
    snprintf(ob.state, sizeof ob.state, "%s", e->state[0] ? e->state : "unknown");
    ob.has_exit_code = e->known && e->exit_code >= 0;
    ob.exit_code = e->exit_code;
    ob.oom_killed = e->oom_killed;
    snprintf(ob.finished_at, sizeof ob.finished_at, "%s", e->finished_at);
    snprintf(ob.error, sizeof ob.error, "%s", e->error);
    ob.output_tail = e->output_tail;
    ob.output_tail_len = e->output_tail ? strlen(e->output_tail) : 0;
    observed_message(&ob, out, outlen);
}

/* ---- containers -------------------------------------------------------- */

static int docker_container_start(docker_runtime_t *rt, const char *id, api_error_t *err)
{
    char path[256];
    docker_reply_t rep;
    snprintf(path, sizeof path, "/containers/%s/start", id);
    int r = docker_call(rt, "POST", path, NULL, DOCKER_CALL_TIMEOUT_MS, &rep, err);
    if (r == 0 && rep.status != 204 && rep.status != 304) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot start the sandbox container: %s", msg);
    }
    docker_reply_release(&rep);
    return r;
}

static int docker_container_delete(docker_runtime_t *rt, const char *ref, api_error_t *err)
{
    char path[256];
    docker_reply_t rep;
    snprintf(path, sizeof path, "/containers/%s?force=true&v=true", ref);
    int r = docker_call(rt, "DELETE", path, NULL, DOCKER_REMOVE_TIMEOUT_MS, &rep, err);
    /* 404: already gone; 409: Docker is already removing it. */
    if (r == 0 && rep.status != 204 && rep.status != 200 && rep.status != 404 && rep.status != 409) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot remove container %.80s: %s", ref, msg);
    }
    docker_reply_release(&rep);
    return r;
}

/* Starts the removal of a container after a failed start and keeps the
 * start's error in err. */
static void docker_container_discard(docker_runtime_t *rt, const char *id)
{
    api_error_t ignored;
    docker_container_delete(rt, id, &ignored);
}

/* GET /containers/{name}/json: *ret is the parsed answer (release with
 * json_object_put) and *ret_id its "Id". A container that does not exist
 * is SBX_ENOTFOUND (err: API_NOT_FOUND); an answer without a valid Id is
 * API_RUNTIME_ERROR. */
static int docker_container_inspect(docker_runtime_t *rt, const char *name, long timeout_ms, json_object **ret,
                                    const char **ret_id, api_error_t *err)
{
    char path[256];
    docker_reply_t rep;
    *ret = NULL;
    *ret_id = NULL;
    snprintf(path, sizeof path, "/containers/%s/json", name);
    int r = docker_call(rt, "GET", path, NULL, timeout_ms, &rep, err);
    if (r < 0)
        goto cleanup;
    if (rep.status == 404) {
        api_error_set(err, API_NOT_FOUND, "no container %s", name);
        r = SBX_ENOTFOUND;
        goto cleanup;
    }
    json_object *o = docker_reply_json(&rep);
    const char *id = jsonx_get_str(o, "Id");
    if (rep.status != 200 || !id || !docker_name_ok(id, 80)) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot inspect container %s: %s", name,
                          rep.body.truncated ? "the reply is too large" : msg);
        if (o)
            json_object_put(o);
        goto cleanup;
    }
    *ret = o;
    *ret_id = id;
cleanup:
    docker_reply_release(&rep);
    return r;
}

/* True when a child of pid (docker-init, the container's pid 1 under Init)
 * runs another program than pid itself: the main process was exec'd. */
static bool docker_main_execd(pid_t pid)
{
    char path[64];
    struct stat self, child;
    snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
    if (stat(path, &self) < 0)
        return false;
    pid_t kids[16];
    size_t n = 0;
    docker_pid_children(pid, kids, &n, sizeof kids / sizeof kids[0]);
    for (size_t i = 0; i < n; i++) {
        snprintf(path, sizeof path, "/proc/%d/exe", (int)kids[i]);
        if (stat(path, &child) == 0 && (child.st_dev != self.st_dev || child.st_ino != self.st_ino))
            return true;
    }
    return false;
}

/* After a start: asks Docker until it confirms the main process running
 * (docker-init has exec'd it, seen in /proc when watch_procs) or the
 * container stopped, at most DOCKER_START_CONFIRM_MS (then running is
 * taken as confirmed: a later death is the heartbeat's to see). A stopped
 * container is API_SANDBOX_EXITED with *ret_exit filled. */
static int docker_container_confirm(docker_runtime_t *rt, const char *id, bool watch_procs, runtime_exit_t *ret_exit,
                                    api_error_t *err)
{
    int64_t until = time_mono_ms() + DOCKER_START_CONFIRM_MS;
    for (;;) {
        json_object *o = NULL;
        const char *cid = NULL;
        int r = docker_container_inspect(rt, id, DOCKER_CALL_TIMEOUT_MS, &o, &cid, err);
        if (r < 0) {
            if (r == SBX_ENOTFOUND)
                r = api_error_set(err, API_SANDBOX_EXITED, "the sandbox container was removed right after its start");
            return r;
        }
        json_object *st = jsonx_get_obj(o, "State");
        bool running = false;
        int64_t pid = 0;
        jsonx_get_bool(st, "Running", &running);
        jsonx_get_int(st, "Pid", &pid);
        if (!running) {
            runtime_exit_t e;
            memset(&e, 0, sizeof e);
            docker_exit_from_inspect(o, &e);
            json_object_put(o);
            api_error_t ignored;
            docker_container_logs_tail(rt, id, SBX_OUTPUT_TAIL_MAX, &e.output_tail, &ignored);
            char msg[sizeof err->message];
            docker_exit_message(&e, msg, sizeof msg);
            api_error_set(err, API_SANDBOX_EXITED, "the sandbox is not running after its start: %s", msg);
            if (ret_exit) {
                runtime_exit_release(ret_exit);
                *ret_exit = e;
            } else {
                runtime_exit_release(&e);
            }
            return SBX_ERUNTIME;
        }
        bool ours = pid > 1 && docker_pid_in_container((pid_t)pid, cid);
        bool alien = pid > 1 && !ours && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
        json_object_put(o);
        /* Another pid namespace (alien): nothing to watch in /proc. */
        if (!watch_procs || alien || (ours && docker_main_execd((pid_t)pid)))
            return 0;
        if (time_mono_ms() >= until)
            return 0;
        if (docker_cancelled(rt))
            return api_error_set(err, API_CANCELLED, "the worker is shutting down");
        usleep(DOCKER_START_POLL_US);
    }
}

/* A start that Docker refused: when the container shows why (the runtime
 * could not run its process), that is API_SANDBOX_EXITED with *ret_exit
 * filled; otherwise err keeps the start's error. */
static void docker_start_failure(docker_runtime_t *rt, const char *id, runtime_exit_t *ret_exit, api_error_t *err)
{
    if (err->code == API_CANCELLED)
        return;
    runtime_exit_t e;
    memset(&e, 0, sizeof e);
    api_error_t ignored;
    if (docker_container_exit(rt, id, &e, &ignored) < 0 || (!e.error[0] && e.exit_code <= 0)) {
        runtime_exit_release(&e);
        return;
    }
    if (!e.error[0]) {
        /* The start's own message says why. */
        const char *m = strstr(err->message, ": ");
        docker_text_line(m ? m + 2 : err->message, e.error, sizeof e.error);
    }
    char msg[sizeof err->message];
    docker_exit_message(&e, msg, sizeof msg);
    api_error_set(err, API_SANDBOX_EXITED, "the sandbox could not start: %s", msg);
    if (ret_exit) {
        runtime_exit_release(ret_exit);
        *ret_exit = e;
    } else {
        runtime_exit_release(&e);
    }
}

/* The container named for the sandbox already exists (a retried create):
 * checks it is ours, starts it when needed and returns its id. */
static int docker_container_adopt(docker_runtime_t *rt, const runtime_create_req_t *req, const char *name,
                                  bool watch_procs, char ret_ref[80], runtime_exit_t *ret_exit, api_error_t *err)
{
    json_object *o = NULL;
    const char *id = NULL;
    int r = docker_container_inspect(rt, name, DOCKER_CALL_TIMEOUT_MS, &o, &id, err);
    if (r < 0) {
        if (r == SBX_ENOTFOUND) /* removed since the create said it exists */
            r = api_error_set(err, API_RUNTIME_ERROR, "container %s vanished while being created", name);
        goto cleanup;
    }
    const char *owner = jsonx_get_str(jsonx_get_obj(jsonx_get_obj(o, "Config"), "Labels"), RUNTIME_LABEL_SANDBOX);
    if (!owner || strcmp(owner, req->sandbox_id) != 0) {
        r = api_error_set(err, API_RUNTIME_ERROR, "a container named %s exists that is not managed for this sandbox",
                          name);
        goto cleanup;
    }
    bool running = false;
    jsonx_get_bool(jsonx_get_obj(o, "State"), "Running", &running);
    if (!running && docker_container_start(rt, id, err) < 0) {
        docker_start_failure(rt, id, ret_exit, err);
        docker_container_discard(rt, id);
        r = SBX_ERUNTIME;
        goto cleanup;
    }
    if (docker_container_confirm(rt, id, watch_procs, ret_exit, err) < 0) {
        if (err->code != API_CANCELLED)
            docker_container_discard(rt, id);
        r = SBX_ERUNTIME;
        goto cleanup;
    }
    snprintf(ret_ref, 80, "%s", id);
cleanup:
    if (o)
        json_object_put(o);
    return r;
}

static int docker_network_ensure(docker_runtime_t *rt, net_mode_t mode, api_error_t *err);

/* What a create runs with: the class's runtime and the network for the
 * mode, or API_ISOLATION_UNAVAILABLE naming both when this worker cannot
 * provide that combination (never a weaker one instead). */
static int docker_create_plan(docker_runtime_t *rt, isolation_t iso, net_mode_t net, docker_create_plan_t *ret,
                              api_error_t *err)
{
    if ((int)iso < 0 || (int)iso >= DOCKER_CLASSES || !rt->offered[iso])
        return api_error_set(err, API_ISOLATION_UNAVAILABLE,
                             "this worker cannot run isolation %s with network %s: the class is not offered (%s)",
                             isolation_name(iso), net_mode_name(net),
                             (int)iso >= 0 && (int)iso < DOCKER_CLASSES && rt->considered[iso]
                                 ? rt->probe[iso]
                                 : "the docker runtime has no such class");
    if ((int)net < 0 || (int)net >= DOCKER_MODES || !(rt->net_modes[iso] & (1u << net)))
        return api_error_set(err, API_ISOLATION_UNAVAILABLE,
                             "this worker cannot run isolation %s with network %s: %s", isolation_name(iso),
                             net_mode_name(net),
                             (int)net >= 0 && (int)net < DOCKER_MODES ? rt->net_why[iso][net] : "unknown mode");
    ret->runtime = iso == ISO_GVISOR ? rt->gvisor_runtime : NULL;
    ret->network_mode = net == NET_NONE ? "none" : rt->net_name[net];
    if (net != NET_NONE && docker_network_ensure(rt, net, err) < 0) {
        /* The network was fine at start; someone removed or replaced it. */
        char why[sizeof err->message];
        snprintf(why, sizeof why, "%s", err->message);
        return api_error_set(err, err->code, "isolation %s with network %s: %s", isolation_name(iso),
                             net_mode_name(net), why);
    }
    return 0;
}

static int docker_rt_create(runtime_t *base, const runtime_create_req_t *req, char ret_ref[80],
                            runtime_exit_t *ret_exit, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    int r = 0;
    char name[SBX_ID_MAX + 8], path[256], id[80];
    json_object *body = NULL, *o = NULL;
    docker_reply_t rep;
    docker_create_plan_t plan;
    memset(&rep, 0, sizeof rep);
    if (!docker_name_ok(req->sandbox_id, SBX_ID_MAX) || !req->spec || !req->spec->image)
        return api_error_set(err, API_INVALID_ARGUMENT, "malformed create request (sandbox id or image)");
    r = docker_create_plan(rt, req->isolation, req->spec->network, &plan, err);
    if (r < 0)
        return r;
    snprintf(name, sizeof name, "sbx-%s", req->sandbox_id);

    r = docker_image_ensure(rt, req->spec->image, err);
    if (r < 0)
        goto cleanup;

    body = docker_sandbox_body(req, &plan);
    snprintf(path, sizeof path, "/containers/create?name=%s", name);
    r = docker_call(rt, "POST", path, body, DOCKER_CALL_TIMEOUT_MS, &rep, err);
    if (r < 0)
        goto cleanup;
    /* Under gVisor the container's processes are inside the sandbox, not
     * in /proc: only Docker's state is asked. */
    bool watch_procs = plan.runtime == NULL;
    if (rep.status == 409) {
        r = docker_container_adopt(rt, req, name, watch_procs, ret_ref, ret_exit, err);
        goto cleanup;
    }
    if (rep.status != 201) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, rep.status == 404 ? API_IMAGE_UNAVAILABLE : API_RUNTIME_ERROR,
                          "cannot create the sandbox container: %s", msg);
        goto cleanup;
    }
    o = docker_reply_json(&rep);
    const char *cid = jsonx_get_str(o, "Id");
    if (!cid || !docker_name_ok(cid, sizeof id)) {
        r = api_error_set(err, API_RUNTIME_ERROR, "docker created a container but returned no usable id");
        goto cleanup;
    }
    snprintf(id, sizeof id, "%s", cid);
    if (docker_container_start(rt, id, err) < 0) {
        docker_start_failure(rt, id, ret_exit, err);
        docker_container_discard(rt, id);
        r = SBX_ERUNTIME;
        goto cleanup;
    }
    if (docker_container_confirm(rt, id, watch_procs, ret_exit, err) < 0) {
        /* A shutdown leaves it for the retried create to adopt. */
        if (err->code != API_CANCELLED)
            docker_container_discard(rt, id);
        r = SBX_ERUNTIME;
        goto cleanup;
    }
    snprintf(ret_ref, 80, "%s", id);
cleanup:
    if (body)
        json_object_put(body);
    if (o)
        json_object_put(o);
    docker_reply_release(&rep);
    return r;
}

/* GET /containers/json with a label filter "key=value" (or just "key"). */
static int docker_container_list(docker_runtime_t *rt, const char *label, json_object **ret, api_error_t *err)
{
    int r = 0;
    char path[1024];
    char *esc = NULL;
    json_object *filters = json_object_new_object(), *arr = json_object_new_array(), *list = NULL;
    docker_reply_t rep;
    memset(&rep, 0, sizeof rep);
    json_object_array_add(arr, json_object_new_string(label));
    jsonx_add(filters, "label", arr);
    char *fj = jsonx_dump(filters);
    esc = fj ? curl_easy_escape(NULL, fj, 0) : NULL;
    free(fj);
    if (!esc) {
        api_error_set(err, API_INTERNAL, "out of memory");
        r = SBX_ENOMEM;
        goto cleanup;
    }
    snprintf(path, sizeof path, "/containers/json?all=true&filters=%s", esc);
    r = docker_call(rt, "GET", path, NULL, DOCKER_CALL_TIMEOUT_MS, &rep, err);
    if (r < 0)
        goto cleanup;
    list = docker_reply_json(&rep);
    if (rep.status != 200 || !list || !json_object_is_type(list, json_type_array)) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot list containers: %s",
                          rep.body.truncated ? "the reply is too large" : msg);
        goto cleanup;
    }
    *ret = list;
    list = NULL;
cleanup:
    if (list)
        json_object_put(list);
    json_object_put(filters);
    curl_free(esc);
    docker_reply_release(&rep);
    return r;
}

static int docker_rt_remove(runtime_t *base, const char *sandbox_id, const char *ref, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    int r = 0;
    json_object *list = NULL;
    if (ref && *ref) {
        if (!docker_name_ok(ref, 80))
            return api_error_set(err, API_INVALID_ARGUMENT, "malformed runtime ref");
        r = docker_container_delete(rt, ref, err);
        if (r < 0)
            goto cleanup;
    }
    if (!sandbox_id)
        goto cleanup;
    if (!docker_name_ok(sandbox_id, SBX_ID_MAX))
        return api_error_set(err, API_INVALID_ARGUMENT, "malformed sandbox id");
    /* Also whatever else carries the sandbox's label (a ref the controller
     * never learnt because a create's report was lost). */
    char label[SBX_ID_MAX + 64];
    snprintf(label, sizeof label, "%s=%s", RUNTIME_LABEL_SANDBOX, sandbox_id);
    r = docker_container_list(rt, label, &list, err);
    if (r < 0)
        goto cleanup;
    size_t n = json_object_array_length(list);
    for (size_t i = 0; i < n; i++) {
        const char *id = jsonx_get_str(json_object_array_get_idx(list, i), "Id");
        if (id && docker_name_ok(id, 80) && (r = docker_container_delete(rt, id, err)) < 0)
            goto cleanup;
    }
cleanup:
    if (list)
        json_object_put(list);
    return r;
}

/* Where the next inventory starts fetching details among the stopped
 * objects: each call takes the next SBX_INVENTORY_DETAILS_MAX of them. */
static atomic_uint docker_details_rotor;

/* Fills `exit` of at most SBX_INVENTORY_DETAILS_MAX stopped objects,
 * within DOCKER_DETAILS_BUDGET_MS. */
static void docker_inventory_details(docker_runtime_t *rt, runtime_object_t *objs, size_t n)
{
    size_t stopped = 0;
    for (size_t i = 0; i < n; i++)
        if (observed_stopped(objs[i].state))
            stopped++;
    if (stopped == 0)
        return;
    size_t take = stopped < SBX_INVENTORY_DETAILS_MAX ? stopped : SBX_INVENTORY_DETAILS_MAX;
    size_t first = atomic_fetch_add(&docker_details_rotor, (unsigned)take) % stopped;
    size_t seen = 0, done = 0;
    int64_t until = time_mono_ms() + DOCKER_DETAILS_BUDGET_MS;
    /* Two rounds over the list: from the first-th stopped object on, then
     * wrapping around to those before it. */
    for (int round = 0; round < 2 && done < take; round++) {
        seen = 0;
        for (size_t i = 0; i < n && done < take; i++) {
            if (!observed_stopped(objs[i].state))
                continue;
            bool in_turn = round == 0 ? seen >= first : seen < first;
            seen++;
            if (!in_turn || docker_cancelled(rt) || time_mono_ms() >= until)
                continue;
            api_error_t ignored;
            if (docker_container_exit(rt, objs[i].ref, &objs[i].exit, &ignored) < 0)
                memset(&objs[i].exit, 0, sizeof objs[i].exit);
            done++;
        }
    }
}

static int docker_rt_inventory(runtime_t *base, const char *cluster_id, const char *worker_name, runtime_object_t **ret,
                               size_t *ret_n, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    int r = 0;
    json_object *list = NULL;
    runtime_object_t *objs = NULL;
    char label[160];
    if (cluster_id && *cluster_id)
        snprintf(label, sizeof label, "%s=%s", RUNTIME_LABEL_CLUSTER, cluster_id);
    else
        snprintf(label, sizeof label, "%s=true", RUNTIME_LABEL_MANAGED);
    r = docker_container_list(rt, label, &list, err);
    if (r < 0)
        goto cleanup;
    size_t n = json_object_array_length(list), k = 0;
    objs = calloc(n ? n : 1, sizeof *objs);
    if (!objs) {
        api_error_set(err, API_INTERNAL, "out of memory");
        r = SBX_ENOMEM;
        goto cleanup;
    }
    for (size_t i = 0; i < n; i++) {
        json_object *c = json_object_array_get_idx(list, i);
        json_object *labels = jsonx_get_obj(c, "Labels");
        const char *id = jsonx_get_str(c, "Id");
        const char *sbx = jsonx_get_str(labels, RUNTIME_LABEL_SANDBOX);
        const char *tenant = jsonx_get_str(labels, RUNTIME_LABEL_TENANT);
        const char *state = jsonx_get_str(c, "State");
        const char *maker = jsonx_get_str(labels, RUNTIME_LABEL_WORKER);
        /* Nothing the controller could match without a sandbox id (nor
         * anything it would refuse the whole heartbeat for). */
        if (!id || !sbx || !docker_name_ok(sbx, sizeof objs[k].sandbox_id) || !docker_name_ok(id, sizeof objs[k].ref))
            continue;
        if (tenant && (strlen(tenant) >= sizeof objs[k].tenant || utf8_has_control(tenant) ||
                       !utf8_valid(tenant, strlen(tenant))))
            tenant = NULL;
        if (state && (strlen(state) >= sizeof objs[k].state || !*state ||
                      strspn(state, "abcdefghijklmnopqrstuvwxyz_") != strlen(state)))
            state = NULL;
        /* Another worker's on a shared Docker host: not ours to report. */
        if (worker_name && *worker_name && maker && strcmp(maker, worker_name) != 0)
            continue;
        snprintf(objs[k].sandbox_id, sizeof objs[k].sandbox_id, "%s", sbx);
        snprintf(objs[k].tenant, sizeof objs[k].tenant, "%s", tenant ? tenant : "");
        snprintf(objs[k].ref, sizeof objs[k].ref, "%s", id);
        snprintf(objs[k].state, sizeof objs[k].state, "%s", state ? state : "unknown");
        k++;
    }
    docker_inventory_details(rt, objs, k);
    *ret = objs;
    *ret_n = k;
    objs = NULL;
cleanup:
    runtime_inventory_free(objs, 0);
    if (list)
        json_object_put(list);
    return r;
}

/* ---- discovery: the gVisor probe, networks, images ----------------------- */

/* GET path as JSON (new reference in *ret) when Docker answers 200. */
static int docker_get_json(docker_runtime_t *rt, const char *path, long timeout_ms, json_object **ret, api_error_t *err)
{
    docker_reply_t rep;
    int r = docker_call(rt, "GET", path, NULL, timeout_ms, &rep, err);
    if (r == 0) {
        json_object *o = docker_reply_json(&rep);
        if (rep.status != 200 || !o) {
            char msg[320];
            docker_reply_message(&rep, msg, sizeof msg);
            r = api_error_set(err, API_RUNTIME_ERROR, "GET %.100s: %s", path,
                              rep.body.truncated ? "the reply is too large" : msg);
            if (o)
                json_object_put(o);
        } else {
            *ret = o;
        }
    }
    docker_reply_release(&rep);
    return r;
}

/* A filters={"KEY":["VALUE"]} query parameter, URL-escaped (curl_free). */
static char *docker_filter_param(const char *key, const char *value)
{
    json_object *filters = json_object_new_object(), *arr = json_object_new_array();
    json_object_array_add(arr, json_object_new_string(value));
    jsonx_add(filters, key, arr);
    char *fj = jsonx_dump(filters);
    char *esc = fj ? curl_easy_escape(NULL, fj, 0) : NULL;
    free(fj);
    json_object_put(filters);
    return esc;
}

/* True when runsc's runtimeArgs (from /info) give it no network:
 * "--network=none" or "--network" "none" (one or two dashes). */
static bool docker_runsc_args_no_network(json_object *args)
{
    size_t n = args && json_object_is_type(args, json_type_array) ? json_object_array_length(args) : 0;
    for (size_t i = 0; i < n; i++) {
        const char *a = json_object_get_string(json_object_array_get_idx(args, i));
        if (!a || a[0] != '-')
            continue;
        a += a[1] == '-' ? 2 : 1;
        if (strcmp(a, "network=none") == 0)
            return true;
        if (strcmp(a, "network") == 0 && i + 1 < n) {
            const char *v = json_object_get_string(json_object_array_get_idx(args, i + 1));
            if (v && strcmp(v, "none") == 0)
                return true;
        }
    }
    return false;
}

/* The runsc binary dockerd runs (its runtime "path"), as a file this
 * process can see: absolute as given, else searched like dockerd would. */
static void docker_runsc_exe(const char *path, char out[RUNSC_PATH_MAX])
{
    static const char *const dirs[] = { "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin",
                                        "/bin", NULL };
    struct stat st;
    out[0] = '\0';
    if (!path || !*path || strlen(path) >= RUNSC_PATH_MAX - 32)
        return;
    if (path[0] == '/') {
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
            snprintf(out, RUNSC_PATH_MAX, "%s", path);
        return;
    }
    if (strchr(path, '/'))
        return;
    for (const char *const *d = dirs; *d; d++) {
        char cand[RUNSC_PATH_MAX];
        snprintf(cand, sizeof cand, "%s/%s", *d, path);
        if (stat(cand, &st) == 0 && S_ISREG(st.st_mode)) {
            snprintf(out, RUNSC_PATH_MAX, "%s", cand);
            return;
        }
    }
}

/* Makes the probe image from an in-memory tar holding one empty directory
 * when Docker does not have it (no registry needed). */
static int docker_probe_image(docker_runtime_t *rt, api_error_t *err)
{
    int r = 0;
    long status = 0;
    unsigned char tar[TARBALL_DIR_BYTES];
    docker_pull_t p;
    docker_reply_t rep;
    memset(&p, 0, sizeof p);
    sbuf_init(&p.line, DOCKER_PULL_LINE_BYTES);
    r = docker_call(rt, "GET", "/images/" DOCKER_PROBE_IMAGE "/json", NULL, DOCKER_PROBE_CALL_MS, &rep, err);
    if (r < 0 || rep.status == 200)
        goto cleanup;
    if (rep.status != 404) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot inspect image %s: %s", DOCKER_PROBE_IMAGE, msg);
        goto cleanup;
    }
    if (tarball_dir("probe", tar) < 0) {
        r = api_error_set(err, API_INTERNAL, "cannot build the probe image's tar");
        goto cleanup;
    }
    r = docker_call_raw(rt, "POST", "/images/create?fromSrc=-&repo=" DOCKER_PROBE_REPO "&tag=" DOCKER_PROBE_TAG, tar,
                        sizeof tar, "application/x-tar", DOCKER_PROBE_CALL_MS, docker_pull_write_cb, &p, &status,
                        err);
    if (r < 0)
        goto cleanup;
    docker_pull_line(&p);
    if (status != 200 || p.failed)
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot import image %s: %s", DOCKER_PROBE_IMAGE,
                          p.failed ? p.error : "docker answered without a reason");
cleanup:
    docker_reply_release(&rep);
    sbuf_release(&p.line);
    return r;
}

/* Removes probe containers a worker that died mid-probe left behind; a
 * recent one may be another worker's probe running now and is kept. */
static void docker_probe_remove_stale(docker_runtime_t *rt)
{
    json_object *list = NULL;
    api_error_t ignored;
    if (docker_container_list(rt, RUNTIME_LABEL_MANAGED "=" RUNTIME_MANAGED_PROBE, &list, &ignored) < 0)
        return;
    int64_t now_s = time_wall_ms() / 1000;
    for (size_t i = 0; i < json_object_array_length(list); i++) {
        json_object *c = json_object_array_get_idx(list, i);
        const char *id = jsonx_get_str(c, "Id");
        int64_t created = 0;
        if (id && docker_name_ok(id, 80) && jsonx_get_int(c, "Created", &created) &&
            created < now_s - DOCKER_PROBE_STALE_S)
            docker_container_delete(rt, id, &ignored);
    }
    json_object_put(list);
}

/* Runs the probe container under runtime: `docker-init --version` (the tini
 * Docker mounts at /sbin/docker-init under Init) must exit 0 and print
 * "tini". Always removes the container. */
static int docker_probe_run(docker_runtime_t *rt, const char *runtime, api_error_t *err)
{
    int r = 0;
    char path[256], id[80] = "", msg[320];
    json_object *body = NULL, *o = NULL;
    docker_reply_t rep;
    sbuf_t out, errs;
    docker_stream_t demux;
    memset(&rep, 0, sizeof rep);
    sbuf_init(&out, 4096);
    sbuf_init(&errs, 4096);

    body = docker_probe_body(DOCKER_PROBE_IMAGE, runtime, rt->worker_name);
    r = docker_call(rt, "POST", "/containers/create", body, DOCKER_PROBE_CALL_MS, &rep, err);
    if (r < 0)
        goto cleanup;
    o = docker_reply_json(&rep);
    const char *cid = jsonx_get_str(o, "Id");
    if (rep.status != 201 || !cid || !docker_name_ok(cid, sizeof id)) {
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot create the probe container: %s", msg);
        goto cleanup;
    }
    snprintf(id, sizeof id, "%s", cid);
    docker_reply_release(&rep);

    snprintf(path, sizeof path, "/containers/%s/start", id);
    r = docker_call(rt, "POST", path, NULL, DOCKER_PROBE_CALL_MS, &rep, err);
    if (r < 0)
        goto cleanup;
    if (rep.status != 204 && rep.status != 304) {
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot start the probe container: %s", msg);
        goto cleanup;
    }
    docker_reply_release(&rep);

    snprintf(path, sizeof path, "/containers/%s/wait?condition=not-running", id);
    r = docker_call(rt, "POST", path, NULL, DOCKER_PROBE_WAIT_MS, &rep, err);
    if (r == SBX_ETIMEOUT) {
        r = api_error_set(err, API_TIMEOUT, "the probe container did not exit within %ld s",
                          DOCKER_PROBE_WAIT_MS / 1000);
        goto cleanup;
    }
    if (r < 0)
        goto cleanup;
    if (o)
        json_object_put(o);
    o = docker_reply_json(&rep);
    int64_t code = -1;
    if (rep.status != 200 || !jsonx_get_int(o, "StatusCode", &code)) {
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot wait for the probe container: %s", msg);
        goto cleanup;
    }
    docker_reply_release(&rep);

    snprintf(path, sizeof path, "/containers/%s/logs?stdout=true&stderr=true", id);
    r = docker_call(rt, "GET", path, NULL, DOCKER_PROBE_CALL_MS, &rep, err);
    if (r < 0)
        goto cleanup;
    docker_stream_init(&demux, &out, &errs);
    if (rep.status == 200 && rep.body.len)
        docker_stream_push(&demux, rep.body.data, rep.body.len);
    if (code != 0 || !strstr(sbuf_cstr(&out), "tini")) {
        const char *said = errs.len ? sbuf_cstr(&errs) : sbuf_cstr(&out);
        r = api_error_set(err, API_RUNTIME_ERROR, "docker-init --version exited %lld%s%.200s", (long long)code,
                          *said ? ": " : " without output", said);
        size_t l = strlen(err->message);
        while (l > 0 && (err->message[l - 1] == '\n' || err->message[l - 1] == '\r'))
            err->message[--l] = '\0';
        goto cleanup;
    }
cleanup:
    if (id[0]) {
        api_error_t ignored;
        docker_container_delete(rt, id, &ignored);
    }
    if (body)
        json_object_put(body);
    if (o)
        json_object_put(o);
    docker_reply_release(&rep);
    sbuf_release(&out);
    sbuf_release(&errs);
    return r;
}

/* Decides the gvisor class from /info and the probe. */
static void docker_gvisor_discover(docker_runtime_t *rt, json_object *info)
{
    const char *name = rt->gvisor_runtime;
    char *why = rt->probe[ISO_GVISOR];
    rt->considered[ISO_GVISOR] = true;
    if (!name[0]) {
        snprintf(why, RUNTIME_PROBE_TEXT_MAX, "not offered: disabled (worker_gvisor_runtime is empty)");
        return;
    }
    json_object *entry = jsonx_get_obj(jsonx_get_obj(info, "Runtimes"), name);
    if (!entry) {
        snprintf(why, RUNTIME_PROBE_TEXT_MAX,
                 "not offered: dockerd has no runtime named %s (register it under \"runtimes\" in dockerd's "
                 "daemon.json and restart dockerd)", name);
        return;
    }
    api_error_t perr;
    docker_probe_remove_stale(rt);
    if (docker_probe_image(rt, &perr) < 0 || docker_probe_run(rt, name, &perr) < 0) {
        snprintf(why, RUNTIME_PROBE_TEXT_MAX, "not offered: probe failed: %.340s", perr.message);
        return;
    }
    docker_runsc_exe(jsonx_get_str(entry, "path"), rt->runsc_exe);
    rt->offered[ISO_GVISOR] = true;
    snprintf(why, RUNTIME_PROBE_TEXT_MAX, "ok: %s ran a probe container", name);
    if (docker_runsc_args_no_network(jsonx_get_arr(entry, "runtimeArgs"))) {
        rt->net_modes[ISO_GVISOR] = 1u << NET_NONE;
        for (int m = NET_RESTRICTED; m < DOCKER_MODES; m++)
            snprintf(rt->net_why[ISO_GVISOR][m], RUNTIME_PROBE_TEXT_MAX,
                     "dockerd runs %s with --network=none, so gVisor sandboxes have loopback only", name);
    } else {
        rt->net_modes[ISO_GVISOR] = rt->net_modes[ISO_CONTAINER];
        memcpy(rt->net_why[ISO_GVISOR], rt->net_why[ISO_CONTAINER], sizeof rt->net_why[ISO_GVISOR]);
    }
}

/* Checks that an existing network is what the worker would have created:
 * a bridge, internal exactly when restricted, no traffic between
 * containers and, when internal, no host address on the bridge. */
static int docker_network_check(json_object *net, const char *name, net_mode_t mode, api_error_t *err)
{
    bool want_internal = mode == NET_RESTRICTED, internal = false;
    const char *driver = jsonx_get_str(net, "Driver");
    json_object *opts = jsonx_get_obj(net, "Options");
    const char *icc = jsonx_get_str(opts, "com.docker.network.bridge.enable_icc");
    const char *inhibit = jsonx_get_str(opts, "com.docker.network.bridge.inhibit_ipv4");
    const char *problem = NULL;
    jsonx_get_bool(net, "Internal", &internal);
    if (!driver || strcmp(driver, "bridge") != 0)
        problem = "its driver is not bridge";
    else if (internal != want_internal)
        problem = want_internal ? "it is not internal (sandboxes would have egress)"
                                : "it is internal (sandboxes would have no egress)";
    else if (!icc || strcmp(icc, "false") != 0)
        problem = "it lets containers reach each other (com.docker.network.bridge.enable_icc is not false)";
    else if (want_internal && (!inhibit || strcmp(inhibit, "true") != 0))
        problem = "its bridge has a host address (com.docker.network.bridge.inhibit_ipv4 is not true), so sandboxes "
                  "could reach services on the host";
    if (problem)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE,
                             "Docker network %s exists but %s; refusing to run network %s on it (remove it with "
                             "`docker network rm %s` or set worker_%s_network to another name)",
                             name, problem, net_mode_name(mode), name, net_mode_name(mode));
    return 0;
}

/* The networks named exactly name: a new array (empty when none). */
static int docker_network_find(docker_runtime_t *rt, const char *name, json_object **ret, api_error_t *err)
{
    char path[1024];
    json_object *list = NULL;
    char *esc = docker_filter_param("name", name);
    if (!esc) {
        api_error_set(err, API_INTERNAL, "out of memory");
        return SBX_ENOMEM;
    }
    snprintf(path, sizeof path, "/networks?filters=%s", esc);
    curl_free(esc);
    int r = docker_get_json(rt, path, DOCKER_CALL_TIMEOUT_MS, &list, err);
    if (r < 0)
        return r;
    json_object *found = json_object_new_array();
    size_t n = json_object_is_type(list, json_type_array) ? json_object_array_length(list) : 0;
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(list, i);
        const char *nm = jsonx_get_str(e, "Name");
        const char *id = jsonx_get_str(e, "Id");
        /* the name filter matches substrings; ids go into URL paths */
        if (nm && strcmp(nm, name) == 0 && id && docker_name_ok(id, 80))
            json_object_array_add(found, json_object_get(e));
    }
    json_object_put(list);
    *ret = found;
    return 0;
}

/* Docker's CheckDuplicate is not atomic: workers starting together on one
 * dockerd can each create the network. Keeps one — the one containers are
 * attached to, if any (a duplicate name makes Docker refuse to attach, so
 * at most one can have them), else the smallest id, so every worker keeps
 * the same — and removes the others when they are the worker's and unused. */
static int docker_network_dedupe(docker_runtime_t *rt, json_object *matches, api_error_t *err)
{
    size_t n = json_object_array_length(matches), used = 0, keep = 0;
    bool *ours = calloc(n, sizeof *ours), *busy = calloc(n, sizeof *busy);
    int r = 0;
    if (!ours || !busy) {
        r = api_error_set(err, API_INTERNAL, "out of memory");
        goto cleanup;
    }
    for (size_t i = 0; i < n; i++) {
        char path[160];
        json_object *net = NULL;
        const char *id = jsonx_get_str(json_object_array_get_idx(matches, i), "Id");
        snprintf(path, sizeof path, "/networks/%s", id);
        if (docker_get_json(rt, path, DOCKER_CALL_TIMEOUT_MS, &net, err) < 0)
            goto cleanup; /* gone already: another worker is deduplicating; the caller looks again */
        const char *m = jsonx_get_str(jsonx_get_obj(net, "Labels"), RUNTIME_LABEL_MANAGED);
        json_object *cs = jsonx_get_obj(net, "Containers");
        ours[i] = m && strcmp(m, RUNTIME_MANAGED_NETWORK) == 0;
        busy[i] = cs && json_object_object_length(cs) > 0;
        json_object_put(net);
        const char *best = jsonx_get_str(json_object_array_get_idx(matches, keep), "Id");
        if (busy[i])
            used++;
        if ((busy[i] && !busy[keep]) || (busy[i] == busy[keep] && strcmp(id, best) < 0))
            keep = i;
    }
    for (size_t i = 0; i < n && used <= 1; i++) {
        if (i == keep)
            continue;
        if (!ours[i] || busy[i])
            break;
        char path[160];
        docker_reply_t rep;
        snprintf(path, sizeof path, "/networks/%s", jsonx_get_str(json_object_array_get_idx(matches, i), "Id"));
        if ((r = docker_call(rt, "DELETE", path, NULL, DOCKER_CALL_TIMEOUT_MS, &rep, err)) < 0)
            goto cleanup;
        long status = rep.status;
        docker_reply_release(&rep);
        if (status != 204 && status != 200 && status != 404)
            break;
    }
    r = 0;
cleanup:
    free(ours);
    free(busy);
    return r;
}

/* Makes sure the network for mode exists as the worker would create it:
 * creates it when missing (a concurrent creator's 409 is fine: the winner's
 * network is checked instead; duplicates from racing creators are removed)
 * and refuses one set up differently. */
static int docker_network_ensure(docker_runtime_t *rt, net_mode_t mode, api_error_t *err)
{
    const char *name = rt->net_name[mode];
    bool created = false;
    int dedupes = 0;
    for (int attempt = 0; attempt < 8; attempt++) {
        json_object *nets = NULL;
        int r = docker_network_find(rt, name, &nets, err);
        if (r < 0)
            return r;
        size_t n = json_object_array_length(nets);
        if (n > 1 && dedupes < 3) {
            if (dedupes++ > 0)
                usleep(100000); /* let a worker deduplicating at the same time finish */
            r = docker_network_dedupe(rt, nets, err);
            json_object_put(nets);
            if (r < 0)
                return r;
            continue;
        }
        if (n > 1) {
            json_object_put(nets);
            return api_error_set(err, API_ISOLATION_UNAVAILABLE,
                                 "%zu Docker networks are named %s; remove all but one (docker network ls)", n, name);
        }
        if (n == 1) {
            r = docker_network_check(json_object_array_get_idx(nets, 0), name, mode, err);
            json_object_put(nets);
            /* Ours just now: look once more for a racing creator's copy. */
            if (r == 0 && created && dedupes == 0) {
                created = false;
                continue;
            }
            return r;
        }
        json_object_put(nets);
        if (created)
            break;
        json_object *body = json_object_new_object(), *opts = json_object_new_object(),
                    *labels = json_object_new_object();
        jsonx_add_str(body, "Name", name);
        jsonx_add_str(body, "Driver", "bridge");
        jsonx_add_bool(body, "CheckDuplicate", true);
        jsonx_add_bool(body, "Internal", mode == NET_RESTRICTED);
        jsonx_add_bool(body, "Attachable", false);
        jsonx_add_bool(body, "EnableIPv6", false);
        jsonx_add_str(opts, "com.docker.network.bridge.enable_icc", "false");
        if (mode == NET_RESTRICTED)
            jsonx_add_str(opts, "com.docker.network.bridge.inhibit_ipv4", "true");
        jsonx_add(body, "Options", opts);
        jsonx_add_str(labels, RUNTIME_LABEL_MANAGED, RUNTIME_MANAGED_NETWORK);
        jsonx_add(body, "Labels", labels);
        docker_reply_t rep;
        r = docker_call(rt, "POST", "/networks/create", body, DOCKER_CALL_TIMEOUT_MS, &rep, err);
        json_object_put(body);
        long status = rep.status;
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        docker_reply_release(&rep);
        if (r < 0)
            return r;
        if (status != 201 && status != 409)
            return api_error_set(err, API_RUNTIME_ERROR, "cannot create Docker network %s: %s", name, msg);
        created = true;
    }
    return api_error_set(err, API_RUNTIME_ERROR, "Docker network %s was created but cannot be found", name);
}

/* Decides the container class's network modes, creating the networks. */
static void docker_networks_discover(docker_runtime_t *rt)
{
    rt->net_modes[ISO_CONTAINER] = 1u << NET_NONE;
    for (int m = NET_RESTRICTED; m < DOCKER_MODES; m++) {
        char *why = rt->net_why[ISO_CONTAINER][m];
        api_error_t nerr;
        if (!rt->net_name[m][0])
            snprintf(why, RUNTIME_PROBE_TEXT_MAX, "disabled (worker_%s_network is empty)",
                     net_mode_name((net_mode_t)m));
        else if (docker_network_ensure(rt, (net_mode_t)m, &nerr) < 0)
            snprintf(why, RUNTIME_PROBE_TEXT_MAX, "%.390s", nerr.message);
        else
            rt->net_modes[ISO_CONTAINER] |= 1u << m;
    }
}

static const runtime_ops_t docker_ops;

int runtime_docker_open(const runtime_docker_options_t *opt, runtime_t **ret, api_error_t *err)
{
    int r = 0;
    const char *sock = opt->socket_path && *opt->socket_path ? opt->socket_path : "/var/run/docker.sock";
    const char *names[][2] = {
        { "worker_gvisor_runtime", opt->gvisor_runtime },
        { "worker_restricted_network", opt->restricted_network },
        { "worker_open_network", opt->open_network },
    };
    docker_reply_t rep;
    json_object *info = NULL;
    memset(&rep, 0, sizeof rep);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i][1] && *names[i][1] && !docker_name_ok(names[i][1], DOCKER_NETWORK_NAME_MAX))
            return api_error_set(err, API_INVALID_ARGUMENT,
                                 "%s must be letters, digits, '.', '_' or '-' (at most %d), got \"%.64s\"",
                                 names[i][0], DOCKER_NETWORK_NAME_MAX - 1, names[i][1]);
    docker_runtime_t *rt = calloc(1, sizeof *rt);
    if (rt)
        rt->base.ops = &docker_ops;
    if (!rt || !(rt->socket_path = strdup(sock))) {
        api_error_set(err, API_INTERNAL, "out of memory");
        r = SBX_ENOMEM;
        goto cleanup;
    }
    snprintf(rt->gvisor_runtime, sizeof rt->gvisor_runtime, "%s", opt->gvisor_runtime ? opt->gvisor_runtime : "");
    snprintf(rt->worker_name, sizeof rt->worker_name, "%s", opt->worker_name ? opt->worker_name : "");
    snprintf(rt->net_name[NET_RESTRICTED], DOCKER_NETWORK_NAME_MAX, "%s",
             opt->restricted_network ? opt->restricted_network : "");
    snprintf(rt->net_name[NET_OPEN], DOCKER_NETWORK_NAME_MAX, "%s", opt->open_network ? opt->open_network : "");
    if (docker_call(rt, "GET", "/_ping", NULL, 10000L, &rep, err) < 0) {
        api_error_set(err, API_UNAVAILABLE, "docker engine at %s does not answer (is dockerd running?)",
                      rt->socket_path);
        r = SBX_EUNAVAIL;
        goto cleanup;
    }
    if (rep.status != 200) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        api_error_set(err, API_UNAVAILABLE, "docker engine at %s answered /_ping with %ld: %s", rt->socket_path,
                      rep.status, msg);
        r = SBX_EUNAVAIL;
        goto cleanup;
    }
    if (docker_get_json(rt, "/info", DOCKER_CALL_TIMEOUT_MS, &info, err) < 0) {
        r = SBX_EUNAVAIL;
        goto cleanup;
    }
    rt->offered[ISO_CONTAINER] = true;
    docker_networks_discover(rt);
    docker_gvisor_discover(rt, info);
    *ret = &rt->base;
    rt = NULL;
cleanup:
    if (info)
        json_object_put(info);
    docker_reply_release(&rep);
    docker_runtime_free(rt);
    return r;
}

static int docker_rt_ping(runtime_t *base, long timeout_ms, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    docker_reply_t rep;
    int r = docker_call(rt, "GET", "/_ping", NULL, timeout_ms, &rep, err);
    if (r == 0 && rep.status != 200) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        api_error_set(err, API_RUNTIME_ERROR, "docker engine at %s answered /_ping with %ld: %s", rt->socket_path,
                      rep.status, msg);
        r = SBX_ERUNTIME;
    }
    docker_reply_release(&rep);
    return r;
}

static int docker_rt_images(runtime_t *base, char ***ret, size_t *ret_n, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    json_object *list = NULL;
    int r = docker_get_json(rt, "/images/json", DOCKER_CALL_TIMEOUT_MS, &list, err);
    if (r < 0)
        return r;
    size_t n = 0;
    char **names = calloc(RUNTIME_MAX_IMAGES, sizeof *names);
    if (!names) {
        json_object_put(list);
        api_error_set(err, API_INTERNAL, "out of memory");
        return SBX_ENOMEM;
    }
    size_t count = json_object_is_type(list, json_type_array) ? json_object_array_length(list) : 0;
    for (size_t i = 0; i < count && n < RUNTIME_MAX_IMAGES; i++) {
        json_object *tags = jsonx_get_arr(json_object_array_get_idx(list, i), "RepoTags");
        size_t nt = tags ? json_object_array_length(tags) : 0;
        for (size_t j = 0; j < nt && n < RUNTIME_MAX_IMAGES; j++) {
            const char *t = json_object_get_string(json_object_array_get_idx(tags, j));
            if (!t || !*t || strcmp(t, "<none>:<none>") == 0 || strlen(t) > RUNTIME_MAX_IMAGE_NAME)
                continue;
            if (!(names[n] = strdup(t))) {
                runtime_images_free(names, n);
                json_object_put(list);
                api_error_set(err, API_INTERNAL, "out of memory");
                return SBX_ENOMEM;
            }
            n++;
        }
    }
    json_object_put(list);
    *ret = names;
    *ret_n = n;
    return 0;
}

/* ---- exec -------------------------------------------------------------- */

/* True when /proc/<pid>/cgroup names the container: the pid is one of the
 * sandbox's processes in our pid namespace, not a stranger's. */
static bool docker_pid_in_container(pid_t pid, const char *container_id)
{
    char path[64], buf[8192];
    snprintf(path, sizeof path, "/proc/%d/cgroup", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    return strstr(buf, container_id) != NULL;
}

static bool docker_pid_known(const pid_t *pids, size_t n, pid_t p)
{
    for (size_t i = 0; i < n; i++)
        if (pids[i] == p)
            return true;
    return false;
}

/* Appends the children of pid (all its threads') to pids. */
static void docker_pid_children(pid_t pid, pid_t *pids, size_t *n, size_t max)
{
    char path[96];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && *n < max) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        char cpath[160], buf[4096];
        snprintf(cpath, sizeof cpath, "/proc/%d/task/%.20s/children", (int)pid, de->d_name);
        int fd = open(cpath, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t len = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (len <= 0)
            continue;
        buf[len] = '\0';
        char *p = buf;
        while (*p && *n < max) {
            char *end;
            errno = 0;
            long v = strtol(p, &end, 10);
            if (end == p)
                break;
            if (errno == 0 && v > 1 && !docker_pid_known(pids, *n, (pid_t)v))
                pids[(*n)++] = (pid_t)v;
            p = end;
        }
    }
    closedir(d);
}

/* SIGKILLs root and all its descendants. The tree is frozen with SIGSTOP
 * while it is walked so a forking process cannot escape between the walk
 * and the kill. Every pid is checked to belong to the container first.
 * Returns the number of processes signalled. */
static size_t docker_kill_tree(pid_t root, const char *container_id)
{
    size_t killed = 0;
    pid_t *pids = calloc(DOCKER_KILL_MAX_PIDS, sizeof *pids);
    if (!pids)
        return 0;
    size_t n = 0, stopped = 0;
    if (docker_pid_in_container(root, container_id))
        pids[n++] = root;
    for (int round = 0; round < 5 && n > 0; round++) {
        size_t before = n;
        for (size_t i = 0; i < n; i++)
            docker_pid_children(pids[i], pids, &n, DOCKER_KILL_MAX_PIDS);
        for (; stopped < n; stopped++) {
            if (docker_pid_in_container(pids[stopped], container_id))
                kill(pids[stopped], SIGSTOP);
            else
                pids[stopped] = 0;
        }
        if (n == before && round > 0)
            break;
    }
    for (size_t i = 0; i < n; i++)
        if (pids[i] > 1 && kill(pids[i], SIGKILL) == 0)
            killed++;
    free(pids);
    return killed;
}

/* What the timeout kill of an exec in a gVisor sandbox needs, found before
 * the exec starts. */
typedef struct docker_gvisor_exec {
    bool gvisor;              /* the container runs under the gvisor runtime */
    char container_id[80];
    int after_pid;            /* largest pid in the sandbox before the exec; -1 unknown */
    char note[200];           /* why after_pid is unknown */
} docker_gvisor_exec_t;

/* Finds out whether ref runs under gVisor and, if so, the largest pid in
 * the sandbox now: the exec's processes will be the ones above it. */
static void docker_gvisor_exec_prepare(docker_runtime_t *rt, const char *ref, docker_gvisor_exec_t *gv)
{
    char path[160];
    json_object *o = NULL;
    api_error_t ierr;
    runsc_host_t host;
    runsc_proc_t *procs = NULL;
    size_t np = 0;
    memset(gv, 0, sizeof *gv);
    gv->after_pid = -1;
    snprintf(path, sizeof path, "/containers/%s/json", ref);
    if (docker_get_json(rt, path, DOCKER_CALL_TIMEOUT_MS, &o, &ierr) < 0)
        return; /* the exec itself will report the missing container */
    const char *runtime = jsonx_get_str(jsonx_get_obj(o, "HostConfig"), "Runtime");
    const char *id = jsonx_get_str(o, "Id");
    int64_t pid = 0;
    jsonx_get_int(jsonx_get_obj(o, "State"), "Pid", &pid);
    if (!runtime || strcmp(runtime, rt->gvisor_runtime) != 0 || !id || !docker_name_ok(id, 80))
        goto cleanup;
    gv->gvisor = true;
    snprintf(gv->container_id, sizeof gv->container_id, "%s", id);
    if (!rt->runsc_exe[0]) {
        snprintf(gv->note, sizeof gv->note, "the runsc binary dockerd uses is not visible to the worker");
        goto cleanup;
    }
    if (pid <= 1 || runsc_host_from_pid((pid_t)pid, id, NULL, rt->runsc_exe, &host) < 0) {
        snprintf(gv->note, sizeof gv->note, "the sandbox's host pid %lld is not its runsc process",
                 (long long)pid);
        goto cleanup;
    }
    if (runsc_ps(&host, id, &procs, &np) < 0) {
        snprintf(gv->note, sizeof gv->note, "runsc ps failed before the command started");
        goto cleanup;
    }
    gv->after_pid = runsc_max_pid(procs, np);
cleanup:
    free(procs);
    if (o)
        json_object_put(o);
}

/* The timeout kill under gVisor. Docker's exec pid is the host runsc-exec
 * process; killing it only ends the stream, so the exec's process tree is
 * first killed inside the sandbox (runsc kill --pid, see runsc.h), then the
 * runsc-exec process. Both are checked first: the pid must be the
 * configured runsc binary running `exec` for this container and exec. */
static void docker_gvisor_kill(docker_runtime_t *rt, const docker_gvisor_exec_t *gv, const char *exec_id, pid_t pid,
                               runtime_exec_result_t *ret)
{
    runsc_host_t host;
    const char *cid = gv->container_id;
    if (!rt->runsc_exe[0] || runsc_host_from_pid(pid, cid, exec_id, rt->runsc_exe, &host) < 0) {
        snprintf(ret->warning, sizeof ret->warning,
                 "exec pid %d is not the runsc exec of container %.12s: nothing killed", (int)pid, cid);
        return;
    }
    if (gv->after_pid < 0) {
        snprintf(ret->warning, sizeof ret->warning,
                 "the command may still run inside the gVisor sandbox: %s", gv->note);
    } else {
        size_t killed = 0;
        int r = runsc_kill_exec_tree(&host, cid, gv->after_pid, &killed);
        if (r == SBX_ECONFLICT)
            snprintf(ret->warning, sizeof ret->warning,
                     "the command may still run inside the gVisor sandbox: other commands started after it "
                     "still run, so which process is its own is unknown");
        else if (r < 0 && r != SBX_ENOTFOUND)
            snprintf(ret->warning, sizeof ret->warning,
                     "the command may still run inside the gVisor sandbox: runsc ps failed (%s)", sbx_strerror(r));
    }
    if (runsc_pid_matches(pid, cid, exec_id, rt->runsc_exe))
        kill(pid, SIGKILL);
}

typedef struct docker_exec_io {
    CURL *h;
    docker_stream_t demux;
    sbuf_t error_body;   /* the body of a non-200 answer to exec start */
    long status;
} docker_exec_io_t;

static size_t docker_exec_write_cb(char *p, size_t size, size_t nmemb, void *ud)
{
    docker_exec_io_t *io = ud;
    size_t n = size * nmemb;
    if (io->status == 0)
        curl_easy_getinfo(io->h, CURLINFO_RESPONSE_CODE, &io->status);
    if (io->status != 200 && io->status != 101)
        return sbuf_append_bounded(&io->error_body, p, n) < 0 ? 0 : n;
    return docker_stream_push(&io->demux, p, n) < 0 ? 0 : n;
}

/* GET /exec/{id}/json: Running, ExitCode (-1 while unknown), Pid and, when
 * ret_container is not NULL, the full container id. */
static int docker_exec_inspect(docker_runtime_t *rt, const char *exec_id, bool *ret_running, int *ret_exit,
                               pid_t *ret_pid, char ret_container[80], api_error_t *err)
{
    char path[160];
    docker_reply_t rep;
    snprintf(path, sizeof path, "/exec/%s/json", exec_id);
    int r = docker_call(rt, "GET", path, NULL, DOCKER_CALL_TIMEOUT_MS, &rep, err);
    if (r < 0) {
        docker_reply_release(&rep);
        return r;
    }
    json_object *o = docker_reply_json(&rep);
    int64_t code = -1, pid = 0;
    bool running = false;
    if (rep.status != 200 || !o) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot inspect exec: %s", msg);
    } else {
        jsonx_get_bool(o, "Running", &running);
        if (!jsonx_get_int(o, "ExitCode", &code))
            code = -1;
        jsonx_get_int(o, "Pid", &pid);
        const char *cid = jsonx_get_str(o, "ContainerID");
        if (ret_container)
            snprintf(ret_container, 80, "%s", cid && docker_name_ok(cid, 80) ? cid : "");
        *ret_running = running;
        *ret_exit = (int)code;
        *ret_pid = (pid_t)pid;
    }
    if (o)
        json_object_put(o);
    docker_reply_release(&rep);
    return r;
}

/* Runs POST /exec/{id}/start and demultiplexes its stream into ret until it
 * ends, the deadline passes (then the process tree is killed) or the worker
 * is cancelled. */
static int docker_exec_stream(docker_runtime_t *rt, const char *exec_id, const docker_gvisor_exec_t *gv,
                              int64_t deadline_ms, runtime_exec_result_t *ret, bool *ret_killed, api_error_t *err)
{
    int r = 0;
    char path[160];
    struct curl_slist *hl = NULL;
    CURLM *m = NULL;
    bool added = false;
    docker_exec_io_t io;
    memset(&io, 0, sizeof io);
    sbuf_init(&io.error_body, 4096);
    docker_stream_init(&io.demux, &ret->out, &ret->err);
    *ret_killed = false;

    snprintf(path, sizeof path, "/exec/%s/start", exec_id);
    static const char start_body[] = "{\"Detach\":false,\"Tty\":false}";
    io.h = docker_handle_new(rt, "POST", path, start_body, sizeof start_body - 1, "application/json", 0, &hl);
    m = curl_multi_init();
    if (!io.h || !m) {
        api_error_set(err, API_INTERNAL, "out of memory");
        r = SBX_ENOMEM;
        goto cleanup;
    }
    /* The deadline is ours; libcurl's progress callback would only see the
     * cancel flag about once a second, the loop below sees it sooner. */
    curl_easy_setopt(io.h, CURLOPT_NOPROGRESS, 1L);
    curl_easy_setopt(io.h, CURLOPT_WRITEFUNCTION, docker_exec_write_cb);
    curl_easy_setopt(io.h, CURLOPT_WRITEDATA, &io);
    curl_multi_add_handle(m, io.h);
    added = true;

    int running = 1;
    while (running) {
        CURLMcode mc = curl_multi_perform(m, &running);
        if (mc != CURLM_OK) {
            r = api_error_set(err, API_RUNTIME_ERROR, "docker exec stream: %s", curl_multi_strerror(mc));
            goto cleanup;
        }
        if (!running)
            break;
        int64_t now = time_mono_ms();
        if (now >= deadline_ms || docker_cancelled(rt)) {
            bool still = false;
            int code = -1;
            pid_t pid = 0;
            char cid[80];
            api_error_t ignored;
            /* The full container id (ref may be a name) to check pids by. */
            if (docker_exec_inspect(rt, exec_id, &still, &code, &pid, cid, &ignored) < 0 || pid <= 1 || !cid[0])
                snprintf(ret->warning, sizeof ret->warning, "docker gave no pid for the exec: nothing killed");
            else if (gv->gvisor)
                docker_gvisor_kill(rt, gv, exec_id, pid, ret);
            else if (docker_kill_tree(pid, cid) == 0)
                snprintf(ret->warning, sizeof ret->warning,
                         "exec pid %d is not in the container's cgroup (another pid namespace?): nothing killed",
                         (int)pid);
            *ret_killed = true;
            goto cleanup; /* stop reading: the stream may be held open by escaped processes */
        }
        int64_t wait = deadline_ms - now;
        curl_multi_poll(m, NULL, 0, (int)(wait < 100 ? wait : 100), NULL);
    }
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(m, &left)) != NULL) {
        if (msg->msg == CURLMSG_DONE && msg->data.result != CURLE_OK) {
            r = docker_transport_error(rt, msg->data.result, err);
            goto cleanup;
        }
    }
    if (io.status == 0)
        curl_easy_getinfo(io.h, CURLINFO_RESPONSE_CODE, &io.status);
    if (io.status == 404) {
        r = api_error_set(err, API_RUNTIME_ERROR, "sandbox container not found");
        goto cleanup;
    }
    if (io.status != 200 && io.status != 101) {
        docker_reply_t rep = { .status = io.status, .body = io.error_body };
        char emsg[320];
        docker_reply_message(&rep, emsg, sizeof emsg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot start the command: %s", emsg);
        goto cleanup;
    }
cleanup:
    if (added)
        curl_multi_remove_handle(m, io.h);
    if (io.h)
        curl_easy_cleanup(io.h);
    if (m)
        curl_multi_cleanup(m);
    curl_slist_free_all(hl);
    sbuf_release(&io.error_body);
    return r;
}

/* Docker reports a command it could not start ("executable file not found")
 * as exit code 126 with its own message on the stdout stream; make that look
 * like a shell's answer: 127 (not found) or 126, message on stderr. A
 * working directory that does not exist is the request's fault, not the
 * command's: SBX_EINVAL with API_INVALID_ARGUMENT naming it. */
static int docker_exec_fix_start_failure(runtime_exec_result_t *res, const exec_spec_t *spec, api_error_t *err)
{
    static const char marker[] = "OCI runtime exec failed";
    if (res->exit_code != 126 || res->out.len < sizeof marker - 1 ||
        memcmp(res->out.data, marker, sizeof marker - 1) != 0 || res->err.len != 0)
        return 0;
    const char *s = sbuf_cstr(&res->out);
    if (spec->cwd && strstr(s, "chdir to cwd"))
        return api_error_set(err, API_INVALID_ARGUMENT,
                             "cwd %.200s does not exist in the sandbox (or is not a directory)", spec->cwd);
    if (strstr(s, "executable file not found") || strstr(s, "no such file or directory"))
        res->exit_code = 127;
    sbuf_t empty = res->err;
    res->err = res->out;
    res->out = empty;
    return 0;
}

static int docker_rt_exec(runtime_t *base, const char *ref, const exec_spec_t *spec, size_t max_output,
                          runtime_exec_result_t *ret, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    int r = 0;
    char path[160], exec_id[80];
    json_object *body = NULL, *o = NULL;
    docker_reply_t rep;
    memset(&rep, 0, sizeof rep);
    memset(ret, 0, sizeof *ret);
    if (max_output == 0)
        max_output = SBX_EXEC_OUTPUT_DEFAULT;
    sbuf_init(&ret->out, max_output);
    sbuf_init(&ret->err, max_output);
    int64_t start = time_mono_ms();
    int64_t timeout_s = spec->timeout_seconds > 0 ? spec->timeout_seconds : EXEC_DEFAULT_TIMEOUT;
    int64_t deadline = start + timeout_s * 1000;

    if (!ref || !docker_name_ok(ref, 80))
        return api_error_set(err, API_RUNTIME_ERROR, "sandbox container not found");
    if (!spec->argv || spec->argc == 0)
        return api_error_set(err, API_INVALID_ARGUMENT, "argv must name a command");

    /* Under gVisor the timeout kill needs to know the sandbox's pids from
     * before the command started. */
    docker_gvisor_exec_t gv = { .gvisor = false, .after_pid = -1 };
    if (rt->offered[ISO_GVISOR])
        docker_gvisor_exec_prepare(rt, ref, &gv);

    body = json_object_new_object();
    jsonx_add_bool(body, "AttachStdin", false);
    jsonx_add_bool(body, "AttachStdout", true);
    jsonx_add_bool(body, "AttachStderr", true);
    jsonx_add_bool(body, "Tty", false);
    jsonx_add(body, "Cmd", docker_json_strings((const char *const *)spec->argv));
    jsonx_add(body, "Env", docker_json_env(&spec->env));
    if (spec->cwd)
        jsonx_add_str(body, "WorkingDir", spec->cwd);
    snprintf(path, sizeof path, "/containers/%s/exec", ref);
    r = docker_call(rt, "POST", path, body, DOCKER_CALL_TIMEOUT_MS, &rep, err);
    if (r < 0)
        goto cleanup;
    if (rep.status == 404) {
        r = api_error_set(err, API_RUNTIME_ERROR, "sandbox container not found");
        goto cleanup;
    }
    if (rep.status == 409) {
        /* Docker: "container ... is not running". Say how it ended. */
        runtime_exit_t e;
        memset(&e, 0, sizeof e);
        api_error_t ignored;
        char msg[400] = "its state is unknown";
        if (docker_container_exit(rt, ref, &e, &ignored) == 0)
            docker_exit_message(&e, msg, sizeof msg);
        runtime_exit_release(&e);
        r = api_error_set(err, API_SANDBOX_EXITED, "the sandbox is not running: %s", msg);
        goto cleanup;
    }
    o = docker_reply_json(&rep);
    const char *eid = jsonx_get_str(o, "Id");
    if (rep.status != 201 || !eid || !docker_name_ok(eid, sizeof exec_id)) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot run the command in the sandbox: %s", msg);
        goto cleanup;
    }
    snprintf(exec_id, sizeof exec_id, "%s", eid);

    bool killed = false;
    r = docker_exec_stream(rt, exec_id, &gv, deadline, ret, &killed, err);
    if (r < 0)
        goto cleanup;
    if (killed) {
        ret->duration_ms = time_mono_ms() - start;
        if (docker_cancelled(rt)) {
            r = api_error_set(err, API_CANCELLED, "the worker shut down while the command ran; it was killed");
            goto cleanup;
        }
        ret->timed_out = true;
        ret->signal = SIGKILL;
        ret->exit_code = 128 + SIGKILL;
        goto cleanup;
    }

    /* The stream ends when the process closes its output; Docker records
     * the exit code a moment later. */
    int64_t wait_until = time_mono_ms() + DOCKER_EXIT_WAIT_MS;
    for (;;) {
        bool running = false;
        int code = -1;
        pid_t pid = 0;
        r = docker_exec_inspect(rt, exec_id, &running, &code, &pid, NULL, err);
        if (r < 0)
            goto cleanup;
        if (!running && code >= 0) {
            ret->exit_code = code;
            break;
        }
        if (time_mono_ms() >= wait_until) {
            r = api_error_set(err, API_RUNTIME_ERROR, "the command's output ended but docker reports no exit code");
            goto cleanup;
        }
        usleep(20000);
    }
    /* Docker folds a fatal signal N into exit code 128+N, as a shell does. */
    if (ret->exit_code > 128 && ret->exit_code < 128 + 65)
        ret->signal = ret->exit_code - 128;
    r = docker_exec_fix_start_failure(ret, spec, err);
    ret->duration_ms = time_mono_ms() - start;
cleanup:
    if (body)
        json_object_put(body);
    if (o)
        json_object_put(o);
    docker_reply_release(&rep);
    if (r < 0)
        runtime_exec_result_release(ret);
    return r;
}

/* ---- routes ------------------------------------------------------------ */

/* Inspects the container of sandbox_id ("sbx-<id>") and checks that it is
 * this worker's sandbox: a container of that name made by another worker
 * on a shared Docker host, or not by us at all, is not. *ret (release with
 * json_object_put) and *ret_id (its id, owned by *ret) on success; a
 * missing or foreign container is API_NOT_FOUND "sandbox ID <missing>". */
static int docker_sandbox_inspect(docker_runtime_t *rt, const char *sandbox_id, const char *worker_name,
                                  const char *missing, json_object **ret, const char **ret_id, api_error_t *err)
{
    char name[SBX_ID_MAX + 8];
    json_object *o = NULL;
    const char *id = NULL;
    if (!docker_name_ok(sandbox_id, SBX_ID_MAX) || !worker_name)
        return api_error_set(err, API_INVALID_ARGUMENT, "malformed sandbox id");
    snprintf(name, sizeof name, "sbx-%s", sandbox_id);
    int r = docker_container_inspect(rt, name, DOCKER_ROUTE_TIMEOUT_MS, &o, &id, err);
    if (r < 0)
        return r == SBX_ENOTFOUND ? api_error_set(err, API_NOT_FOUND, "sandbox %s %s", sandbox_id, missing) : r;
    json_object *labels = jsonx_get_obj(jsonx_get_obj(o, "Config"), "Labels");
    const char *owner = jsonx_get_str(labels, RUNTIME_LABEL_SANDBOX);
    const char *maker = jsonx_get_str(labels, RUNTIME_LABEL_WORKER);
    if (!owner || strcmp(owner, sandbox_id) != 0 || !maker || strcmp(maker, worker_name) != 0) {
        json_object_put(o);
        return api_error_set(err, API_NOT_FOUND, "sandbox %s %s", sandbox_id, missing);
    }
    *ret = o;
    *ret_id = id;
    return 0;
}

static int docker_rt_route_target(runtime_t *base, const char *sandbox_id, const char *worker_name, int *ret_netns_fd,
                                  api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    int r = 0, fd = -1;
    json_object *o = NULL;
    const char *id = NULL;
    r = docker_sandbox_inspect(rt, sandbox_id, worker_name, "does not run on this worker", &o, &id, err);
    if (r < 0)
        goto cleanup;
    json_object *state = jsonx_get_obj(o, "State");
    bool running = false, paused = false, restarting = false;
    int64_t pid = 0;
    jsonx_get_bool(state, "Running", &running);
    jsonx_get_bool(state, "Paused", &paused);
    jsonx_get_bool(state, "Restarting", &restarting);
    jsonx_get_int(state, "Pid", &pid);
    if (!running || paused || restarting || pid <= 1) {
        r = api_error_set(err, API_NOT_FOUND, "sandbox %s is not running", sandbox_id);
        goto cleanup;
    }
    const char *runtime = jsonx_get_str(jsonx_get_obj(o, "HostConfig"), "Runtime");
    if (rt->gvisor_runtime[0] && runtime && strcmp(runtime, rt->gvisor_runtime) == 0) {
        r = api_error_set(err, API_ISOLATION_UNAVAILABLE, "routes into gVisor sandboxes are not supported: their "
                          "network stack is inside the sandbox");
        goto cleanup;
    }
    char ns[64];
    snprintf(ns, sizeof ns, "/proc/%lld/ns/net", (long long)pid);
    fd = open(ns, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT || e == ESRCH)
            r = api_error_set(err, API_NOT_FOUND, "sandbox %s is not running", sandbox_id);
        else
            r = api_error_set(err, API_UNAVAILABLE, "cannot enter the sandbox's network namespace: %s", strerror(e));
        goto cleanup;
    }
    /* The pid is still the container's now that the namespace is held (it
     * could have exited and the number been reused since the inspect). */
    if (!docker_pid_in_container((pid_t)pid, id)) {
        r = api_error_set(err, API_NOT_FOUND, "sandbox %s is not running", sandbox_id);
        goto cleanup;
    }
    /* Never the worker's own namespace: its loopback is the host's. */
    struct stat a, b;
    if (fstat(fd, &a) < 0 || stat("/proc/thread-self/ns/net", &b) < 0 ||
        (a.st_dev == b.st_dev && a.st_ino == b.st_ino)) {
        r = api_error_set(err, API_UNAVAILABLE, "sandbox %s has no network namespace of its own", sandbox_id);
        goto cleanup;
    }
    *ret_netns_fd = fd;
    fd = -1;
cleanup:
    if (fd >= 0)
        close(fd);
    if (o)
        json_object_put(o);
    return r;
}

/* ---- logs -------------------------------------------------------------- */

static int docker_rt_logs_target(runtime_t *base, const char *sandbox_id, const char *worker_name, char ret_ref[80],
                                 api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    json_object *o = NULL;
    const char *id = NULL;
    int r = docker_sandbox_inspect(rt, sandbox_id, worker_name, "has no container on this worker", &o, &id, err);
    if (r < 0)
        goto cleanup;
    snprintf(ret_ref, 80, "%s", id);
cleanup:
    if (o)
        json_object_put(o);
    return r;
}

typedef struct docker_logs_io {
    CURL *h;
    long status;
    docker_stream_t demux;
    sbuf_t out, err;          /* one frame's payload at a time */
    sbuf_t error_body;        /* a non-200 answer */
    const runtime_logs_req_t *req;
    bool stop;                /* on_output asked to stop */
} docker_logs_io_t;

/* Hands what the demultiplexer collected to on_output (stdout first: a
 * frame ends before the next starts, so at most one of them has bytes). */
static int docker_logs_flush(docker_logs_io_t *io)
{
    sbuf_t *bufs[2] = { &io->out, &io->err };
    for (int i = 0; i < 2; i++) {
        if (bufs[i]->len == 0)
            continue;
        int r = io->req->on_output(io->req->ud, i + 1, bufs[i]->data, bufs[i]->len);
        sbuf_reset(bufs[i]);
        if (r < 0)
            return r;
    }
    return 0;
}

static size_t docker_logs_write_cb(char *p, size_t size, size_t nmemb, void *ud)
{
    docker_logs_io_t *io = ud;
    size_t n = size * nmemb, off = 0;
    if (io->status == 0)
        curl_easy_getinfo(io->h, CURLINFO_RESPONSE_CODE, &io->status);
    if (io->status != 200)
        return sbuf_append_bounded(&io->error_body, p, n) < 0 ? 0 : n;
    /* Fed frame by frame, so stdout and stderr keep their order. */
    while (off < n) {
        size_t take = io->demux.remaining > 0 ? io->demux.remaining : DOCKER_STREAM_HEADER_BYTES - io->demux.header_len;
        if (take > n - off)
            take = n - off;
        if (docker_stream_push(&io->demux, p + off, take) < 0)
            return 0;
        off += take;
        if ((io->demux.remaining == 0 || io->out.len + io->err.len >= 16384) && docker_logs_flush(io) < 0) {
            io->stop = true;
            return 0;
        }
    }
    return n;
}

static int docker_rt_logs_stream(runtime_t *base, const char *ref, const runtime_logs_req_t *req, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    int r = 0;
    char path[256], tail[24];
    struct curl_slist *hl = NULL;
    CURLM *m = NULL;
    bool added = false;
    docker_logs_io_t io;
    memset(&io, 0, sizeof io);
    io.req = req;
    sbuf_init(&io.out, 0);
    sbuf_init(&io.err, 0);
    sbuf_init(&io.error_body, 4096);
    docker_stream_init(&io.demux, &io.out, &io.err);
    if (!ref || !docker_name_ok(ref, 80) || !req->on_output || req->nstop_fds > 4)
        return api_error_set(err, API_INVALID_ARGUMENT, "malformed logs request");
    if (req->tail < 0)
        snprintf(tail, sizeof tail, "all");
    else
        snprintf(tail, sizeof tail, "%lld", (long long)req->tail);
    snprintf(path, sizeof path, "/containers/%s/logs?stdout=1&stderr=1&follow=%d&tail=%s", ref, req->follow ? 1 : 0,
             tail);
    io.h = docker_handle_new(rt, "GET", path, NULL, 0, NULL, 0, &hl);
    m = curl_multi_init();
    if (!io.h || !m) {
        r = api_error_set(err, API_INTERNAL, "out of memory");
        goto cleanup;
    }
    /* Our loop watches the cancel flag and the stop descriptors itself. */
    curl_easy_setopt(io.h, CURLOPT_NOPROGRESS, 1L);
    curl_easy_setopt(io.h, CURLOPT_WRITEFUNCTION, docker_logs_write_cb);
    curl_easy_setopt(io.h, CURLOPT_WRITEDATA, &io);
    curl_multi_add_handle(m, io.h);
    added = true;
    int running = 1;
    while (running) {
        CURLMcode mc = curl_multi_perform(m, &running);
        if (mc != CURLM_OK) {
            r = api_error_set(err, API_RUNTIME_ERROR, "docker logs stream: %s", curl_multi_strerror(mc));
            goto cleanup;
        }
        if (!running || io.stop)
            break;
        if (docker_cancelled(rt)) {
            r = api_error_set(err, API_CANCELLED, "the worker is shutting down");
            goto cleanup;
        }
        struct curl_waitfd wfd[4];
        for (size_t i = 0; i < req->nstop_fds; i++)
            wfd[i] = (struct curl_waitfd){ .fd = req->stop_fds[i], .events = CURL_WAIT_POLLIN, .revents = 0 };
        curl_multi_poll(m, wfd, (unsigned)req->nstop_fds, 200, NULL);
        for (size_t i = 0; i < req->nstop_fds; i++)
            if (wfd[i].revents)
                goto cleanup;     /* asked to stop: not an error */
    }
    if (io.stop)
        goto cleanup;
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(m, &left)) != NULL) {
        if (msg->msg == CURLMSG_DONE && msg->data.result != CURLE_OK) {
            r = docker_transport_error(rt, msg->data.result, err);
            goto cleanup;
        }
    }
    if (io.status == 0)
        curl_easy_getinfo(io.h, CURLINFO_RESPONSE_CODE, &io.status);
    if (io.status == 404) {
        r = api_error_set(err, API_NOT_FOUND, "the sandbox's container is gone");
        goto cleanup;
    }
    if (io.status != 200) {
        docker_reply_t rep = { .status = io.status, .body = io.error_body };
        char emsg[320];
        docker_reply_message(&rep, emsg, sizeof emsg);
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot read the sandbox's logs: %s", emsg);
        goto cleanup;
    }
    docker_logs_flush(&io);
cleanup:
    if (added)
        curl_multi_remove_handle(m, io.h);
    if (io.h)
        curl_easy_cleanup(io.h);
    if (m)
        curl_multi_cleanup(m);
    curl_slist_free_all(hl);
    sbuf_release(&io.out);
    sbuf_release(&io.err);
    sbuf_release(&io.error_body);
    return r;
}

/* ---- the operations table ---------------------------------------------- */

static const runtime_ops_t docker_ops = {
    .name = RUNTIME_BACKEND_DOCKER,
    .ping = docker_rt_ping,
    .create = docker_rt_create,
    .exec = docker_rt_exec,
    .remove = docker_rt_remove,
    .inventory = docker_rt_inventory,
    .images = docker_rt_images,
    .route_target = docker_rt_route_target,
    .logs_target = docker_rt_logs_target,
    .logs_stream = docker_rt_logs_stream,
    .isolation_classes = docker_rt_isolation_classes,
    .network_modes = docker_rt_network_modes,
    .probe_result = docker_rt_probe_result,
    .network_unavailable = docker_rt_network_unavailable,
    .set_cancel_flag = docker_rt_set_cancel_flag,
    .free = docker_rt_free,
};
