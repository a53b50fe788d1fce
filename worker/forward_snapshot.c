/* The forwarder's snapshot export (GRANT_SNAPSHOT): the controller, copying
 * a snapshot this worker holds to another worker, asks for it with the
 * request line {"op":"snapshot_export","snapshot":ID} (the grant names the
 * same id and binds the line); the answer is the 200 line, then the
 * docker-save tar as data frames, then the END frame (with a message when
 * it was cut). Bounded by the controller, which reads at its pace. */
#include "forward_internal.h"
#include "ids.h"
#include "jsonx.h"
#include "log.h"
#include "logframe.h"
#include "timeutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct snap_down {
    forward_conn_t *c;
    bool answered;
    bool gone;
    uint64_t bytes;
} snap_down_t;

static int snap_down_data(void *ud, const char *data, size_t n)
{
    snap_down_t *d = ud;
    if (!d->answered) {
        char line[256];
        size_t k = forward_reply_format(line, sizeof line, 200, "ok", "{\"type\":\"file\"}");
        d->answered = true;
        if (forward_send_all(d->c, line, k) < 0) {
            d->gone = true;
            return SBX_EIO;
        }
    }
    if (forward_send_frames(d->c, LOGFRAME_STDOUT, data, n) < 0) {
        d->gone = true;
        return SBX_EIO;
    }
    d->bytes += n;
    return 0;
}

void forward_snapshot(forward_conn_t *c)
{
    forward_t *f = c->f;
    int64_t t0 = time_mono_ms();
    forward_reqline_t *l = malloc(sizeof *l);
    json_object *o = NULL;
    api_error_t err;
    if (!l) {
        forward_refuse(c, 503, "busy", "out of memory");
        return;
    }
    if (forward_granted_line(c, l) < 0)
        goto cleanup;
    if (jsonx_parse(l->buf, l->len, &o, &err) < 0 || !json_object_is_type(o, json_type_object) ||
        !jsonx_get_str(o, "op") || strcmp(jsonx_get_str(o, "op"), "snapshot_export") != 0 ||
        !jsonx_get_str(o, "snapshot") || strcmp(jsonx_get_str(o, "snapshot"), c->sandbox_id) != 0 ||
        !ids_valid("snp", c->sandbox_id)) {
        forward_refuse(c, 400, "invalid_argument", "a snapshot export names the grant's snapshot");
        goto cleanup;
    }
    snap_down_t d = { .c = c };
    int stop_fds[2] = { c->client, f->stop_pipe[0] };
    runtime_snapshot_export_req_t req = { .snapshot_id = c->sandbox_id, .worker_name = f->worker_name,
                                          .on_data = snap_down_data, .ud = &d, .stop_fds = stop_fds,
                                          .nstop_fds = 2 };
    int r = runtime_snapshot_export(f->rt, &req, &err);
    if (!d.answered) {
        if (r < 0)
            forward_refuse_runtime(c, &err);
        else
            forward_refuse(c, 503, "busy", "the export stopped before it began");
    } else if (!d.gone) {
        const char *msg = r < 0 ? err.message : forward_stopping(f) ? "the worker is shutting down" : "";
        size_t wl = strlen(msg) > 400 ? 400 : strlen(msg);
        unsigned char hdr[LOGFRAME_HEADER_BYTES];
        logframe_header(hdr, LOGFRAME_END, (uint32_t)wl);
        if (forward_send_all(c, hdr, sizeof hdr) == 0 && wl > 0)
            forward_send_all(c, msg, wl);
        forward_client_shutdown(c);
    }
    log_info(FORWARD_COMPONENT, "snapshot %s sent for a copy: %llu bytes in %lld ms%s%s", c->sandbox_id,
             (unsigned long long)d.bytes, (long long)(time_mono_ms() - t0), r < 0 ? ": " : "",
             r < 0 ? err.message : "");
cleanup:
    json_object_put(o);
    free(l);
}
