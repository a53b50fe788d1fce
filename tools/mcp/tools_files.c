/* The file tools: sandbox_write_file, sandbox_read_file and
 * sandbox_list_files, over PUT and GET /v1/sandboxes/{id}/files in the raw
 * and list forms (docs/api.md "Files"). Contents travel in the tool's JSON,
 * so they are bounded (MCP_FILE_MAX_BYTES); sandbox cp moves big trees. */
#include <json-c/json.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "jsonx.h"
#include "limits.h"
#include "mcp_int.h"
#include "sbuf.h"
#include "utf8.h"

/* A path argument: absolute, 1..SBX_FILES_PATH_MAX bytes. */
static bool arg_path(json_object *args, const char **ret, json_object **bad)
{
    json_object *v = NULL;
    *ret = NULL;
    if (!json_object_object_get_ex(args, "path", &v) || !json_object_is_type(v, json_type_string) ||
        json_object_get_string_len(v) < 1 || json_object_get_string_len(v) > SBX_FILES_PATH_MAX ||
        json_object_get_string(v)[0] != '/') {
        *bad = mcp_tool_error("invalid_argument", "path must be an absolute path in the sandbox (it starts with /)");
        return false;
    }
    *ret = json_object_get_string(v);
    return true;
}

/* /v1/sandboxes/SBX/files?path=P&format=F into out. */
static bool files_url(char *out, size_t n, const char *sbx, const char *p, const char *format, json_object **bad)
{
    char *ep = httpc_escape(p);
    if (!ep || !tool_id_path(out, n, "/v1/sandboxes/", sbx, "/files?format=", bad)) {
        free(ep);
        if (!*bad)
            *bad = mcp_tool_error("internal", "out of memory");
        return false;
    }
    size_t l = strlen(out);
    int w = snprintf(out + l, n - l, "%s&path=%s", format, ep);
    free(ep);
    if (w < 0 || (size_t)w >= n - l) {
        *bad = mcp_tool_error("invalid_argument", "path is too long");
        return false;
    }
    return true;
}

/* The tool's error for a failed transfer. */
static json_object *transfer_failure(call_t *c, int r, httpc_response_t *resp)
{
    if (c->cancel)
        return mcp_tool_error("cancelled", "the client cancelled the call");
    if (r < 0 || resp->status == 0) {
        char msg[400];
        snprintf(msg, sizeof msg, "cannot reach the controller at %s: %s", c->srv->url,
                 resp->error[0] ? resp->error : sbx_strerror(r));
        return mcp_tool_error("unavailable", msg);
    }
    const char *code = NULL, *msg = NULL;
    httpc_api_error(resp, &code, &msg);
    return mcp_tool_error(code ? code : "error", msg ? msg : "");
}

/* ---- sandbox_write_file ------------------------------------------------- */

typedef struct mem_reader {
    const char *p;
    size_t left;
} mem_reader_t;

static long mem_read(void *ud, char *buf, size_t n)
{
    mem_reader_t *m = ud;
    size_t k = n < m->left ? n : m->left;
    memcpy(buf, m->p, k);
    m->p += k;
    m->left -= k;
    return (long)k;
}

static int put_raw(call_t *c, const char *url, const char *data, size_t len, httpc_response_t *resp)
{
    mem_reader_t m = { data, len };
    return httpc_transfer(c->http, "PUT", url, (int64_t)len, mem_read, NULL, &m, NULL, NULL, MCP_REQUEST_TIMEOUT_MS,
                          resp);
}

/* mkdir -p dir in the sandbox (an exec operation); NULL or the error. */
static json_object *make_dirs(call_t *c, const char *sbx, const char *dir)
{
    char path[MCP_PATH_MAX];
    json_object *bad = NULL;
    if (!tool_id_path(path, sizeof path, "/v1/sandboxes/", sbx, "/exec", &bad))
        return bad;
    json_object *body = json_object_new_object(), *argv = json_object_new_array();
    json_object_array_add(argv, json_object_new_string("mkdir"));
    json_object_array_add(argv, json_object_new_string("-p"));
    json_object_array_add(argv, json_object_new_string(dir));
    jsonx_add(body, "argv", argv);
    jsonx_add_int(body, "timeout_seconds", 30);
    json_object *resp = NULL;
    bool done = false;
    json_object *out = op_request(c, "POST", path, body, NULL, NULL, true, 90, &resp, &done);
    json_object_put(body);
    if (!out) {
        int64_t code = -1;
        json_object *res = jsonx_get_obj(jsonx_get_obj(resp, "operation"), "result");
        if (!done || !jsonx_get_int(res, "exit_code", &code) || code != 0) {
            char msg[300];
            snprintf(msg, sizeof msg, "cannot make the directory %.200s in the sandbox (mkdir -p %s)", dir,
                     done ? "failed" : "did not finish");
            out = mcp_tool_error("invalid_argument", msg);
        }
    }
    json_object_put(resp);
    return out;
}

json_object *tool_write_file(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    const char *sbx = NULL, *p = NULL, *mode = NULL;
    bool parents = true;
    if (!tool_arg_str(args, "sandbox_id", &sbx, &bad) || !arg_path(args, &p, &bad) ||
        !tool_arg_str(args, "mode", &mode, &bad) || !tool_arg_bool(args, "make_dirs", true, &parents, &bad))
        return bad;
    json_object *text = NULL, *b64 = NULL;
    json_object_object_get_ex(args, "content", &text);
    json_object_object_get_ex(args, "content_base64", &b64);
    if ((text != NULL) == (b64 != NULL) || (text && !json_object_is_type(text, json_type_string)) ||
        (b64 && !json_object_is_type(b64, json_type_string)))
        return mcp_tool_error("invalid_argument", "give exactly one of content (text) or content_base64 (bytes)");
    unsigned char *bytes = NULL;
    size_t len = 0;
    if (text) {
        len = (size_t)json_object_get_string_len(text);
    } else {
        const char *s = json_object_get_string(b64);
        size_t sl = (size_t)json_object_get_string_len(b64);
        bytes = malloc(sl / 4 * 3 + 3);
        if (!bytes || sodium_base642bin(bytes, sl / 4 * 3 + 3, s, sl, " \r\n", &len, NULL,
                                        sodium_base64_VARIANT_ORIGINAL) != 0) {
            free(bytes);
            return mcp_tool_error("invalid_argument", "content_base64 is not base64");
        }
    }
    if (len > MCP_FILE_MAX_BYTES) {
        free(bytes);
        char msg[200];
        snprintf(msg, sizeof msg, "the content is %zu bytes, over the tool's limit of %u bytes; sandbox cp moves "
                 "larger files", len, MCP_FILE_MAX_BYTES);
        return mcp_tool_error("payload_too_large", msg);
    }
    const char *data = text ? json_object_get_string(text) : (const char *)bytes;
    char url[MCP_PATH_MAX + SBX_FILES_PATH_MAX * 3];
    if (!files_url(url, sizeof url, sbx, p, "raw", &bad)) {
        free(bytes);
        return bad;
    }
    if (mode) {
        size_t l = strlen(url);
        snprintf(url + l, sizeof url - l, "&mode=%.8s", mode);
    }
    /* The worker makes the missing directories (no mkdir in the image
     * needed); a runtime that cannot answers 404, and mkdir -p follows. */
    if (parents) {
        size_t l = strlen(url);
        snprintf(url + l, sizeof url - l, "&parents=true");
    }
    httpc_response_t resp;
    int r = put_raw(c, url, data, len, &resp);
    json_object *out = NULL;
    const char *emsg = jsonx_get_str(jsonx_get_obj(resp.json, "error"), "message");
    if (r == 0 && resp.status == 404 && parents && emsg && strncmp(emsg, "no sandbox", 10) != 0) {
        /* The directory is missing (not the sandbox): make it and try once more. */
        char dir[SBX_FILES_PATH_MAX + 1];
        snprintf(dir, sizeof dir, "%s", p);
        char *slash = strrchr(dir, '/');
        if (slash && slash != dir) {
            *slash = '\0';
            httpc_response_release(&resp);
            if ((out = make_dirs(c, sbx, dir)) == NULL)
                r = put_raw(c, url, data, len, &resp);
            else
                memset(&resp, 0, sizeof resp);
        }
    }
    if (!out && r == 0 && resp.status == 200) {
        json_object *res = json_object_new_object();
        jsonx_add_str(res, "path", p);
        int64_t n = 0;
        jsonx_get_int(resp.json, "bytes", &n);
        jsonx_add_int(res, "bytes", n);
        out = mcp_tool_ok(res);
    } else if (!out) {
        out = transfer_failure(c, r, &resp);
    }
    httpc_response_release(&resp);
    free(bytes);
    return out;
}

/* ---- sandbox_read_file -------------------------------------------------- */

typedef struct mem_writer {
    sbuf_t b;
    size_t max;
    bool truncated;
} mem_writer_t;

static int mem_write(void *ud, const char *data, size_t n)
{
    mem_writer_t *w = ud;
    size_t room = w->max - w->b.len;
    if (n > room) {
        sbuf_append(&w->b, data, room);
        w->truncated = true;
        return -1; /* enough: stop the download */
    }
    return sbuf_append(&w->b, data, n) < 0 ? -1 : 0;
}

json_object *tool_read_file(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    const char *sbx = NULL, *p = NULL;
    int64_t max;
    char url[MCP_PATH_MAX + SBX_FILES_PATH_MAX * 3];
    if (!tool_arg_str(args, "sandbox_id", &sbx, &bad) || !arg_path(args, &p, &bad) ||
        !tool_arg_int(args, "max_bytes", 1, MCP_FILE_MAX_BYTES, MCP_FILE_READ_DEFAULT, &max, &bad) ||
        !files_url(url, sizeof url, sbx, p, "raw", &bad))
        return bad;
    mem_writer_t w = { .max = (size_t)max };
    sbuf_init(&w.b, (size_t)max);
    httpc_response_t resp;
    int r = httpc_transfer(c->http, "GET", url, -1, NULL, mem_write, &w, NULL, NULL, MCP_REQUEST_TIMEOUT_MS, &resp);
    json_object *out = NULL;
    if ((r == 0 || (r == SBX_ECANCELLED && w.truncated && !c->cancel)) && resp.status == 200) {
        json_object *res = json_object_new_object();
        jsonx_add_str(res, "path", p);
        const char *d = w.b.data ? w.b.data : "";
        if (utf8_valid(d, w.b.len) && memchr(d, '\0', w.b.len) == NULL) {
            jsonx_add_str(res, "encoding", "utf-8");
            jsonx_add(res, "content", json_object_new_string_len(d, (int)w.b.len));
        } else {
            size_t bl = sodium_base64_ENCODED_LEN(w.b.len, sodium_base64_VARIANT_ORIGINAL);
            char *b64 = malloc(bl);
            if (b64)
                sodium_bin2base64(b64, bl, (const unsigned char *)d, w.b.len, sodium_base64_VARIANT_ORIGINAL);
            jsonx_add_str(res, "encoding", "base64");
            jsonx_add_str(res, "content", b64 ? b64 : "");
            free(b64);
        }
        jsonx_add_int(res, "bytes", (int64_t)w.b.len);
        jsonx_add_bool(res, "truncated", w.truncated);
        out = mcp_tool_ok(res);
    } else {
        out = transfer_failure(c, r, &resp);
    }
    httpc_response_release(&resp);
    sbuf_release(&w.b);
    return out;
}

/* ---- sandbox_list_files ------------------------------------------------- */

json_object *tool_list_files(call_t *c, json_object *args)
{
    json_object *bad = NULL;
    const char *sbx = NULL, *p = NULL;
    char url[MCP_PATH_MAX + SBX_FILES_PATH_MAX * 3];
    if (!tool_arg_str(args, "sandbox_id", &sbx, &bad) || !arg_path(args, &p, &bad) ||
        !files_url(url, sizeof url, sbx, p, "list", &bad))
        return bad;
    httpc_response_t resp;
    int r = httpc_transfer(c->http, "GET", url, -1, NULL, NULL, NULL, NULL, NULL, MCP_REQUEST_TIMEOUT_MS, &resp);
    json_object *out = NULL;
    if (r == 0 && resp.status == 200 && resp.json) {
        json_object *res = json_object_new_object();
        jsonx_add_str(res, "path", p);
        json_object *e = NULL;
        jsonx_add(res, "entries", json_object_object_get_ex(resp.json, "entries", &e) ? json_object_get(e)
                                                                                       : json_object_new_array());
        bool t = false;
        json_object *tv = NULL;
        if (json_object_object_get_ex(resp.json, "truncated", &tv))
            t = json_object_get_boolean(tv);
        jsonx_add_bool(res, "truncated", t);
        out = mcp_tool_ok(res);
    } else if (r == 0 && resp.status == 200) {
        out = mcp_tool_error("bad_response", "the listing is not JSON");
    } else {
        out = transfer_failure(c, r, &resp);
    }
    httpc_response_release(&resp);
    return out;
}
