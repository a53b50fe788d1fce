/* libevent's own error pages in the API's JSON error shape (controller/http_errpage.c). */
#ifndef SBX_HTTP_ERRPAGE_H
#define SBX_HTTP_ERRPAGE_H

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdbool.h>

/* When out ends with a whole error page as libevent 2.1's evhttp_send_error
 * queues it (status line, exactly its four headers, its HTML body), replaces
 * that page in place by {"error":{"code","message"}} with the status of the
 * code in common/errors.c's table; what precedes it is kept. Returns true
 * when it rewrote one. */
bool http_errpage_rewrite(struct evbuffer *out);

/* For evhttp_set_bevcb: the socket bufferevent libevent would make itself
 * (arg NULL) or a TLS-accepting one on the SSL_CTX arg (tls.c), with its
 * (plaintext) output watched by http_errpage_rewrite. NULL when out of
 * memory (libevent then drops the connection). */
struct bufferevent *http_errpage_bev(struct event_base *base, void *arg);

#endif
