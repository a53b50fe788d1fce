/* The connection caps shared by the route and API listeners
 * (controller/conncap.c): who is evicted, who is refused, what counts. */
#include "check_util.h"
#include "conncap.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

static conncap_t cap;
static conncap_entry_t *evicted[16];
static int nevicted;

static void on_evict(conncap_entry_t *victim, void *arg)
{
    (void)arg;
    if (nevicted < 16)
        evicted[nevicted++] = victim;
}

static struct sockaddr_storage addr(const char *text)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    if (strchr(text, ':')) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        inet_pton(AF_INET6, text, &a->sin6_addr);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        inet_pton(AF_INET, text, &a->sin_addr);
    }
    return ss;
}

static conncap_admit_t admit(conncap_entry_t *e, const char *from, bool exempt)
{
    struct sockaddr_storage ss = addr(from);
    memset(e, 0, sizeof *e);
    return conncap_admit(&cap, e, &ss, exempt, on_evict, NULL);
}

static void setup(int max, int per_addr)
{
    nevicted = 0;
    ck_assert_int_eq(conncap_init(&cap, "test listener", "max", "per_addr", max, per_addr, NULL), 0);
}

START_TEST(test_the_oldest_idle_connection_makes_room)
{
    setup(3, 0);
    conncap_entry_t e[5];
    ck_assert_int_eq(admit(&e[0], "10.0.0.1", false), CONNCAP_OK);
    ck_assert_int_eq(admit(&e[1], "10.0.0.2", false), CONNCAP_OK);
    ck_assert_int_eq(admit(&e[2], "10.0.0.3", false), CONNCAP_OK);
    ck_assert(conncap_claim(&cap, &e[0])); /* busy: not evictable */
    ck_assert_int_eq(admit(&e[3], "10.0.0.4", false), CONNCAP_OK);
    ck_assert_int_eq(nevicted, 1);
    ck_assert_ptr_eq(evicted[0], &e[1]);
    ck_assert(e[1].evicting);
    ck_assert(!conncap_claim(&cap, &e[1])); /* chosen: it cannot start a request */
    conncap_remove(&cap, &e[1]);
    conncap_destroy(&cap);
}
END_TEST

START_TEST(test_full_of_busy_connections_refuses_the_new_one)
{
    setup(2, 0);
    conncap_entry_t e[3];
    admit(&e[0], "10.0.0.1", false);
    admit(&e[1], "10.0.0.1", false);
    conncap_claim(&cap, &e[0]);
    conncap_claim(&cap, &e[1]);
    ck_assert_int_eq(admit(&e[2], "10.0.0.2", false), CONNCAP_FULL);
    ck_assert_int_eq(nevicted, 0);
    /* It stays counted until removed, whatever the answer. */
    ck_assert_int_eq(cap.total, 3);
    conncap_remove(&cap, &e[2]);
    conncap_release(&cap, &e[1]);
    ck_assert_int_eq(admit(&e[2], "10.0.0.2", false), CONNCAP_OK);
    ck_assert_ptr_eq(evicted[0], &e[1]);
    conncap_destroy(&cap);
}
END_TEST

START_TEST(test_an_address_over_its_cap_evicts_its_own_only)
{
    setup(100, 2);
    conncap_entry_t other, a[3];
    admit(&other, "10.0.0.9", false);       /* older, idle, another address */
    admit(&a[0], "10.0.0.1", false);
    admit(&a[1], "10.0.0.1", false);
    ck_assert_int_eq(admit(&a[2], "10.0.0.1", false), CONNCAP_OK);
    ck_assert_int_eq(nevicted, 1);
    ck_assert_ptr_eq(evicted[0], &a[0]);
    conncap_claim(&cap, &a[1]);
    conncap_claim(&cap, &a[2]);
    conncap_remove(&cap, &a[0]);
    conncap_entry_t more;
    ck_assert_int_eq(admit(&more, "10.0.0.1", false), CONNCAP_ADDRESS_FULL);
    ck_assert(!other.evicting);
    conncap_destroy(&cap);
}
END_TEST

START_TEST(test_ipv6_counts_by_64_and_exempt_peers_by_nothing)
{
    setup(100, 1);
    conncap_entry_t a, b, c, d;
    admit(&a, "2001:db8:1:2::1", false);
    ck_assert_int_eq(admit(&b, "2001:db8:1:2:ffff::7", false), CONNCAP_OK); /* the same /64 */
    ck_assert_int_eq(nevicted, 1);
    ck_assert_ptr_eq(evicted[0], &a);
    ck_assert_int_eq(admit(&c, "2001:db8:1:3::1", false), CONNCAP_OK);     /* another /64 */
    ck_assert_int_eq(nevicted, 1);
    conncap_claim(&cap, &b);
    ck_assert_int_eq(admit(&d, "2001:db8:1:2::9", true), CONNCAP_OK);      /* trusted proxy */
    ck_assert_ptr_null(d.addr);
    ck_assert_int_eq(nevicted, 1);
    conncap_destroy(&cap);
}
END_TEST

START_TEST(test_log_due_lets_one_line_a_second)
{
    atomic_llong last = 0;
    atomic_long suppressed = 0;
    long n = -1;
    ck_assert(conncap_log_due(&last, &suppressed, &n));
    ck_assert_int_eq(n, 0);
    ck_assert(!conncap_log_due(&last, &suppressed, &n));
    ck_assert(!conncap_log_due(&last, &suppressed, &n));
    ck_assert_int_eq(atomic_load(&suppressed), 2);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("conncap");
    unit_tcase_add(s, "core", UNIT_TESTS(
        test_the_oldest_idle_connection_makes_room,
        test_full_of_busy_connections_refuses_the_new_one,
        test_an_address_over_its_cap_evicts_its_own_only,
        test_ipv6_counts_by_64_and_exempt_peers_by_nothing,
        test_log_due_lets_one_line_a_second,));
    return s;
}
