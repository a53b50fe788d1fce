/* The Docker backend's Engine API client: requests over the unix socket
 * with libcurl, their metrics, replies and the names the Engine accepts. */
#include "docker_internal.h"
#include "fdutil.h"
#include "jsonx.h"
#include "metrics.h"
#include "timeutil.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- plumbing ---------------------------------------------------------- */

static int docker_xferinfo_cb(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt; (void)dn; (void)ut; (void)un;
    const docker_runtime_t *rt = ud;
    return docker_cancelled(rt) ? 1 : 0;
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
CURL *docker_handle_new(const docker_runtime_t *rt, const char *method, const char *path, const void *body,
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
    fd_curl_cloexec(h);
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

bool docker_cancelled(const docker_runtime_t *rt) { return rt->cancel && atomic_load(rt->cancel); }

int docker_multi_open(docker_multi_t *dm, const docker_runtime_t *rt, const char *method, const char *path,
                      const void *body, size_t body_len, const char *content_type, curl_write_callback write_cb,
                      void *ud)
{
    memset(dm, 0, sizeof *dm);
    dm->h = docker_handle_new(rt, method, path, body, body_len, content_type, 0, &dm->hl);
    dm->m = curl_multi_init();
    if (!dm->h || !dm->m)
        return SBX_ENOMEM;
    curl_easy_setopt(dm->h, CURLOPT_NOPROGRESS, 1L);
    curl_easy_setopt(dm->h, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(dm->h, CURLOPT_WRITEDATA, ud);
    curl_multi_add_handle(dm->m, dm->h);
    dm->added = true;
    return 0;
}

int docker_multi_perform(docker_multi_t *dm, const char *what, int *running, api_error_t *err)
{
    CURLMcode mc = curl_multi_perform(dm->m, running);
    if (mc != CURLM_OK)
        return api_error_set(err, API_RUNTIME_ERROR, "docker %s stream: %s", what, curl_multi_strerror(mc));
    return 0;
}

int docker_multi_result(docker_multi_t *dm, const docker_runtime_t *rt, long *status, api_error_t *err)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(dm->m, &left)) != NULL)
        if (msg->msg == CURLMSG_DONE && msg->data.result != CURLE_OK)
            return docker_transport_error(rt, msg->data.result, err);
    if (*status == 0)
        curl_easy_getinfo(dm->h, CURLINFO_RESPONSE_CODE, status);
    return 0;
}

void docker_multi_close(docker_multi_t *dm)
{
    if (dm->added)
        curl_multi_remove_handle(dm->m, dm->h);
    if (dm->h)
        curl_easy_cleanup(dm->h);
    if (dm->m)
        curl_multi_cleanup(dm->m);
    curl_slist_free_all(dm->hl);
    memset(dm, 0, sizeof *dm);
}

int docker_transport_error(const docker_runtime_t *rt, CURLcode cr, api_error_t *err)
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

int docker_call_raw(const docker_runtime_t *rt, const char *method, const char *path, const void *data,
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

int docker_call_ex(const docker_runtime_t *rt, const char *method, const char *path, json_object *body,
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

int docker_call(const docker_runtime_t *rt, const char *method, const char *path, json_object *body,
                long timeout_ms, docker_reply_t *ret, api_error_t *err)
{
    memset(ret, 0, sizeof *ret);
    sbuf_init(&ret->body, SBX_MAX_DOCKER_REPLY_BYTES);
    return docker_call_ex(rt, method, path, body, timeout_ms, docker_reply_write_cb, &ret->body, &ret->status,
                          err);
}

void docker_reply_release(docker_reply_t *r) { sbuf_release(&r->body); }

json_object *docker_reply_json(const docker_reply_t *r)
{
    json_object *o = NULL;
    if (r->body.truncated || r->body.len == 0)
        return NULL;
    if (jsonx_parse(r->body.data, r->body.len, &o, NULL) < 0)
        return NULL;
    return o;
}

bool docker_reply_id(const docker_reply_t *r, char ret_id[80])
{
    json_object *o = docker_reply_json(r);
    const char *id = jsonx_get_str(o, "Id");
    bool ok = id && docker_name_ok(id, 80);
    if (ok)
        snprintf(ret_id, 80, "%s", id);
    if (o)
        json_object_put(o);
    return ok;
}

void docker_reply_message(const docker_reply_t *r, char *out, size_t outlen)
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

bool docker_image_ok(const char *s)
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

int docker_image_split(const char *image, char *repo, size_t repolen, char *tag, size_t taglen)
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

int docker_get_json(docker_runtime_t *rt, const char *path, long timeout_ms, json_object **ret, api_error_t *err)
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

char *docker_filter_param(const char *key, const char *value)
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
