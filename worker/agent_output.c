/* Live exec output: what a running exec writes is buffered and sent to the
 * controller (POST /v1/workers/{id}/output, fenced by the lease's attempt)
 * every AGENT_OUTPUT_FLUSH_MS or AGENT_OUTPUT_CHUNK_MAX bytes, so followers
 * see it before the command ends. */
#include "agent_internal.h"
#include "agent_output.h"
#include "b64.h"
#include "jsonx.h"
#include "log.h"
#include "timeutil.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Appends n bytes of stream at the current offset, merged into the last
 * piece when it is of the same stream. */
static int agent_output_add(agent_output_t *ao, int stream, const char *p, size_t n)
{
    bool merge = ao->npieces > 0 && ao->pieces[ao->npieces - 1].stream == stream;
    if (!merge && ao->npieces == AGENT_OUTPUT_PIECES_MAX)
        return SBX_ETOOBIG;
    if (sbuf_append_bounded(&ao->buf, p, n) < 0)
        return SBX_ENOMEM;
    if (merge)
        ao->pieces[ao->npieces - 1].len += n;
    else
        ao->pieces[ao->npieces++] = (agent_output_piece_t){ .stream = stream, .offset = ao->next_offset, .len = n };
    ao->next_offset += (int64_t)n;
    return 0;
}

/* Drops the oldest pending pieces until at most keep bytes are pending:
 * the controller cannot be reached and the worker's memory is bounded.
 * Followers see the gap as output they can no longer read. */
static void agent_output_drop(agent_output_t *ao, size_t keep)
{
    size_t drop = 0, i = 0;
    while (i < ao->npieces && ao->buf.len - drop > keep)
        drop += ao->pieces[i++].len;
    if (!drop)
        return;
    memmove(ao->pieces, ao->pieces + i, (ao->npieces - i) * sizeof *ao->pieces);
    ao->npieces -= i;
    memmove(ao->buf.data, ao->buf.data + drop, ao->buf.len - drop);
    ao->buf.len -= drop;
    ao->buf.data[ao->buf.len] = '\0';
    ao->dropped += drop;
}

/* The request body of the pending pieces, or NULL (no memory). */
static json_object *agent_output_body(const agent_output_t *ao)
{
    json_object *body = json_object_new_object(), *arr = json_object_new_array();
    jsonx_add_str(body, "operation_id", ao->op_id);
    jsonx_add_int(body, "attempt", ao->attempt);
    jsonx_add(body, "chunks", arr);
    size_t at = 0;
    for (size_t i = 0; i < ao->npieces; i++) {
        const agent_output_piece_t *pc = &ao->pieces[i];
        char *enc = b64_encode(ao->buf.data + at, pc->len);
        if (!enc) {
            json_object_put(body);
            return NULL;
        }
        json_object *ch = json_object_new_object();
        jsonx_add_str(ch, "stream", pc->stream == 2 ? "stderr" : "stdout");
        jsonx_add_int(ch, "offset", pc->offset);
        jsonx_add(ch, "data_b64", json_object_new_string(enc));
        free(enc);
        json_object_array_add(arr, ch);
        at += pc->len;
    }
    return body;
}

void agent_output_flush(agent_output_t *ao, bool final)
{
    if (!ao->c || ao->stopped || ao->npieces == 0)
        return;
    int64_t now = time_mono_ms();
    if (!final && now < ao->retry_at_ms)
        return;
    json_object *body = agent_output_body(ao);
    if (!body)
        return;
    char wid[AGENT_WORKER_ID_MAX], path[AGENT_WORKER_ID_MAX + 32];
    agent_worker_id(ao->a, wid, sizeof wid);
    snprintf(path, sizeof path, "/v1/workers/%s/output", wid);
    httpc_response_t resp;
    int rc = httpc_request(ao->c, "POST", path, body, NULL, AGENT_OUTPUT_HTTP_TIMEOUT_MS, &resp);
    json_object_put(body);
    ao->last_flush_ms = now;
    if (rc == 0 && resp.status == 200) {
        ao->npieces = 0;
        sbuf_reset(&ao->buf);
        ao->failures = 0;
    } else if (rc == 0 && resp.status >= 400 && resp.status < 500 && resp.status != 408 && resp.status != 429) {
        /* 409: the lease is not ours any more; 404: a controller without
         * live output. Either way nobody will take it: stop sending. */
        const char *code = "", *msg = "";
        httpc_api_error(&resp, &code, &msg);
        log_info(AGENT_COMPONENT, "live output of operation %s stopped: HTTP %ld %s: %s", ao->op_id, resp.status,
                 code, msg);
        ao->stopped = true;
        ao->npieces = 0;
        sbuf_reset(&ao->buf);
    } else {
        /* Kept for the next try, a second from now (the exec goes on), on
         * the next controller of the list when this one did not answer. */
        if (rc < 0)
            agent_failover(ao->a, ao->c);
        ao->failures++;
        ao->retry_at_ms = now + AGENT_OUTPUT_RETRY_MS;
        if (ao->failures == 1)
            log_debug(AGENT_COMPONENT, "live output of operation %s not sent (%s); retrying", ao->op_id,
                      rc < 0 ? resp.error : "server error");
        agent_output_drop(ao, AGENT_OUTPUT_BUFFER_MAX);
    }
    httpc_response_release(&resp);
}

static void agent_output_write(void *ud, int stream, const char *p, size_t n)
{
    agent_output_t *ao = ud;
    if (ao->stopped || !ao->c)
        return;
    while (n > 0) {
        size_t take = n < AGENT_OUTPUT_CHUNK_MAX ? n : AGENT_OUTPUT_CHUNK_MAX;
        /* Within the bound while sends fail (between their retries too). */
        if (ao->buf.len + take > AGENT_OUTPUT_BUFFER_MAX)
            agent_output_drop(ao, AGENT_OUTPUT_BUFFER_MAX - take);
        if (agent_output_add(ao, stream, p, take) < 0) {
            /* Too many pieces pending: send them, or (no answer) give up
             * the oldest one. */
            agent_output_flush(ao, false);
            if (ao->npieces == AGENT_OUTPUT_PIECES_MAX)
                agent_output_drop(ao, ao->buf.len - ao->pieces[0].len);
            if (agent_output_add(ao, stream, p, take) < 0) {
                ao->next_offset += (int64_t)take; /* no memory: the bytes are lost, their gap stays */
                ao->dropped += take;
            }
        }
        p += take;
        n -= take;
        if (ao->buf.len >= AGENT_OUTPUT_CHUNK_MAX)
            agent_output_flush(ao, false);
    }
}

static void agent_output_tick(void *ud)
{
    agent_output_t *ao = ud;
    if (time_mono_ms() - ao->last_flush_ms >= AGENT_OUTPUT_FLUSH_MS)
        agent_output_flush(ao, false);
}

static bool agent_output_cancelled(void *ud)
{
    agent_output_t *ao = ud;
    if (ao->cancel_seen || !ao->op_id)
        return ao->cancel_seen;
    agent_t *a = ao->a;
    pthread_mutex_lock(&a->mu);
    for (size_t i = 0; i < a->ncancel && !ao->cancel_seen; i++)
        if (strcmp(a->cancel_ops[i], ao->op_id) == 0)
            ao->cancel_seen = true;
    pthread_mutex_unlock(&a->mu);
    return ao->cancel_seen;
}

void agent_output_init(agent_output_t *ao, agent_t *a, httpc_t *c, const char *op_id, int64_t attempt)
{
    memset(ao, 0, sizeof *ao);
    ao->a = a;
    ao->c = c;
    ao->op_id = op_id;
    ao->attempt = attempt;
    ao->last_flush_ms = time_mono_ms();
    sbuf_init(&ao->buf, 0);
    ao->sink = (runtime_output_sink_t){ .write = agent_output_write, .tick = agent_output_tick,
                                        .cancelled = agent_output_cancelled, .ud = ao };
}

void agent_output_discard(agent_output_t *ao)
{
    ao->npieces = 0;
    sbuf_reset(&ao->buf);
}

void agent_output_release(agent_output_t *ao)
{
    if (ao->dropped)
        log_warn(AGENT_COMPONENT, "live output of operation %s: %llu bytes could not be sent", ao->op_id,
                 (unsigned long long)ao->dropped);
    sbuf_release(&ao->buf);
}
