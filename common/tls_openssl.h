/* OpenSSL's headers, for the files that call it (common/tls.c,
 * controller/tlsbev.c, worker/forward.c). They include <limits.h> for
 * INT_MAX, and -Icommon makes that common/limits.h: INT_MAX comes from the
 * compiler instead. */
#ifndef SBX_TLS_OPENSSL_H
#define SBX_TLS_OPENSSL_H

#ifndef INT_MAX
#define INT_MAX __INT_MAX__
#endif
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#endif
