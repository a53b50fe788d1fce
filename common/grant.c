/* Worker grants (routes, logs, files, shells, envd): keyed BLAKE2b over a short text (see grant.h). */
#include "grant.h"
#include "errors.h"
#include "token.h"

#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The key is BLAKE2b-256 of the token hash, keyed by a fixed context, so a
 * grant key is never the stored hash itself. */
static const char grant_context[] = "sandbox route grant key v1";

int grant_key_from_hash_hex(const char *hash_hex, unsigned char ret_key[GRANT_KEY_BYTES])
{
    unsigned char bin[TOKEN_HASH_BYTES];
    size_t n = 0;
    if (!hash_hex || strlen(hash_hex) != TOKEN_HASH_BYTES * 2 ||
        sodium_hex2bin(bin, sizeof bin, hash_hex, strlen(hash_hex), NULL, &n, NULL) != 0 || n != sizeof bin)
        return SBX_EINVAL;
    crypto_generichash(ret_key, GRANT_KEY_BYTES, bin, sizeof bin, (const unsigned char *)grant_context,
                       sizeof grant_context - 1);
    sodium_memzero(bin, sizeof bin);
    return 0;
}

void grant_key_from_token(const char *token, unsigned char ret_key[GRANT_KEY_BYTES])
{
    char hex[TOKEN_HASH_HEX];
    token_hash_hex(token, hex);
    grant_key_from_hash_hex(hex, ret_key);
    sodium_memzero(hex, sizeof hex);
}

static bool id_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= SBX_ID_MAX)
        return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' ||
              *p == '-'))
            return false;
    return true;
}

static void mac_hex(const unsigned char key[GRANT_KEY_BYTES], const char *msg, size_t len,
                    char ret[GRANT_KEY_BYTES * 2 + 1])
{
    unsigned char mac[GRANT_KEY_BYTES];
    crypto_generichash(mac, sizeof mac, (const unsigned char *)msg, len, key, GRANT_KEY_BYTES);
    sodium_bin2hex(ret, GRANT_KEY_BYTES * 2 + 1, mac, sizeof mac);
}

/* The purpose field of a logs grant: "logs-<tail|all>-<0|1>". */
static int logs_field(const grant_t *g, char *ret, size_t retlen)
{
    if (g->logs_tail != GRANT_LOGS_TAIL_ALL && (g->logs_tail < 0 || g->logs_tail > SBX_LOGS_TAIL_MAX))
        return SBX_EINVAL;
    int n = g->logs_tail == GRANT_LOGS_TAIL_ALL
                ? snprintf(ret, retlen, "logs-all-%d", g->logs_follow ? 1 : 0)
                : snprintf(ret, retlen, "logs-%" PRId64 "-%d", g->logs_tail, g->logs_follow ? 1 : 0);
    return n < 0 || (size_t)n >= retlen ? SBX_EINVAL : 0;
}

/* Parses a logs purpose field strictly (no sign, no leading zeros). */
static int logs_field_parse(const char *f, grant_t *ret)
{
    if (strncmp(f, "logs-", 5) != 0)
        return SBX_EINVAL;
    const char *t = f + 5;
    const char *dash = strchr(t, '-');
    if (!dash || dash == t || strchr(dash + 1, '-') || strlen(dash + 1) != 1 || (dash[1] != '0' && dash[1] != '1'))
        return SBX_EINVAL;
    size_t tl = (size_t)(dash - t);
    if (tl == 3 && strncmp(t, "all", 3) == 0) {
        ret->logs_tail = GRANT_LOGS_TAIL_ALL;
    } else {
        if (tl > 7 || (tl > 1 && t[0] == '0'))
            return SBX_EINVAL;
        int64_t v = 0;
        for (size_t i = 0; i < tl; i++) {
            if (t[i] < '0' || t[i] > '9')
                return SBX_EINVAL;
            v = v * 10 + (t[i] - '0');
        }
        if (v > SBX_LOGS_TAIL_MAX)
            return SBX_EINVAL;
        ret->logs_tail = v;
    }
    ret->logs_follow = dash[1] == '1';
    ret->purpose = GRANT_LOGS;
    return 0;
}

void grant_files_digest(const char *line, size_t len, char ret[GRANT_FILES_DIGEST_HEX])
{
    unsigned char d[(GRANT_FILES_DIGEST_HEX - 1) / 2];
    crypto_generichash(d, sizeof d, (const unsigned char *)line, len, NULL, 0);
    sodium_bin2hex(ret, GRANT_FILES_DIGEST_HEX, d, sizeof d);
}

/* True for exactly GRANT_FILES_DIGEST_HEX - 1 lowercase hex digits. */
static bool digest_ok(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f')))
            return false;
    return n == GRANT_FILES_DIGEST_HEX - 1;
}

/* The purpose field of a files grant, "fput-<digest>" or "fget-<digest>",
 * of a shell grant, "shell-<digest>", or of an envd grant, "envd-<digest>". */
static int files_field(const grant_t *g, char *ret, size_t retlen)
{
    if (!digest_ok(g->files_digest))
        return SBX_EINVAL;
    const char *kind = g->purpose == GRANT_FILES_PUT   ? "fput"
                       : g->purpose == GRANT_FILES_GET ? "fget"
                       : g->purpose == GRANT_ENVD      ? "envd"
                       : g->purpose == GRANT_SNAPSHOT  ? "snapx"
                                                       : "shell";
    int n = snprintf(ret, retlen, "%s-%s", kind, g->files_digest);
    return n < 0 || (size_t)n >= retlen ? SBX_EINVAL : 0;
}

static int files_field_parse(const char *f, grant_t *ret)
{
    size_t skip = 5;
    if (strncmp(f, "fput-", 5) == 0) {
        ret->purpose = GRANT_FILES_PUT;
    } else if (strncmp(f, "fget-", 5) == 0) {
        ret->purpose = GRANT_FILES_GET;
    } else if (strncmp(f, "shell-", 6) == 0) {
        ret->purpose = GRANT_SHELL;
        skip = 6;
    } else if (strncmp(f, "envd-", 5) == 0) {
        ret->purpose = GRANT_ENVD;
    } else if (strncmp(f, "snapx-", 6) == 0) {
        ret->purpose = GRANT_SNAPSHOT;
        skip = 6;
    } else {
        return SBX_EINVAL;
    }
    if (!digest_ok(f + skip))
        return SBX_EINVAL;
    memcpy(ret->files_digest, f + skip, GRANT_FILES_DIGEST_HEX);
    return 0;
}

int grant_sign(const unsigned char key[GRANT_KEY_BYTES], const grant_t *g, char ret[GRANT_MAX])
{
    char field[48];
    if (!id_ok(g->worker_id) || !id_ok(g->sandbox_id) || g->expires_unix < 0)
        return SBX_EINVAL;
    if (g->purpose == GRANT_ROUTE) {
        if (g->port < 1 || g->port > 65535)
            return SBX_EINVAL;
        snprintf(field, sizeof field, "%d", g->port);
    } else if (g->purpose == GRANT_LOGS) {
        if (logs_field(g, field, sizeof field) < 0)
            return SBX_EINVAL;
    } else if (g->purpose == GRANT_FILES_PUT || g->purpose == GRANT_FILES_GET || g->purpose == GRANT_SHELL ||
               g->purpose == GRANT_ENVD || g->purpose == GRANT_SNAPSHOT) {
        if (files_field(g, field, sizeof field) < 0)
            return SBX_EINVAL;
    } else {
        return SBX_EINVAL;
    }
    int n = snprintf(ret, GRANT_MAX, "v1.%s.%s.%s.%" PRId64 ".", g->worker_id, g->sandbox_id, field,
                     g->expires_unix);
    if (n < 0 || (size_t)n + GRANT_KEY_BYTES * 2 + 1 > GRANT_MAX)
        return SBX_EINVAL;
    mac_hex(key, ret, (size_t)n - 1, ret + n); /* the MAC covers the text before its own dot */
    return 0;
}

int grant_verify(const unsigned char key[GRANT_KEY_BYTES], const char *text, int64_t now_unix, grant_t *ret)
{
    memset(ret, 0, sizeof *ret);
    if (!text || strlen(text) >= GRANT_MAX || strncmp(text, "v1.", 3) != 0)
        return SBX_EINVAL;
    const char *dot = strrchr(text, '.');
    if (!dot || strlen(dot + 1) != GRANT_KEY_BYTES * 2)
        return SBX_EINVAL;
    char buf[GRANT_MAX];
    size_t body = (size_t)(dot - text);
    memcpy(buf, text, body);
    buf[body] = '\0';
    /* v1 . worker . sandbox . port . expires */
    char *fields[5];
    int nf = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ".", &save); t; t = strtok_r(NULL, ".", &save)) {
        if (nf == 5)
            return SBX_EINVAL;
        fields[nf++] = t;
    }
    if (nf != 5 || !id_ok(fields[1]) || !id_ok(fields[2]))
        return SBX_EINVAL;
    char *end = NULL;
    grant_t parsed;
    memset(&parsed, 0, sizeof parsed);
    long port = 0;
    if (fields[3][0] >= '0' && fields[3][0] <= '9') {
        port = strtol(fields[3], &end, 10);
        if (*end || port < 1 || port > 65535)
            return SBX_EINVAL;
    } else if (logs_field_parse(fields[3], &parsed) < 0 && files_field_parse(fields[3], &parsed) < 0) {
        return SBX_EINVAL;
    }
    long long exp = strtoll(fields[4], &end, 10);
    if (*end || exp < 0)
        return SBX_EINVAL;
    char want[GRANT_KEY_BYTES * 2 + 1];
    mac_hex(key, text, body, want);
    if (sodium_memcmp(want, dot + 1, GRANT_KEY_BYTES * 2) != 0)
        return SBX_EAUTH;
    if ((int64_t)exp < now_unix)
        return SBX_ETIMEOUT;
    *ret = parsed;
    snprintf(ret->worker_id, sizeof ret->worker_id, "%s", fields[1]);
    snprintf(ret->sandbox_id, sizeof ret->sandbox_id, "%s", fields[2]);
    ret->port = (int)port;
    ret->expires_unix = (int64_t)exp;
    return 0;
}

int grant_verify_purpose(const unsigned char key[GRANT_KEY_BYTES], const char *text, int64_t now_unix,
                         grant_purpose_t purpose, grant_t *ret)
{
    int r = grant_verify(key, text, now_unix, ret);
    if (r == 0 && ret->purpose != purpose) {
        memset(ret, 0, sizeof *ret);
        return SBX_EPERM;
    }
    return r;
}
