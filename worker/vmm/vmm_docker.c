/* worker/vmm's image export: an image's filesystem as a tar stream, through
 * the Docker Engine API on its unix socket (create a stopped container,
 * export it, remove it), for vmm_image_prepare. */
#include "vmm_internal.h"

#include <curl/curl.h>
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "errors.h"
#include "fdutil.h"
#include "sbuf.h"

typedef struct {
    sbuf_t body;
    int out_fd;        /* >= 0: the body goes there */
    int write_failed;
} sink_t;

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    sink_t *s = arg;
    size_t len = size * n;
    if (s->out_fd >= 0) {
        size_t off = 0;
        while (off < len) {
            ssize_t w = write(s->out_fd, p + off, len - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0) {
                s->write_failed = 1;
                return 0;
            }
            off += (size_t)w;
        }
        return len;
    }
    return sbuf_append(&s->body, p, len) == 0 ? len : 0;
}

/* One Engine API call; the body to sink (out_fd or a capped buffer). */
static int engine(const char *sock, const char *method, const char *path, const char *json, sink_t *sink,
                  long *ret_status, char *why)
{
    CURL *c = curl_easy_init();
    struct curl_slist *h = NULL;
    char url[1024];
    int rc = 0;
    if (c == NULL)
        return SBX_ENOMEM;
    fd_curl_cloexec(c);
    snprintf(url, sizeof(url), "http://docker%s", path);
    curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, sock);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 600000L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, sink);
    if (json != NULL) {
        h = curl_slist_append(h, "Content-Type: application/json");
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, json);
    }
    CURLcode cr = curl_easy_perform(c);
    if (cr != CURLE_OK) {
        vmm__why(why, "docker %s %s: %s", method, path, sink->write_failed ? "writing the tar stream failed" : curl_easy_strerror(cr));
        rc = SBX_EUNAVAIL;
    } else {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, ret_status);
    }
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return rc;
}

/* The local Docker's inspect of image (its 200 answer): *ret (a new
 * object), or a negative code with why. */
static int image_inspect(const char *sock, const char *image, json_object **ret, char *why)
{
    sink_t s = {.out_fd = -1};
    long st = 0;
    char path[512];
    *ret = NULL;
    char *esc = curl_easy_escape(NULL, image, 0);
    if (esc == NULL)
        return SBX_ENOMEM;
    snprintf(path, sizeof(path), "/images/%s/json", esc);
    curl_free(esc);
    sbuf_init(&s.body, 1u << 20);
    int rc = engine(sock, "GET", path, NULL, &s, &st, why);
    json_object *body = rc == 0 ? json_tokener_parse(sbuf_cstr(&s.body)) : NULL;
    sbuf_release(&s.body);
    if (rc == 0 && (st != 200 || !json_object_is_type(body, json_type_object))) {
        vmm__why(why, "image %s: not in the local Docker (HTTP %ld)", image, st);
        rc = SBX_ENOTFOUND;
    }
    if (rc == 0)
        *ret = body;
    else
        json_object_put(body);
    return rc;
}

int vmm_docker_export(const char *docker_sock, const char *image, int out_fd, char ret_image_id[80], char *ret_why)
{
    const char *sock = docker_sock ? docker_sock : "/var/run/docker.sock";
    sink_t s = {.out_fd = -1};
    long st = 0;
    char path[512], cid[80] = "", iid[80] = "";
    json_object *body = NULL, *req = NULL;
    int rc;
    sbuf_init(&s.body, 1u << 20);
    if ((rc = image_inspect(sock, image, &body, ret_why)) != 0)
        goto cleanup;
    json_object *id = NULL;
    if (!json_object_object_get_ex(body, "Id", &id)) {
        vmm__why(ret_why, "image %s: no Id in its inspect", image);
        rc = SBX_ENOTFOUND;
        goto cleanup;
    }
    snprintf(iid, sizeof(iid), "%s", json_object_get_string(id));
    json_object_put(body);
    body = NULL;
    req = json_object_new_object();
    json_object_object_add(req, "Image", json_object_new_string(iid));
    json_object *cmd = json_object_new_array();
    json_object_array_add(cmd, json_object_new_string("true"));
    json_object_object_add(req, "Cmd", cmd);
    json_object_object_add(req, "NetworkDisabled", json_object_new_boolean(1));
    sbuf_reset(&s.body);
    if ((rc = engine(sock, "POST", "/containers/create", json_object_to_json_string(req), &s, &st, ret_why)) != 0)
        goto cleanup;
    body = json_tokener_parse(sbuf_cstr(&s.body));
    if (st != 201 || !json_object_object_get_ex(body, "Id", &id)) {
        vmm__why(ret_why, "docker create %s: HTTP %ld", image, st);
        rc = SBX_ERUNTIME;
        goto cleanup;
    }
    snprintf(cid, sizeof(cid), "%s", json_object_get_string(id));
    snprintf(path, sizeof(path), "/containers/%s/export", cid);
    sink_t out = {.out_fd = out_fd};
    if ((rc = engine(sock, "GET", path, NULL, &out, &st, ret_why)) != 0)
        goto cleanup;
    if (st != 200) {
        vmm__why(ret_why, "docker export %s: HTTP %ld", image, st);
        rc = SBX_ERUNTIME;
        goto cleanup;
    }
    snprintf(ret_image_id, 80, "%s", iid);
cleanup:
    if (cid[0] != '\0') {
        long dst = 0;
        sink_t drop = {.out_fd = -1};
        sbuf_init(&drop.body, 64u << 10);
        snprintf(path, sizeof(path), "/containers/%s?force=1", cid);
        engine(sock, "DELETE", path, NULL, &drop, &dst, NULL);
        sbuf_release(&drop.body);
    }
    json_object_put(body);
    json_object_put(req);
    sbuf_release(&s.body);
    return rc;
}

int vmm_docker_image_config(const char *docker_sock, const char *image, json_object **ret_config, char *ret_why)
{
    json_object *body = NULL, *cfg = NULL;
    *ret_config = NULL;
    int rc = image_inspect(docker_sock ? docker_sock : "/var/run/docker.sock", image, &body, ret_why);
    if (rc == 0 && (!json_object_object_get_ex(body, "Config", &cfg) || !json_object_is_type(cfg, json_type_object))) {
        vmm__why(ret_why, "image %s: no Config in its inspect", image);
        rc = SBX_ENOTFOUND;
    }
    if (rc == 0)
        *ret_config = json_object_get(cfg);
    json_object_put(body);
    return rc;
}
