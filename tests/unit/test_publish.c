/* Unit tests for the NATS publisher's pure parts: holes in the id sequence,
 * subjects, URL redaction. */
#include "check_util.h"
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "publish.h"

#define GRACE 5000

static publish_plan_t plan(publish_gap_t *g, int64_t cursor, const int64_t *ids, int n, int64_t now)
{
    publish_plan_t p;
    memset(&p, 0xab, sizeof p);
    publish_plan_batch(g, cursor, ids, n, now, GRACE, &p);
    return p;
}

START_TEST(test_contiguous_batch_goes_out_whole)
{
    publish_gap_t g = { 0 };
    int64_t ids[] = { 11, 12, 13, 14 };
    publish_plan_t p = plan(&g, 10, ids, 4, 1000);
    ck_assert_int_eq(p.nrows, 4);
    ck_assert_int_eq(p.cursor, 14);
    ck_assert_int_eq(p.missing, 0);
    ck_assert_int_eq(p.blocked_at, 0);
    ck_assert_int_eq(g.seen_below, 0);
}
END_TEST

START_TEST(test_empty_batch_keeps_the_cursor)
{
    publish_gap_t g = { 0 };
    publish_plan_t p = plan(&g, 10, NULL, 0, 1000);
    ck_assert_int_eq(p.nrows, 0);
    ck_assert_int_eq(p.cursor, 10);
    ck_assert_int_eq(p.blocked_at, 0);
}
END_TEST

START_TEST(test_hole_stops_the_batch_before_it)
{
    publish_gap_t g = { 0 };
    int64_t ids[] = { 11, 12, 15, 16 };
    publish_plan_t p = plan(&g, 10, ids, 4, 1000);
    ck_assert_int_eq(p.nrows, 2);
    ck_assert_int_eq(p.cursor, 12);
    ck_assert_int_eq(p.missing, 0);
    ck_assert_int_eq(p.blocked_at, 13);
    /* the grace clock covers every hole of the batch */
    ck_assert_int_eq(g.seen_below, 16);
    ck_assert_int_eq(g.seen_ms, 1000);
}
END_TEST

START_TEST(test_hole_right_after_the_cursor_publishes_nothing)
{
    publish_gap_t g = { 0 };
    int64_t ids[] = { 12, 13 };
    publish_plan_t p = plan(&g, 10, ids, 2, 1000);
    ck_assert_int_eq(p.nrows, 0);
    ck_assert_int_eq(p.cursor, 10);
    ck_assert_int_eq(p.blocked_at, 11);
}
END_TEST

START_TEST(test_hole_that_fills_is_published_in_order)
{
    publish_gap_t g = { 0 };
    int64_t first[] = { 12, 13 };
    publish_plan_t p = plan(&g, 10, first, 2, 1000);
    ck_assert_int_eq(p.blocked_at, 11);
    /* the late transaction commits 11 */
    int64_t second[] = { 11, 12, 13 };
    p = plan(&g, 10, second, 3, 1100);
    ck_assert_int_eq(p.nrows, 3);
    ck_assert_int_eq(p.cursor, 13);
    ck_assert_int_eq(p.missing, 0);
    ck_assert_int_eq(p.blocked_at, 0);
}
END_TEST

START_TEST(test_hole_passes_after_the_grace_not_before)
{
    publish_gap_t g = { 0 };
    int64_t ids[] = { 11, 14, 15 };
    publish_plan_t p = plan(&g, 10, ids, 3, 1000);
    ck_assert_int_eq(p.cursor, 11);
    ck_assert_int_eq(p.blocked_at, 12);
    int64_t rest[] = { 14, 15 };
    p = plan(&g, 11, rest, 2, 1000 + GRACE - 1);
    ck_assert_int_eq(p.nrows, 0);
    ck_assert_int_eq(p.cursor, 11);
    ck_assert_int_eq(p.blocked_at, 12);
    ck_assert_int_eq(g.seen_ms, 1000); /* the clock did not restart */
    p = plan(&g, 11, rest, 2, 1000 + GRACE);
    ck_assert_int_eq(p.nrows, 2);
    ck_assert_int_eq(p.cursor, 15);
    ck_assert_int_eq(p.missing, 2);
    ck_assert_int_eq(p.graced, 2);
    ck_assert_int_eq(p.blocked_at, 0);
}
END_TEST

START_TEST(test_all_holes_of_a_batch_share_one_grace)
{
    publish_gap_t g = { 0 };
    int64_t ids[] = { 12, 14, 16, 20 };
    publish_plan_t p = plan(&g, 10, ids, 4, 0);
    ck_assert_int_eq(p.blocked_at, 11);
    p = plan(&g, 10, ids, 4, GRACE);
    ck_assert_int_eq(p.nrows, 4);
    ck_assert_int_eq(p.cursor, 20);
    ck_assert_int_eq(p.missing, 1 + 1 + 1 + 3);
    ck_assert_int_eq(p.blocked_at, 0);
}
END_TEST

START_TEST(test_a_hole_newer_than_the_sighting_waits_its_own_grace)
{
    publish_gap_t g = { 0 };
    int64_t a[] = { 12, 13 };
    publish_plan_t p = plan(&g, 10, a, 2, 0);
    ck_assert_int_eq(g.seen_below, 13);
    /* after the grace: 11 passes; 15 was not seen missing back then */
    int64_t b[] = { 12, 13, 14, 16 };
    p = plan(&g, 10, b, 4, GRACE);
    ck_assert_int_eq(p.nrows, 3);
    ck_assert_int_eq(p.cursor, 14);
    ck_assert_int_eq(p.missing, 1);
    ck_assert_int_eq(p.blocked_at, 15);
    ck_assert_int_eq(g.seen_below, 16);
    ck_assert_int_eq(g.seen_ms, GRACE);
    int64_t c[] = { 16 };
    p = plan(&g, 14, c, 1, 2 * GRACE - 1);
    ck_assert_int_eq(p.blocked_at, 15);
    p = plan(&g, 14, c, 1, 2 * GRACE);
    ck_assert_int_eq(p.cursor, 16);
    ck_assert_int_eq(p.missing, 1);
}
END_TEST

START_TEST(test_settled_holes_pass_at_once)
{
    /* PostgreSQL said no transaction that could hold an id below 20 is
     * open: the next read passes them without waiting. */
    publish_gap_t g = { 0 };
    int64_t ids[] = { 12, 14, 20 };
    publish_plan_t p = plan(&g, 10, ids, 3, 0);
    ck_assert_int_eq(p.blocked_at, 11);
    publish_gap_settle(&g, 20);
    p = plan(&g, 10, ids, 3, 1);
    ck_assert_int_eq(p.nrows, 3);
    ck_assert_int_eq(p.cursor, 20);
    ck_assert_int_eq(p.missing, 1 + 1 + 5);
    ck_assert_int_eq(p.graced, 0);
    ck_assert_int_eq(p.blocked_at, 0);
    /* settling never moves back */
    publish_gap_settle(&g, 5);
    ck_assert_int_eq(g.settled_below, 20);
}
END_TEST

START_TEST(test_settled_part_of_a_hole_passes_the_rest_waits)
{
    publish_gap_t g = { .settled_below = 13 };
    int64_t ids[] = { 16 };
    publish_plan_t p = plan(&g, 10, ids, 1, 0);
    ck_assert_int_eq(p.nrows, 0);
    ck_assert_int_eq(p.cursor, 12); /* 11 and 12 are final, 13..15 may still commit */
    ck_assert_int_eq(p.missing, 2);
    ck_assert_int_eq(p.blocked_at, 13);
}
END_TEST

START_TEST(test_settled_and_graced_holes_are_told_apart)
{
    /* 11 is known final (settled below 12); 13..14 only waited out */
    publish_gap_t g = { .settled_below = 12 };
    int64_t ids[] = { 12, 15 };
    publish_plan_t p = plan(&g, 10, ids, 2, 0);
    ck_assert_int_eq(p.cursor, 12);
    ck_assert_int_eq(p.missing, 1);
    ck_assert_int_eq(p.graced, 0);
    ck_assert_int_eq(p.blocked_at, 13);
    p = plan(&g, 12, ids + 1, 1, GRACE);
    ck_assert_int_eq(p.cursor, 15);
    ck_assert_int_eq(p.missing, 2);
    ck_assert_int_eq(p.graced, 2);
}
END_TEST

START_TEST(test_pruned_events_below_the_table_pass_once_settled)
{
    /* A long NATS outage: the retention pruned up to 4999, the cursor is 100. */
    publish_gap_t g = { 0 };
    int64_t ids[] = { 5000, 5001 };
    publish_plan_t p = plan(&g, 100, ids, 2, 0);
    ck_assert_int_eq(p.nrows, 0);
    ck_assert_int_eq(p.blocked_at, 101);
    publish_gap_settle(&g, 5001);
    p = plan(&g, 100, ids, 2, 0);
    ck_assert_int_eq(p.nrows, 2);
    ck_assert_int_eq(p.cursor, 5001);
    ck_assert_int_eq(p.missing, 4899);
}
END_TEST

START_TEST(test_rows_not_after_the_cursor_stop_the_batch)
{
    publish_gap_t g = { 0 };
    int64_t ids[] = { 11, 11, 12 };
    publish_plan_t p = plan(&g, 10, ids, 3, 0);
    ck_assert_int_eq(p.nrows, 1);
    ck_assert_int_eq(p.cursor, 11);
    ck_assert_int_eq(p.blocked_at, 0);
}
END_TEST

START_TEST(test_subject_tokens)
{
    char buf[128];
    ck_assert_int_eq(publish_subject(buf, sizeof buf, "sandbox.events", "team-a", "operation.succeeded"), 0);
    ck_assert_str_eq(buf, "sandbox.events.team-a.operation.succeeded");
    ck_assert_int_eq(publish_subject(buf, sizeof buf, "sandbox.events", NULL, "worker.registered"), 0);
    ck_assert_str_eq(buf, "sandbox.events._system.worker.registered");
    /* a tenant cannot add tokens, wildcards or whitespace */
    ck_assert_int_eq(publish_subject(buf, sizeof buf, "p", "a.b*c >d\te", "k"), 0);
    ck_assert_str_eq(buf, "p.a_b_c__d_e.k");
    ck_assert_int_eq(publish_subject(buf, sizeof buf, "p", "", "k"), 0);
    ck_assert_str_eq(buf, "p._.k");
    ck_assert_int_eq(publish_subject(buf, sizeof buf, "p", "\xc3\xa9t\xc3\xa9", "k"), 0);
    ck_assert_str_eq(buf, "p.__t__.k");
    /* kinds keep their dots, never an empty token or a wildcard */
    ck_assert_int_eq(publish_subject(buf, sizeof buf, "p", "t", ".a..b*."), 0);
    ck_assert_str_eq(buf, "p.t._.a._.b_._");
    ck_assert_int_eq(publish_subject(buf, sizeof buf, "p", "t", ""), 0);
    ck_assert_str_eq(buf, "p.t._");
    ck_assert_int_eq(publish_subject(buf, sizeof buf, "p", "t", NULL), 0);
    ck_assert_str_eq(buf, "p.t._");
}
END_TEST

START_TEST(test_subject_too_long)
{
    char buf[16];
    ck_assert_int_eq(publish_subject(buf, sizeof buf, "sandbox.events", "t", "k"), SBX_ETOOBIG);
    ck_assert_int_eq(publish_subject(buf, 10, "abc", "def", "ghi"), SBX_ETOOBIG); /* needs 12 */
    ck_assert_int_eq(publish_subject(buf, 12, "abc", "def", "ghi"), 0);
    ck_assert_str_eq(buf, "abc.def.ghi");
}
END_TEST

START_TEST(test_prefix_validation)
{
    ck_assert(publish_prefix_valid("sandbox.events"));
    ck_assert(publish_prefix_valid("a"));
    ck_assert(publish_prefix_valid("my-org_1.ev"));
    ck_assert(!publish_prefix_valid(""));
    ck_assert(!publish_prefix_valid(NULL));
    ck_assert(!publish_prefix_valid(".a"));
    ck_assert(!publish_prefix_valid("a."));
    ck_assert(!publish_prefix_valid("a..b"));
    ck_assert(!publish_prefix_valid("a.*"));
    ck_assert(!publish_prefix_valid("a.>"));
    ck_assert(!publish_prefix_valid("a b"));
}
END_TEST

START_TEST(test_url_redaction)
{
    char buf[256];
    ck_assert_str_eq(publish_url_redact("nats://127.0.0.1:4222", buf, sizeof buf), "nats://127.0.0.1:4222");
    ck_assert_str_eq(publish_url_redact("nats://user:s3cret@nats.example:4222", buf, sizeof buf),
                     "nats://***@nats.example:4222");
    ck_assert_str_eq(publish_url_redact("nats://tok@h:1,tls://a:b@h2:2,nats://h3", buf, sizeof buf),
                     "nats://***@h:1,tls://***@h2:2,nats://h3");
    ck_assert_str_eq(publish_url_redact("u:p@host:4222", buf, sizeof buf), "***@host:4222");
    /* a password with '@' in it still goes */
    ck_assert_str_eq(publish_url_redact("nats://u:p@ss@h:1", buf, sizeof buf), "nats://***@h:1");
    /* an '@' after the authority is not a credential */
    ck_assert_str_eq(publish_url_redact("nats://h:1/x@y", buf, sizeof buf), "nats://h:1/x@y");
    char small[8];
    ck_assert_str_eq(publish_url_redact("nats://u:p@h:1", small, sizeof small), "nats://");
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("publish");
    unit_tcase_add(s, "holes", UNIT_TESTS(
        test_contiguous_batch_goes_out_whole,
        test_empty_batch_keeps_the_cursor,
        test_hole_stops_the_batch_before_it,
        test_hole_right_after_the_cursor_publishes_nothing,
        test_hole_that_fills_is_published_in_order,
        test_hole_passes_after_the_grace_not_before,
        test_all_holes_of_a_batch_share_one_grace,
        test_a_hole_newer_than_the_sighting_waits_its_own_grace,
        test_settled_holes_pass_at_once,
        test_settled_part_of_a_hole_passes_the_rest_waits,
        test_settled_and_graced_holes_are_told_apart,
        test_pruned_events_below_the_table_pass_once_settled,
        test_rows_not_after_the_cursor_stop_the_batch,
    ));
    unit_tcase_add(s, "subjects", UNIT_TESTS(
        test_subject_tokens,
        test_subject_too_long,
        test_prefix_validation,
        test_url_redaction,
    ));
    return s;
}
