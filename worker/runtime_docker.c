/* The Docker runtime adapter: the Engine API (v1.41) over its unix socket
 * with libcurl. Never shells out to the docker CLI. */
#include "runtime.h"
#include "docker_stream.h"
#include "jsonx.h"
#include "limits.h"
#include "timeutil.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define DOCKER_BASE_URL          "http://localhost/v1.41"
/* An ordinary Engine call (inspect, create, start, remove, list). */
#define DOCKER_CALL_TIMEOUT_MS   60000L
/* Removing a running container with force may wait for it to die. */
#define DOCKER_REMOVE_TIMEOUT_MS 120000L
/* A pull of a large image over a slow link. */
#define DOCKER_PULL_TIMEOUT_MS   (30L * 60L * 1000L)
/* Processes a sandbox may hold: a fork bomb stops here. */
#define DOCKER_PIDS_LIMIT        1024
/* One line of the pull progress stream; longer lines are skipped. */
#define DOCKER_PULL_LINE_BYTES   (64u * 1024u)
/* Processes of one exec the timeout kill walks at most. */
#define DOCKER_KILL_MAX_PIDS     4096
/* How long to wait for Docker to record an exec's exit code after its
 * stream ended. */
#define DOCKER_EXIT_WAIT_MS      3000

struct runtime {
    char *socket_path;
    const volatile int *cancel;
};

typedef struct docker_reply {
    long status;
    sbuf_t body;      /* bounded by SBX_MAX_DOCKER_REPLY_BYTES */
} docker_reply_t;

/* ---- plumbing ---------------------------------------------------------- */

static int docker_xferinfo_cb(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt; (void)dn; (void)ut; (void)un;
    const runtime_t *rt = ud;
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

/* A new easy handle for method path on the Engine socket; body (JSON, may be
 * NULL) must outlive the transfer. The caller owns *ret_headers. */
static CURL *docker_handle_new(const runtime_t *rt, const char *method, const char *path, const char *body,
                               long timeout_ms, struct curl_slist **ret_headers)
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
    if (body)
        hl = curl_slist_append(hl, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, rt->socket_path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (strcmp(method, "GET") == 0)
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
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

static bool docker_cancelled(const runtime_t *rt) { return rt->cancel && *rt->cancel; }

/* Maps a failed transfer to an error. */
static int docker_transport_error(const runtime_t *rt, CURLcode cr, api_error_t *err)
{
    if (cr == CURLE_ABORTED_BY_CALLBACK && docker_cancelled(rt))
    {
        api_error_set(err, API_CANCELLED, "the worker is shutting down");
        return SBX_EUNAVAIL;
    }
    api_error_set(err, API_RUNTIME_ERROR, "docker engine at %s: %s", rt->socket_path, curl_easy_strerror(cr));
    return cr == CURLE_OPERATION_TIMEDOUT ? SBX_ETIMEOUT : SBX_EUNAVAIL;
}

/* Sends one request with an optional JSON body and reads the (bounded) reply.
 * Returns 0 when Docker answered, whatever the status; the caller releases
 * ret->body. */
static int docker_call_ex(const runtime_t *rt, const char *method, const char *path, json_object *body,
                          long timeout_ms, size_t (*write_cb)(char *, size_t, size_t, void *), void *write_ud,
                          long *ret_status, api_error_t *err)
{
    int r = 0;
    char *payload = NULL;
    struct curl_slist *hl = NULL;
    CURL *h = NULL;
    if (body && !(payload = jsonx_dump(body))) {
        api_error_set(err, API_INTERNAL, "out of memory");
        r = SBX_ENOMEM;
        goto cleanup;
    }
    h = docker_handle_new(rt, method, path, payload, timeout_ms, &hl);
    if (!h) {
        api_error_set(err, API_INTERNAL, "cannot build a docker request for %.200s", path);
        r = SBX_ENOMEM;
        goto cleanup;
    }
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, write_ud);
    CURLcode cr = curl_easy_perform(h);
    if (cr != CURLE_OK) {
        r = docker_transport_error(rt, cr, err);
        goto cleanup;
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, ret_status);
cleanup:
    if (h)
        curl_easy_cleanup(h);
    curl_slist_free_all(hl);
    free(payload);
    return r;
}

static int docker_call(const runtime_t *rt, const char *method, const char *path, json_object *body,
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

/* ---- open / close ------------------------------------------------------ */

int runtime_docker_open(const char *socket_path, runtime_t **ret, api_error_t *err)
{
    int r = 0;
    docker_reply_t rep;
    memset(&rep, 0, sizeof rep);
    runtime_t *rt = calloc(1, sizeof *rt);
    if (!rt || !(rt->socket_path = strdup(socket_path && *socket_path ? socket_path : "/var/run/docker.sock"))) {
        api_error_set(err, API_INTERNAL, "out of memory");
        r = SBX_ENOMEM;
        goto cleanup;
    }
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
    *ret = rt;
    rt = NULL;
cleanup:
    docker_reply_release(&rep);
    runtime_free(rt);
    return r;
}

void runtime_free(runtime_t *rt)
{
    if (!rt)
        return;
    free(rt->socket_path);
    free(rt);
}

void runtime_set_cancel_flag(runtime_t *rt, const volatile int *flag) { rt->cancel = flag; }

const char *runtime_name(const runtime_t *rt)
{
    (void)rt;
    return "docker";
}

size_t runtime_isolation_classes(const runtime_t *rt, isolation_t *ret, size_t max)
{
    (void)rt;
    /* gVisor (runsc) is a later issue: only what is really offered. */
    if (max < 1)
        return 0;
    ret[0] = ISO_CONTAINER;
    return 1;
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

static int docker_image_pull(runtime_t *rt, const char *image, api_error_t *err)
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
static int docker_image_ensure(runtime_t *rt, const char *image, api_error_t *err)
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

/* ---- containers -------------------------------------------------------- */

static json_object *docker_string_array(const char *const *items)
{
    json_object *a = json_object_new_array();
    for (const char *const *p = items; *p; p++)
        json_object_array_add(a, json_object_new_string(*p));
    return a;
}

/* Env as Docker's ["K=V", ...]. */
static json_object *docker_env_array(const kv_list_t *env)
{
    json_object *a = json_object_new_array();
    for (size_t i = 0; i < env->n; i++) {
        size_t l = strlen(env->items[i].key) + strlen(env->items[i].value) + 2;
        char *kv = malloc(l);
        if (!kv)
            continue;
        snprintf(kv, l, "%s=%s", env->items[i].key, env->items[i].value);
        json_object_array_add(a, json_object_new_string(kv));
        free(kv);
    }
    return a;
}

/* The container create body: the hardening every sandbox gets. */
static json_object *docker_container_config(const runtime_create_req_t *req)
{
    static const char *const entrypoint[] = { "sleep", NULL };
    static const char *const cmd[] = { "infinity", NULL };
    /* Enough for ordinary package installs and builds as root inside the
     * container; everything else (NET_RAW, MKNOD, SYS_CHROOT, AUDIT_WRITE,
     * SETFCAP, NET_BIND_SERVICE, ...) stays dropped. */
    static const char *const cap_add[] = { "CHOWN", "DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID", "KILL", NULL };
    static const char *const cap_drop[] = { "ALL", NULL };
    static const char *const secopt[] = { "no-new-privileges", NULL };
    const sandbox_spec_t *s = req->spec;

    json_object *o = json_object_new_object();
    jsonx_add_str(o, "Image", s->image);
    jsonx_add(o, "Entrypoint", docker_string_array(entrypoint));
    jsonx_add(o, "Cmd", docker_string_array(cmd));
    jsonx_add(o, "Env", docker_env_array(&s->env));
    json_object *labels = kv_list_to_json(&s->labels);
    /* Ours last: a user label cannot impersonate another sandbox. */
    jsonx_add_str(labels, RUNTIME_LABEL_MANAGED, "true");
    jsonx_add_str(labels, RUNTIME_LABEL_SANDBOX, req->sandbox_id);
    jsonx_add_str(labels, RUNTIME_LABEL_TENANT, req->tenant ? req->tenant : (s->tenant ? s->tenant : ""));
    if (req->cluster_id && *req->cluster_id)
        jsonx_add_str(labels, RUNTIME_LABEL_CLUSTER, req->cluster_id);
    jsonx_add(o, "Labels", labels);
    jsonx_add_bool(o, "AttachStdin", false);
    jsonx_add_bool(o, "AttachStdout", false);
    jsonx_add_bool(o, "AttachStderr", false);
    jsonx_add_bool(o, "Tty", false);
    jsonx_add_bool(o, "OpenStdin", false);

    json_object *hc = json_object_new_object();
    jsonx_add_int(hc, "NanoCpus", s->cpu_millis * 1000000);
    jsonx_add_int(hc, "Memory", s->memory_mib * 1024 * 1024);
    jsonx_add_int(hc, "MemorySwap", s->memory_mib * 1024 * 1024);
    jsonx_add_int(hc, "PidsLimit", DOCKER_PIDS_LIMIT);
    /* restricted never gets an open network until a real restricted
     * network exists. */
    jsonx_add_str(hc, "NetworkMode", s->network == NET_OPEN ? "bridge" : "none");
    jsonx_add(hc, "CapDrop", docker_string_array(cap_drop));
    jsonx_add(hc, "CapAdd", docker_string_array(cap_add));
    jsonx_add(hc, "SecurityOpt", docker_string_array(secopt));
    jsonx_add_bool(hc, "Privileged", false);
    /* docker-init as pid 1 reaps the zombies of killed exec trees, which
     * `sleep` would leave to fill the pids limit. */
    jsonx_add_bool(hc, "Init", true);
    jsonx_add(hc, "Binds", json_object_new_array());
    jsonx_add(hc, "Mounts", json_object_new_array());
    jsonx_add_bool(hc, "PublishAllPorts", false);
    json_object *rp = json_object_new_object();
    jsonx_add_str(rp, "Name", "no");
    jsonx_add(hc, "RestartPolicy", rp);
    jsonx_add(o, "HostConfig", hc);
    return o;
}

static int docker_container_start(runtime_t *rt, const char *id, api_error_t *err)
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

static int docker_container_delete(runtime_t *rt, const char *ref, api_error_t *err)
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
static void docker_container_discard(runtime_t *rt, const char *id)
{
    api_error_t ignored;
    docker_container_delete(rt, id, &ignored);
}

/* The container named for the sandbox already exists (a retried create):
 * checks it is ours, starts it when needed and returns its id. */
static int docker_container_adopt(runtime_t *rt, const runtime_create_req_t *req, const char *name,
                                  char ret_ref[80], api_error_t *err)
{
    int r = 0;
    char path[256];
    json_object *o = NULL;
    docker_reply_t rep;
    snprintf(path, sizeof path, "/containers/%s/json", name);
    r = docker_call(rt, "GET", path, NULL, DOCKER_CALL_TIMEOUT_MS, &rep, err);
    if (r < 0)
        goto cleanup;
    o = docker_reply_json(&rep);
    const char *id = jsonx_get_str(o, "Id");
    if (rep.status != 200 || !id || !docker_name_ok(id, 80)) {
        char msg[320];
        docker_reply_message(&rep, msg, sizeof msg);
        r = api_error_set(err, API_RUNTIME_ERROR, "container %s exists but cannot be inspected: %s", name, msg);
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
        docker_container_discard(rt, id);
        r = SBX_ERUNTIME;
        goto cleanup;
    }
    snprintf(ret_ref, 80, "%s", id);
cleanup:
    if (o)
        json_object_put(o);
    docker_reply_release(&rep);
    return r;
}

int runtime_create(runtime_t *rt, const runtime_create_req_t *req, char ret_ref[80], api_error_t *err)
{
    int r = 0;
    char name[SBX_ID_MAX + 8], path[256], id[80];
    json_object *body = NULL, *o = NULL;
    docker_reply_t rep;
    memset(&rep, 0, sizeof rep);
    if (req->isolation != ISO_CONTAINER)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "this worker's docker runtime offers only container "
                             "isolation (asked: %s)", isolation_name(req->isolation));
    if (!docker_name_ok(req->sandbox_id, SBX_ID_MAX) || !req->spec || !req->spec->image)
        return api_error_set(err, API_INVALID_ARGUMENT, "malformed create request (sandbox id or image)");
    snprintf(name, sizeof name, "sbx-%s", req->sandbox_id);

    r = docker_image_ensure(rt, req->spec->image, err);
    if (r < 0)
        goto cleanup;

    body = docker_container_config(req);
    snprintf(path, sizeof path, "/containers/create?name=%s", name);
    r = docker_call(rt, "POST", path, body, DOCKER_CALL_TIMEOUT_MS, &rep, err);
    if (r < 0)
        goto cleanup;
    if (rep.status == 409) {
        r = docker_container_adopt(rt, req, name, ret_ref, err);
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
static int docker_container_list(runtime_t *rt, const char *label, json_object **ret, api_error_t *err)
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

int runtime_remove(runtime_t *rt, const char *sandbox_id, const char *ref, api_error_t *err)
{
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

int runtime_inventory(runtime_t *rt, const char *cluster_id, runtime_object_t **ret, size_t *ret_n,
                      api_error_t *err)
{
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
        /* Nothing the controller could match without a sandbox id. */
        if (!id || !sbx || strlen(sbx) >= sizeof objs[k].sandbox_id || strlen(id) >= sizeof objs[k].ref)
            continue;
        snprintf(objs[k].sandbox_id, sizeof objs[k].sandbox_id, "%s", sbx);
        snprintf(objs[k].tenant, sizeof objs[k].tenant, "%s", tenant ? tenant : "");
        snprintf(objs[k].ref, sizeof objs[k].ref, "%s", id);
        snprintf(objs[k].state, sizeof objs[k].state, "%s", state ? state : "unknown");
        k++;
    }
    *ret = objs;
    *ret_n = k;
    objs = NULL;
cleanup:
    free(objs);
    if (list)
        json_object_put(list);
    return r;
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
 * and the kill. Every pid is checked to belong to the container first. */
static void docker_kill_tree(pid_t root, const char *container_id)
{
    pid_t *pids = calloc(DOCKER_KILL_MAX_PIDS, sizeof *pids);
    if (!pids)
        return;
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
        if (pids[i] > 1)
            kill(pids[i], SIGKILL);
    free(pids);
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
static int docker_exec_inspect(runtime_t *rt, const char *exec_id, bool *ret_running, int *ret_exit, pid_t *ret_pid,
                               char ret_container[80], api_error_t *err)
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
static int docker_exec_stream(runtime_t *rt, const char *exec_id, int64_t deadline_ms,
                              runtime_exec_result_t *ret, bool *ret_killed, api_error_t *err)
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
    io.h = docker_handle_new(rt, "POST", path, "{\"Detach\":false,\"Tty\":false}", 0, &hl);
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
            if (docker_exec_inspect(rt, exec_id, &still, &code, &pid, cid, &ignored) == 0 && pid > 1 && cid[0])
                docker_kill_tree(pid, cid);
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
 * like a shell's answer: 127 (not found) or 126, message on stderr. */
static void docker_exec_fix_start_failure(runtime_exec_result_t *res)
{
    static const char marker[] = "OCI runtime exec failed";
    if (res->exit_code != 126 || res->out.len < sizeof marker - 1 ||
        memcmp(res->out.data, marker, sizeof marker - 1) != 0 || res->err.len != 0)
        return;
    const char *s = sbuf_cstr(&res->out);
    if (strstr(s, "executable file not found") || strstr(s, "no such file or directory"))
        res->exit_code = 127;
    sbuf_t empty = res->err;
    res->err = res->out;
    res->out = empty;
}

void runtime_exec_result_release(runtime_exec_result_t *r)
{
    if (!r)
        return;
    sbuf_release(&r->out);
    sbuf_release(&r->err);
}

int runtime_exec(runtime_t *rt, const char *ref, const exec_spec_t *spec, size_t max_output,
                 runtime_exec_result_t *ret, api_error_t *err)
{
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

    body = json_object_new_object();
    jsonx_add_bool(body, "AttachStdin", false);
    jsonx_add_bool(body, "AttachStdout", true);
    jsonx_add_bool(body, "AttachStderr", true);
    jsonx_add_bool(body, "Tty", false);
    jsonx_add(body, "Cmd", docker_string_array((const char *const *)spec->argv));
    jsonx_add(body, "Env", docker_env_array(&spec->env));
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
    r = docker_exec_stream(rt, exec_id, deadline, ret, &killed, err);
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
    docker_exec_fix_start_failure(ret);
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
