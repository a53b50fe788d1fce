/* The main() shared by the unit-test programs, which runs the suite that the
 * program's unit_suite() builds, and the helpers of check_util.h. */
#include "check_util.h"

#include <stdlib.h>
#include <string.h>

TCase *unit_tcase_add(Suite *s, const char *name, const TTest *const tests[])
{
    TCase *tc = tcase_create(name);
    for (size_t i = 0; tests[i] != NULL; i++)
        tcase_add_test(tc, tests[i]);
    suite_add_tcase(s, tc);
    return tc;
}

void *unit_xmalloc(size_t n)
{
    void *p = malloc(n);
    ck_assert_ptr_nonnull(p);
    return p;
}

char *unit_repeat(char c, size_t n)
{
    char *s = unit_xmalloc(n + 1);
    memset(s, c, n);
    s[n] = '\0';
    return s;
}

json_object *unit_json(const char *text)
{
    json_object *o = NULL;
    api_error_t err;
    memset(&err, 0, sizeof err);
    ck_assert_msg(jsonx_parse(text, strlen(text), &o, &err) == 0, "test JSON %s: %s", text, err.message);
    return o;
}

void unit_expect_invalid(const char *what, const char *text, int r, const api_error_t *err, const char *want)
{
    ck_assert_msg(r == SBX_EINVAL, "%s %.200s accepted (r=%d)", what, text, r);
    ck_assert_msg(err->code == API_INVALID_ARGUMENT, "%s %.200s: code %d, expected %d", what, text, (int)err->code,
                  (int)API_INVALID_ARGUMENT);
    ck_assert_msg(strstr(err->message, want) != NULL, "%s %.200s: message \"%s\" does not contain \"%s\"", what,
                  text, err->message, want);
}

int main(void)
{
    Suite *s = unit_suite();
    if (s == NULL)
        return EXIT_FAILURE;
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
