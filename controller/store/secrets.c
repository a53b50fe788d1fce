/* Secrets at egress (docs/network.md#secrets-at-egress): a tenant's header
 * value bound to hosts, sealed with the controllers' key (XChaCha20-
 * Poly1305, the tenant id and name as associated data). The API never
 * returns a value; a create's assignment carries the values its worker's
 * egress filter adds. */
#include "store_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEAL_NONCE crypto_aead_xchacha20poly1305_ietf_NPUBBYTES
#define SEAL_ABYTES crypto_aead_xchacha20poly1305_ietf_ABYTES

/* "tenant_id\0name": what a sealed value belongs to. */
static size_t seal_ad(const char *tenant_id, const char *name, unsigned char *out, size_t cap)
{
    size_t a = strlen(tenant_id), b = strlen(name);
    if (a + 1 + b > cap)
        return 0;
    memcpy(out, tenant_id, a);
    out[a] = 0;
    memcpy(out + a + 1, name, b);
    return a + 1 + b;
}

static json_object *secret_json(PGresult *r, int i)
{
    json_object *o = json_object_new_object();
    jsonx_add_str(o, "name", db_get(r, i, 0));
    jsonx_add_str(o, "tenant", db_get(r, i, 1));
    jsonx_add_str(o, "header", db_get(r, i, 2));
    jsonx_add(o, "hosts", store__parse_json_text(db_get(r, i, 3)));
    jsonx_add_str(o, "created_at", db_get(r, i, 4));
    return o;
}

#define SECRET_COLS "s.name, tn.name, s.header, s.hosts::text, " TS("s.created_at")

int store_secret_create(PGconn *c, const store_limits_t *lim, const char *tenant_id, const char *name,
                        const char *header, json_object *hosts, const char *value, const char *created_by,
                        json_object **ret, api_error_t *err)
{
    if (!lim->secrets_key)
        return api_error_set(err, API_UNAVAILABLE, "secrets are off: the controller has no secrets_key_file");
    size_t vl = strlen(value);
    unsigned char nonce[SEAL_NONCE], ad[SBX_ID_MAX + SBX_MAX_NAME_BYTES + 2];
    size_t adl = seal_ad(tenant_id, name, ad, sizeof ad);
    unsigned char *sealed = malloc(vl + SEAL_ABYTES);
    char *nonce_hex = malloc(2 * SEAL_NONCE + 1), *sealed_hex = malloc(2 * (vl + SEAL_ABYTES) + 1);
    char *hosts_text = jsonx_dump(hosts);
    int rc = 0;
    if (!sealed || !nonce_hex || !sealed_hex || !hosts_text || adl == 0) {
        rc = api_error_set(err, API_INTERNAL, "out of memory");
        goto cleanup;
    }
    randombytes_buf(nonce, sizeof nonce);
    unsigned long long sl = 0;
    crypto_aead_xchacha20poly1305_ietf_encrypt(sealed, &sl, (const unsigned char *)value, vl, ad, adl, NULL, nonce,
                                               lim->secrets_key);
    sodium_bin2hex(nonce_hex, 2 * SEAL_NONCE + 1, nonce, sizeof nonce);
    sodium_bin2hex(sealed_hex, 2 * (vl + SEAL_ABYTES) + 1, sealed, (size_t)sl);
    const char *p[] = { tenant_id, name, header, hosts_text, nonce_hex, sealed_hex, created_by };
    PGresult *r = db_exec(c,
                          "WITH s AS (INSERT INTO secrets (tenant_id, name, header, hosts, nonce, sealed, created_by) "
                          "  VALUES ($1, $2, $3, $4::jsonb, decode($5, 'hex'), decode($6, 'hex'), $7) "
                          "  ON CONFLICT DO NOTHING RETURNING *) "
                          "SELECT " SECRET_COLS " FROM s JOIN tenants tn ON tn.id = s.tenant_id",
                          7, p);
    if (!r) {
        rc = store__db_error(err);
        goto cleanup;
    }
    if (PQntuples(r) != 1)
        rc = api_error_set(err, API_CONFLICT, "the tenant has a secret named %s already (delete it first to "
                           "replace it: sandbox secrets delete %s)", name, name);
    else
        *ret = store__wrap("secret", secret_json(r, 0));
    PQclear(r);
cleanup:
    free(sealed);
    free(nonce_hex);
    if (sealed_hex)
        sodium_memzero(sealed_hex, 2 * (vl + SEAL_ABYTES) + 1);
    free(sealed_hex);
    free(hosts_text);
    return rc;
}

int store_secret_list(PGconn *c, const char *scope, json_object **ret, api_error_t *err)
{
    const char *p[] = { scope };
    PGresult *r = db_exec(c,
                          "SELECT " SECRET_COLS " FROM secrets s JOIN tenants tn ON tn.id = s.tenant_id "
                          "WHERE ($1::text IS NULL OR s.tenant_id = $1) ORDER BY tn.name, s.name",
                          1, p);
    if (!r)
        return store__db_error(err);
    json_object *arr = json_object_new_array();
    for (int i = 0; i < PQntuples(r); i++)
        json_object_array_add(arr, secret_json(r, i));
    PQclear(r);
    *ret = store__wrap("secrets", arr);
    return 0;
}

int store_secret_delete(PGconn *c, const char *tenant_id, const char *name, json_object **ret, api_error_t *err)
{
    const char *p[] = { tenant_id, name };
    PGresult *r = db_exec(c,
                          "WITH s AS (DELETE FROM secrets WHERE tenant_id = $1 AND name = $2 RETURNING *) "
                          "SELECT " SECRET_COLS " FROM s JOIN tenants tn ON tn.id = s.tenant_id",
                          2, p);
    if (!r)
        return store__db_error(err);
    int rc = 0;
    if (PQntuples(r) != 1)
        rc = api_error_set(err, API_NOT_FOUND, "no secret %s", name);
    else
        *ret = store__wrap("secret", secret_json(r, 0));
    PQclear(r);
    return rc;
}

int store_secrets_check(PGconn *c, const char *tenant_id, char *const *names, size_t n, api_error_t *err)
{
    for (size_t i = 0; i < n; i++) {
        const char *p[] = { tenant_id, names[i] };
        PGresult *r = db_exec(c, "SELECT 1 FROM secrets WHERE tenant_id = $1 AND name = $2", 2, p);
        if (!r)
            return store__db_error(err);
        bool found = PQntuples(r) == 1;
        PQclear(r);
        if (!found)
            return api_error_set(err, API_NOT_FOUND, "secrets[%zu]: the tenant has no secret %s (sandbox secrets "
                                 "create %s …)", i, names[i], names[i]);
    }
    return 0;
}

json_object *store__secrets_open(PGconn *c, const store_limits_t *lim, const char *tenant_id, json_object *names,
                                 char *why, size_t whylen)
{
    if (!lim->secrets_key) {
        snprintf(why, whylen, "the controller has no secrets_key_file");
        return NULL;
    }
    json_object *out = json_object_new_array();
    for (size_t i = 0; i < json_object_array_length(names); i++) {
        const char *name = json_object_get_string(json_object_array_get_idx(names, i));
        const char *p[] = { tenant_id, name };
        PGresult *r = db_exec(c,
                              "SELECT header, hosts::text, encode(nonce, 'hex'), encode(sealed, 'hex') "
                              "FROM secrets WHERE tenant_id = $1 AND name = $2",
                              2, p);
        if (!r || PQntuples(r) != 1) {
            PQclear(r);
            snprintf(why, whylen, "secret %s is gone", name ? name : "?");
            json_object_put(out);
            return NULL;
        }
        unsigned char nonce[SEAL_NONCE], ad[SBX_ID_MAX + SBX_MAX_NAME_BYTES + 2];
        size_t nl = 0, sl = 0, adl = seal_ad(tenant_id, name, ad, sizeof ad);
        const char *sh = db_get(r, 0, 3);
        size_t cap = strlen(sh) / 2 + 1;
        unsigned char *sealed = malloc(cap), *plain = sodium_malloc(cap + 1);
        unsigned long long pl = 0;
        bool ok = sealed && plain && adl &&
                  sodium_hex2bin(nonce, sizeof nonce, db_get(r, 0, 2), strlen(db_get(r, 0, 2)), NULL, &nl, NULL) == 0 &&
                  nl == sizeof nonce && sodium_hex2bin(sealed, cap, sh, strlen(sh), NULL, &sl, NULL) == 0 &&
                  crypto_aead_xchacha20poly1305_ietf_decrypt(plain, &pl, NULL, sealed, sl, ad, adl, nonce,
                                                             lim->secrets_key) == 0;
        if (ok) {
            plain[pl] = '\0';
            json_object *e = json_object_new_object();
            jsonx_add_str(e, "name", name);
            jsonx_add_str(e, "header", db_get(r, 0, 0));
            jsonx_add(e, "hosts", store__parse_json_text(db_get(r, 0, 1)));
            jsonx_add_str(e, "value", (const char *)plain);
            json_object_array_add(out, e);
        }
        free(sealed);
        if (plain)
            sodium_free(plain);
        PQclear(r);
        if (!ok) {
            snprintf(why, whylen, "secret %s does not open with this controller's key (secrets_key_file differs "
                     "from the one it was sealed with?)", name);
            json_object_put(out);
            return NULL;
        }
    }
    return out;
}
