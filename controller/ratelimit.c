/* Token buckets in a fixed set-associative table (ratelimit.h). */
#include "ratelimit.h"

#include "errors.h"
#include "ids.h"
#include "limits.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RL_SETS (SBX_RATELIMIT_BUCKETS / SBX_RATELIMIT_WAYS)

/* Tokens are counted in micro-requests so refills stay exact integers. */
#define RL_UNIT INT64_C(1000000)

typedef struct rl_bucket {
    char key[SBX_ID_MAX];   /* "" : free */
    int64_t tokens;         /* micro-requests held */
    int64_t stamp_us;       /* last refill */
    uint64_t used;          /* last use, for LRU within the set */
    int64_t told_us;        /* the last refusal's Retry-After ends here */
} rl_bucket_t;

struct ratelimit {
    pthread_mutex_t mu;
    int64_t rate;           /* requests per second; 0: disabled */
    int64_t burst;          /* requests */
    uint64_t clock;         /* use counter */
    int nused;
    rl_bucket_t buckets[SBX_RATELIMIT_BUCKETS];
};

int ratelimit_new(int64_t rate_per_second, int64_t burst, ratelimit_t **ret)
{
    *ret = NULL;
    if (rate_per_second < 0 || burst < 0 || (rate_per_second > 0 && burst < 1) ||
        rate_per_second > INT64_C(1000000) || burst > INT64_C(1000000))
        return SBX_EINVAL;
    ratelimit_t *rl = calloc(1, sizeof *rl);
    if (!rl)
        return SBX_ENOMEM;
    pthread_mutex_init(&rl->mu, NULL);
    rl->rate = rate_per_second;
    rl->burst = burst;
    *ret = rl;
    return 0;
}

void ratelimit_free(ratelimit_t *rl)
{
    if (!rl)
        return;
    pthread_mutex_destroy(&rl->mu);
    free(rl);
}

static size_t rl_set_of(const char *key)
{
    uint64_t h = 1469598103934665603ull;
    for (const char *p = key; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return (size_t)(h % RL_SETS);
}

/* key's bucket, or the set's free or least recently used one, reset full. */
static rl_bucket_t *rl_bucket_for(ratelimit_t *rl, const char *key, int64_t now_us)
{
    rl_bucket_t *set = &rl->buckets[rl_set_of(key) * SBX_RATELIMIT_WAYS];
    rl_bucket_t *victim = &set[0];
    for (int i = 0; i < SBX_RATELIMIT_WAYS; i++) {
        if (set[i].key[0] && strcmp(set[i].key, key) == 0)
            return &set[i];
        if (!set[i].key[0] ? victim->key[0] != '\0' : (victim->key[0] && set[i].used < victim->used))
            victim = &set[i];
    }
    if (!victim->key[0])
        rl->nused++;
    snprintf(victim->key, sizeof victim->key, "%s", key);
    victim->tokens = rl->burst * RL_UNIT;
    victim->stamp_us = now_us;
    victim->told_us = 0;
    return victim;
}

/* b's micro-requests at now_us, refilled since its stamp. */
static int64_t rl_tokens_at(const ratelimit_t *rl, const rl_bucket_t *b, int64_t now_us)
{
    int64_t cap = rl->burst * RL_UNIT;
    if (now_us <= b->stamp_us)
        return b->tokens;
    int64_t dt = now_us - b->stamp_us;
    /* A second refills rate requests: rate * RL_UNIT micro-requests. */
    int64_t add = dt >= (cap / rl->rate) + 1 ? cap : dt * rl->rate;
    return b->tokens + add > cap ? cap : b->tokens + add;
}

/* Whole seconds (at least 1) until tokens hold a request. */
static int rl_wait_seconds(const ratelimit_t *rl, int64_t tokens)
{
    /* Micro-requests missing, over rate per microsecond: the wait. */
    int64_t wait_us = (RL_UNIT - tokens + rl->rate - 1) / rl->rate;
    int64_t secs = (wait_us + RL_UNIT - 1) / RL_UNIT;
    return secs < 1 ? 1 : (int)secs;
}

int ratelimit_take(ratelimit_t *rl, const char *key, int64_t now_us, int *ret_retry_after)
{
    *ret_retry_after = 0;
    if (!rl || rl->rate == 0 || !key || !key[0])
        return 0;
    char k[SBX_ID_MAX]; /* a longer key is cut, the same way every time */
    snprintf(k, sizeof k, "%s", key);
    pthread_mutex_lock(&rl->mu);
    rl_bucket_t *b = rl_bucket_for(rl, k, now_us);
    b->used = ++rl->clock;
    if (now_us > b->stamp_us) {
        b->tokens = rl_tokens_at(rl, b, now_us);
        b->stamp_us = now_us;
    }
    int rc = 0;
    if (b->tokens >= RL_UNIT) {
        b->tokens -= RL_UNIT;
    } else {
        *ret_retry_after = rl_wait_seconds(rl, b->tokens);
        rc = SBX_ETOOBIG;
    }
    pthread_mutex_unlock(&rl->mu);
    return rc;
}

bool ratelimit_empty(ratelimit_t *rl, const char *key, int64_t now_us, int *ret_retry_after)
{
    *ret_retry_after = 0;
    if (!rl || rl->rate == 0 || !key || !key[0])
        return false;
    char k[SBX_ID_MAX];
    snprintf(k, sizeof k, "%s", key);
    pthread_mutex_lock(&rl->mu);
    const rl_bucket_t *set = &rl->buckets[rl_set_of(k) * SBX_RATELIMIT_WAYS];
    bool empty = false;
    for (int i = 0; i < SBX_RATELIMIT_WAYS; i++) {
        const rl_bucket_t *b = &set[i];
        if (!b->key[0] || strcmp(b->key, k) != 0)
            continue;
        int64_t tokens = rl_tokens_at(rl, b, now_us);
        if (tokens < RL_UNIT) {
            *ret_retry_after = rl_wait_seconds(rl, tokens);
            empty = true;
        }
        break;
    }
    pthread_mutex_unlock(&rl->mu);
    return empty;
}

int64_t ratelimit_hold(ratelimit_t *rl, const char *key, int64_t now_us, int retry_after)
{
    if (!rl || rl->rate == 0 || !key || !key[0] || retry_after < 1)
        return 0;
    char k[SBX_ID_MAX];
    snprintf(k, sizeof k, "%s", key);
    pthread_mutex_lock(&rl->mu);
    rl_bucket_t *set = &rl->buckets[rl_set_of(k) * SBX_RATELIMIT_WAYS];
    int64_t hold = 0;
    for (int i = 0; i < SBX_RATELIMIT_WAYS; i++) {
        rl_bucket_t *b = &set[i];
        if (!b->key[0] || strcmp(b->key, k) != 0)
            continue;
        if (now_us < b->told_us)
            hold = b->told_us - now_us > SBX_RATE_HOLD_MAX_US ? SBX_RATE_HOLD_MAX_US : b->told_us - now_us;
        else
            b->told_us = now_us + (int64_t)retry_after * RL_UNIT;
        break;
    }
    pthread_mutex_unlock(&rl->mu);
    return hold;
}

int ratelimit_size(ratelimit_t *rl)
{
    if (!rl)
        return 0;
    pthread_mutex_lock(&rl->mu);
    int n = rl->nused;
    pthread_mutex_unlock(&rl->mu);
    return n;
}
