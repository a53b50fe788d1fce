/* JSON-over-HTTP client on libcurl. */
#include "httpc.h"
#include "errors.h"
#include "fdutil.h"
#include "jsonx.h"
#include "limits.h"
#include "sbuf.h"

#include <curl/curl.h>
#include <poll.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* An upload at least this long asks for 100 Continue first (curl's own
 * threshold for a POST). */
#define HTTPC_EXPECT_MIN_BYTES (1024 * 1024)

struct httpc {
    CURL *curl;
    char *base;
    char *auth_header;
    char *ca_file; /* NULL: the system's CAs */
    char errbuf[CURL_ERROR_SIZE]; /* curl's detail of the last failure */
    const atomic_int *abort_flag;
};

void httpc_set_abort_flag(httpc_t *c, const atomic_int *flag) { c->abort_flag = flag; }

static int httpc_progress_cb(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt; (void)dn; (void)ut; (void)un;
    const atomic_int *flag = ud;
    return flag && atomic_load(flag) ? 1 : 0;
}

int httpc_new(const char *base_url, const char *token, httpc_t **ret)
{
    if (!base_url || strncmp(base_url, "http", 4) != 0)
        return SBX_EINVAL;
    httpc_t *c = calloc(1, sizeof *c);
    if (!c)
        return SBX_ENOMEM;
    c->curl = curl_easy_init();
    c->base = strdup(base_url);
    if (c->base) {
        size_t l = strlen(c->base);
        while (l > 0 && c->base[l - 1] == '/')
            c->base[--l] = '\0';
    }
    if (token && *token) {
        size_t n = strlen(token) + 32;
        c->auth_header = malloc(n);
        if (c->auth_header)
            snprintf(c->auth_header, n, "Authorization: Bearer %s", token);
    }
    if (!c->curl || !c->base || (token && *token && !c->auth_header)) {
        httpc_free(c);
        return SBX_ENOMEM;
    }
    *ret = c;
    return 0;
}

int httpc_set_ca_file(httpc_t *c, const char *path)
{
    char *p = path && *path ? strdup(path) : NULL;
    if (path && *path && !p)
        return SBX_ENOMEM;
    free(c->ca_file);
    c->ca_file = p;
    return 0;
}

int httpc_set_base(httpc_t *c, const char *base_url)
{
    if (!base_url || strncmp(base_url, "http", 4) != 0)
        return SBX_EINVAL;
    char *b = strdup(base_url);
    if (!b)
        return SBX_ENOMEM;
    size_t l = strlen(b);
    while (l > 0 && b[l - 1] == '/')
        b[--l] = '\0';
    free(c->base);
    c->base = b;
    return 0;
}

void httpc_free(httpc_t *c)
{
    if (!c)
        return;
    if (c->curl)
        curl_easy_cleanup(c->curl);
    free(c->base);
    free(c->auth_header);
    free(c->ca_file);
    free(c);
}

/* The text of a transport failure: curl's name for it, and for TLS
 * failures (an unverified certificate above all) curl's detail too. */
static void httpc_transport_error(const httpc_t *c, CURLcode cr, char *buf, size_t len)
{
    bool tls = cr == CURLE_PEER_FAILED_VERIFICATION || cr == CURLE_SSL_CONNECT_ERROR || cr == CURLE_SSL_CACERT_BADFILE ||
               cr == CURLE_SSL_CERTPROBLEM || cr == CURLE_SSL_ISSUER_ERROR || cr == CURLE_SSL_CIPHER;
    if (tls && c->errbuf[0])
        snprintf(buf, len, "TLS: %.180s (%.60s)", c->errbuf, curl_easy_strerror(cr));
    else
        snprintf(buf, len, "%s", curl_easy_strerror(cr));
}

static size_t httpc_write_cb(char *p, size_t size, size_t nmemb, void *ud)
{
    sbuf_t *b = ud;
    size_t n = size * nmemb;
    if (sbuf_append(b, p, n) < 0)
        return 0; /* aborts the transfer */
    return n;
}

/* What every request of c shares: no signals, connect and total
 * timeouts, TCP keepalive, and the abort flag polled while it runs. */
static void httpc_set_transfer_options(httpc_t *c, CURL *h, long timeout_ms)
{
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 0L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_SSLVERSION, (long)CURL_SSLVERSION_TLSv1_2);
    if (c->ca_file)
        curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
    c->errbuf[0] = '\0';
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, c->errbuf);
    if (c->abort_flag) {
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, httpc_progress_cb);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, (void *)c->abort_flag);
    }
}

/* Points the handle of c at url with the headers hl, the response body going
 * to write_cb with ud, and sets the transfer options. */
static void httpc_set_target(httpc_t *c, const char *url, struct curl_slist *hl, curl_write_callback write_cb,
                             void *ud, long timeout_ms)
{
    curl_easy_setopt(c->curl, CURLOPT_URL, url);
    curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, ud);
    httpc_set_transfer_options(c, c->curl, timeout_ms);
}

/* Begins a request of c to path: resets its handle and returns the full URL
 * (malloc'd; NULL when out of memory, nothing else done), with *ret_headers
 * holding accept and the token's Authorization header. */
static char *httpc_start(httpc_t *c, const char *path, const char *accept, struct curl_slist **ret_headers)
{
    curl_easy_reset(c->curl);
    fd_curl_cloexec(c->curl);
    size_t ul = strlen(c->base) + strlen(path) + 1;
    char *url = malloc(ul);
    if (!url)
        return NULL;
    snprintf(url, ul, "%s%s", c->base, path);
    struct curl_slist *hl = curl_slist_append(NULL, accept);
    if (c->auth_header)
        hl = curl_slist_append(hl, c->auth_header);
    *ret_headers = hl;
    return url;
}

int httpc_request(httpc_t *c, const char *method, const char *path, json_object *body,
                  const char *const *headers, long timeout_ms, httpc_response_t *ret)
{
    memset(ret, 0, sizeof *ret);
    CURL *h = c->curl;
    struct curl_slist *hl = NULL;
    char *url = httpc_start(c, path, "Accept: application/json", &hl);
    if (!url)
        return SBX_ENOMEM;
    for (const char *const *hp = headers; hp && *hp; hp++)
        hl = curl_slist_append(hl, *hp);
    char *payload = NULL;
    if (body) {
        payload = jsonx_dump(body);
        hl = curl_slist_append(hl, "Content-Type: application/json");
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, payload ? payload : "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)(payload ? strlen(payload) : 0));
    } else if (strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, 0L);
    }
    /* Expect: 100-continue only adds a round trip for our small bodies. */
    hl = curl_slist_append(hl, "Expect:");

    sbuf_t buf;
    sbuf_init(&buf, SBX_MAX_RESPONSE_BYTES);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (strcmp(method, "GET") == 0)
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    httpc_set_target(c, url, hl, httpc_write_cb, &buf, timeout_ms);

    CURLcode cr = curl_easy_perform(h);
    int r = 0;
    if (cr != CURLE_OK) {
        if (buf.truncated) {
            snprintf(ret->error, sizeof ret->error, "response larger than %u bytes", SBX_MAX_RESPONSE_BYTES);
            r = SBX_ETOOBIG;
        } else {
            httpc_transport_error(c, cr, ret->error, sizeof ret->error);
            if (cr == CURLE_ABORTED_BY_CALLBACK)
                snprintf(ret->error, sizeof ret->error, "aborted");
            r = cr == CURLE_OPERATION_TIMEDOUT ? SBX_ETIMEOUT : SBX_EIO;
        }
    } else {
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &ret->status);
        ret->body = sbuf_detach(&buf, &ret->body_len);
        if (ret->body && ret->body_len > 0) {
            json_object *j = NULL;
            if (jsonx_parse(ret->body, ret->body_len, &j, NULL) == 0)
                ret->json = j;
        }
    }
    sbuf_release(&buf);
    curl_slist_free_all(hl);
    free(payload);
    free(url);
    return r;
}

void httpc_response_release(httpc_response_t *r)
{
    if (!r)
        return;
    free(r->body);
    if (r->json)
        json_object_put(r->json);
    memset(r, 0, sizeof *r);
}

/* A body's own words, for an answer that is not the API's: an HTML page's
 * <title> (what nginx and most proxies send: "413 Request Entity Too
 * Large"), else its first line of text; printable ASCII, spaces collapsed,
 * at most cap - 1 bytes. "" when there is none. */
static void httpc_body_words(const char *body, size_t len, char *out, size_t cap)
{
    const char *p = body, *end = body + len;
    const char *t = body ? strcasestr(body, "<title>") : NULL;
    if (t && t < end) {
        p = t + 7;
        const char *te = strcasestr(p, "</title>");
        end = te ? te : end;
    }
    size_t n = 0;
    bool space = false, in_tag = false;
    for (; p && p < end && n + 1 < cap; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '<')
            in_tag = true;
        if (in_tag) {
            in_tag = ch != '>';
            continue;
        }
        if (ch == '\n' && n > 0 && !t)
            break;
        if (ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n') {
            space = n > 0;
            continue;
        }
        if (ch < 0x20 || ch > 0x7e)
            continue;
        if (space && n + 2 < cap)
            out[n++] = ' ';
        space = false;
        out[n++] = (char)ch;
    }
    out[n] = '\0';
}

void httpc_api_error(const httpc_response_t *r, const char **ret_code, const char **ret_message)
{
    static _Thread_local char foreign[320];
    json_object *e = jsonx_get_obj(r->json, "error");
    const char *code = jsonx_get_str(e, "code");
    const char *msg = jsonx_get_str(e, "message");
    *ret_code = code ? code : "http_error";
    if (msg || !r->status) {
        *ret_message = msg ? msg : r->error;
        return;
    }
    /* Not the API's answer: something in front of the controller (a
     * proxy's 413, 502 or 504) answered; say so, in its own words. */
    char words[160];
    httpc_body_words(r->body, r->body_len, words, sizeof words);
    snprintf(foreign, sizeof foreign, "HTTP %ld without the API's error body, so likely from a proxy in front of the "
             "controller%s%s", r->status, words[0] ? ": " : " (an empty body)", words);
    *ret_message = foreign;
}

char *httpc_escape(const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s);
    char *o = malloc(n * 3 + 1);
    if (!o)
        return NULL;
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || strchr("-._~", ch)) {
            o[j++] = (char)ch;
        } else {
            o[j++] = '%';
            o[j++] = hex[ch >> 4];
            o[j++] = hex[ch & 15];
        }
    }
    o[j] = '\0';
    return o;
}

/* ---- streamed answers ---- */

typedef struct httpc_stream {
    CURL *h;
    long status;
    sbuf_t line;             /* the line so far (2xx) */
    sbuf_t body;             /* the whole body (other statuses) */
    httpc_line_fn on_line;
    void *ud;
    bool stopped;            /* on_line asked to stop */
    bool too_long;
} httpc_stream_t;

static size_t httpc_stream_write_cb(char *p, size_t size, size_t nmemb, void *ud)
{
    httpc_stream_t *st = ud;
    size_t n = size * nmemb;
    if (st->status == 0)
        curl_easy_getinfo(st->h, CURLINFO_RESPONSE_CODE, &st->status);
    if (st->status < 200 || st->status >= 300)
        return sbuf_append(&st->body, p, n) < 0 ? 0 : n;
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '\n')
            continue;
        if (sbuf_append(&st->line, p + start, i - start) < 0) {
            st->too_long = true;
            return 0;
        }
        int r = st->on_line(st->ud, st->line.data ? st->line.data : "", st->line.len);
        sbuf_reset(&st->line);
        start = i + 1;
        if (r < 0) {
            st->stopped = true;
            return 0;
        }
    }
    if (start < n && sbuf_append(&st->line, p + start, n - start) < 0) {
        st->too_long = true;
        return 0;
    }
    return n;
}

int httpc_stream_lines(httpc_t *c, const char *path, long timeout_ms, size_t max_line, httpc_line_fn on_line,
                       void *ud, httpc_response_t *ret)
{
    memset(ret, 0, sizeof *ret);
    CURL *h = c->curl;
    struct curl_slist *hl = NULL;
    char *url = httpc_start(c, path, "Accept: application/x-ndjson, application/json", &hl);
    if (!url)
        return SBX_ENOMEM;
    httpc_stream_t st = { .h = h, .on_line = on_line, .ud = ud };
    sbuf_init(&st.line, max_line);
    sbuf_init(&st.body, SBX_MAX_RESPONSE_BYTES);
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    httpc_set_target(c, url, hl, httpc_stream_write_cb, &st, timeout_ms);
    CURLcode cr = curl_easy_perform(h);
    int r = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &ret->status);
    if (cr == CURLE_OK && st.line.len > 0 && ret->status >= 200 && ret->status < 300 &&
        on_line(ud, st.line.data, st.line.len) < 0)
        st.stopped = true;
    if (st.stopped || (cr == CURLE_ABORTED_BY_CALLBACK && c->abort_flag && *c->abort_flag)) {
        snprintf(ret->error, sizeof ret->error, "aborted");
        r = SBX_ECANCELLED;
    } else if (st.too_long || st.body.truncated) {
        snprintf(ret->error, sizeof ret->error, st.too_long ? "a line of the answer is longer than %zu bytes"
                                                            : "response larger than %zu bytes",
                 st.too_long ? max_line : (size_t)SBX_MAX_RESPONSE_BYTES);
        r = SBX_ETOOBIG;
    } else if (cr != CURLE_OK) {
        httpc_transport_error(c, cr, ret->error, sizeof ret->error);
        r = cr == CURLE_OPERATION_TIMEDOUT ? SBX_ETIMEOUT : SBX_EIO;
    } else if (ret->status < 200 || ret->status >= 300) {
        ret->body = sbuf_detach(&st.body, &ret->body_len);
        json_object *j = NULL;
        if (ret->body && ret->body_len > 0 && jsonx_parse(ret->body, ret->body_len, &j, NULL) == 0)
            ret->json = j;
    }
    if (r < 0 && r != SBX_ECANCELLED && r != SBX_ETOOBIG)
        ret->status = 0;
    sbuf_release(&st.line);
    sbuf_release(&st.body);
    curl_slist_free_all(hl);
    free(url);
    return r;
}

/* ---- streamed transfers ---- */

typedef struct httpc_xfer {
    CURL *h;
    long status;
    httpc_read_fn rd;
    httpc_write_fn wr;
    void *ud;
    sbuf_t body;             /* a non-2xx answer, or a 2xx one without wr */
    bool aborted;            /* a callback asked to stop */
    const char *header_name;
    size_t header_len;
    char *header;
} httpc_xfer_t;

static size_t httpc_xfer_read_cb(char *buf, size_t size, size_t nitems, void *ud)
{
    httpc_xfer_t *x = ud;
    long n = x->rd(x->ud, buf, size * nitems);
    if (n < 0) {
        x->aborted = true;
        return CURL_READFUNC_ABORT;
    }
    return (size_t)n;
}

static size_t httpc_xfer_write_cb(char *p, size_t size, size_t nmemb, void *ud)
{
    httpc_xfer_t *x = ud;
    size_t n = size * nmemb;
    if (x->status == 0)
        curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &x->status);
    if (x->status < 200 || x->status >= 300 || !x->wr)
        return sbuf_append(&x->body, p, n) < 0 ? 0 : n;
    if (x->wr(x->ud, p, n) < 0) {
        x->aborted = true;
        return 0;
    }
    return n;
}

static size_t httpc_xfer_header_cb(char *p, size_t size, size_t nitems, void *ud)
{
    httpc_xfer_t *x = ud;
    size_t n = size * nitems;
    if (x->header_name && !x->header && n > x->header_len + 1 && strncasecmp(p, x->header_name, x->header_len) == 0 &&
        p[x->header_len] == ':') {
        size_t a = x->header_len + 1, b = n;
        while (a < b && (p[a] == ' ' || p[a] == '\t'))
            a++;
        while (b > a && (p[b - 1] == '\r' || p[b - 1] == '\n' || p[b - 1] == ' '))
            b--;
        x->header = strndup(p + a, b - a);
    }
    return n;
}

int httpc_transfer(httpc_t *c, const char *method, const char *path, int64_t size, httpc_read_fn rd,
                   httpc_write_fn wr, void *ud, const char *header_name, char **ret_header, long timeout_ms,
                   httpc_response_t *ret)
{
    memset(ret, 0, sizeof *ret);
    if (ret_header)
        *ret_header = NULL;
    CURL *h = c->curl;
    struct curl_slist *hl = NULL;
    char *url = httpc_start(c, path, "Accept: */*", &hl);
    if (!url)
        return SBX_ENOMEM;
    httpc_xfer_t x = { .h = h, .rd = rd, .wr = wr, .ud = ud, .header_name = header_name,
                       .header_len = header_name ? strlen(header_name) : 0 };
    sbuf_init(&x.body, SBX_MAX_RESPONSE_BYTES);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (rd) {
        hl = curl_slist_append(hl, "Content-Type: application/octet-stream");
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, httpc_xfer_read_cb);
        curl_easy_setopt(h, CURLOPT_READDATA, &x);
        if (size >= 0)
            curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)size);
        else
            hl = curl_slist_append(hl, "Transfer-Encoding: chunked");
        /* curl asks for 100 Continue on every upload; a refusal then costs
         * no body. A small one's body costs less than the round trip (and a
         * TLS controller's 100 comes with its answer: curl would wait 1 s
         * for it), so it goes at once. */
        if (size >= 0 && size < HTTPC_EXPECT_MIN_BYTES)
            hl = curl_slist_append(hl, "Expect:");
    } else if (strcmp(method, "GET") == 0) {
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    }
    httpc_set_target(c, url, hl, httpc_xfer_write_cb, &x, timeout_ms);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, httpc_xfer_header_cb);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
    CURLcode cr = curl_easy_perform(h);
    int r = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &ret->status);
    if (x.aborted || (cr == CURLE_ABORTED_BY_CALLBACK && c->abort_flag && *c->abort_flag)) {
        snprintf(ret->error, sizeof ret->error, "aborted");
        r = SBX_ECANCELLED;
    } else if (x.body.truncated) {
        snprintf(ret->error, sizeof ret->error, "response larger than %u bytes", SBX_MAX_RESPONSE_BYTES);
        r = SBX_ETOOBIG;
    } else if (cr != CURLE_OK && !(ret->status >= 400 && cr == CURLE_SEND_ERROR)) {
        httpc_transport_error(c, cr, ret->error, sizeof ret->error);
        r = cr == CURLE_OPERATION_TIMEDOUT ? SBX_ETIMEOUT : SBX_EIO;
    }
    if (r == 0 || ret->status >= 300) {
        ret->body = sbuf_detach(&x.body, &ret->body_len);
        json_object *j = NULL;
        if (ret->body && ret->body_len > 0 && jsonx_parse(ret->body, ret->body_len, &j, NULL) == 0)
            ret->json = j;
        if (ret->status >= 300)
            r = 0; /* an answer came: the caller reads its error */
    }
    if (r < 0 && r != SBX_ECANCELLED)
        ret->status = 0;
    if (ret_header)
        *ret_header = x.header;
    else
        free(x.header);
    sbuf_release(&x.body);
    curl_slist_free_all(hl);
    free(url);
    return r;
}

int httpc_upgrade_open(httpc_t *c, const char *path, const char *upgrade, void **ret_curl, int *ret_fd, char *err,
                       size_t errlen)
{
    *ret_curl = NULL;
    *ret_fd = -1;
    CURL *h = curl_easy_init();
    const char *host = strstr(c->base, "://");
    if (!h || !host) {
        if (h)
            curl_easy_cleanup(h);
        snprintf(err, errlen, "out of memory");
        return SBX_EIO;
    }
    fd_curl_cloexec(h);
    host += 3;
    httpc_set_transfer_options(c, h, 0);
    curl_easy_setopt(h, CURLOPT_URL, c->base);
    curl_easy_setopt(h, CURLOPT_CONNECT_ONLY, 1L);
    CURLcode cr = curl_easy_perform(h);
    curl_socket_t fd = CURL_SOCKET_BAD;
    if (cr == CURLE_OK)
        cr = curl_easy_getinfo(h, CURLINFO_ACTIVESOCKET, &fd);
    if (cr != CURLE_OK || fd == CURL_SOCKET_BAD) {
        httpc_transport_error(c, cr, err, errlen);
        curl_easy_cleanup(h);
        return SBX_EIO;
    }
    size_t cap = strlen(path) + strlen(host) + strlen(upgrade) + (c->auth_header ? strlen(c->auth_header) : 0) + 160;
    char *req = malloc(cap);
    int n = req ? snprintf(req, cap,
                           "POST %s HTTP/1.1\r\nHost: %s\r\n%s%sConnection: Upgrade\r\nUpgrade: %s\r\n"
                           "Content-Length: 0\r\n\r\n",
                           path, host, c->auth_header ? c->auth_header : "", c->auth_header ? "\r\n" : "", upgrade)
                : -1;
    size_t off = 0;
    while (n > 0 && off < (size_t)n) {
        size_t sent = 0;
        cr = curl_easy_send(h, req + off, (size_t)n - off, &sent);
        if (cr == CURLE_AGAIN) {
            struct pollfd p = { .fd = fd, .events = POLLOUT };
            poll(&p, 1, 1000);
            continue;
        }
        if (cr != CURLE_OK)
            break;
        off += sent;
    }
    if (req)
        sodium_memzero(req, cap);
    free(req);
    if (n <= 0 || off < (size_t)n) {
        snprintf(err, errlen, "%s", n <= 0 ? "out of memory" : curl_easy_strerror(cr));
        curl_easy_cleanup(h);
        return SBX_EIO;
    }
    *ret_curl = h;
    *ret_fd = (int)fd;
    return 0;
}
