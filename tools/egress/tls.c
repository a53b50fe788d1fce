/* sandbox-egress: secrets at egress (docs/network.md#secrets-at-egress).
 * A sandbox the worker gave a certificate authority of its own (in its
 * trust store) and secrets bound to hosts: a TLS connection to a bound host
 * is answered by the filter with a certificate for that name signed by the
 * sandbox's CA, its first request gets the secret's header, and the filter
 * connects to the host over TLS itself, verifying the host's certificate.
 * Other TLS passes through untouched; secrets live in this process's
 * memory only and are wiped when dropped. */
#include "egressd.h"

#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jsonx.h"

#define LEAF_CACHE       16
#define LEAF_LIFE_S      (24 * 3600)
#define SECRET_VALUE_MAX 4096
#define HEADER_NAME_MAX  64

typedef struct tls_secret {
    char header[HEADER_NAME_MAX + 1];
    char *value;
    char **hosts;
    size_t nhosts;
} tls_secret_t;

typedef struct tls_leaf {
    char name[EGRESS_DOMAIN_MAX + 1];
    X509 *cert;
    time_t made;
} tls_leaf_t;

struct egd_tls {
    X509 *ca;
    EVP_PKEY *ca_key, *leaf_key;
    tls_secret_t secrets[EGD_SECRETS_MAX];
    size_t nsecrets;
    tls_leaf_t leaves[LEAF_CACHE];
    unsigned next_leaf;
};

static SSL_CTX *server_ctx, *client_ctx;

static int alpn_http1(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                      unsigned inlen, void *arg)
{
    (void)ssl, (void)arg;
    /* HTTP/1.1 only: the filter reads and rewrites an HTTP/1 request */
    for (unsigned i = 0; i < inlen;) {
        unsigned l = in[i];
        if (i + 1 + l > inlen)
            break;
        if (l == 8 && memcmp(in + i + 1, "http/1.1", 8) == 0) {
            *out = in + i + 1;
            *outlen = (unsigned char)l;
            return SSL_TLSEXT_ERR_OK;
        }
        i += 1 + l;
    }
    return SSL_TLSEXT_ERR_NOACK;
}

int egd_tls_init(const char *upstream_ca, char *err, size_t errlen)
{
    server_ctx = SSL_CTX_new(TLS_server_method());
    client_ctx = SSL_CTX_new(TLS_client_method());
    if (!server_ctx || !client_ctx) {
        snprintf(err, errlen, "cannot make TLS contexts");
        return -1;
    }
    SSL_CTX_set_min_proto_version(server_ctx, TLS1_2_VERSION);
    SSL_CTX_set_min_proto_version(client_ctx, TLS1_2_VERSION);
    SSL_CTX_set_alpn_select_cb(server_ctx, alpn_http1, NULL);
    static const unsigned char alpn[] = { 8, 'h', 't', 't', 'p', '/', '1', '.', '1' };
    SSL_CTX_set_alpn_protos(client_ctx, alpn, sizeof alpn);
    SSL_CTX_set_verify(client_ctx, SSL_VERIFY_PEER, NULL);
    int ok = upstream_ca && *upstream_ca ? SSL_CTX_load_verify_locations(client_ctx, upstream_ca, NULL)
                                         : SSL_CTX_set_default_verify_paths(client_ctx);
    if (ok != 1) {
        snprintf(err, errlen, "cannot load the upstream CA %s", upstream_ca ? upstream_ca : "(default paths)");
        return -1;
    }
    return 0;
}

void egd_tls_cleanup(void)
{
    SSL_CTX_free(server_ctx);
    SSL_CTX_free(client_ctx);
    server_ctx = client_ctx = NULL;
}

void egd_tls_free(struct egd_tls *t)
{
    if (!t)
        return;
    X509_free(t->ca);
    EVP_PKEY_free(t->ca_key);
    EVP_PKEY_free(t->leaf_key);
    for (size_t i = 0; i < t->nsecrets; i++) {
        if (t->secrets[i].value) {
            OPENSSL_cleanse(t->secrets[i].value, strlen(t->secrets[i].value));
            free(t->secrets[i].value);
        }
        for (size_t k = 0; k < t->secrets[i].nhosts; k++)
            free(t->secrets[i].hosts[k]);
        free(t->secrets[i].hosts);
    }
    for (size_t i = 0; i < LEAF_CACHE; i++)
        X509_free(t->leaves[i].cert);
    OPENSSL_cleanse(t, sizeof *t);
    free(t);
}

static bool value_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > SECRET_VALUE_MAX)
        return false;
    for (const unsigned char *c = (const unsigned char *)s; *c; c++)
        if (*c < 0x20 || *c == 0x7f)
            return false;
    return true;
}

static EVP_PKEY *pem_key(const char *pem)
{
    BIO *b = BIO_new_mem_buf(pem, -1);
    EVP_PKEY *k = b ? PEM_read_bio_PrivateKey(b, NULL, NULL, NULL) : NULL;
    BIO_free(b);
    return k;
}

static X509 *pem_cert(const char *pem)
{
    BIO *b = BIO_new_mem_buf(pem, -1);
    X509 *x = b ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
    BIO_free(b);
    return x;
}

int egd_tls_parse(json_object *ca, json_object *secrets, struct egd_tls **ret, char *why, size_t whylen)
{
    *ret = NULL;
    if (!ca && !secrets)
        return 0;
    const char *cert = jsonx_get_str(ca, "cert"), *key = jsonx_get_str(ca, "key");
    if (!cert || !key || !json_object_is_type(secrets, json_type_array) ||
        json_object_array_length(secrets) > EGD_SECRETS_MAX) {
        snprintf(why, whylen, "ca {cert, key} (PEM) and secrets (at most %d) go together", EGD_SECRETS_MAX);
        return -1;
    }
    struct egd_tls *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    t->ca = pem_cert(cert);
    t->ca_key = pem_key(key);
    if (!t->ca || !t->ca_key || X509_check_private_key(t->ca, t->ca_key) != 1) {
        snprintf(why, whylen, "ca: not a PEM certificate and its private key");
        goto fail;
    }
    t->leaf_key = EVP_EC_gen("P-256");
    if (!t->leaf_key) {
        snprintf(why, whylen, "cannot make a key");
        goto fail;
    }
    for (size_t i = 0; i < json_object_array_length(secrets); i++) {
        json_object *e = json_object_array_get_idx(secrets, i);
        const char *h = jsonx_get_str(e, "header"), *v = jsonx_get_str(e, "value");
        json_object *hosts = jsonx_get_arr(e, "hosts");
        tls_secret_t *s = &t->secrets[t->nsecrets++];
        if (!h || !egress_header_name_ok(h) || !v || !value_ok(v) || !hosts || json_object_array_length(hosts) == 0 ||
            json_object_array_length(hosts) > EGD_SECRET_HOSTS_MAX) {
            snprintf(why, whylen, "secrets[%zu]: header (a header name), value (printable, at most %d bytes) and "
                     "hosts (1 to %d) are required", i, SECRET_VALUE_MAX, EGD_SECRET_HOSTS_MAX);
            goto fail;
        }
        snprintf(s->header, sizeof s->header, "%s", h);
        s->value = strdup(v);
        s->hosts = calloc(json_object_array_length(hosts), sizeof *s->hosts);
        if (!s->value || !s->hosts) {
            snprintf(why, whylen, "out of memory");
            goto fail;
        }
        for (size_t k = 0; k < json_object_array_length(hosts); k++) {
            char canon[EGRESS_DOMAIN_MAX + 1], w[120];
            const char *host = json_object_get_string(json_object_array_get_idx(hosts, k));
            if (!host || egress_domain_canon(host, canon, w, sizeof w) < 0 || !(s->hosts[k] = strdup(canon))) {
                snprintf(why, whylen, "secrets[%zu].hosts[%zu]: %s", i, k, host ? w : "a domain");
                goto fail;
            }
            s->nhosts++;
        }
    }
    *ret = t;
    return 0;
fail:
    egd_tls_free(t);
    return -1;
}

static bool host_match(const char *pattern, const char *name)
{
    if (strncmp(pattern, "*.", 2) != 0)
        return strcmp(pattern, name) == 0;
    size_t pl = strlen(pattern + 1), nl = strlen(name); /* ".example.com" */
    return nl > pl && strcmp(name + nl - pl, pattern + 1) == 0;
}

size_t egd_tls_headers(const struct egd_tls *t, const char *name, egress_header_t *out, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; t && i < t->nsecrets && n < max; i++)
        for (size_t k = 0; k < t->secrets[i].nhosts; k++)
            if (host_match(t->secrets[i].hosts[k], name)) {
                out[n].name = t->secrets[i].header;
                out[n].value = t->secrets[i].value;
                n++;
                break;
            }
    return n;
}

/* A certificate for name signed by the sandbox's CA, made once a day. */
static X509 *leaf_for(struct egd_tls *t, const char *name)
{
    time_t now = time(NULL);
    for (size_t i = 0; i < LEAF_CACHE; i++)
        if (t->leaves[i].cert && strcmp(t->leaves[i].name, name) == 0 && now - t->leaves[i].made < LEAF_LIFE_S / 2)
            return t->leaves[i].cert;
    X509 *x = X509_new();
    X509_NAME *subj = X509_NAME_new();
    unsigned char serial[16];
    BIGNUM *bn = NULL;
    char san[EGRESS_DOMAIN_MAX + 8];
    X509_EXTENSION *ext = NULL;
    bool ok = x && subj && RAND_bytes(serial, sizeof serial) == 1;
    if (ok) {
        serial[0] &= 0x7f;
        bn = BN_bin2bn(serial, sizeof serial, NULL);
        snprintf(san, sizeof san, "DNS:%s", name);
        ok = bn && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) && X509_set_version(x, 2) &&
             X509_NAME_add_entry_by_txt(subj, "CN", MBSTRING_ASC, (const unsigned char *)name, -1, -1, 0) &&
             X509_set_subject_name(x, subj) && X509_set_issuer_name(x, X509_get_subject_name(t->ca)) &&
             X509_gmtime_adj(X509_getm_notBefore(x), -3600) && X509_gmtime_adj(X509_getm_notAfter(x), LEAF_LIFE_S) &&
             X509_set_pubkey(x, t->leaf_key) &&
             (ext = X509V3_EXT_conf_nid(NULL, NULL, NID_subject_alt_name, san)) && X509_add_ext(x, ext, -1) &&
             X509_sign(x, t->ca_key, EVP_sha256()) > 0;
    }
    X509_EXTENSION_free(ext);
    BN_free(bn);
    X509_NAME_free(subj);
    if (!ok) {
        X509_free(x);
        return NULL;
    }
    tls_leaf_t *l = &t->leaves[t->next_leaf++ % LEAF_CACHE];
    X509_free(l->cert);
    l->cert = x;
    l->made = now;
    snprintf(l->name, sizeof l->name, "%s", name);
    return x;
}

SSL *egd_tls_server(struct egd_tls *t, const char *name)
{
    X509 *leaf = leaf_for(t, name);
    SSL *ssl = leaf ? SSL_new(server_ctx) : NULL;
    if (ssl && (SSL_use_certificate(ssl, leaf) != 1 || SSL_use_PrivateKey(ssl, t->leaf_key) != 1)) {
        SSL_free(ssl);
        ssl = NULL;
    }
    return ssl;
}

SSL *egd_tls_client(const char *name)
{
    SSL *ssl = SSL_new(client_ctx);
    if (ssl && (SSL_set_tlsext_host_name(ssl, name) != 1 || SSL_set1_host(ssl, name) != 1)) {
        SSL_free(ssl);
        ssl = NULL;
    }
    return ssl;
}
