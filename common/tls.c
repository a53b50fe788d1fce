/* TLS contexts from PEM files. */
#include "tls.h"
#include "errors.h"
#include "tls_openssl.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* OpenSSL's reason for the last failure (its error queue emptied). */
static void tls_reason(char *buf, size_t len)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    snprintf(buf, len, "%s", r ? r : "not a valid PEM file");
    ERR_clear_error();
}

/* What every context shares: TLS 1.2+, no compression, no renegotiation.
 * (Not SSL_MODE_ENABLE_PARTIAL_WRITE: libevent's OpenSSL bufferevents
 * assume whole writes.) */
static SSL_CTX *tls_ctx_base(const SSL_METHOD *method)
{
    SSL_CTX *ctx = SSL_CTX_new(method);
    if (!ctx)
        return NULL;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE |
                                 SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
    return ctx;
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
    SSL_CTX *ctx = tls_ctx_base(TLS_server_method());
    if (!ctx) {
        snprintf(err, errlen, "%s: cannot make a TLS context", what);
        return SBX_ENOMEM;
    }
    /* No session tickets: peers do not resume, and a ticket written after
     * the handshake would be one more thing a blocking relay must flush. */
    SSL_CTX_set_num_tickets(ctx, 0);
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

int tls_client_ctx_new(const char *what, const char *ca_file, SSL_CTX **ret, char *err, size_t errlen)
{
    *ret = NULL;
    if (!ca_file || !*ca_file)
        return 0;
    SSL_CTX *ctx = tls_ctx_base(TLS_client_method());
    if (!ctx) {
        snprintf(err, errlen, "%s: cannot make a TLS context", what);
        return SBX_ENOMEM;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    if (SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1) {
        char why[160];
        tls_reason(why, sizeof why);
        snprintf(err, errlen, "%s %.200s: cannot load the CA certificates: %s", what, ca_file, why);
        SSL_CTX_free(ctx);
        return SBX_EINVAL;
    }
    *ret = ctx;
    return 0;
}

void tls_ctx_free(SSL_CTX *ctx)
{
    if (ctx)
        SSL_CTX_free(ctx);
}

void tls_failure_text(SSL *ssl, char *buf, size_t len)
{
    long v = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
    if (v != X509_V_OK) {
        snprintf(buf, len, "certificate verify failed: %s", X509_verify_cert_error_string(v));
        ERR_clear_error();
        return;
    }
    unsigned long e = ERR_peek_last_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    snprintf(buf, len, "%s", r ? r : "the connection failed during the TLS handshake");
    ERR_clear_error();
}
