/* Unit tests for the operation transition table and state names (common/opstate.c). */
#include "check_util.h"
#include <stdio.h>

#include "errors.h"
#include "opstate.h"

/* docs/architecture.md#operations, written out independently of common/opstate.c:
 *   pending  -> admitted | failed (policy denies) | cancelled
 *   admitted -> leased | failed (isolation unavailable, deadline) | cancelled
 *             | succeeded (the documented extra edge: a delete of a sandbox
 *               that was never placed, a share, an unshare and an extend
 *               complete in the controller alone)
 *   leased   -> running | admitted (lease expired, retry) | failed (no retry left) | cancelled
 *   running  -> succeeded | failed | admitted (lease expired, retry) | cancelled
 *             | leased (the poll's answer never reached the worker)
 *   succeeded, failed, cancelled: terminal, no outgoing edge. */
enum { P = OP_PENDING, A = OP_ADMITTED, L = OP_LEASED, R = OP_RUNNING, S = OP_SUCCEEDED, F = OP_FAILED,
       C = OP_CANCELLED };
static const int expected[OP__COUNT][OP__COUNT] = {
    /*              P  A  L  R  S  F  C */
    [P] = { 0, 1, 0, 0, 0, 1, 1 },
    [A] = { 0, 0, 1, 0, 1, 1, 1 },
    [L] = { 0, 1, 0, 1, 0, 1, 1 },
    [R] = { 0, 1, 1, 0, 1, 1, 1 },
    [S] = { 0, 0, 0, 0, 0, 0, 0 },
    [F] = { 0, 0, 0, 0, 0, 0, 0 },
    [C] = { 0, 0, 0, 0, 0, 0, 0 },
};

START_TEST(test_transition_table_matches_design_for_every_pair)
{
    ck_assert_int_eq(OP__COUNT, 7);
    int mismatches = 0;
    for (int from = 0; from < OP__COUNT; from++)
        for (int to = 0; to < OP__COUNT; to++) {
            int got = op_transition_allowed((op_state_t)from, (op_state_t)to);
            if (got != expected[from][to]) {
                fprintf(stderr, "transition %s -> %s: allowed=%d, expected %d\n", op_state_name((op_state_t)from),
                        op_state_name((op_state_t)to), got, expected[from][to]);
                mismatches++;
            }
        }
    ck_assert_int_eq(mismatches, 0);
}
END_TEST

START_TEST(test_no_state_moves_to_itself)
{
    for (int s = 0; s < OP__COUNT; s++)
        ck_assert_msg(!op_transition_allowed((op_state_t)s, (op_state_t)s), "%s -> itself is allowed",
                      op_state_name((op_state_t)s));
}
END_TEST

START_TEST(test_nothing_moves_back_to_pending)
{
    for (int s = 0; s < OP__COUNT; s++)
        ck_assert_msg(!op_transition_allowed((op_state_t)s, OP_PENDING), "%s -> pending is allowed",
                      op_state_name((op_state_t)s));
}
END_TEST

START_TEST(test_terminal_states_have_no_outgoing_transitions)
{
    for (int s = 0; s < OP__COUNT; s++) {
        int outgoing = 0;
        for (int t = 0; t < OP__COUNT; t++)
            outgoing += op_transition_allowed((op_state_t)s, (op_state_t)t);
        if (op_state_terminal((op_state_t)s))
            ck_assert_int_eq(outgoing, 0);
        else
            ck_assert_int_gt(outgoing, 0);
    }
}
END_TEST

START_TEST(test_terminal_states_are_exactly_succeeded_failed_cancelled)
{
    static const int terminal[OP__COUNT] = { [S] = 1, [F] = 1, [C] = 1 };
    for (int s = 0; s < OP__COUNT; s++)
        ck_assert_int_eq(op_state_terminal((op_state_t)s), terminal[s]);
}
END_TEST

START_TEST(test_every_non_terminal_state_can_be_cancelled_and_fail)
{
    for (int s = 0; s < OP__COUNT; s++) {
        if (op_state_terminal((op_state_t)s))
            continue;
        ck_assert(op_transition_allowed((op_state_t)s, OP_CANCELLED));
        ck_assert(op_transition_allowed((op_state_t)s, OP_FAILED));
    }
}
END_TEST

START_TEST(test_out_of_range_states_are_refused_by_transition_check)
{
    ck_assert(!op_transition_allowed(OP__COUNT, OP_ADMITTED));
    ck_assert(!op_transition_allowed(OP_PENDING, OP__COUNT));
    ck_assert(!op_transition_allowed((op_state_t)-1, OP_ADMITTED));
    ck_assert(!op_transition_allowed(OP_PENDING, (op_state_t)-1));
    ck_assert(!op_transition_allowed((op_state_t)1000, (op_state_t)1000));
    ck_assert(!op_state_terminal(OP__COUNT));
}
END_TEST

/* Asserts that name_fn names every value below count as names[] does and that
 * parse_fn reads each name back to its value. */
#define ASSERT_NAMES_ROUND_TRIP(type_t, count, name_fn, parse_fn, names)                                           \
    for (int v_ = 0; v_ < (count); v_++) {                                                                          \
        ck_assert_str_eq(name_fn((type_t)v_), (names)[v_]);                                                         \
        type_t back_ = (count);                                                                                     \
        ck_assert_int_eq(parse_fn((names)[v_], &back_), 0);                                                         \
        ck_assert_int_eq(back_, v_);                                                                                \
    }

START_TEST(test_state_names_round_trip_through_parse)
{
    static const char *names[OP__COUNT] = { "pending", "admitted", "leased", "running",
                                            "succeeded", "failed", "cancelled" };
    ASSERT_NAMES_ROUND_TRIP(op_state_t, OP__COUNT, op_state_name, op_state_parse, names);
}
END_TEST

START_TEST(test_kind_names_round_trip_through_parse)
{
    ck_assert_int_eq(OPK__COUNT, 11);
    static const char *names[OPK__COUNT] = { "create", "delete", "exec", "share", "unshare", "extend", "snapshot", "pause",
                                             "resume", "snapshot_copy", "network" };
    ASSERT_NAMES_ROUND_TRIP(op_kind_t, OPK__COUNT, op_kind_name, op_kind_parse, names);
}
END_TEST

START_TEST(test_phase_names_round_trip_through_parse)
{
    static const char *names[PH__COUNT] = { "pending", "scheduled", "provisioning", "running",
                                            "deleting", "deleted", "failed", "lost", "paused" };
    ASSERT_NAMES_ROUND_TRIP(sandbox_phase_t, PH__COUNT, sandbox_phase_name, sandbox_phase_parse, names);
}
END_TEST

START_TEST(test_out_of_range_values_have_unknown_name)
{
    ck_assert_str_eq(op_state_name(OP__COUNT), "unknown");
    ck_assert_str_eq(op_state_name((op_state_t)-1), "unknown");
    ck_assert_str_eq(op_kind_name(OPK__COUNT), "unknown");
    ck_assert_str_eq(op_kind_name((op_kind_t)-1), "unknown");
    ck_assert_str_eq(sandbox_phase_name(PH__COUNT), "unknown");
    ck_assert_str_eq(sandbox_phase_name((sandbox_phase_t)-1), "unknown");
}
END_TEST

START_TEST(test_unknown_names_are_rejected_and_leave_output_alone)
{
    static const char *bad[] = { "", "unknown", "PENDING", "Running", "pending ", " leased", "cancel",
                                 "canceled", "succeed", "done" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        op_state_t s = OP_RUNNING;
        ck_assert_int_eq(op_state_parse(bad[i], &s), SBX_EINVAL);
        ck_assert_int_eq(s, OP_RUNNING);
    }
    op_state_t s = OP_RUNNING;
    ck_assert_int_eq(op_state_parse(NULL, &s), SBX_EINVAL);

    op_kind_t k = OPK_EXEC;
    ck_assert_int_eq(op_kind_parse("Create", &k), SBX_EINVAL);
    ck_assert_int_eq(op_kind_parse("run", &k), SBX_EINVAL);
    ck_assert_int_eq(op_kind_parse("", &k), SBX_EINVAL);
    ck_assert_int_eq(op_kind_parse("Extend", &k), SBX_EINVAL);
    ck_assert_int_eq(op_kind_parse("extend ", &k), SBX_EINVAL);
    ck_assert_int_eq(op_kind_parse(NULL, &k), SBX_EINVAL);
    ck_assert_int_eq(k, OPK_EXEC);

    sandbox_phase_t p = PH_LOST;
    ck_assert_int_eq(sandbox_phase_parse("admitted", &p), SBX_EINVAL);
    ck_assert_int_eq(sandbox_phase_parse("Deleted", &p), SBX_EINVAL);
    ck_assert_int_eq(sandbox_phase_parse("", &p), SBX_EINVAL);
    ck_assert_int_eq(sandbox_phase_parse(NULL, &p), SBX_EINVAL);
    ck_assert_int_eq(p, PH_LOST);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("opstate");
    unit_tcase_add(s, "transitions", UNIT_TESTS(
        test_transition_table_matches_design_for_every_pair,
        test_no_state_moves_to_itself,
        test_nothing_moves_back_to_pending,
        test_terminal_states_have_no_outgoing_transitions,
        test_terminal_states_are_exactly_succeeded_failed_cancelled,
        test_every_non_terminal_state_can_be_cancelled_and_fail,
        test_out_of_range_states_are_refused_by_transition_check,
    ));
    unit_tcase_add(s, "names", UNIT_TESTS(
        test_state_names_round_trip_through_parse,
        test_kind_names_round_trip_through_parse,
        test_phase_names_round_trip_through_parse,
        test_out_of_range_values_have_unknown_name,
        test_unknown_names_are_rejected_and_leave_output_alone,
    ));
    return s;
}
