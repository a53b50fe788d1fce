/* GET /setup.sh and GET /client/NAME: the one-line installer of the
 * clients and the files it installs (client_files.h, docs/client-setup.md).
 * The installer is tools/client-setup.sh with this controller's URL (the
 * scheme of its listener and the request's Host), the version and the
 * files' SHA-256 sums filled in; the sums are taken once, at the first
 * request. */
#include "client_files.h"
#include "sbuf.h"
#include "server_int.h"
#include "version.h"

#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#define CLIENT_ARCH "x86_64"
#elif defined(__aarch64__)
#define CLIENT_ARCH "aarch64"
#else
#define CLIENT_ARCH "unknown"
#endif

#define CLIENT_SETUP_NAME "setup.sh"
#define CLIENT_FILES_MAX 8

/* The files' "SHA256 MODE NAME" lines for the installer (the template not
 * among them), made once. */
static pthread_once_t sums_once = PTHREAD_ONCE_INIT;
static char sums[CLIENT_FILES_MAX * 96];

static void sums_make(void)
{
    size_t off = 0;
    for (const client_file_t *f = client_files_embedded; f && f->name; f++) {
        if (strcmp(f->name, CLIENT_SETUP_NAME) == 0)
            continue;
        unsigned char h[crypto_hash_sha256_BYTES];
        char hex[2 * crypto_hash_sha256_BYTES + 1];
        crypto_hash_sha256(h, f->start, (unsigned long long)(f->end - f->start));
        sodium_bin2hex(hex, sizeof hex, h, sizeof h);
        int n = snprintf(sums + off, sizeof sums - off, "%s%s %o %s", off ? "\n" : "", hex, f->mode, f->name);
        if (n < 0 || (size_t)n >= sizeof sums - off)
            break;
        off += (size_t)n;
    }
}

static const client_file_t *client_file(const char *name)
{
    for (const client_file_t *f = client_files_embedded; f && f->name; f++)
        if (strcmp(f->name, name) == 0)
            return f;
    return NULL;
}

/* Appends text to b, replacing each @KEY@ of keys with its value. 0, or
 * SBX_ENOMEM. */
static int template_fill(sbuf_t *b, const char *t, size_t n, const char *const keys[][2], size_t nkeys)
{
    const char *end = t + n;
    int rc = 0;
    while (t < end && rc == 0) {
        const char *at = memchr(t, '@', (size_t)(end - t));
        if (!at)
            return sbuf_append(b, t, (size_t)(end - t));
        rc = sbuf_append(b, t, (size_t)(at - t));
        size_t k = 0;
        for (; k < nkeys; k++) {
            size_t kl = strlen(keys[k][0]);
            if ((size_t)(end - at) >= kl && memcmp(at, keys[k][0], kl) == 0)
                break;
        }
        if (rc == 0)
            rc = sbuf_append(b, k < nkeys ? keys[k][1] : "@", k < nkeys ? strlen(keys[k][1]) : 1);
        t = at + (k < nkeys ? strlen(keys[k][0]) : 1);
    }
    return rc;
}

void client_setup_route(req_t *rq)
{
    const client_file_t *tpl = client_file(CLIENT_SETUP_NAME);
    if (!tpl) {
        http_reply_error(rq, API_NOT_FOUND, "this controller was built without the client files");
        return;
    }
    /* The URL the client reached: it goes into the script between single
     * quotes, so a Host of a host name's or an address's characters only. */
    const char *host = http_header(rq, "Host");
    if (!host || !*host || strlen(host) > 255 ||
        strspn(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]") != strlen(host)) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "the installer needs the request's Host header (a host name or "
                         "address, with its port)");
        return;
    }
    pthread_once(&sums_once, sums_make);
    char url[300];
    snprintf(url, sizeof url, "%s://%s", rq->ctl->api_tls ? "https" : "http", host);
    const char *const keys[][2] = { { "@SBX_URL@", url }, { "@SBX_VERSION@", SBX_VERSION },
                                    { "@SBX_ARCH@", CLIENT_ARCH }, { "@SBX_FILES@", sums } };
    sbuf_t b;
    sbuf_init(&b, 0);
    if (template_fill(&b, (const char *)tpl->start, (size_t)(tpl->end - tpl->start), keys,
                      sizeof keys / sizeof keys[0]) < 0) {
        sbuf_release(&b);
        http_reply_error(rq, API_INTERNAL, "out of memory");
        return;
    }
    evhttp_add_header(evhttp_request_get_output_headers(rq->ev), "X-Content-Type-Options", "nosniff");
    http_reply_text(rq, 200, "text/x-shellscript; charset=utf-8", b.data ? b.data : "", b.len);
    sbuf_release(&b);
}

void client_file_route(req_t *rq, const char *name)
{
    const client_file_t *f = client_file(name);
    if (!f || strcmp(f->name, CLIENT_SETUP_NAME) == 0) {
        http_reply_error(rq, API_NOT_FOUND, "no such client file: %.100s (GET /setup.sh lists them)", name);
        return;
    }
    evhttp_add_header(evhttp_request_get_output_headers(rq->ev), "X-Content-Type-Options", "nosniff");
    http_reply_text(rq, 200, "application/octet-stream", (const char *)f->start, (size_t)(f->end - f->start));
}
