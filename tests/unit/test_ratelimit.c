/* Unit tests for the token buckets (controller/ratelimit.c) with an injected
 * clock: the burst, the refill, Retry-After, keys apart, disabled limiters,
 * and a table that stays bounded under a flood of distinct keys. */
#include "check_util.h"
#include <pthread.h>
#include <stdio.h>

#include "limits.h"
#include "ratelimit.h"

#define SEC INT64_C(1000000)

static ratelimit_t *limiter(int64_t rate, int64_t burst)
{
    ratelimit_t *rl = NULL;
    ck_assert_int_eq(ratelimit_new(rate, burst, &rl), 0);
    ck_assert_ptr_nonnull(rl);
    return rl;
}

START_TEST(test_burst_then_refused_with_retry_after)
{
    ratelimit_t *rl = limiter(5, 10);
    int ra = -1;
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(ratelimit_take(rl, "tok_a", 1000 * SEC, &ra), 0);
    ck_assert_int_eq(ra, 0);
    ck_assert_int_eq(ratelimit_take(rl, "tok_a", 1000 * SEC, &ra), SBX_ETOOBIG);
    ck_assert_int_eq(ra, 1);
    ratelimit_free(rl);
}
END_TEST

START_TEST(test_refill_at_the_rate)
{
    ratelimit_t *rl = limiter(5, 5);
    int ra;
    int64_t t = 50 * SEC;
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(ratelimit_take(rl, "k", t, &ra), 0);
    ck_assert_int_eq(ratelimit_take(rl, "k", t, &ra), SBX_ETOOBIG);
    /* 5 per second: one more after 200 ms, not after 199 ms. */
    ck_assert_int_eq(ratelimit_take(rl, "k", t + 199000, &ra), SBX_ETOOBIG);
    ck_assert_int_eq(ratelimit_take(rl, "k", t + 200000, &ra), 0);
    ck_assert_int_eq(ratelimit_take(rl, "k", t + 200000, &ra), SBX_ETOOBIG);
    /* A long pause refills to the burst, not beyond. */
    t += 3600 * SEC;
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(ratelimit_take(rl, "k", t, &ra), 0);
    ck_assert_int_eq(ratelimit_take(rl, "k", t, &ra), SBX_ETOOBIG);
    /* Refused requests take nothing: a second on, the rate is there again. */
    t += SEC;
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(ratelimit_take(rl, "k", t, &ra), 0);
    ratelimit_free(rl);
}
END_TEST

START_TEST(test_retry_after_is_whole_seconds_at_least_one)
{
    ratelimit_t *rl = limiter(1, 1);
    int ra;
    ck_assert_int_eq(ratelimit_take(rl, "k", SEC, &ra), 0);
    ck_assert_int_eq(ratelimit_take(rl, "k", SEC, &ra), SBX_ETOOBIG);
    ck_assert_int_eq(ra, 1);
    ck_assert_int_eq(ratelimit_take(rl, "k", SEC + 999999, &ra), SBX_ETOOBIG);
    ck_assert_int_eq(ra, 1);
    /* Waiting Retry-After is enough. */
    ck_assert_int_eq(ratelimit_take(rl, "k", 2 * SEC, &ra), 0);
    ratelimit_free(rl);
}
END_TEST

START_TEST(test_keys_are_apart)
{
    ratelimit_t *rl = limiter(1, 3);
    int ra;
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(ratelimit_take(rl, "tenant_a", 0, &ra), 0);
    ck_assert_int_eq(ratelimit_take(rl, "tenant_a", 0, &ra), SBX_ETOOBIG);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(ratelimit_take(rl, "tenant_b", 0, &ra), 0);
    ck_assert_int_eq(ratelimit_take(rl, "tenant_b", 0, &ra), SBX_ETOOBIG);
    ck_assert_int_eq(ratelimit_size(rl), 2);
    ratelimit_free(rl);
}
END_TEST

START_TEST(test_disabled_and_bad_settings)
{
    ratelimit_t *rl = limiter(0, 0);
    int ra;
    for (int i = 0; i < 100000; i++)
        ck_assert_int_eq(ratelimit_take(rl, "k", 0, &ra), 0);
    ck_assert_int_eq(ratelimit_size(rl), 0);
    ratelimit_free(rl);
    ck_assert_int_eq(ratelimit_take(NULL, "k", 0, &ra), 0);
    ratelimit_t *bad = (ratelimit_t *)1;
    ck_assert_int_eq(ratelimit_new(-1, 5, &bad), SBX_EINVAL);
    ck_assert_ptr_null(bad);
    ck_assert_int_eq(ratelimit_new(5, 0, &bad), SBX_EINVAL);
    ck_assert_int_eq(ratelimit_new(5, -3, &bad), SBX_EINVAL);
    ratelimit_free(NULL);
}
END_TEST

START_TEST(test_flood_of_keys_stays_bounded_and_keeps_a_busy_key)
{
    ratelimit_t *rl = limiter(1, 2);
    int ra;
    /* The busy key is used between every few new keys, so it stays recent. */
    ck_assert_int_eq(ratelimit_take(rl, "busy", 0, &ra), 0);
    ck_assert_int_eq(ratelimit_take(rl, "busy", 0, &ra), 0);
    char k[32];
    for (int i = 0; i < 100000; i++) {
        snprintf(k, sizeof k, "tok_%d", i);
        ck_assert_int_eq(ratelimit_take(rl, k, 0, &ra), 0);
        if (i % 4 == 0)
            ck_assert_int_eq(ratelimit_take(rl, "busy", 0, &ra), SBX_ETOOBIG);
    }
    ck_assert_int_le(ratelimit_size(rl), SBX_RATELIMIT_BUCKETS);
    ck_assert_int_ge(ratelimit_size(rl), SBX_RATELIMIT_BUCKETS / 2);
    ratelimit_free(rl);
}
END_TEST

START_TEST(test_long_keys_share_one_bucket)
{
    ratelimit_t *rl = limiter(1, 1);
    char *a = unit_repeat('x', 200);
    int ra;
    ck_assert_int_eq(ratelimit_take(rl, a, 0, &ra), 0);
    ck_assert_int_eq(ratelimit_take(rl, a, 0, &ra), SBX_ETOOBIG);
    free(a);
    ratelimit_free(rl);
}
END_TEST

/* Several threads draining one key: exactly the burst is granted. */
static ratelimit_t *shared;
static int granted[4];

static void *drain(void *arg)
{
    int *g = arg;
    int ra;
    for (int i = 0; i < 5000; i++)
        if (ratelimit_take(shared, "one", 7 * SEC, &ra) == 0)
            (*g)++;
    return NULL;
}

START_TEST(test_threads_share_the_bucket)
{
    shared = limiter(1, 1000);
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        granted[i] = 0;
        ck_assert_int_eq(pthread_create(&t[i], NULL, drain, &granted[i]), 0);
    }
    int sum = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        sum += granted[i];
    }
    ck_assert_int_eq(sum, 1000);
    ratelimit_free(shared);
}
END_TEST

START_TEST(test_empty_looks_without_taking_or_making_a_bucket)
{
    ratelimit_t *rl = limiter(2, 3);
    int ra = -1;
    /* A key without a bucket is not empty, and looking makes none. */
    ck_assert(!ratelimit_empty(rl, "tok_x", 1000 * SEC, &ra));
    ck_assert_int_eq(ratelimit_size(rl), 0);
    for (int i = 0; i < 3; i++) {
        ck_assert(!ratelimit_empty(rl, "tok_a", 1000 * SEC, &ra));
        ck_assert_int_eq(ratelimit_take(rl, "tok_a", 1000 * SEC, &ra), 0);
    }
    /* Used up: empty, with the wait; looking again takes nothing. */
    ck_assert(ratelimit_empty(rl, "tok_a", 1000 * SEC, &ra));
    ck_assert_int_eq(ra, 1);
    ck_assert(ratelimit_empty(rl, "tok_a", 1000 * SEC, &ra));
    /* Half a second refills one (rate 2): not empty, and take gets it. */
    ck_assert(!ratelimit_empty(rl, "tok_a", 1000 * SEC + SEC / 2, &ra));
    ck_assert_int_eq(ratelimit_take(rl, "tok_a", 1000 * SEC + SEC / 2, &ra), 0);
    ck_assert(ratelimit_empty(rl, "tok_a", 1000 * SEC + SEC / 2, &ra));
    ratelimit_free(rl);
}
END_TEST

START_TEST(test_hold_only_clients_back_inside_their_retry_after)
{
    ratelimit_t *rl = limiter(1, 1);
    int ra = -1;
    /* No bucket: nothing held, and none made. */
    ck_assert_int_eq(ratelimit_hold(rl, "tok_x", 10 * SEC, 1), 0);
    ck_assert_int_eq(ratelimit_size(rl), 0);
    ck_assert_int_eq(ratelimit_take(rl, "k", 10 * SEC, &ra), 0);
    ck_assert_int_eq(ratelimit_take(rl, "k", 10 * SEC, &ra), SBX_ETOOBIG);
    /* The first refusal is sent at once and tells the client 1 s. */
    ck_assert_int_eq(ratelimit_hold(rl, "k", 10 * SEC, ra), 0);
    /* Back after 0.3 s: held for the 0.7 s left of what it was told. */
    ck_assert_int_eq(ratelimit_hold(rl, "k", 10 * SEC + 300000, 1), 700000);
    ck_assert_int_eq(ratelimit_hold(rl, "k", 10 * SEC + 999999, 1), 1);
    /* Back when told: at once again, and that refusal tells 1 s more. */
    ck_assert_int_eq(ratelimit_hold(rl, "k", 11 * SEC, 1), 0);
    ck_assert_int_eq(ratelimit_hold(rl, "k", 11 * SEC + 500000, 1), 500000);
    /* A long Retry-After holds at most SBX_RATE_HOLD_MAX_US. */
    ck_assert_int_eq(ratelimit_hold(rl, "k", 20 * SEC, 30), 0);
    ck_assert_int_eq(ratelimit_hold(rl, "k", 20 * SEC + 1, 30), SBX_RATE_HOLD_MAX_US);
    /* A disabled limiter holds nothing. */
    ratelimit_t *off = limiter(0, 0);
    ck_assert_int_eq(ratelimit_hold(off, "k", 0, 1), 0);
    ck_assert_int_eq(ratelimit_hold(off, "k", 1, 1), 0);
    ratelimit_free(off);
    ratelimit_free(rl);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("ratelimit");
    unit_tcase_add(s, "buckets", UNIT_TESTS(
        test_burst_then_refused_with_retry_after,
        test_refill_at_the_rate,
        test_retry_after_is_whole_seconds_at_least_one,
        test_keys_are_apart,
        test_disabled_and_bad_settings,
        test_flood_of_keys_stays_bounded_and_keeps_a_busy_key,
        test_long_keys_share_one_bucket,
        test_threads_share_the_bucket,
        test_empty_looks_without_taking_or_making_a_bucket,
        test_hold_only_clients_back_inside_their_retry_after,
    ));
    return s;
}
