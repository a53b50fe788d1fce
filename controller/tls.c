/* TLS server contexts and accepting bufferevents. */
#include "tls.h"
#include "errors.h"

/* OpenSSL's headers include <limits.h> for INT_MAX, and -Icommon makes
 * that common/limits.h. */
#ifndef INT_MAX
#define INT_MAX __INT_MAX__
#endif
#include <event2/bufferevent_ssl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

/* OpenSSL's reason for the last failure (its error queue emptied). */
static void tls_reason(char *buf, size_t len)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    snprintf(buf, len, "%s", r ? r : "not a valid PEM file");
    ERR_clear_error();
}

int tls_server_ctx_new(const char *what, const char *cert_file, const char *key_file, SSL_CTX **ret, char *err,
                       size_t errlen)
{
    bool have_cert = cert_file && *cert_file, have_key = key_file && *key_file;
    *ret = NULL;
    if (!have_cert && !have_key)
        return 0;
    if (!have_cert || !have_key) {
        snprintf(err, errlen, "%s_cert and %s_key go together: set both or neither", what, what);
        return SBX_EINVAL;
    }
    char why[160];
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) {
        snprintf(err, errlen, "%s: cannot make a TLS context", what);
        return SBX_ENOMEM;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
    if (SSL_CTX_use_certificate_chain_file(ctx, cert_file) != 1) {
        tls_reason(why, sizeof why);
        snprintf(err, errlen, "%s_cert %.200s: cannot load the certificate: %s", what, cert_file, why);
        goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
        bool mismatch = ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH;
        tls_reason(why, sizeof why);
        if (mismatch)
            snprintf(err, errlen, "%s_key %.200s does not match the certificate %.200s", what, key_file, cert_file);
        else
            snprintf(err, errlen, "%s_key %.200s: cannot load the private key: %s", what, key_file, why);
        goto fail;
    }
    *ret = ctx;
    return 0;
fail:
    SSL_CTX_free(ctx);
    return SBX_EINVAL;
}

void tls_ctx_free(SSL_CTX *ctx)
{
    if (ctx)
        SSL_CTX_free(ctx);
}

struct bufferevent *tls_bev_accepting(struct event_base *base, SSL_CTX *ctx, evutil_socket_t fd)
{
    SSL *ssl = SSL_new(ctx);
    if (!ssl)
        return NULL;
    struct bufferevent *bev =
        bufferevent_openssl_socket_new(base, fd, ssl, BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) {
        SSL_free(ssl);
        return NULL;
    }
    /* Clients that close without a close_notify (most HTTP clients) end the
     * connection with EOF, not an error. */
    bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    return bev;
}

void tls_bev_shutdown_write(struct bufferevent *bev)
{
    SSL *ssl = bufferevent_openssl_get_ssl(bev);
    if (ssl) {
        /* Writes the close_notify straight to the socket (a few bytes into an
         * emptied send buffer); a failure only leaves the EOF below. */
        if (SSL_shutdown(ssl) < 0)
            ERR_clear_error();
    }
    shutdown(bufferevent_getfd(bev), SHUT_WR);
}
