/* TLS contexts between Sandbox's machines (OpenSSL): a server context from
 * PEM certificate and key files, a client context verifying peers against a
 * PEM CA file. TLS 1.2 and later only. Built only with the server
 * (controller/tlsbev.c and worker/forward.c use it). */
#ifndef SBX_TLS_H
#define SBX_TLS_H

#include <stddef.h>

/* OpenSSL's SSL_CTX and SSL, named without its headers (they include
 * <limits.h>, which common/limits.h shadows). */
typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

/* Makes a server context serving the certificate chain cert_file with the
 * private key key_file (both PEM). what names the setting pair in messages
 * ("api_tls" for api_tls_cert / api_tls_key). Both empty: *ret = NULL and 0
 * (plain TCP). One set without the other, an unreadable or invalid file, or
 * a key that does not match the certificate: SBX_EINVAL with a one-line
 * reason in err naming the setting and the file. The caller frees *ret with
 * tls_ctx_free. */
int tls_server_ctx_new(const char *what, const char *cert_file, const char *key_file, SSL_CTX **ret, char *err,
                       size_t errlen);

/* Makes a client context that verifies every peer's certificate against the
 * PEM CA file ca_file (what: the setting's name, for messages). Empty
 * ca_file: *ret = NULL and 0 (plain TCP). An unreadable or invalid file:
 * SBX_EINVAL with a reason in err. Free with tls_ctx_free. */
int tls_client_ctx_new(const char *what, const char *ca_file, SSL_CTX **ret, char *err, size_t errlen);

/* Frees a context (NULL: nothing). Connections made on it keep their own
 * reference. */
void tls_ctx_free(SSL_CTX *ctx);

/* Why the TLS connection ssl failed, for a log line: the certificate
 * verification's result when that failed, else OpenSSL's last reason (its
 * error queue emptied). */
void tls_failure_text(SSL *ssl, char *buf, size_t len);

#endif
