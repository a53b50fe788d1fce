/* Bearer-token authentication: look the token up by its id (or find it in
 * a small cache of recent lookups), compare the BLAKE2b hash in constant
 * time. */
#include "api.h"
#include "db.h"
#include "limits.h"
#include "metrics.h"
#include "timeutil.h"
#include "token.h"

#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* A direct-mapped table by token id: a collision replaces the older entry.
 * Only verified tokens go in; the secret is verified on every use. */
typedef struct auth_cached {
    char hash[72];
    auth_info_t info;       /* info.token_id "": empty slot */
    int64_t until_ms;       /* time_mono_ms after which it is looked up again */
    char worker_id[SBX_ID_MAX]; /* a worker token: the worker it was found to act for ("": not yet) */
} auth_cached_t;

static auth_cached_t auth_cache[SBX_AUTH_CACHE_MAX];
static pthread_mutex_t auth_cache_mu = PTHREAD_MUTEX_INITIALIZER;
/* Bumped by a forget: a lookup that began before it must not put back
 * what the forget removed. One per slot (a forget of one token spoils only
 * the lookups in flight for its slot, so a storm of revocations elsewhere
 * does not turn every lookup into a miss) and one for forget_all. */
static uint64_t auth_cache_gen;
static uint64_t auth_slot_gen[SBX_AUTH_CACHE_MAX];

static size_t auth_cache_slot(const char *id)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *id; id++) {
        h ^= (unsigned char)*id;
        h *= 1099511628211ULL;
    }
    return (size_t)(h % SBX_AUTH_CACHE_MAX);
}

static metric_family_t *m_cache;
static pthread_once_t metrics_once = PTHREAD_ONCE_INIT;

static void auth_metrics_init(void)
{
    m_cache = metrics_family("sandbox_auth_cache_total", METRIC_COUNTER,
                             "Bearer tokens checked, by whether their lookup was remembered (hit) or "
                             "read from PostgreSQL (miss).", NULL, 0);
}

static void auth_cache_count(bool hit)
{
    pthread_once(&metrics_once, auth_metrics_init);
    metrics_add(m_cache, hit ? "result=\"hit\"" : "result=\"miss\"", 1);
}

/* 0 with the cached hash and info of id, SBX_ENOTFOUND. */
static int auth_cache_get(const char *id, char ret_hash[72], auth_info_t *ret)
{
    int rc = SBX_ENOTFOUND;
    pthread_mutex_lock(&auth_cache_mu);
    auth_cached_t *e = &auth_cache[auth_cache_slot(id)];
    if (strcmp(e->info.token_id, id) == 0 && time_mono_ms() < e->until_ms) {
        memcpy(ret_hash, e->hash, 72);
        *ret = e->info;
        rc = 0;
    }
    pthread_mutex_unlock(&auth_cache_mu);
    return rc;
}

/* The generation a lookup of slot starts under: both counters. */
static uint64_t auth_cache_gen_of(size_t slot)
{
    pthread_mutex_lock(&auth_cache_mu);
    uint64_t gen = auth_cache_gen + auth_slot_gen[slot];
    pthread_mutex_unlock(&auth_cache_mu);
    return gen;
}

static void auth_cache_put(uint64_t gen, const char hash[72], const auth_info_t *info, int64_t left_ms)
{
    int64_t keep = SBX_AUTH_CACHE_TTL_MS;
    if (left_ms >= 0 && left_ms < keep)
        keep = left_ms;
    size_t slot = auth_cache_slot(info->token_id);
    pthread_mutex_lock(&auth_cache_mu);
    /* both only grow: an unchanged sum means neither moved */
    if (gen == auth_cache_gen + auth_slot_gen[slot] && keep > 0) {
        auth_cached_t *e = &auth_cache[slot];
        if (strcmp(e->info.token_id, info->token_id) != 0)
            e->worker_id[0] = '\0';
        memcpy(e->hash, hash, 72);
        e->info = *info;
        e->until_ms = time_mono_ms() + keep;
    }
    pthread_mutex_unlock(&auth_cache_mu);
}

void auth_cache_forget(const char *token_id)
{
    size_t slot = auth_cache_slot(token_id);
    pthread_mutex_lock(&auth_cache_mu);
    auth_slot_gen[slot]++;
    auth_cached_t *e = &auth_cache[slot];
    if (strcmp(e->info.token_id, token_id) == 0)
        memset(e, 0, sizeof *e);
    pthread_mutex_unlock(&auth_cache_mu);
}

void auth_cache_forget_all(void)
{
    pthread_mutex_lock(&auth_cache_mu);
    auth_cache_gen++;
    memset(auth_cache, 0, sizeof auth_cache);
    pthread_mutex_unlock(&auth_cache_mu);
}

bool auth_worker_known(const char *token_id, const char *worker_id)
{
    pthread_mutex_lock(&auth_cache_mu);
    auth_cached_t *e = &auth_cache[auth_cache_slot(token_id)];
    bool known = e->worker_id[0] && strcmp(e->info.token_id, token_id) == 0 && strcmp(e->worker_id, worker_id) == 0 &&
                 time_mono_ms() < e->until_ms;
    pthread_mutex_unlock(&auth_cache_mu);
    return known;
}

void auth_worker_remember(const char *token_id, const char *worker_id)
{
    pthread_mutex_lock(&auth_cache_mu);
    auth_cached_t *e = &auth_cache[auth_cache_slot(token_id)];
    if (strcmp(e->info.token_id, token_id) == 0)
        snprintf(e->worker_id, sizeof e->worker_id, "%s", worker_id);
    pthread_mutex_unlock(&auth_cache_mu);
}

const char *auth_bearer(const char *header)
{
    if (!header || strncasecmp(header, "Bearer ", 7) != 0)
        return NULL;
    const char *token = header + 7;
    while (*token == ' ')
        token++;
    return token;
}

int auth_token_check(PGconn *db, const char *token, auth_info_t *ret)
{
    char id[SBX_ID_MAX], hash[72];
    if (token_parse_id(token, id) < 0)
        return SBX_EAUTH;
    bool hit = auth_cache_get(id, hash, ret) == 0;
    auth_cache_count(hit);
    if (hit)
        return token_verify(token, hash) ? 0 : SBX_EAUTH;
    uint64_t gen = auth_cache_gen_of(auth_cache_slot(id));
    int64_t left_ms = -1;
    int rc = store_token_find(db, id, hash, ret, &left_ms);
    if (rc == SBX_EDB)
        return rc;
    /* Unknown, revoked, expired or wrong secret: one answer for all. */
    if (rc < 0 || !token_verify(token, hash))
        return SBX_EAUTH;
    auth_cache_put(gen, hash, ret, left_ms);
    return 0;
}

int auth_token_live(PGconn *db, const char *token_id)
{
    char hash[72];
    auth_info_t info;
    if (auth_cache_get(token_id, hash, &info) == 0)
        return 1; /* verified within SBX_AUTH_CACHE_TTL_MS, never past a revocation seen */
    int64_t left_ms = -1;
    int rc = store_token_find(db, token_id, hash, &info, &left_ms);
    sodium_memzero(hash, sizeof hash);
    return rc == SBX_EDB ? rc : rc == 0 ? 1 : 0;
}

int auth_request(req_t *rq)
{
    return auth_token_request(rq, auth_bearer(http_header(rq, "Authorization")),
                              "missing bearer token (Authorization: Bearer TOKEN)");
}

int auth_token_request(req_t *rq, const char *token, const char *missing)
{
    if (!token || !*token) {
        http_reply_error(rq, API_UNAUTHORIZED, "%s", missing);
        return SBX_EAUTH;
    }
    char id[SBX_ID_MAX];
    if (token_parse_id(token, id) < 0) {
        http_reply_error(rq, API_UNAUTHORIZED, "invalid token");
        return SBX_EAUTH;
    }
    int rc = auth_token_check(rq->db, token, &rq->auth);
    if (rc == SBX_EDB) {
        http_reply_error(rq, API_UNAVAILABLE, "database unavailable: %s", db_last_error());
        return rc;
    }
    if (rc < 0) {
        http_reply_error(rq, API_UNAUTHORIZED, "invalid, revoked or expired token");
        return SBX_EAUTH;
    }
    return 0;
}

const char *auth_scope(const req_t *rq)
{
    return rq->auth.role == ROLE_ADMIN ? NULL : rq->auth.tenant_id;
}
