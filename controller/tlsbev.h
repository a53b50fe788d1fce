/* TLS on the controller's event loops: OpenSSL bufferevents for the API and
 * route listeners (accepting) and for the hop to a worker's forwarder
 * (connecting, verified). Contexts come from common/tls.h. */
#ifndef SBX_TLSBEV_H
#define SBX_TLSBEV_H

#include "tls.h"

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <sys/socket.h>

/* A bufferevent that accepts a TLS connection on fd (-1: set later, as
 * evhttp's bevcb does) with ctx; its input and output evbuffers carry the
 * plaintext, and BEV_EVENT_CONNECTED reports the handshake done. Freeing it
 * closes fd and frees its SSL. NULL when out of memory (fd is not closed). */
struct bufferevent *tls_bev_accepting(struct event_base *base, SSL_CTX *ctx, evutil_socket_t fd);

/* A bufferevent connecting to sa (an IP address and port) over TCP, then
 * TLS with the client context ctx: the peer's certificate must verify
 * against ctx's CA and name sa's IP address (subjectAltName IP). Events as
 * for a socket bufferevent after bufferevent_socket_connect: CONNECTED once
 * the handshake is done, ERROR when the connection or the verification
 * fails (tls_bev_failure says why). NULL when the connection fails at once
 * or out of memory. Freeing it closes the socket. */
struct bufferevent *tls_bev_connect(struct event_base *base, SSL_CTX *ctx, const struct sockaddr *sa, int salen);

/* Why bev's TLS failed: the certificate verification's result, or
 * OpenSSL's reason; "" for a bufferevent without TLS and for a failure of
 * the connection itself (refused, reset). */
void tls_bev_failure(struct bufferevent *bev, char *buf, size_t len);

/* Ends the sending half of bev's connection: a TLS close_notify first
 * when bev is a TLS bufferevent, then shutdown(SHUT_WR) of its socket. Call
 * once its output has been written. */
void tls_bev_shutdown_write(struct bufferevent *bev);

#endif
