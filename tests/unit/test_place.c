/* Unit tests for the placement decision of a create (controller/store/place.c):
 * which worker, or why it waits or is refused, and the placement JSON. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonx.h"
#include "store/place.h"

#define ALLNET ((1u << NET_NONE) | (1u << NET_RESTRICTED) | (1u << NET_OPEN))

/* A ready, fresh container worker of 4000m/4096 MiB, empty. */
static aegis_worker_t worker(const char *name)
{
    aegis_worker_t w;
    memset(&w, 0, sizeof w);
    w.id = name;
    w.name = name;
    w.state = "ready";
    w.fresh = true;
    w.classes = 1u << ISO_CONTAINER;
    w.networks[ISO_CONTAINER] = ALLNET;
    w.cap_cpu = w.free_cpu = 4000;
    w.cap_mem = w.free_mem = 4096;
    w.free_slots = 10;
    return w;
}

static place_input_t input(aegis_worker_t *ws, int n)
{
    place_input_t in = { .rq = { .need = ISO_CONTAINER, .network = NET_NONE, .cpu = 1000, .mem = 1024 },
                         .ws = ws, .n = n };
    return in;
}

static const char *reason(json_object *pl, size_t i)
{
    return json_object_get_string(json_object_array_get_idx(jsonx_get_arr(pl, "reasons"), i));
}

START_TEST(test_decide_leases_to_the_worker_with_room)
{
    aegis_worker_t ws[2] = { worker("a"), worker("b") };
    ws[0].free_slots = 0;
    place_input_t in = input(ws, 2);
    place_decision_t d;
    ck_assert_int_eq(place_decide(&in, &d), 0);
    ck_assert_int_eq(d.action, PLACE_LEASE);
    ck_assert_int_eq(d.worker, 1);
    ck_assert_int_eq(d.run_as, ISO_CONTAINER);
    ck_assert_str_eq(jsonx_get_str(d.placement, "worker"), "b");
    ck_assert_str_eq(jsonx_get_str(d.placement, "needs"), "container");
    ck_assert_str_eq(jsonx_get_str(d.placement, "isolation"), "container");
    ck_assert_str_eq(jsonx_get_str(d.placement, "summary"), d.summary);
    /* The chosen worker's sentence comes first. */
    ck_assert_ptr_nonnull(strstr(reason(d.placement, 0), "b: chosen"));
    ck_assert_ptr_nonnull(strstr(reason(d.placement, 1), "a:"));
    int64_t score = -1;
    ck_assert(jsonx_get_int(jsonx_get_obj(d.placement, "score"), "score", &score));
    ck_assert_int_gt(score, 0);
    place_decision_release(&d);
    ck_assert_ptr_null(d.placement);
}
END_TEST

START_TEST(test_decide_refuses_when_no_worker_offers_the_class)
{
    aegis_worker_t ws[1] = { worker("a") };
    place_input_t in = input(ws, 1);
    in.rq.need = ISO_GVISOR;
    place_decision_t d;
    ck_assert_int_eq(place_decide(&in, &d), 0);
    ck_assert_int_eq(d.action, PLACE_REFUSE);
    ck_assert_int_eq(d.worker, -1);
    ck_assert_str_ne(d.summary, "");
    json_object *v = (json_object *)1;
    ck_assert(json_object_object_get_ex(d.placement, "worker", &v));
    ck_assert_ptr_null(v);
    ck_assert_str_eq(jsonx_get_str(d.placement, "needs"), "gvisor");
    ck_assert_ptr_null(jsonx_get_obj(d.placement, "score"));
    place_decision_release(&d);
}
END_TEST

START_TEST(test_decide_waits_when_nobody_has_room)
{
    aegis_worker_t ws[2] = { worker("a"), worker("b") };
    ws[0].free_slots = 0;
    ws[1].free_cpu = 500;
    place_input_t in = input(ws, 2);
    place_decision_t d;
    ck_assert_int_eq(place_decide(&in, &d), 0);
    ck_assert_int_eq(d.action, PLACE_WAIT);
    ck_assert_int_eq(json_object_array_length(jsonx_get_arr(d.placement, "reasons")), 2);
    place_decision_release(&d);
}
END_TEST

START_TEST(test_decide_without_workers_says_none_registered)
{
    place_input_t in = input(NULL, 0);
    place_decision_t d;
    ck_assert_int_eq(place_decide(&in, &d), 0);
    ck_assert_int_ne(d.action, PLACE_LEASE);
    ck_assert_str_eq(reason(d.placement, 0), "no worker has registered");
    place_decision_release(&d);
}
END_TEST

START_TEST(test_reasons_are_capped)
{
    enum { N = AEGIS_REASONS_MAX + 6 };
    aegis_worker_t ws[N];
    char names[N][8];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "w%02d", i);
        ws[i] = worker(names[i]);
        ws[i].free_slots = 0;
    }
    ws[N - 1].free_slots = 1; /* the last one is chosen */
    place_input_t in = input(ws, N);
    place_decision_t d;
    ck_assert_int_eq(place_decide(&in, &d), 0);
    ck_assert_int_eq(d.action, PLACE_LEASE);
    ck_assert_int_eq(d.worker, N - 1);
    json_object *rs = jsonx_get_arr(d.placement, "reasons");
    ck_assert_int_eq(json_object_array_length(rs), AEGIS_REASONS_MAX + 1);
    ck_assert_ptr_nonnull(strstr(reason(d.placement, 0), "w29: chosen"));
    ck_assert_str_eq(reason(d.placement, AEGIS_REASONS_MAX), "and 6 more worker(s)");
    place_decision_release(&d);
}
END_TEST

START_TEST(test_classes_and_networks_parse)
{
    ck_assert_uint_eq(place_classes_parse("container,gvisor"), (1u << ISO_CONTAINER) | (1u << ISO_GVISOR));
    ck_assert_uint_eq(place_classes_parse("bogus,microvm"), 1u << ISO_MICROVM);
    ck_assert_uint_eq(place_classes_parse(""), 0);
    ck_assert_uint_eq(place_classes_parse(NULL), 0);
    json_object *nets = NULL;
    const char *txt = "{\"container\":[\"none\",\"open\"],\"gvisor\":\"open\",\"microvm\":[\"x\",\"restricted\"]}";
    ck_assert_int_eq(jsonx_parse(txt, strlen(txt), &nets, NULL), 0);
    unsigned bits[3] = { 0, 0, 0 };
    place_networks_parse(nets, bits);
    ck_assert_uint_eq(bits[ISO_CONTAINER], (1u << NET_NONE) | (1u << NET_OPEN));
    ck_assert_uint_eq(bits[ISO_GVISOR], 0);
    ck_assert_uint_eq(bits[ISO_MICROVM], 1u << NET_RESTRICTED);
    json_object_put(nets);
    unsigned none[3] = { 0, 0, 0 };
    place_networks_parse(NULL, none);
    ck_assert_uint_eq(none[0] | none[1] | none[2], 0);
}
END_TEST

static Suite *place_suite(void)
{
    Suite *s = suite_create("place");
    TCase *tc = tcase_create("decide");
    tcase_add_test(tc, test_decide_leases_to_the_worker_with_room);
    tcase_add_test(tc, test_decide_refuses_when_no_worker_offers_the_class);
    tcase_add_test(tc, test_decide_waits_when_nobody_has_room);
    tcase_add_test(tc, test_decide_without_workers_says_none_registered);
    tcase_add_test(tc, test_reasons_are_capped);
    tcase_add_test(tc, test_classes_and_networks_parse);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(place_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
