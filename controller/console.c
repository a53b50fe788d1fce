/* GET /console/…: the web console (docs/console.md). Its files are built in
 * (console.h); what it shows comes from the API with the token the person
 * signs in with, which the page keeps in the tab's session storage and
 * sends only as an Authorization header. The files themselves need no
 * token. Every answer carries a policy that lets the page load its own
 * files and talk to its own origin only: no inline script, no other
 * origin, no framing, no referrer. */
#include "console.h"
#include "server_int.h"

#include <string.h>

#define CONSOLE_CSP                                                                                                 \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; "     \
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

static void console_headers(req_t *rq)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(rq->ev);
    evhttp_add_header(h, "Content-Security-Policy", CONSOLE_CSP);
    evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
    evhttp_add_header(h, "X-Frame-Options", "DENY");
    evhttp_add_header(h, "Referrer-Policy", "no-referrer");
    evhttp_add_header(h, "Cross-Origin-Opener-Policy", "same-origin");
    evhttp_add_header(h, "Cross-Origin-Resource-Policy", "same-origin");
}

void console_route(req_t *rq)
{
    rq->route_tmpl = "/console/{file}";
    if (rq->method != EVHTTP_REQ_GET && rq->method != EVHTTP_REQ_HEAD) {
        evhttp_add_header(evhttp_request_get_output_headers(rq->ev), "Allow", "GET, HEAD");
        http_reply_error(rq, API_METHOD_NOT_ALLOWED, "the console is read with GET");
        return;
    }
    const char *name = rq->nsegs == 1 ? "index.html" : rq->nsegs == 2 ? rq->segs[1] : NULL;
    if (rq->nsegs == 1 && rq->path[strlen(rq->path) - 1] != '/') {
        /* /console: its files are relative to /console/ (a proxy's prefix
         * kept: the Location is relative too) */
        evhttp_add_header(evhttp_request_get_output_headers(rq->ev), "Location", "console/");
        http_reply_text(rq, 308, "text/plain; charset=utf-8", "console/\n", 9);
        return;
    }
    for (const console_file_t *f = console_files; name && f->name; f++)
        if (strcmp(f->name, name) == 0) {
            console_headers(rq);
            http_reply_text(rq, 200, f->content_type, f->data, f->len);
            return;
        }
    http_reply_error(rq, API_NOT_FOUND, "no such console file: %.100s", rq->path);
}
