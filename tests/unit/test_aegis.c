/* Unit tests for AEGIS placement: each filter, the scores, each tie-break;
 * and the store's placement decision over them (store/place.c). */
#include "check_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aegis.h"
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

static aegis_request_t request(void)
{
    aegis_request_t r = { .need = ISO_CONTAINER, .network = NET_NONE, .cpu = 1000, .mem = 1024, .selector = NULL };
    return r;
}

static aegis_outcome_t decide(const aegis_request_t *rq, aegis_worker_t *ws, size_t n, aegis_verdict_t *vs,
                              int *best)
{
    char msg[512];
    return aegis_decide(rq, ws, n, vs, best, msg, sizeof msg);
}

START_TEST(test_fit_prefers_the_fuller_worker)
{
    aegis_worker_t ws[2] = { worker("a"), worker("b") };
    ws[1].free_cpu = 2000;
    ws[1].free_mem = 2048; /* b is half full: the better fit */
    aegis_request_t rq = request();
    aegis_verdict_t vs[2];
    int best;
    ck_assert_int_eq(decide(&rq, ws, 2, vs, &best), AEGIS_CHOSEN);
    ck_assert_int_eq(best, 1);
    ck_assert_int_eq(vs[0].fit, 250);  /* 1000 - (3000/4000 + 3072/4096) * 500 */
    ck_assert_int_eq(vs[1].fit, 750);
    ck_assert_ptr_nonnull(strstr(vs[1].why, "b: chosen, score 750 = fit 750 + image 0 - spread 0; runs as container"));
    ck_assert_ptr_nonnull(strstr(vs[0].why, "a: eligible, lower rank, score 250"));
    /* Fit is a fraction of each worker's size: a big empty worker scores
     * low, a small one this sandbox fills exactly scores the most. */
    ck_assert_int_eq(aegis_fit(16000, 16384, 16000, 16384, 1000, 1024), 64);
    ck_assert_int_eq(aegis_fit(2000, 2048, 1000, 1024, 1000, 1024), 1000);
}
END_TEST

START_TEST(test_image_present_and_spread_move_the_score)
{
    aegis_worker_t ws[2] = { worker("a"), worker("b") };
    aegis_request_t rq = request();
    aegis_verdict_t vs[2];
    int best;
    ws[1].has_image = true;
    ck_assert_int_eq(decide(&rq, ws, 2, vs, &best), AEGIS_CHOSEN);
    ck_assert_int_eq(best, 1);
    ck_assert_int_eq(vs[1].image, AEGIS_IMAGE_BONUS);
    /* Two sandboxes of the tenant on b outweigh the image. */
    ws[1].tenant_sandboxes = 2;
    ck_assert_int_eq(decide(&rq, ws, 2, vs, &best), AEGIS_CHOSEN);
    ck_assert_int_eq(best, 0);
    ck_assert_int_eq(vs[1].spread, 2 * AEGIS_SPREAD_PENALTY);
    /* The spread penalty is capped. */
    ws[1].tenant_sandboxes = 100;
    decide(&rq, ws, 2, vs, &best);
    ck_assert_int_eq(vs[1].spread, AEGIS_SPREAD_MAX * AEGIS_SPREAD_PENALTY);
}
END_TEST

START_TEST(test_ties_go_to_fewer_tenant_sandboxes_then_name)
{
    aegis_worker_t ws[3] = { worker("c"), worker("a"), worker("b") };
    aegis_request_t rq = request();
    aegis_verdict_t vs[3];
    int best;
    ck_assert_int_eq(decide(&rq, ws, 3, vs, &best), AEGIS_CHOSEN);
    ck_assert_str_eq(ws[best].name, "a"); /* equal scores: by name, whatever the order */
    /* Equal scores but a has more of the tenant: the image bonus on a makes
     * up exactly for one spread penalty... */
    ws[1].tenant_sandboxes = 1;
    ws[1].has_image = true;
    ws[1].free_cpu -= 0;
    decide(&rq, ws, 3, vs, &best);
    ck_assert_str_eq(ws[best].name, "a"); /* 200 - 150 > 0 */
    /* ...and with scores equal, fewer tenant sandboxes wins over the name. */
    ws[2].tenant_sandboxes = 0;
    ws[2].has_image = false;
    ws[1].has_image = false;
    ws[1].tenant_sandboxes = 0;
    ws[0].tenant_sandboxes = 0;
    ws[1].free_cpu = ws[2].free_cpu = ws[0].free_cpu = 3000;
    ws[1].tenant_sandboxes = 1;
    ws[1].has_image = true; /* a: +200 - 150 = +50 */
    ws[2].has_image = false;
    ws[2].free_cpu = 3000 - 392; /* b: fit + 49 (392m of 4000m, half weight) */
    decide(&rq, ws, 3, vs, &best);
    ck_assert_int_eq(vs[1].score, vs[0].score + 50);
    ck_assert_int_eq(vs[2].score, vs[0].score + 49);
    ck_assert_str_eq(ws[best].name, "a");
    ws[2].free_cpu = 3000 - 400; /* b: +50 too: tie → b has fewer tenant sandboxes */
    decide(&rq, ws, 3, vs, &best);
    ck_assert_int_eq(vs[2].score, vs[1].score);
    ck_assert_str_eq(ws[best].name, "b");
}
END_TEST

/* Each filter, with the sentence an operator reads. */
START_TEST(test_filters_say_why)
{
    aegis_worker_t ws[6] = { worker("draining"), worker("stale"), worker("full"), worker("zone-b"), worker("ok"),
                             worker("slotless") };
    ws[0].state = "draining";
    ws[1].fresh = false;
    ws[2].free_cpu = 500;
    json_object *lb = NULL, *la = NULL;
    ck_assert_int_eq(jsonx_parse("{\"zone\":\"b\"}", 12, &lb, NULL), 0);
    ck_assert_int_eq(jsonx_parse("{\"zone\":\"a\"}", 12, &la, NULL), 0);
    ws[3].labels = lb;
    ws[4].labels = la;
    ws[5].labels = la;
    ws[5].free_slots = 0;
    kv_t item = { "zone", "a" };
    kv_list_t sel = { &item, 1 };
    aegis_request_t rq = request();
    rq.selector = &sel;
    aegis_verdict_t vs[6];
    int best;
    ck_assert_int_eq(decide(&rq, ws, 6, vs, &best), AEGIS_CHOSEN);
    ck_assert_str_eq(ws[best].name, "ok");
    ck_assert_ptr_nonnull(strstr(vs[0].why, "draining: filtered, draining (takes no new sandboxes)"));
    ck_assert_ptr_nonnull(strstr(vs[1].why, "stale: filtered, no heartbeat"));
    /* Selector before capacity: "full" has no zone label. */
    ck_assert_ptr_nonnull(strstr(vs[2].why, "full: filtered, selector zone=a does not match (worker has no such label)"));
    ck_assert_ptr_nonnull(strstr(vs[3].why, "zone-b: filtered, selector zone=a does not match (worker has b)"));
    ck_assert_ptr_nonnull(strstr(vs[5].why, "slotless: filtered, not enough free capacity"));
    rq.selector = NULL;
    decide(&rq, ws, 6, vs, &best);
    ck_assert_ptr_nonnull(strstr(vs[2].why, "full: filtered, not enough free capacity (needs 1000m cpu and 1024 MiB; "
                                            "has 500m"));
    json_object_put(la);
    json_object_put(lb);
}
END_TEST

START_TEST(test_isolation_never_downgrades)
{
    aegis_worker_t ws[2] = { worker("runc1"), worker("runc2") };
    aegis_request_t rq = request();
    rq.need = ISO_GVISOR;
    aegis_verdict_t vs[2];
    int best;
    char msg[512];
    ck_assert_int_eq(aegis_decide(&rq, ws, 2, vs, &best, msg, sizeof msg), AEGIS_REFUSE);
    ck_assert_int_eq(best, -1);
    ck_assert_ptr_nonnull(strstr(msg, "no ready worker offers isolation class gvisor"));
    ck_assert_ptr_nonnull(strstr(vs[0].why, "runc1: filtered, offers container but not gvisor or stronger"));
    /* A gVisor worker serves it, and a stronger class serves a weaker need. */
    ws[1].classes |= 1u << ISO_GVISOR;
    ws[1].networks[ISO_GVISOR] = 1u << NET_NONE;
    ck_assert_int_eq(decide(&rq, ws, 2, vs, &best), AEGIS_CHOSEN);
    ck_assert_int_eq(best, 1);
    ck_assert_int_eq(vs[1].run_as, ISO_GVISOR);
    /* The weakest sufficient class is used: container work on that worker
     * runs as container. */
    rq.need = ISO_CONTAINER;
    ws[0].state = "draining";
    decide(&rq, ws, 2, vs, &best);
    ck_assert_int_eq(vs[1].run_as, ISO_CONTAINER);
    /* gVisor without the network mode: refused, naming the network. */
    rq.need = ISO_GVISOR;
    rq.network = NET_RESTRICTED;
    ws[0].state = "ready";
    ck_assert_int_eq(aegis_decide(&rq, ws, 2, vs, &best, msg, sizeof msg), AEGIS_REFUSE);
    ck_assert_ptr_nonnull(strstr(msg, "gvisor with network restricted"));
    ck_assert_ptr_nonnull(strstr(vs[1].why, "offers gvisor or stronger but not with network restricted"));
    /* Only a container worker that lacks the network: refused too. */
    rq.need = ISO_CONTAINER;
    rq.network = NET_OPEN;
    ws[0].networks[ISO_CONTAINER] = 1u << NET_NONE;
    ws[1].networks[ISO_CONTAINER] = 1u << NET_NONE;
    ck_assert_int_eq(decide(&rq, ws, 2, vs, &best), AEGIS_REFUSE);
    /* open with egress rules by domain: only a worker that offers
     * "filtered" (its egress filter); plain open is not enough */
    ws[0].networks[ISO_CONTAINER] = ALLNET;
    ws[1].networks[ISO_CONTAINER] = ALLNET | 1u << NET_OFFER_FILTERED;
    rq.egress_rules = true;
    ck_assert_int_eq(decide(&rq, ws, 2, vs, &best), AEGIS_CHOSEN);
    ck_assert_int_eq(best, 1);
    ck_assert_ptr_nonnull(strstr(vs[0].why, "not with network open through an egress filter"));
    ws[1].networks[ISO_CONTAINER] = ALLNET;
    ck_assert_int_eq(aegis_decide(&rq, ws, 2, vs, &best, msg, sizeof msg), AEGIS_REFUSE);
    ck_assert_ptr_nonnull(strstr(msg, "through an egress filter"));
    rq.egress_rules = false;
    /* microvm: nobody offers it. */
    rq.need = ISO_MICROVM;
    rq.network = NET_NONE;
    ck_assert_int_eq(aegis_decide(&rq, ws, 2, vs, &best, msg, sizeof msg), AEGIS_REFUSE);
    ck_assert_ptr_nonnull(strstr(msg, "microvm"));
}
END_TEST

START_TEST(test_a_snapshot_runs_only_where_it_is_held)
{
    /* b holds the snapshot: a, the better fit, is filtered saying why */
    aegis_worker_t ws[2] = { worker("a"), worker("b") };
    ws[0].free_cpu = 2000;
    ws[0].free_mem = 2048;
    ws[1].holds_snapshot = true;
    aegis_request_t rq = request();
    rq.snapshot = "snp_aaaaaaaaaaaaaaaaaaaaaaaaaa";
    aegis_verdict_t vs[2];
    int best;
    char msg[512];
    ck_assert_int_eq(aegis_decide(&rq, ws, 2, vs, &best, msg, sizeof msg), AEGIS_CHOSEN);
    ck_assert_int_eq(best, 1);
    ck_assert_ptr_nonnull(strstr(vs[0].why, "a: filtered, does not hold snapshot snp_aaaaaaaaaaaaaaaaaaaaaaaaaa"));
    /* its holder full: wait for it, never another worker */
    ws[1].free_slots = 0;
    ck_assert_int_eq(aegis_decide(&rq, ws, 2, vs, &best, msg, sizeof msg), AEGIS_WAIT);
    ck_assert_ptr_nonnull(strstr(msg, "the snapshot's worker"));
    /* gvisor work from a (container's) snapshot on a holder offering
     * container and microvm: refused, never run as a microvm (a snapshot's
     * sandbox runs in its kind of class) */
    ws[1].free_slots = 10;
    ws[1].classes |= 1u << ISO_MICROVM;
    ws[1].networks[ISO_MICROVM] = ALLNET;
    rq.need = ISO_GVISOR;
    ck_assert_int_eq(aegis_decide(&rq, ws, 2, vs, &best, msg, sizeof msg), AEGIS_REFUSE);
    ck_assert_ptr_nonnull(strstr(msg, "for a sandbox from a snapshot"));
    ck_assert_ptr_nonnull(strstr(vs[1].why, "up to gvisor"));
    /* a microvm snapshot's sandbox (its create raised the need to microvm)
     * runs as microvm on its holder */
    rq.need = ISO_MICROVM;
    ck_assert_int_eq(decide(&rq, ws, 2, vs, &best), AEGIS_CHOSEN);
    ck_assert_int_eq(best, 1);
    ck_assert_int_eq(vs[1].run_as, ISO_MICROVM);
    /* container work from it on a worker with container and microvm runs
     * as container; without a snapshot the same worker would too */
    rq.need = ISO_CONTAINER;
    ck_assert_int_eq(decide(&rq, ws, 2, vs, &best), AEGIS_CHOSEN);
    ck_assert_int_eq(vs[1].run_as, ISO_CONTAINER);
}
END_TEST

START_TEST(test_wait_rather_than_refuse)
{
    aegis_request_t rq = request();
    aegis_verdict_t vs[2];
    int best;
    char msg[512];
    /* No worker at all (or none ready): wait, a worker may come. */
    ck_assert_int_eq(aegis_decide(&rq, NULL, 0, vs, &best, msg, sizeof msg), AEGIS_WAIT);
    ck_assert_ptr_nonnull(strstr(msg, "no ready worker yet"));
    aegis_worker_t ws[2] = { worker("a"), worker("b") };
    ws[0].state = "draining";
    ws[1].fresh = false;
    ck_assert_int_eq(aegis_decide(&rq, ws, 2, vs, &best, msg, sizeof msg), AEGIS_WAIT);
    /* Class offered but full: wait for capacity. */
    ws[0].state = "ready";
    ws[0].free_mem = 100;
    ck_assert_int_eq(aegis_decide(&rq, ws, 2, vs, &best, msg, sizeof msg), AEGIS_WAIT);
    ck_assert_ptr_nonnull(strstr(msg, "none fits now"));
}
END_TEST

START_TEST(test_image_ref)
{
    char out[128];
    aegis_image_ref("busybox", out, sizeof out);
    ck_assert_str_eq(out, "busybox:latest");
    aegis_image_ref("sandbox-test/busybox", out, sizeof out);
    ck_assert_str_eq(out, "sandbox-test/busybox:latest");
    aegis_image_ref("localhost:5000/x", out, sizeof out);
    ck_assert_str_eq(out, "localhost:5000/x:latest");
    aegis_image_ref("debian:12", out, sizeof out);
    ck_assert_str_eq(out, "debian:12");
    aegis_image_ref("x@sha256:ab", out, sizeof out);
    ck_assert_str_eq(out, "x@sha256:ab");
}
END_TEST

/* ---- the placement decision of a create (controller/store/place.c) ---- */

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

Suite *unit_suite(void)
{
    Suite *s = suite_create("aegis");
    unit_tcase_add(s, "placement", UNIT_TESTS(
        test_fit_prefers_the_fuller_worker,
        test_image_present_and_spread_move_the_score,
        test_ties_go_to_fewer_tenant_sandboxes_then_name,
        test_filters_say_why,
        test_isolation_never_downgrades,
        test_a_snapshot_runs_only_where_it_is_held,
        test_wait_rather_than_refuse,
        test_image_ref,
    ));
    unit_tcase_add(s, "place", UNIT_TESTS(
        test_decide_leases_to_the_worker_with_room,
        test_decide_refuses_when_no_worker_offers_the_class,
        test_decide_waits_when_nobody_has_room,
        test_decide_without_workers_says_none_registered,
        test_reasons_are_capped,
        test_classes_and_networks_parse,
    ));
    return s;
}
