/* The one main() of a unit-test program, a short form for its test cases and
 * small helpers the tests share: each tests/unit/test_<module>.c defines
 * unit_suite() and lists its tests. */
#ifndef SANDBOX_TESTS_CHECK_UTIL_H
#define SANDBOX_TESTS_CHECK_UTIL_H

#include <check.h>
#include <stddef.h>

#include "errors.h"
#include "jsonx.h"

/* A NULL-ended list of the tests made by START_TEST, for unit_tcase_add();
 * every test is followed by a comma, the last one too: UNIT_TESTS(test_a, test_b,). */
#define UNIT_TESTS(...) ((const TTest *const[]){__VA_ARGS__ NULL})

/* Defined by each test program: builds its suite, or returns NULL (after saying
 * why on stderr) when the program cannot run at all. main() runs the suite with
 * CK_NORMAL, frees it and exits EXIT_FAILURE when any test failed. */
Suite *unit_suite(void);

/* Adds to s a test case called name holding tests (a UNIT_TESTS list), in order.
 * Returns the test case (owned by s) for fixtures, timeouts or loop tests. */
TCase *unit_tcase_add(Suite *s, const char *name, const TTest *const tests[]);

/* malloc that fails the test instead of returning NULL. */
void *unit_xmalloc(size_t n) __attribute__((malloc, returns_nonnull));

/* A string of n copies of c; the caller frees it. */
char *unit_repeat(char c, size_t n) __attribute__((malloc, returns_nonnull));

/* Parses JSON text strictly (jsonx_parse); fails the test when it is not JSON.
 * The caller puts the result. */
json_object *unit_json(const char *text);

/* Asserts that a decoder's result r and err refuse `what` text as
 * SBX_EINVAL / invalid_argument with a message containing want. */
void unit_expect_invalid(const char *what, const char *text, int r, const api_error_t *err, const char *want);

#endif
