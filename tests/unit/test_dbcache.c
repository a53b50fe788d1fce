/* Unit tests for the prepared-statement cache (controller/dbcache.c): a text
 * gets one name and keeps it, names are never reused (not even across a
 * clear), the bound holds, removal keeps every other entry findable (the
 * backward shift), and NULL is safe. */
#include "check_util.h"
#include <stdio.h>
#include <string.h>

#include "dbcache.h"

static dbcache_t *cache(size_t cap)
{
    dbcache_t *c = NULL;
    ck_assert_int_eq(dbcache_new(cap, &c), 0);
    ck_assert_ptr_nonnull(c);
    return c;
}

static char *name_of(dbcache_t *c, const char *sql, char buf[DBCACHE_NAME_MAX])
{
    const char *n = NULL;
    ck_assert_int_eq(dbcache_add(c, sql, &n), 0);
    snprintf(buf, DBCACHE_NAME_MAX, "%s", n);
    return buf;
}

START_TEST(test_one_name_per_text)
{
    dbcache_t *c = cache(8);
    char a[DBCACHE_NAME_MAX], b[DBCACHE_NAME_MAX];
    ck_assert_ptr_null(dbcache_find(c, "SELECT 1"));
    name_of(c, "SELECT 1", a);
    name_of(c, "SELECT 2", b);
    ck_assert_str_ne(a, b);
    ck_assert_str_eq(dbcache_find(c, "SELECT 1"), a);
    ck_assert_str_eq(dbcache_find(c, "SELECT 2"), b);
    const char *n = NULL;
    ck_assert_int_eq(dbcache_add(c, "SELECT 1", &n), SBX_ECONFLICT);
    ck_assert_uint_eq(dbcache_count(c), 2);
    /* Texts differing in one byte are different statements. */
    ck_assert_ptr_null(dbcache_find(c, "SELECT 1 "));
    dbcache_free(c);
}
END_TEST

START_TEST(test_bounded_and_names_never_reused)
{
    dbcache_t *c = cache(4);
    char names[5][DBCACHE_NAME_MAX], sql[32];
    for (int i = 0; i < 4; i++) {
        snprintf(sql, sizeof sql, "SELECT %d", i);
        name_of(c, sql, names[i]);
    }
    const char *n = NULL;
    ck_assert_int_eq(dbcache_add(c, "SELECT 4", &n), SBX_ETOOBIG);
    ck_assert_ptr_null(dbcache_find(c, "SELECT 4"));
    ck_assert_uint_eq(dbcache_count(c), 4);
    /* After a reset the server forgot them: the same text gets a new name. */
    dbcache_clear(c);
    ck_assert_uint_eq(dbcache_count(c), 0);
    ck_assert_ptr_null(dbcache_find(c, "SELECT 0"));
    name_of(c, "SELECT 0", names[4]);
    for (int i = 0; i < 4; i++)
        ck_assert_str_ne(names[4], names[i]);
    /* Removal frees room. */
    dbcache_remove(c, "SELECT 0");
    dbcache_remove(c, "never added");
    ck_assert_uint_eq(dbcache_count(c), 0);
    dbcache_free(c);
}
END_TEST

START_TEST(test_remove_keeps_the_others_findable)
{
    /* Enough entries to make collisions and long probe runs in a small table. */
    enum { N = 200 };
    dbcache_t *c = cache(N);
    char names[N][DBCACHE_NAME_MAX], sql[48];
    for (int i = 0; i < N; i++) {
        snprintf(sql, sizeof sql, "UPDATE t SET x = %d WHERE id = $1", i);
        name_of(c, sql, names[i]);
    }
    for (int i = 0; i < N; i += 3) {
        snprintf(sql, sizeof sql, "UPDATE t SET x = %d WHERE id = $1", i);
        dbcache_remove(c, sql);
    }
    for (int i = 0; i < N; i++) {
        snprintf(sql, sizeof sql, "UPDATE t SET x = %d WHERE id = $1", i);
        const char *n = dbcache_find(c, sql);
        if (i % 3 == 0)
            ck_assert_msg(n == NULL, "entry %d still found after its removal", i);
        else
            ck_assert_msg(n && strcmp(n, names[i]) == 0, "entry %d lost: %s instead of %s", i, n ? n : "(none)",
                          names[i]);
    }
    ck_assert_uint_eq(dbcache_count(c), N - (N + 2) / 3);
    dbcache_free(c);
}
END_TEST

START_TEST(test_bad_sizes_and_null)
{
    dbcache_t *c = NULL;
    ck_assert_int_eq(dbcache_new(0, &c), SBX_EINVAL);
    ck_assert_int_eq(dbcache_new(65537, &c), SBX_EINVAL);
    ck_assert_ptr_null(dbcache_find(NULL, "SELECT 1"));
    ck_assert_uint_eq(dbcache_count(NULL), 0);
    dbcache_clear(NULL);
    dbcache_remove(NULL, "x");
    dbcache_free(NULL);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("dbcache");
    unit_tcase_add(s, "dbcache", UNIT_TESTS(test_one_name_per_text, test_bounded_and_names_never_reused,
                                            test_remove_keeps_the_others_findable, test_bad_sizes_and_null, ));
    return s;
}
