/* Secrets at egress, the worker's part (docs/network.md#secrets-at-egress):
 * a sandbox created with secrets gets a certificate authority of its own
 * (made here, its key never inside the sandbox), which its image's trust
 * store gets before the container starts; the CA and the secrets go to the
 * egress filter, which adds each secret's header for its hosts. The worker
 * keeps them in a file of its own under /run (mode 0600, like the rules a
 * live change left) so a restarted worker or filter gives them again; the
 * file goes with the sandbox. */
#include "docker_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "jsonx.h"
#include "log.h"
#include "tarstream.h"

#define CA_BUNDLE      "etc/ssl/certs/ca-certificates.crt"
#define CA_OWN         "etc/ssl/certs/sandbox-egress-ca.pem"
#define CA_LIFE_S      (31L * 24 * 3600)

/* PEM of a key or certificate, malloc'd. */
static char *pem_of(EVP_PKEY *k, X509 *x)
{
    BIO *b = BIO_new(BIO_s_mem());
    char *out = NULL, *p = NULL;
    if (b && (k ? PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL) : PEM_write_bio_X509(b, x)) == 1) {
        long n = BIO_get_mem_data(b, &p);
        if (n > 0 && (out = malloc((size_t)n + 1))) {
            memcpy(out, p, (size_t)n);
            out[n] = '\0';
        }
    }
    BIO_free(b);
    return out;
}

/* A CA of the sandbox's own: an EC P-256 key and a self-signed certificate
 * that may sign leaves only (pathlen 0). */
static int ca_make(const char *sandbox_id, char **ret_cert, char **ret_key, api_error_t *err)
{
    EVP_PKEY *k = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    X509_NAME *n = X509_NAME_new();
    unsigned char serial[16];
    char cn[128];
    BIGNUM *bn = NULL;
    X509V3_CTX ctx;
    bool ok = k && x && n && RAND_bytes(serial, sizeof serial) == 1;
    if (ok) {
        serial[0] &= 0x7f;
        snprintf(cn, sizeof cn, "Sandbox egress CA %s", sandbox_id);
        bn = BN_bin2bn(serial, sizeof serial, NULL);
        ok = bn && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) && X509_set_version(x, 2) &&
             X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0) &&
             X509_set_subject_name(x, n) && X509_set_issuer_name(x, n) &&
             X509_gmtime_adj(X509_getm_notBefore(x), -3600) && X509_gmtime_adj(X509_getm_notAfter(x), CA_LIFE_S) &&
             X509_set_pubkey(x, k);
    }
    if (ok) {
        X509V3_set_ctx(&ctx, x, x, NULL, NULL, 0);
        static const char *const ext[][2] = { { "basicConstraints", "critical,CA:TRUE,pathlen:0" },
                                              { "keyUsage", "critical,keyCertSign,cRLSign" },
                                              { "subjectKeyIdentifier", "hash" } };
        for (size_t i = 0; ok && i < sizeof ext / sizeof ext[0]; i++) {
            X509_EXTENSION *e = X509V3_EXT_conf(NULL, &ctx, ext[i][0], ext[i][1]);
            ok = e && X509_add_ext(x, e, -1);
            X509_EXTENSION_free(e);
        }
        ok = ok && X509_sign(x, k, EVP_sha256()) > 0;
    }
    *ret_cert = ok ? pem_of(NULL, x) : NULL;
    *ret_key = ok ? pem_of(k, NULL) : NULL;
    BN_free(bn);
    X509_NAME_free(n);
    X509_free(x);
    EVP_PKEY_free(k);
    if (!*ret_cert || !*ret_key) {
        free(*ret_cert);
        if (*ret_key)
            OPENSSL_cleanse(*ret_key, strlen(*ret_key));
        free(*ret_key);
        *ret_cert = *ret_key = NULL;
        return api_error_set(err, API_RUNTIME_ERROR, "cannot make the sandbox's certificate authority");
    }
    return 0;
}

/* One ustar entry (a regular file, 0644, root) of len bytes into out at
 * *at (out has room: 512 + len rounded up). */
static void tar_file(unsigned char *out, size_t *at, const char *name, const char *data, size_t len)
{
    unsigned char *h = out + *at;
    memset(h, 0, TARSTREAM_BLOCK);
    snprintf((char *)h, 100, "%s", name);
    snprintf((char *)h + 100, 8, "%07o", 0644);
    snprintf((char *)h + 108, 8, "%07o", 0);
    snprintf((char *)h + 116, 8, "%07o", 0);
    snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)len);
    snprintf((char *)h + 136, 12, "%011llo", (unsigned long long)time(NULL));
    h[156] = '0';
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    tarstream_checksum(h);
    memcpy(h + TARSTREAM_BLOCK, data, len);
    size_t blocks = (len + TARSTREAM_BLOCK - 1) / TARSTREAM_BLOCK;
    memset(h + TARSTREAM_BLOCK + len, 0, blocks * TARSTREAM_BLOCK - len);
    *at += TARSTREAM_BLOCK + blocks * TARSTREAM_BLOCK;
}

/* The image's CA bundle (a regular file), as a tar of it Docker answers;
 * "" when the image has none. */
static int bundle_read(docker_runtime_t *rt, const char *cid, char **ret, size_t *ret_len, api_error_t *err)
{
    char path[256];
    docker_reply_t rep;
    memset(&rep, 0, sizeof rep);
    *ret = NULL;
    *ret_len = 0;
    snprintf(path, sizeof path, "/containers/%s/archive?path=/" CA_BUNDLE, cid);
    int r = docker_call(rt, "GET", path, NULL, DOCKER_CALL_TIMEOUT_MS, &rep, err);
    if (r < 0)
        goto done;
    if (rep.status == 404) { /* none: ours alone */
        *ret = strdup("");
        r = *ret ? 0 : api_error_set(err, API_INTERNAL, "out of memory");
        goto done;
    }
    const unsigned char *h = (const unsigned char *)rep.body.data;
    size_t n = rep.body.len;
    unsigned long long size = 0;
    if (rep.status != 200 || rep.body.truncated || n < TARSTREAM_BLOCK ||
        sscanf((const char *)h + 124, "%11llo", &size) != 1 || size > n - TARSTREAM_BLOCK) {
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot read the image's /%s (HTTP %ld%s)", CA_BUNDLE, rep.status,
                          rep.body.truncated ? ", over 4 MiB" : "");
        goto done;
    }
    if (h[156] != '0' && h[156] != '\0') { /* a link: ours replaces it with the CAs it can read */
        *ret = strdup("");
    } else if ((*ret = malloc(size + 1))) {
        memcpy(*ret, h + TARSTREAM_BLOCK, size);
        (*ret)[size] = '\0';
        *ret_len = size;
    }
    r = *ret ? 0 : api_error_set(err, API_INTERNAL, "out of memory");
done:
    docker_reply_release(&rep);
    return r;
}

static size_t reply_cb(char *p, size_t size, size_t nmemb, void *ud)
{
    sbuf_append_bounded(ud, p, size * nmemb);
    return size * nmemb;
}

/* The CA into the container's trust store: appended to its bundle, and a
 * file of its own (NODE_EXTRA_CA_CERTS names it). Before it starts. */
static int trust_add(docker_runtime_t *rt, const char *cid, const char *ca, api_error_t *err)
{
    char *bundle = NULL;
    size_t blen = 0, clen = strlen(ca);
    int r = bundle_read(rt, cid, &bundle, &blen, err);
    if (r < 0)
        return r;
    size_t nlen = blen + 1 + clen;
    char *joined = malloc(nlen + 1);
    unsigned char *tar = malloc(4 * TARSTREAM_BLOCK + nlen + clen + 2 * TARSTREAM_BLOCK);
    if (!joined || !tar) {
        r = api_error_set(err, API_INTERNAL, "out of memory");
        goto done;
    }
    memcpy(joined, bundle, blen);
    size_t at = blen;
    if (blen && bundle[blen - 1] != '\n')
        joined[at++] = '\n';
    memcpy(joined + at, ca, clen);
    at += clen;
    size_t tl = 0;
    tar_file(tar, &tl, CA_BUNDLE, joined, at);
    tar_file(tar, &tl, CA_OWN, ca, clen);
    memset(tar + tl, 0, 2 * TARSTREAM_BLOCK);
    tl += 2 * TARSTREAM_BLOCK;
    char path[256], out[512];
    long status = 0;
    sbuf_t body;
    sbuf_init(&body, sizeof out);
    snprintf(path, sizeof path, "/containers/%s/archive?path=/", cid);
    r = docker_call_raw(rt, "PUT", path, tar, tl, "application/x-tar", DOCKER_CALL_TIMEOUT_MS, reply_cb, &body,
                        &status, err);
    if (r == 0 && status != 200)
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot put the sandbox's CA in its trust store (HTTP %ld): %.300s",
                          status, sbuf_cstr(&body));
    sbuf_release(&body);
done:
    free(bundle);
    free(joined);
    free(tar);
    return r;
}

int docker_secrets_prepare(docker_runtime_t *rt, const char *sandbox_id, const char *cid, json_object *secrets,
                           api_error_t *err)
{
    if (!rt->filter_ready)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "this worker runs no egress filter");
    char *cert = NULL, *key = NULL;
    int r = ca_make(sandbox_id, &cert, &key, err);
    if (r < 0)
        return r;
    json_object *o = json_object_new_object(), *ca = json_object_new_object(), *list = json_object_new_array();
    jsonx_add_str(ca, "cert", cert);
    jsonx_add_str(ca, "key", key);
    jsonx_add(o, "ca", ca);
    for (size_t i = 0; i < json_object_array_length(secrets); i++) {
        json_object *s = json_object_array_get_idx(secrets, i), *e = json_object_new_object();
        jsonx_add_str(e, "header", jsonx_get_str(s, "header"));
        jsonx_add_str(e, "value", jsonx_get_str(s, "value"));
        jsonx_add(e, "hosts", json_object_get(jsonx_get_arr(s, "hosts")));
        json_object_array_add(list, e);
    }
    jsonx_add(o, "secrets", list);
    const char *text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
    r = docker_filter_keep(rt, sandbox_id, ".tls.json", text, err);
    OPENSSL_cleanse((void *)text, strlen(text));
    json_object_put(o);
    if (r == 0 && (r = trust_add(rt, cid, cert, err)) < 0) {
        api_error_t ignored;
        docker_filter_keep(rt, sandbox_id, ".tls.json", NULL, &ignored);
    }
    free(cert);
    OPENSSL_cleanse(key, strlen(key));
    free(key);
    return r;
}
