/* libevent 2.1 answers some requests itself, before our request callback
 * runs, with an HTML page from evhttp_send_error: a malformed request line or
 * header (400, also a head over max_headers_size), a body over max_body_size
 * (413), a method it does not know or does not allow (501), an Expect other
 * than 100-continue (417). Version 2.1 has no hook for these (2.2's
 * evhttp_set_errorcb is not in Debian 12), so the connection's output buffer
 * is watched instead: such a page is rewritten, as soon as it is queued and
 * before a byte of it is sent, into the API's error shape. */
#include "http_errpage.h"
#include "errors.h"
#include "jsonx.h"
#include "limits.h"
#include "tlsbev.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERRPAGE_TAIL "</H1>\n</BODY></HTML>\n"
#define ERRPAGE_WINDOW 1024 /* a page is ~250 bytes: its reason is libevent's own phrase */

/* What a libevent status means in the API's words (msg: room for a line). */
static void errpage_meaning(int status, api_code_t *ret_code, char *msg, size_t msglen)
{
    const char *text;
    switch (status) {
    case 400:
        *ret_code = API_INVALID_ARGUMENT;
        text = "malformed HTTP request: the request line or a header is not HTTP/1.x, or the head is over 64 KiB";
        break;
    case 413:
        *ret_code = API_PAYLOAD_TOO_LARGE;
        snprintf(msg, msglen, "request body over the limit of %u MiB", SBX_MAX_BODY_BYTES / (1024u * 1024u));
        return;
    case 417:
        *ret_code = API_INVALID_ARGUMENT;
        text = "unsupported Expect header: only Expect: 100-continue is understood";
        break;
    case 501:
    case 405:
        *ret_code = API_METHOD_NOT_ALLOWED;
        text = "unsupported HTTP method";
        break;
    case 503:
        *ret_code = API_UNAVAILABLE;
        text = "the controller cannot take this request now";
        break;
    default:
        *ret_code = status >= 500 ? API_INTERNAL : API_INVALID_ARGUMENT;
        text = "the HTTP layer refused this request";
        break;
    }
    snprintf(msg, msglen, "%s", text);
}

static const char *errpage_reason(int status)
{
    switch (status) {
    case 400: return "Bad Request";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Error";
    }
}

/* Reads "Name: value\r\n" at p; returns the byte after the line or NULL. */
static const char *errpage_header(const char *p, const char *end, const char **ret_name, size_t *ret_nlen,
                                  const char **ret_val, size_t *ret_vlen)
{
    const char *colon = memchr(p, ':', (size_t)(end - p));
    const char *crlf = colon ? memchr(colon, '\r', (size_t)(end - colon)) : NULL;
    if (!colon || !crlf || crlf + 1 >= end || crlf[1] != '\n' || colon + 2 > crlf || colon[1] != ' ')
        return NULL;
    *ret_name = p;
    *ret_nlen = (size_t)(colon - p);
    *ret_val = colon + 2;
    *ret_vlen = (size_t)(crlf - colon - 2);
    return crlf + 2;
}

/* Checks that w[0, n) is exactly one libevent error page; returns its
 * status and HTTP minor version, or 0. */
static int errpage_parse(const char *w, size_t n, int *ret_minor)
{
    int minor = -1, status = 0, off = 0;
    if (n < 16 || sscanf(w, "HTTP/1.%1d %3d %n", &minor, &status, &off) < 2 || off <= 0 || minor < 0 ||
        minor > 1 || status < 100 || status > 599)
        return 0;
    const char *end = w + n, *p = w + off;
    const char *eol = memchr(p, '\r', (size_t)(end - p));
    if (!eol || eol + 1 >= end || eol[1] != '\n')
        return 0;
    char reason[128];
    size_t rl = (size_t)(eol - p);
    if (rl == 0 || rl >= sizeof reason)
        return 0;
    memcpy(reason, p, rl);
    reason[rl] = '\0';
    p = eol + 2;
    bool type = false, conn = false, date = false;
    long clen = -1;
    while (p + 1 < end && !(p[0] == '\r' && p[1] == '\n')) {
        const char *name, *val;
        size_t nl, vl;
        p = errpage_header(p, end, &name, &nl, &val, &vl);
        if (!p)
            return 0;
        if (nl == 12 && memcmp(name, "Content-Type", 12) == 0 && vl == 9 && memcmp(val, "text/html", 9) == 0 && !type)
            type = true;
        else if (nl == 10 && memcmp(name, "Connection", 10) == 0 && vl == 5 && memcmp(val, "close", 5) == 0 && !conn)
            conn = true;
        else if (nl == 4 && memcmp(name, "Date", 4) == 0 && !date)
            date = true;
        else if (nl == 14 && memcmp(name, "Content-Length", 14) == 0 && clen < 0 && vl > 0 && vl < 6) {
            clen = 0;
            for (size_t i = 0; i < vl; i++) {
                if (val[i] < '0' || val[i] > '9')
                    return 0;
                clen = clen * 10 + (val[i] - '0');
            }
        } else
            return 0;
    }
    if (!type || !conn || clen < 0 || p + 2 > end)
        return 0;
    p += 2;
    char page[512];
    int pl = snprintf(page, sizeof page,
                      "<HTML><HEAD>\n<TITLE>%d %s</TITLE>\n</HEAD><BODY>\n<H1>%s</H1>\n</BODY></HTML>\n", status,
                      reason, reason);
    if (pl <= 0 || (size_t)pl >= sizeof page || (size_t)pl != (size_t)(end - p) || (long)pl != clen ||
        memcmp(p, page, (size_t)pl) != 0)
        return 0;
    *ret_minor = minor;
    return status;
}

static bool errpage_rewrite_unfrozen(struct evbuffer *out);

bool http_errpage_rewrite(struct evbuffer *out)
{
    if (evbuffer_get_length(out) < sizeof ERRPAGE_TAIL - 1)
        return false;
    /* A socket bufferevent freezes the front of its output between writes;
     * we are not inside a write (the page was just queued), so the front may
     * move for the moment of the rewrite. Draining nothing fails only on a
     * frozen front. */
    bool frozen = evbuffer_drain(out, 0) < 0;
    if (frozen)
        evbuffer_unfreeze(out, 1);
    bool done = errpage_rewrite_unfrozen(out);
    if (frozen)
        evbuffer_freeze(out, 1);
    return done;
}

static bool errpage_rewrite_unfrozen(struct evbuffer *out)
{
    size_t len = evbuffer_get_length(out);
    size_t tl = sizeof ERRPAGE_TAIL - 1;
    char w[ERRPAGE_WINDOW + 1];
    struct evbuffer_ptr at;
    if (evbuffer_ptr_set(out, &at, len - tl, EVBUFFER_PTR_SET) < 0 ||
        evbuffer_copyout_from(out, &at, w, tl) != (ev_ssize_t)tl || memcmp(w, ERRPAGE_TAIL, tl) != 0)
        return false;
    size_t n = len < ERRPAGE_WINDOW ? len : ERRPAGE_WINDOW;
    if (evbuffer_ptr_set(out, &at, len - n, EVBUFFER_PTR_SET) < 0 ||
        evbuffer_copyout_from(out, &at, w, n) != (ev_ssize_t)n)
        return false;
    w[n] = '\0';
    /* The page starts at the last status line that parses as one whole page. */
    int status = 0, minor = 1;
    size_t start = n;
    while (start > 0 && !status) {
        start--;
        if (w[start] == 'H' && n - start >= 16 && memcmp(w + start, "HTTP/1.", 7) == 0)
            status = errpage_parse(w + start, n - start, &minor);
    }
    if (!status)
        return false;
    api_code_t code;
    char msg[160];
    errpage_meaning(status, &code, msg, sizeof msg);
    int st = api_code_info(code)->http_status;
    json_object *body = jsonx_error_body(api_code_info(code)->name, msg);
    const char *text = body ? json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE) : NULL;
    bool done = false;
    struct evbuffer *keep = text ? evbuffer_new() : NULL;
    size_t prefix = len - (n - start);
    if (keep && evbuffer_remove_buffer(out, keep, prefix) == (int)prefix) {
        evbuffer_drain(out, evbuffer_get_length(out));
        evbuffer_add_buffer(out, keep);
        evbuffer_add_printf(out,
                            "HTTP/1.%d %d %s\r\nContent-Type: application/json\r\nCache-Control: no-store\r\n"
                            "Connection: close\r\nContent-Length: %zu\r\n\r\n%s\n",
                            minor, st, errpage_reason(st), strlen(text) + 1, text);
        done = true;
    }
    if (keep)
        evbuffer_free(keep);
    if (body)
        json_object_put(body);
    return done;
}

static _Thread_local bool errpage_busy;

static void errpage_out_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    (void)arg;
    /* Our own rewrite changes the buffer again: not a new page. */
    if (info->n_added == 0 || errpage_busy)
        return;
    errpage_busy = true;
    http_errpage_rewrite(buf);
    errpage_busy = false;
}

struct bufferevent *http_errpage_bev(struct event_base *base, void *arg)
{
    SSL_CTX *tls = arg;
    struct bufferevent *bev = tls ? tls_bev_accepting(base, tls, -1) : bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (bev && !evbuffer_add_cb(bufferevent_get_output(bev), errpage_out_cb, NULL)) {
        bufferevent_free(bev);
        return NULL;
    }
    return bev;
}
