/* The route proxy: the controller's second listener (route_listen), which
 * serves public routes. A request names its route by host
 * ({route}.{route_domain}) or by path (/r/{route}/...); the proxy checks
 * the route (active, unexpired, its sandbox running) and its access token,
 * then connects to the worker that runs the sandbox, hands it a signed
 * grant (common/grant.h) and relays bytes both ways: request and response
 * bodies stream with bounded buffers, a WebSocket upgrade becomes a
 * tunnel. One request per client connection (the upstream request says
 * Connection: close). The proxy runs on the HTTP threads' event loops and
 * their database connections; it never connects to a container itself. */
#ifndef SBX_PROXY_H
#define SBX_PROXY_H

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "config.h"
#include "controller.h"
#include "httphead.h"
#include "limits.h"

/* A network whose X-Forwarded-* headers are believed (trusted_proxies). */
struct proxy_net {
    int family;              /* AF_INET or AF_INET6 */
    unsigned char addr[16];
    int bits;
};

struct evbuffer;
typedef struct proxy_thread proxy_thread_t;

/* The worker's one-line answer to a forward preamble (worker/forward.h:
 * "SANDBOX-FORWARD/1 <status> <code> [<message>]"). */
typedef struct proxy_worker_reply {
    int status;
    char code[48];
    char msg[300];           /* the message; the code when there is none */
} proxy_worker_reply_t;

/* Reads the worker's answer from in (the route proxy's and the logs
 * stream's upstream): 1 with *ret set once a whole line came (taken from
 * in), 0 while it has not, -1 when what came is not such a line (or runs
 * past 1024 bytes without ending). */
int proxy_worker_reply_read(struct evbuffer *in, proxy_worker_reply_t *ret);

/* Connects to a worker's forwarder at address ("IP:port"; TLS verified
 * against controller_worker_ca when ctl has it) for the data path (routes,
 * logs, files): preamble (when not NULL) queued, timeout_s for reads and
 * writes, the callbacks set, reading and writing on. NULL with *ret_why
 * (a sentence for the client) when the address is not one or the
 * connection cannot be made. */
struct bufferevent *proxy_worker_dial(controller_t *ctl, struct event_base *base, const char *address,
                                      struct evbuffer *preamble, int timeout_s, bufferevent_data_cb rcb,
                                      bufferevent_data_cb wcb, bufferevent_event_cb ecb, void *arg, const char **ret_why);
/* TCP keepalive on a connected worker connection (PROXY_KEEP*): a worker
 * host that vanished ends a quiet stream within about a minute. */
#define PROXY_KEEPIDLE_SECONDS 30
#define PROXY_KEEPINTVL_SECONDS 10
#define PROXY_KEEPCNT          3
void proxy_worker_keepalive(struct bufferevent *up);

/* Reads the route settings (limits, trusted_proxies) into ctl. */
int proxy_config(controller_t *ctl, const cfg_t *cfg, char *err, size_t errlen);

/* Starts accepting routed connections on base (a dup of ctl->route_fd),
 * using *db (the thread's connection, reconnected through db_ensure). */
proxy_thread_t *proxy_thread_new(controller_t *ctl, struct event_base *base, PGconn **db, char *err, size_t errlen);
/* Closes the listener and every open routed connection. */
void proxy_thread_free(proxy_thread_t *pt);

/* ---- pure parts, exposed for the unit tests ---- */

#define PROXY_MAX_HEADERS SBX_HTTP_MAX_HEADERS
#define PROXY_NAME_LEN 26    /* route names: 26 base32 characters */

typedef httphead_t proxy_head_t;

/* Parses a request head in place (common/httphead.h, CRLF line ends only,
 * headers kept): buf holds len bytes ending with the blank line, and is
 * NUL-terminated at len. 0, or SBX_EINVAL (malformed, or an absolute-form
 * target), or SBX_ETOOBIG (too many headers). */
int proxy_parse_head(char *buf, size_t len, proxy_head_t *ret);

/* The last value of header name (case-insensitive) or NULL. */
const char *proxy_head_get(const proxy_head_t *h, const char *name);

typedef enum {
    PROXY_ROUTE_NONE = 0,    /* not a route address */
    PROXY_ROUTE_HOST,        /* by host: forward the target as it is */
    PROXY_ROUTE_PATH,        /* by path: forward *ret_rest */
    PROXY_ROUTE_REDIRECT,    /* "/r/{name}" without its slash: redirect */
} proxy_route_kind_t;

/* Which route a request is for. host may be NULL; route_domain NULL or ""
 * when not configured. ret_name gets the name (PROXY_NAME_LEN + 1 bytes);
 * for PROXY_ROUTE_PATH *ret_rest is the target after "/r/{name}" (starts
 * with '/'); for a redirect, *ret_rest is what follows the name ("" or a
 * "?query"). */
proxy_route_kind_t proxy_route_for(const char *host, const char *target, const char *route_domain,
                                   char ret_name[PROXY_NAME_LEN + 1], const char **ret_rest);

/* Whether host names a port of a sandbox the way E2B's SDK does
 * (sandbox.getHost(port)): "{port}-{sandbox id}.{route_domain}", the port
 * 1..65535 without leading zeros, the id sbx_ and 26 base32 characters (any
 * case; ret_sandbox gets it in lower case). route_domain may end with the
 * listener's ":port" (then host must carry it too); else host's own port
 * is ignored. */
bool proxy_port_host(const char *host, const char *route_domain, char ret_sandbox[SBX_ID_MAX], int *ret_port);

/* Where a chunked request body ends: the scanner's state, zeroed to start. */
typedef struct proxy_chunked {
    int state;
    uint64_t left;   /* bytes of the current chunk's data still to come */
    int digits;      /* hex digits of the size line read */
} proxy_chunked_t;

/* Scans the next n bytes of a chunked body. Returns 0 when all n belong to
 * the body and it goes on, 1 when it ended within them (*ret_used: the bytes
 * up to and including its last CRLF; what follows is a next request), or
 * SBX_EINVAL for framing we cannot vouch for (a malformed size line, a size
 * over 15 hex digits, a missing CRLF, or trailer fields, which are refused
 * rather than forwarded). */
int proxy_chunked_scan(proxy_chunked_t *c, const char *p, size_t n, size_t *ret_used);
/* Decodes the next n bytes of a chunked body in place: the chunk data are
 * moved to the front of p (*ret_out bytes), the framing dropped; the same
 * returns as proxy_chunked_scan, *ret_used the bytes of p it took (all n
 * unless the body ended within them, or up to the bad byte). */
int proxy_chunked_decode(proxy_chunked_t *c, char *p, size_t n, size_t *ret_used, size_t *ret_out);

/* Parses "a.b.c.d[/n], [v6][/n], ..." into a malloc'd array. */
int proxy_nets_parse(const char *text, struct proxy_net **ret, int *ret_n, char *err, size_t errlen);
bool proxy_nets_contain(const struct proxy_net *nets, int n, const struct sockaddr *sa);

#endif
