/* Unit tests for AEGIS placement: each filter, the scores, each tie-break. */
#include "check_util.h"
#include <stdlib.h>
#include <string.h>

#include "aegis.h"
#include "jsonx.h"

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
    /* microvm: nobody offers it. */
    rq.need = ISO_MICROVM;
    rq.network = NET_NONE;
    ck_assert_int_eq(aegis_decide(&rq, ws, 2, vs, &best, msg, sizeof msg), AEGIS_REFUSE);
    ck_assert_ptr_nonnull(strstr(msg, "microvm"));
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

Suite *unit_suite(void)
{
    Suite *s = suite_create("aegis");
    unit_tcase_add(s, "placement", UNIT_TESTS(
        test_fit_prefers_the_fuller_worker,
        test_image_present_and_spread_move_the_score,
        test_ties_go_to_fewer_tenant_sandboxes_then_name,
        test_filters_say_why,
        test_isolation_never_downgrades,
        test_wait_rather_than_refuse,
        test_image_ref,
    ));
    return s;
}
