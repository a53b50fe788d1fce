/* TLS for the controller's listeners (OpenSSL through libevent's
 * bufferevents): a server context from PEM files, and accepting
 * bufferevents on it. TLS 1.2 and later only. */
#ifndef SBX_TLS_H
#define SBX_TLS_H

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stddef.h>

/* OpenSSL's SSL_CTX, named without its headers (they include <limits.h>,
 * which common/limits.h shadows). */
typedef struct ssl_ctx_st SSL_CTX;

/* Makes a server context serving the certificate chain cert_file with the
 * private key key_file (both PEM). what names the setting pair in messages
 * ("api_tls"). Both empty: *ret = NULL and 0 (plain HTTP). One set without
 * the other, an unreadable or invalid file, or a key that does not match the
 * certificate: SBX_EINVAL with a one-line reason in err naming the file and
 * OpenSSL's reason. The caller frees *ret with tls_ctx_free. */
int tls_server_ctx_new(const char *what, const char *cert_file, const char *key_file, SSL_CTX **ret, char *err,
                       size_t errlen);

/* Frees a context (NULL: nothing). Connections made on it keep their own
 * reference. */
void tls_ctx_free(SSL_CTX *ctx);

/* A bufferevent that accepts a TLS connection on fd (-1: set later, as
 * evhttp's bevcb does) with ctx; its input and output evbuffers carry the
 * plaintext. Freeing it closes fd and frees its SSL. NULL when out of
 * memory. */
struct bufferevent *tls_bev_accepting(struct event_base *base, SSL_CTX *ctx, evutil_socket_t fd);

/* Ends the sending half of bev's connection: a TLS close_notify first
 * when bev is a TLS bufferevent, then shutdown(SHUT_WR) of its socket. Call
 * once its output has been written. */
void tls_bev_shutdown_write(struct bufferevent *bev);

#endif
