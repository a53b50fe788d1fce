/* Token-bucket rate limits kept in memory, one table per limiter: per token
 * (API requests) and per tenant (requests that start an operation). The
 * table is fixed-size, so a flood of distinct keys cannot grow it, and is
 * shared by every HTTP thread of one controller process (a mutex). */
#ifndef SBX_RATELIMIT_H
#define SBX_RATELIMIT_H

#include <stdbool.h>
#include <stdint.h>

typedef struct ratelimit ratelimit_t;

/* A limiter granting rate_per_second requests a second per key, with
 * bursts of up to burst (a key never seen, or evicted, starts full). rate
 * 0 makes a limiter that allows everything. Returns 0 with *ret, or
 * SBX_EINVAL (negative values, or a burst under 1 with a rate) /
 * SBX_ENOMEM. */
int ratelimit_new(int64_t rate_per_second, int64_t burst, ratelimit_t **ret);
void ratelimit_free(ratelimit_t *rl);

/* Takes one request from key's bucket at now_us (a monotonic clock in
 * microseconds; the caller's, so tests inject it). Returns 0 when allowed;
 * SBX_ETOOBIG when the bucket is empty, with *ret_retry_after the whole
 * seconds (at least 1) until it holds a request again. A NULL limiter,
 * a disabled one or an empty key allow everything. Thread-safe. */
int ratelimit_take(ratelimit_t *rl, const char *key, int64_t now_us, int *ret_retry_after);

/* Whether key's bucket is empty at now_us, without taking from it or
 * making one (a key without a bucket is not empty), with
 * *ret_retry_after as ratelimit_take says it. For a refusal before the
 * request's token is looked up: a bucket only authenticated requests
 * empty, so guessing a token's id can refuse nothing its owner has not
 * used up. Thread-safe. */
bool ratelimit_empty(ratelimit_t *rl, const char *key, int64_t now_us, int *ret_retry_after);

/* A refusal of key at now_us, told to come back in retry_after seconds:
 * returns 0 when key's last refusal had told it to come back by now (or
 * it has none, or no bucket), and records this one's Retry-After; else
 * the microseconds (at most SBX_RATE_HOLD_MAX_US) until the last one's
 * ends, which this refusal is held for. So a client that keeps coming
 * inside its Retry-After gets its answers no faster than it was told to
 * come, and one that waits as told is never held. Never makes a bucket.
 * Thread-safe. */
int64_t ratelimit_hold(ratelimit_t *rl, const char *key, int64_t now_us, int retry_after);

/* How many keys the limiter holds a bucket for now (at most
 * SBX_RATELIMIT_BUCKETS). Thread-safe. */
int ratelimit_size(ratelimit_t *rl);

#endif
