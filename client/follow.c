/* Following a running exec's output (GET /v1/operations/{id}/output): the
 * client side both `sandbox exec`/`sandbox output` and sandbox-mcp use. */
#include "client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "b64.h"
#include "errors.h"
#include "jsonx.h"
#include "limits.h"
#include "timeutil.h"

int client_output_chunk_bytes(json_object *chunk, char **ret, size_t *ret_len)
{
    const char *enc = jsonx_get_str(chunk, "data_b64");
    if (enc)
        return b64_decode(enc, strlen(enc), SBX_MAX_RESPONSE_BYTES, ret, ret_len);
    json_object *d = NULL;
    if (!json_object_object_get_ex(chunk, "data", &d) || !json_object_is_type(d, json_type_string))
        return SBX_EINVAL;
    size_t n = (size_t)json_object_get_string_len(d);
    char *buf = malloc(n + 1);
    if (!buf)
        return SBX_ENOMEM;
    memcpy(buf, json_object_get_string(d), n);
    buf[n] = '\0';
    *ret = buf;
    *ret_len = n;
    return 0;
}

/* SBX_EIO with e a bad_response: path answered without what. */
static int follow_malformed(client_error_t *e, const char *path, const char *what)
{
    memset(e, 0, sizeof *e);
    e->kind = CLIENT_E_MALFORMED;
    e->status = 200;
    snprintf(e->code, sizeof e->code, "bad_response");
    snprintf(e->message, sizeof e->message, "%.400s answered %s", path, what);
    return SBX_EIO;
}

/* Hands the chunks of one answer to f; SBX_EIO (bad_response in e) when one
 * cannot be read. */
static int follow_take(const client_follow_t *f, const char *path, json_object *resp, int64_t *offset, bool *done,
                       client_error_t *e)
{
    json_object *chunks = NULL;
    int64_t next = 0, skipped = 0;
    if (!json_object_object_get_ex(resp, "chunks", &chunks) || !json_object_is_type(chunks, json_type_array) ||
        !jsonx_get_int(resp, "next_offset", &next) || !jsonx_get_bool(resp, "done", done))
        return follow_malformed(e, path, "without chunks, next_offset and done");
    jsonx_get_int(resp, "skipped_bytes", &skipped);
    if (skipped > 0 && f->on_skip)
        f->on_skip(f->ud, *offset, skipped);
    for (size_t i = 0; i < json_object_array_length(chunks); i++) {
        json_object *ch = json_object_array_get_idx(chunks, i);
        char *raw = NULL;
        size_t len = 0;
        int64_t at = 0;
        jsonx_get_int(ch, "offset", &at);
        if (client_output_chunk_bytes(ch, &raw, &len) < 0)
            return follow_malformed(e, path, "a chunk without data");
        if (f->on_chunk)
            f->on_chunk(f->ud, jsonx_get_str(ch, "stream"), at, raw, len);
        free(raw);
    }
    if (next > *offset)
        *offset = next;
    return 0;
}

int client_follow_output(client_t *cl, const char *op_id, int64_t *offset, const client_follow_t *f, bool *ret_done,
                         client_error_t *ret_err)
{
    char base[CLIENT_PATH_MAX];
    *ret_done = false;
    if (client_path(base, sizeof base, "/v1/operations/", op_id, "/output") != 0)
        return SBX_ETOOBIG;
    int64_t deadline = time_mono_ms() + f->timeout_s * 1000, backoff = CLIENT_BACKOFF_START_MS;
    bool failing = false;
    for (bool first = true;; first = false) {
        int64_t rem = deadline - time_mono_ms();
        if (!first && rem <= 0)
            return 0;
        int64_t pw = rem > 0 ? rem / 1000 : 0;
        if (pw > f->poll_wait_s)
            pw = f->poll_wait_s;
        char path[CLIENT_PATH_MAX + 64];
        snprintf(path, sizeof path, "%s?offset=%lld&wait=%lld", base, (long long)*offset, (long long)pw);
        client_req_t req = { .method = "GET", .path = path, .timeout_ms = (long)(pw + CLIENT_POLL_SLACK_S) * 1000L };
        json_object *resp = NULL;
        int r = client_call(cl, &req, &resp, ret_err);
        if (r < 0 && (r == SBX_ECANCELLED || !ret_err->retryable))
            return r;
        if (r < 0) {
            /* No answer (a controller restarting, another taking over):
             * read on from the same offset once one answers. */
            if (!failing && f->on_outage)
                f->on_outage(f->ud, ret_err);
            failing = true;
            int64_t left = deadline - time_mono_ms();
            if (left <= 0)
                return SBX_EIO; /* *ret_err: the last lost answer (retryable) */
            if (client_sleep_ms(cl, backoff < left ? backoff : left))
                return SBX_ECANCELLED;
            backoff = client_backoff_next(backoff);
            continue;
        }
        if (failing && f->on_outage)
            f->on_outage(f->ud, NULL);
        failing = false;
        backoff = CLIENT_BACKOFF_START_MS;
        r = follow_take(f, path, resp, offset, ret_done, ret_err);
        json_object_put(resp);
        if (r < 0 || *ret_done)
            return r;
    }
}
