/* Unit tests for worker/forward: the preamble line as it arrives in pieces,
 * its parsing, the reply lines, and the refusals a forwarder gives before it
 * ever asks the runtime (bad preamble, bad grant, busy), and the file
 * transfers (request line, frames, answers) against a fake runtime. */
#include <check.h>
#include <stdatomic.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check_util.h"
#include "errors.h"
#include "forward.h"
#include "grant.h"
#include "logframe.h"
#include "shellframe.h"
#include "tarstream.h"
#include "timeutil.h"

#define GRANT_TEXT "v1.wrk_a.sbx_b.8080.1700000000.0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define PREAMBLE   FORWARD_PROTOCOL " " GRANT_TEXT "\r\n"
#define REQUEST    "GET /x HTTP/1.1\r\nHost: a\r\n\r\n"

/* Pushes text in chunks of the given sizes (0-terminated list); returns
 * the push result of the last chunk pushed and the offset in text where
 * the line ended. */
static int push_chunks(forward_line_t *l, const char *text, const size_t *sizes, size_t *ret_end)
{
    size_t off = 0, len = strlen(text);
    int r = 0;
    for (const size_t *s = sizes; *s && off < len; s++) {
        size_t n = *s > len - off ? len - off : *s, used = 0;
        r = forward_line_push(l, text + off, n, &used);
        if (r != 0) {
            if (r == 1)
                *ret_end = off + used;
            return r;
        }
        ck_assert_uint_eq(used, n);
        off += n;
    }
    return r;
}

START_TEST(test_whole_line_with_request_bytes_after_it_in_one_read)
{
    forward_line_t l;
    forward_line_init(&l);
    const char *text = PREAMBLE REQUEST;
    size_t used = 0;
    ck_assert_int_eq(forward_line_push(&l, text, strlen(text), &used), 1);
    ck_assert_uint_eq(used, strlen(PREAMBLE));
    ck_assert_str_eq(text + used, REQUEST);
    ck_assert_str_eq(l.buf, FORWARD_PROTOCOL " " GRANT_TEXT);
    char grant[GRANT_MAX];
    ck_assert_int_eq(forward_preamble_parse(l.buf, grant), 0);
    ck_assert_str_eq(grant, GRANT_TEXT);
}
END_TEST

START_TEST(test_every_two_read_split_gives_the_same_line_and_rest)
{
    const char *text = PREAMBLE REQUEST;
    for (size_t cut = 1; cut < strlen(text); cut++) {
        forward_line_t l;
        forward_line_init(&l);
        size_t sizes[] = { cut, strlen(text), 0 }, end = 0;
        ck_assert_int_eq(push_chunks(&l, text, sizes, &end), 1);
        ck_assert_uint_eq(end, strlen(PREAMBLE));
        ck_assert_str_eq(l.buf, FORWARD_PROTOCOL " " GRANT_TEXT);
    }
}
END_TEST

START_TEST(test_cr_and_lf_in_separate_reads)
{
    forward_line_t l;
    forward_line_init(&l);
    size_t used = 0;
    const char *a = FORWARD_PROTOCOL " g\r";
    ck_assert_int_eq(forward_line_push(&l, a, strlen(a), &used), 0);
    ck_assert_uint_eq(used, strlen(a));
    ck_assert_int_eq(forward_line_push(&l, "\nGET", 4, &used), 1);
    ck_assert_uint_eq(used, 1);
    ck_assert_str_eq(l.buf, FORWARD_PROTOCOL " g");
}
END_TEST

START_TEST(test_byte_by_byte)
{
    const char *text = PREAMBLE "X";
    forward_line_t l;
    forward_line_init(&l);
    size_t i = 0, used = 0;
    int r = 0;
    for (; i < strlen(text) && r == 0; i++)
        r = forward_line_push(&l, text + i, 1, &used);
    ck_assert_int_eq(r, 1);
    ck_assert_uint_eq(i, strlen(PREAMBLE));
    ck_assert_uint_eq(used, 1);
}
END_TEST

START_TEST(test_line_of_exactly_the_maximum_is_taken_one_more_byte_is_not)
{
    char text[FORWARD_PREAMBLE_MAX + 8];
    forward_line_t l;
    size_t used = 0;
    /* FORWARD_PREAMBLE_MAX bytes with the CRLF */
    memset(text, 'a', FORWARD_PREAMBLE_MAX - 2);
    memcpy(text + FORWARD_PREAMBLE_MAX - 2, "\r\n", 3);
    forward_line_init(&l);
    ck_assert_int_eq(forward_line_push(&l, text, strlen(text), &used), 1);
    ck_assert_uint_eq(used, FORWARD_PREAMBLE_MAX);
    ck_assert_uint_eq(strlen(l.buf), FORWARD_PREAMBLE_MAX - 2);
    /* one more */
    memset(text, 'a', FORWARD_PREAMBLE_MAX - 1);
    memcpy(text + FORWARD_PREAMBLE_MAX - 1, "\r\n", 3);
    forward_line_init(&l);
    ck_assert_int_eq(forward_line_push(&l, text, strlen(text), &used), SBX_ETOOBIG);
    /* and no end at all, in pieces */
    forward_line_init(&l);
    memset(text, 'b', 600);
    ck_assert_int_eq(forward_line_push(&l, text, 600, &used), 0);
    ck_assert_int_eq(forward_line_push(&l, text, 600, &used), SBX_ETOOBIG);
}
END_TEST

START_TEST(test_bare_line_feed_and_nul_are_refused)
{
    forward_line_t l;
    size_t used = 0;
    forward_line_init(&l);
    ck_assert_int_eq(forward_line_push(&l, "SANDBOX-FORWARD/1 g\nGET", 23, &used), SBX_EINVAL);
    forward_line_init(&l);
    ck_assert_int_eq(forward_line_push(&l, "\n", 1, &used), SBX_EINVAL);
    forward_line_init(&l);
    ck_assert_int_eq(forward_line_push(&l, "SANDBOX-FORWARD/1 g\0x\r\n", 24, &used), SBX_EINVAL);
}
END_TEST

START_TEST(test_preamble_parse_accepts_only_the_exact_form)
{
    char grant[GRANT_MAX];
    ck_assert_int_eq(forward_preamble_parse(FORWARD_PROTOCOL " v1.a-b_c.0", grant), 0);
    ck_assert_str_eq(grant, "v1.a-b_c.0");
    const char *bad[] = {
        "",
        FORWARD_PROTOCOL,
        FORWARD_PROTOCOL " ",
        FORWARD_PROTOCOL "  v1.a",
        FORWARD_PROTOCOL " v1.a ",
        FORWARD_PROTOCOL " v1.a extra",
        FORWARD_PROTOCOL "\tv1.a",
        "sandbox-forward/1 v1.a",
        "SANDBOX-FORWARD/2 v1.a",
        "GET / HTTP/1.1",
        FORWARD_PROTOCOL " v1/a",
        FORWARD_PROTOCOL " v1.a\r",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(forward_preamble_parse(bad[i], grant) == SBX_EINVAL, "accepted [%s]", bad[i]);
    char longest[sizeof FORWARD_PROTOCOL + GRANT_MAX + 1];
    int n = snprintf(longest, sizeof longest, "%s ", FORWARD_PROTOCOL);
    memset(longest + n, 'a', GRANT_MAX - 1);
    longest[n + GRANT_MAX - 1] = '\0';
    ck_assert_int_eq(forward_preamble_parse(longest, grant), 0);
    ck_assert_uint_eq(strlen(grant), GRANT_MAX - 1);
    longest[n + GRANT_MAX - 1] = 'a';
    longest[n + GRANT_MAX] = '\0';
    ck_assert_int_eq(forward_preamble_parse(longest, grant), SBX_EINVAL);
}
END_TEST

START_TEST(test_reply_lines)
{
    char buf[FORWARD_PREAMBLE_MAX];
    size_t n = forward_reply_format(buf, sizeof buf, 200, "ok", NULL);
    ck_assert_str_eq(buf, "SANDBOX-FORWARD/1 200 ok\r\n");
    ck_assert_uint_eq(n, strlen(buf));
    forward_reply_format(buf, sizeof buf, 404, "not_found", "no\r\nsuch\tsandbox");
    ck_assert_str_eq(buf, "SANDBOX-FORWARD/1 404 not_found no  such sandbox\r\n");
    /* cut to fit, ending in CRLF, never inside a UTF-8 sequence */
    char small[51];                      /* room for 5 bytes of the message: 2.5 characters */
    n = forward_reply_format(small, sizeof small, 502, "upstream_unavailable", "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9");
    ck_assert_uint_eq(n, strlen(small));
    ck_assert_str_eq(small, "SANDBOX-FORWARD/1 502 upstream_unavailable \xc3\xa9\xc3\xa9\r\n");
    /* a buffer too small for even the code still ends in CRLF */
    n = forward_reply_format(small, 12, 502, "upstream_unavailable", "x");
    ck_assert_str_eq(small, "SANDBOX-F\r\n");
    ck_assert_uint_eq(n, 11);
}
END_TEST

/* ---- a real listener, refusing before it would ask the runtime ---------- */

#define TOKEN "sbt_aaaaaaaaaaaaaaaaaaaaaaaaaa_0123456789012345678901234567890123456789012"

static void worker_id_cb(void *ud, char *ret, size_t retlen) { snprintf(ret, retlen, "%s", (const char *)ud); }

static forward_t *start_forwarder_on(const char *worker_id, int max, runtime_t *rt)
{
    forward_options_t o = {
        .listen = "127.0.0.1:0",
        .max_connections = max,
        .token = TOKEN,
        .worker_name = "w1",
        .rt = rt,
        .worker_id = worker_id_cb,
        .worker_id_ud = (void *)worker_id,
    };
    forward_t *f = NULL;
    char err[256] = "";
    ck_assert_msg(forward_new(&o, &f, err, sizeof err) == 0, "forward_new: %s", err);
    ck_assert_msg(forward_start(f, err, sizeof err) == 0, "forward_start: %s", err);
    ck_assert(strncmp(forward_address(f), "127.0.0.1:", 10) == 0);
    return f;
}

static forward_t *start_forwarder(const char *worker_id, int max)
{
    static char not_a_runtime;
    return start_forwarder_on(worker_id, max, (runtime_t *)&not_a_runtime); /* never reached by these tests */
}

static int dial(const forward_t *f)
{
    int port = (int)strtol(strrchr(forward_address(f), ':') + 1, NULL, 10);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

/* Reads until max bytes came or the peer closed (at most 5 s); returns
 * how many. */
static size_t read_up_to(int fd, char *buf, size_t max)
{
    size_t len = 0;
    int64_t deadline = time_mono_ms() + 5000;
    while (len < max && time_mono_ms() < deadline) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t n = recv(fd, buf + len, max - len, 0);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    return len;
}

/* Everything the forwarder sends until it closes (at most 5 s). */
static void read_all(int fd, char *buf, size_t cap)
{
    buf[read_up_to(fd, buf, cap - 1)] = '\0';
}

static void exchange(const forward_t *f, const char *send_text, char *reply, size_t cap)
{
    int fd = dial(f);
    ck_assert_int_eq(send(fd, send_text, strlen(send_text), MSG_NOSIGNAL), (ssize_t)strlen(send_text));
    read_all(fd, reply, cap);
    close(fd);
}

static void preamble_for(const char *token, const char *worker, int64_t exp, char *out, size_t outlen)
{
    unsigned char key[GRANT_KEY_BYTES];
    grant_key_from_token(token, key);
    grant_t g = { .port = 8080, .expires_unix = exp };
    snprintf(g.worker_id, sizeof g.worker_id, "%s", worker);
    snprintf(g.sandbox_id, sizeof g.sandbox_id, "sbx_b");
    char text[GRANT_MAX];
    ck_assert_int_eq(grant_sign(key, &g, text), 0);
    snprintf(out, outlen, "%s %s\r\n%s", FORWARD_PROTOCOL, text, REQUEST);
}

START_TEST(test_listener_refuses_bad_preambles_and_grants)
{
    forward_t *f = start_forwarder("wrk_a", 8);
    char reply[1024], pre[1024];
    exchange(f, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", reply, sizeof reply);
    ck_assert_msg(strncmp(reply, "SANDBOX-FORWARD/1 400 bad_request ", 34) == 0, "got [%s]", reply);
    ck_assert(strstr(reply, "\r\n") == reply + strlen(reply) - 2);
    exchange(f, FORWARD_PROTOCOL " v1.x\r\n", reply, sizeof reply);
    ck_assert_msg(strncmp(reply, "SANDBOX-FORWARD/1 403 forbidden malformed grant", 47) == 0, "got [%s]", reply);
    /* signed with another worker's token */
    preamble_for("sbt_other", "wrk_a", time(NULL) + 60, pre, sizeof pre);
    exchange(f, pre, reply, sizeof reply);
    ck_assert_msg(strncmp(reply, "SANDBOX-FORWARD/1 403 forbidden ", 32) == 0, "got [%s]", reply);
    /* expired */
    preamble_for(TOKEN, "wrk_a", time(NULL) - 5, pre, sizeof pre);
    exchange(f, pre, reply, sizeof reply);
    ck_assert_msg(strcmp(reply, "SANDBOX-FORWARD/1 403 forbidden the grant has expired\r\n") == 0, "got [%s]", reply);
    /* for another worker, sent a byte at a time */
    preamble_for(TOKEN, "wrk_z", time(NULL) + 60, pre, sizeof pre);
    int fd = dial(f);
    for (size_t i = 0; i < strlen(pre); i++)
        ck_assert_int_eq(send(fd, pre + i, 1, MSG_NOSIGNAL), 1);
    read_all(fd, reply, sizeof reply);
    close(fd);
    ck_assert_msg(strncmp(reply, "SANDBOX-FORWARD/1 403 forbidden the grant is for worker wrk_z", 61) == 0,
                  "got [%s]", reply);
    /* a line too long */
    char longline[FORWARD_PREAMBLE_MAX + 64];
    memset(longline, 'a', sizeof longline - 1);
    longline[sizeof longline - 1] = '\0';
    exchange(f, longline, reply, sizeof reply);
    ck_assert_msg(strncmp(reply, "SANDBOX-FORWARD/1 400 bad_request the preamble line is longer", 61) == 0,
                  "got [%s]", reply);
    forward_free(f);
}
END_TEST

/* A logs grant goes through the same checks before the runtime is asked. */
START_TEST(test_logs_grants_are_checked_like_route_grants)
{
    forward_t *f = start_forwarder("wrk_a", 8);
    unsigned char key[GRANT_KEY_BYTES], other[GRANT_KEY_BYTES];
    grant_key_from_token(TOKEN, key);
    grant_key_from_token("sbt_other", other);
    grant_t g = { .worker_id = "wrk_a", .sandbox_id = "sbx_b", .purpose = GRANT_LOGS, .logs_tail = 10,
                  .logs_follow = true, .expires_unix = time(NULL) - 5 };
    char text[GRANT_MAX], pre[1024], reply[1024];
    ck_assert_int_eq(grant_sign(key, &g, text), 0);
    snprintf(pre, sizeof pre, "%s %s\r\n", FORWARD_PROTOCOL, text);
    exchange(f, pre, reply, sizeof reply);
    ck_assert_msg(strcmp(reply, "SANDBOX-FORWARD/1 403 forbidden the grant has expired\r\n") == 0, "got [%s]", reply);
    g.expires_unix = time(NULL) + 60;
    ck_assert_int_eq(grant_sign(other, &g, text), 0);
    snprintf(pre, sizeof pre, "%s %s\r\n", FORWARD_PROTOCOL, text);
    exchange(f, pre, reply, sizeof reply);
    ck_assert_msg(strncmp(reply, "SANDBOX-FORWARD/1 403 forbidden the grant is not signed", 55) == 0, "got [%s]", reply);
    snprintf(g.worker_id, sizeof g.worker_id, "wrk_z");
    ck_assert_int_eq(grant_sign(key, &g, text), 0);
    snprintf(pre, sizeof pre, "%s %s\r\n", FORWARD_PROTOCOL, text);
    exchange(f, pre, reply, sizeof reply);
    ck_assert_msg(strncmp(reply, "SANDBOX-FORWARD/1 403 forbidden the grant is for worker wrk_z", 61) == 0,
                  "got [%s]", reply);
    forward_free(f);
}
END_TEST

START_TEST(test_unregistered_worker_refuses_every_grant)
{
    forward_t *f = start_forwarder("", 8);
    char reply[1024], pre[1024];
    preamble_for(TOKEN, "wrk_a", time(NULL) + 60, pre, sizeof pre);
    exchange(f, pre, reply, sizeof reply);
    ck_assert_msg(strcmp(reply, "SANDBOX-FORWARD/1 403 forbidden this worker is not registered yet\r\n") == 0,
                  "got [%s]", reply);
    forward_free(f);
}
END_TEST

START_TEST(test_connections_past_the_maximum_are_busy_and_stop_closes_open_ones)
{
    forward_t *f = start_forwarder("wrk_a", 1);
    int held = dial(f);                  /* sends nothing: holds the one slot */
    ck_assert_int_eq(send(held, "SANDBOX", 7, MSG_NOSIGNAL), 7);
    usleep(100 * 1000);
    char reply[1024];
    exchange(f, "SANDBOX-FORWARD/1 x\r\n", reply, sizeof reply);
    ck_assert_msg(strncmp(reply, "SANDBOX-FORWARD/1 503 busy ", 27) == 0, "got [%s]", reply);
    int64_t t0 = time_mono_ms();
    forward_stop(f);
    ck_assert_int_lt(time_mono_ms() - t0, 3000);
    read_all(held, reply, sizeof reply);
    ck_assert_msg(strncmp(reply, "SANDBOX-FORWARD/1 503 busy the worker is shutting down", 53) == 0, "got [%s]",
                  reply);
    close(held);
    forward_stop(f);                     /* idempotent */
    forward_free(f);
}
END_TEST

START_TEST(test_options_are_checked)
{
    static char not_a_runtime;
    forward_options_t o = { .listen = "0.0.0.0:0", .max_connections = 4, .token = TOKEN, .worker_name = "w",
                            .rt = (runtime_t *)&not_a_runtime, .worker_id = worker_id_cb, .worker_id_ud = "" };
    forward_t *f = NULL;
    char err[256] = "";
    ck_assert_int_eq(forward_new(&o, &f, err, sizeof err), SBX_EINVAL);
    ck_assert_msg(strstr(err, "worker_route_advertise") != NULL, "err [%s]", err);
    o.listen = "[::]:0";
    ck_assert_int_eq(forward_new(&o, &f, err, sizeof err), SBX_EINVAL);
    o.advertise = "10.0.0.5:7000";
    o.listen = "0.0.0.0:0";
    ck_assert_int_eq(forward_new(&o, &f, err, sizeof err), 0);
    ck_assert_str_eq(forward_address(f), "");
    ck_assert_int_eq(forward_start(f, err, sizeof err), 0);
    ck_assert_str_eq(forward_address(f), "10.0.0.5:7000");
    forward_free(f);
    const char *bad_listen[] = { "127.0.0.1", "127.0.0.1:x", "127.0.0.1:70000", "::1:80", ":", "" };
    o.advertise = NULL;
    for (size_t i = 0; i < sizeof bad_listen / sizeof bad_listen[0]; i++) {
        o.listen = bad_listen[i];
        ck_assert_msg(forward_new(&o, &f, err, sizeof err) == SBX_EINVAL, "accepted listen [%s]", bad_listen[i]);
    }
    o.listen = "127.0.0.1:0";
    const char *bad_adv[] = { "host", "host:0", "host:x", "a b:80", "host:65536" };
    for (size_t i = 0; i < sizeof bad_adv / sizeof bad_adv[0]; i++) {
        o.advertise = bad_adv[i];
        ck_assert_msg(forward_new(&o, &f, err, sizeof err) == SBX_EINVAL, "accepted advertise [%s]", bad_adv[i]);
    }
    forward_free(NULL);
}
END_TEST

/* ---- the dial: the forwarder asks the runtime, knows no namespaces ----- */

/* A runtime whose dial hands out one end of a socketpair (the other end is
 * the "sandbox"), or fails with fail_code. */
typedef struct dial_runtime {
    runtime_t base;
    bool fail;               /* then dial fails with fail_code */
    api_code_t fail_code;
    int sandbox_fd;          /* the other end, after a successful dial */
    char sandbox_id[SBX_ID_MAX], worker_name[64];
    int port;
    int stop_fd;
} dial_runtime_t;

static int dial_runtime_dial(runtime_t *rt, const runtime_dial_req_t *req, int *ret_fd, api_error_t *err)
{
    dial_runtime_t *d = (dial_runtime_t *)rt;
    snprintf(d->sandbox_id, sizeof d->sandbox_id, "%s", req->sandbox_id);
    snprintf(d->worker_name, sizeof d->worker_name, "%s", req->worker_name);
    d->port = req->port;
    d->stop_fd = req->stop_fd;
    if (d->fail)
        return api_error_set(err, d->fail_code, "the fake runtime says no");
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
        return api_error_set(err, API_UNAVAILABLE, "socketpair failed");
    d->sandbox_fd = sv[1];
    *ret_fd = sv[0];
    return 0;
}

static const runtime_ops_t dial_runtime_ops = { .name = "dial-fake", .dial = dial_runtime_dial };

/* Reads until want bytes came (at most 5 s). */
static void read_n(int fd, char *buf, size_t want)
{
    buf[read_up_to(fd, buf, want)] = '\0';
}

START_TEST(test_a_route_relays_to_the_connection_the_runtime_dials)
{
    dial_runtime_t d = { .base = { .ops = &dial_runtime_ops }, .sandbox_fd = -1 };
    forward_t *f = start_forwarder_on("wrk_a", 8, &d.base);
    char pre[1024], buf[256];
    preamble_for(TOKEN, "wrk_a", time(NULL) + 60, pre, sizeof pre);
    int fd = dial(f);
    ck_assert_int_eq(send(fd, pre, strlen(pre), MSG_NOSIGNAL), (ssize_t)strlen(pre));
    static const char ok[] = "SANDBOX-FORWARD/1 200 ok\r\n";
    read_n(fd, buf, sizeof ok - 1);
    ck_assert_str_eq(buf, ok);
    ck_assert_str_eq(d.sandbox_id, "sbx_b");
    ck_assert_str_eq(d.worker_name, "w1");
    ck_assert_int_eq(d.port, 8080);
    ck_assert_int_ge(d.stop_fd, 0);
    ck_assert_int_ge(d.sandbox_fd, 0);
    /* the bytes after the preamble reach the sandbox, and its answer the client */
    read_n(d.sandbox_fd, buf, strlen(REQUEST));
    ck_assert_str_eq(buf, REQUEST);
    static const char answer[] = "HTTP/1.1 204 No Content\r\n\r\n";
    ck_assert_int_eq(send(d.sandbox_fd, answer, sizeof answer - 1, MSG_NOSIGNAL), (ssize_t)(sizeof answer - 1));
    read_n(fd, buf, sizeof answer - 1);
    ck_assert_str_eq(buf, answer);
    close(d.sandbox_fd);
    close(fd);
    forward_free(f);
}
END_TEST

START_TEST(test_a_failed_dial_is_answered_by_its_code)
{
    static const struct {
        api_code_t code;
        const char *reply;
    } cases[] = {
        { API_NOT_FOUND, "SANDBOX-FORWARD/1 404 not_found the fake runtime says no\r\n" },
        { API_ISOLATION_UNAVAILABLE, "SANDBOX-FORWARD/1 409 route_unsupported the fake runtime says no\r\n" },
        { API_UNAVAILABLE, "SANDBOX-FORWARD/1 502 upstream_unavailable the fake runtime says no\r\n" },
        { API_CANCELLED, "SANDBOX-FORWARD/1 503 busy the worker is shutting down\r\n" },
        { API_RUNTIME_ERROR,
          "SANDBOX-FORWARD/1 502 upstream_unavailable the worker cannot find the sandbox: the fake runtime says no\r\n" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dial_runtime_t d = { .base = { .ops = &dial_runtime_ops }, .fail = true, .fail_code = cases[i].code,
                             .sandbox_fd = -1 };
        forward_t *f = start_forwarder_on("wrk_a", 8, &d.base);
        char pre[1024], reply[1024];
        preamble_for(TOKEN, "wrk_a", time(NULL) + 60, pre, sizeof pre);
        exchange(f, pre, reply, sizeof reply);
        ck_assert_msg(strcmp(reply, cases[i].reply) == 0, "case %zu: got [%s]", i, reply);
        forward_free(f);
    }
}
END_TEST

/* ---- file transfers (forward_files.c) against a fake runtime ----------- */

typedef struct files_runtime {
    runtime_t base;
    api_code_t target_fail;       /* API_INVALID_ARGUMENT (0) = no failure */
    bool fail_target;
    api_code_t put_fail;
    bool fail_put;
    bool fail_get_midway;
    const char *get_body;         /* the tar a get answers (stat: a directory "top") instead of the file */
    size_t get_body_len;
    int64_t stat_size;            /* the raw file's stat size (0: 70000) */
    atomic_int put_calls, get_calls, put_aborted, put_done;
    char path[SBX_FILES_PATH_MAX + 1];
    runtime_files_format_t format;
    int64_t size, max_bytes;
    int64_t fs_bytes;             /* what files_target says of the sandbox's filesystem */
    unsigned mode;
    char *got;                    /* what the upload carried */
    size_t got_len;
} files_runtime_t;

#define FILES_GOT_MAX (1u << 20)

static int files_rt_target(runtime_t *rt, const char *sandbox_id, const char *worker_name, char ret_ref[80],
                           int64_t *ret_fs_bytes, api_error_t *err)
{
    files_runtime_t *fr = (files_runtime_t *)rt;
    if (ret_fs_bytes)
        *ret_fs_bytes = fr->fs_bytes;
    if (fr->fail_target)
        return api_error_set(err, fr->target_fail, "the fake runtime has no such sandbox");
    ck_assert_str_eq(sandbox_id, "sbx_b");
    ck_assert_str_eq(worker_name, "w1");
    snprintf(ret_ref, 80, "ctr_fake");
    return 0;
}

static int files_rt_put(runtime_t *rt, const runtime_files_put_req_t *req, int64_t *ret_bytes, api_error_t *err)
{
    files_runtime_t *fr = (files_runtime_t *)rt;
    atomic_fetch_add(&fr->put_calls, 1);
    ck_assert_str_eq(req->ref, "ctr_fake");
    snprintf(fr->path, sizeof fr->path, "%s", req->path);
    fr->format = req->format;
    fr->size = req->size;
    fr->mode = req->mode;
    fr->max_bytes = req->max_bytes;
    for (;;) {
        char buf[1000];
        ptrdiff_t n = req->read(req->ud, buf, sizeof buf);
        if (n < 0) {
            atomic_store(&fr->put_aborted, 1);
            return api_error_set(err, API_CANCELLED, "the upload was aborted before its end");
        }
        if (n == 0)
            break;
        ck_assert_uint_le(fr->got_len + (size_t)n, FILES_GOT_MAX);
        memcpy(fr->got + fr->got_len, buf, (size_t)n);
        fr->got_len += (size_t)n;
    }
    if (fr->fail_put)
        return api_error_set(err, fr->put_fail, "the fake runtime refuses");
    *ret_bytes = (int64_t)fr->got_len;
    atomic_store(&fr->put_done, 1);
    return 0;
}

static int files_rt_get(runtime_t *rt, const runtime_files_get_req_t *req, api_error_t *err)
{
    files_runtime_t *fr = (files_runtime_t *)rt;
    atomic_fetch_add(&fr->get_calls, 1);
    snprintf(fr->path, sizeof fr->path, "%s", req->path);
    fr->format = req->format;
    runtime_files_stat_t st = { .name = "report.xml", .size = fr->stat_size ? fr->stat_size : 70000, .mode = 0640,
                                .type = "file", .mtime = "2020-01-02T03:04:05Z" };
    if (fr->get_body) {
        snprintf(st.name, sizeof st.name, "top");
        st.type = "dir";
    }
    if (req->on_stat(req->ud, &st) < 0)
        return 0;
    if (fr->get_body) {
        /* in pieces of 1000 bytes, as a runtime's stream comes */
        for (size_t off = 0; off < fr->get_body_len; off += 1000) {
            size_t k = fr->get_body_len - off < 1000 ? fr->get_body_len - off : 1000;
            if (req->on_data(req->ud, fr->get_body + off, k) < 0)
                return 0;
        }
        return 0;
    }
    static char body[70000];
    for (size_t i = 0; i < sizeof body; i++)
        body[i] = (char)(i * 7);
    if (req->on_data(req->ud, body, sizeof body) < 0)
        return 0;
    if (fr->fail_get_midway)
        return api_error_set(err, API_RUNTIME_ERROR, "docker's archive of the file ended early");
    return 0;
}

static int files_rt_dial(runtime_t *rt, const runtime_dial_req_t *req, int *ret_fd, api_error_t *err)
{
    (void)rt, (void)req, (void)ret_fd;
    return api_error_set(err, API_NOT_FOUND, "no route in the fake");
}

static const runtime_ops_t files_runtime_ops = {
    .name = "files-fake", .dial = files_rt_dial, .files_target = files_rt_target, .files_put = files_rt_put,
    .files_get = files_rt_get,
};

/* A fake files runtime (free fr->got after). */
static void files_rt_init(files_runtime_t *fr)
{
    memset(fr, 0, sizeof *fr);
    fr->base.ops = &files_runtime_ops;
    fr->got = unit_xmalloc(FILES_GOT_MAX);
}

/* A fake files runtime and a forwarder over it (wrk_a); free fr->got after. */
static forward_t *files_forwarder(files_runtime_t *fr)
{
    files_rt_init(fr);
    return start_forwarder_on("wrk_a", 8, &fr->base);
}

static void send_all_test(int fd, const void *p, size_t n)
{
    ck_assert_int_eq(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* Everything until the forwarder closes (at most 5 s), with its length. */
static size_t read_all_n(int fd, char *buf, size_t cap) { return read_up_to(fd, buf, cap); }

/* "SANDBOX-FORWARD/1 <files grant for line>\r\n<line>\r\n" into out; the
 * grant's digest is of digest_line (NULL: of line). */
static void files_preamble(grant_purpose_t purpose, const char *line, const char *digest_line, char *out,
                           size_t outlen)
{
    unsigned char key[GRANT_KEY_BYTES];
    grant_key_from_token(TOKEN, key);
    grant_t g = { .worker_id = "wrk_a", .sandbox_id = "sbx_b", .purpose = purpose,
                  .expires_unix = time(NULL) + 60 };
    const char *d = digest_line ? digest_line : line;
    grant_files_digest(d, strlen(d), g.files_digest);
    char text[GRANT_MAX];
    ck_assert_int_eq(grant_sign(key, &g, text), 0);
    snprintf(out, outlen, "%s %s\r\n%s\r\n", FORWARD_PROTOCOL, text, line);
}

/* Appends a frame of type with n payload bytes to buf (holding *len). */
static void add_frame(char *buf, size_t *len, int type, const char *data, size_t n)
{
    logframe_header((unsigned char *)buf + *len, type, (uint32_t)n);
    memcpy(buf + *len + LOGFRAME_HEADER_BYTES, data, n);
    *len += LOGFRAME_HEADER_BYTES + n;
}

/* Sends pre and then n bytes of body (then ends its side when half_close),
 * and reads everything the forwarder answers until it closes: its length
 * in reply (NUL-terminated, cap - 1 at most). */
static size_t files_exchange(const forward_t *f, const char *pre, const char *body, size_t n, bool half_close,
                             char *reply, size_t cap)
{
    int fd = dial(f);
    ck_assert_int_eq(send(fd, pre, strlen(pre), MSG_NOSIGNAL), (ssize_t)strlen(pre));
    if (n > 0)
        ck_assert_int_eq(send(fd, body, n, MSG_NOSIGNAL), (ssize_t)n);
    if (half_close)
        shutdown(fd, SHUT_WR);
    size_t got = read_up_to(fd, reply, cap - 1);
    reply[got] = '\0';
    close(fd);
    return got;
}

START_TEST(test_files_request_lines_are_parsed_strictly)
{
    forward_files_req_t q;
    char why[200];
    const char *put = "{\"op\":\"put\",\"path\":\"/work/a.bin\",\"format\":\"raw\",\"size\":5,\"mode\":488,\"max_bytes\":9}";
    ck_assert_int_eq(forward_files_request_parse(put, strlen(put), &q, why, sizeof why), 0);
    ck_assert(q.put);
    ck_assert_str_eq(q.path, "/work/a.bin");
    ck_assert_int_eq(q.format, RUNTIME_FILES_RAW);
    ck_assert_int_eq(q.size, 5);
    ck_assert_uint_eq(q.mode, 0750);
    ck_assert_int_eq(q.max_bytes, 9);
    const char *tar = "{\"op\":\"put\",\"path\":\"/work\",\"format\":\"tar\",\"max_bytes\":1048576}";
    ck_assert_int_eq(forward_files_request_parse(tar, strlen(tar), &q, why, sizeof why), 0);
    ck_assert_int_eq(q.size, -1);
    const char *raw_default = "{\"op\":\"put\",\"path\":\"/a\",\"format\":\"raw\",\"size\":0,\"max_bytes\":1}";
    ck_assert_int_eq(forward_files_request_parse(raw_default, strlen(raw_default), &q, why, sizeof why), 0);
    ck_assert_uint_eq(q.mode, 0644);
    const char *get = "{\"op\":\"get\",\"path\":\"/work\",\"format\":\"list\"}";
    ck_assert_int_eq(forward_files_request_parse(get, strlen(get), &q, why, sizeof why), 0);
    ck_assert(!q.put);
    ck_assert_int_eq(q.format, RUNTIME_FILES_LIST);
    const char *bad[] = {
        "", "[]", "{}", "not json", "{\"op\":\"put\"}",
        "{\"op\":\"del\",\"path\":\"/a\",\"format\":\"tar\"}",
        "{\"op\":\"get\",\"path\":\"a\",\"format\":\"tar\"}",
        "{\"op\":\"get\",\"path\":\"\",\"format\":\"tar\"}",
        "{\"op\":\"get\",\"path\":\"/a\\u0000b\",\"format\":\"tar\"}",
        "{\"op\":\"get\",\"path\":\"/a\",\"format\":\"zip\"}",
        "{\"op\":\"put\",\"path\":\"/a\",\"format\":\"list\",\"max_bytes\":1}",
        "{\"op\":\"get\",\"path\":\"/a\",\"format\":\"tar\",\"extra\":1}",
        "{\"op\":\"get\",\"path\":\"/a\",\"format\":\"tar\",\"max_bytes\":1}",
        "{\"op\":\"put\",\"path\":\"/a\",\"format\":\"tar\"}",
        "{\"op\":\"put\",\"path\":\"/a\",\"format\":\"tar\",\"size\":1,\"max_bytes\":1}",
        "{\"op\":\"put\",\"path\":\"/a\",\"format\":\"tar\",\"mode\":1,\"max_bytes\":1}",
        "{\"op\":\"put\",\"path\":\"/a\",\"format\":\"raw\",\"max_bytes\":1}",
        "{\"op\":\"put\",\"path\":\"/a\",\"format\":\"raw\",\"size\":1.5,\"max_bytes\":1}",
        "{\"op\":\"put\",\"path\":\"/a\",\"format\":\"raw\",\"size\":\"1\",\"max_bytes\":1}",
        "{\"op\":\"put\",\"path\":\"/a\",\"format\":\"raw\",\"size\":-1,\"max_bytes\":1}",
        "{\"op\":\"put\",\"path\":\"/a\",\"format\":\"raw\",\"size\":1,\"mode\":4096,\"max_bytes\":1}",
        "{\"op\":\"put\",\"path\":\"/a\",\"format\":\"raw\",\"size\":1,\"max_bytes\":0}",
        "{\"op\":\"get\",\"path\":\"/a\",\"format\":\"tar\"} x",
        "{\"op\":\"get\",\"op\":\"get\",\"path\":\"/a\",\"format\":\"tar\"}x",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(forward_files_request_parse(bad[i], strlen(bad[i]), &q, why, sizeof why) == SBX_EINVAL,
                      "accepted %s", bad[i]);
    /* A path of the maximum is taken, one byte more is not. */
    char *p = unit_repeat('a', SBX_FILES_PATH_MAX + 1);
    p[0] = '/';
    char line[SBX_FILES_PATH_MAX + 128];
    snprintf(line, sizeof line, "{\"op\":\"get\",\"path\":\"%s\",\"format\":\"tar\"}", p);
    ck_assert_int_eq(forward_files_request_parse(line, strlen(line), &q, why, sizeof why), SBX_EINVAL);
    p[SBX_FILES_PATH_MAX] = '\0';
    snprintf(line, sizeof line, "{\"op\":\"get\",\"path\":\"%s\",\"format\":\"tar\"}", p);
    ck_assert_int_eq(forward_files_request_parse(line, strlen(line), &q, why, sizeof why), 0);
    free(p);
}
END_TEST

START_TEST(test_files_put_takes_frames_and_answers_one_line)
{
    files_runtime_t fr;
    forward_t *f = files_forwarder(&fr);
    const char *line = "{\"op\":\"put\",\"path\":\"/work/a.bin\",\"format\":\"raw\",\"size\":70000,\"mode\":488,"
                       "\"max_bytes\":1048576}";
    char pre[2048], reply[1024];
    files_preamble(GRANT_FILES_PUT, line, NULL, pre, sizeof pre);
    static char data[70000], body[70100];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (char)(i * 13);
    size_t blen = 0;
    add_frame(body, &blen, LOGFRAME_STDOUT, data, LOGFRAME_PAYLOAD_MAX);
    add_frame(body, &blen, LOGFRAME_STDOUT, "", 0);      /* an empty data frame is nothing */
    add_frame(body, &blen, LOGFRAME_STDOUT, data + LOGFRAME_PAYLOAD_MAX, sizeof data - LOGFRAME_PAYLOAD_MAX);
    add_frame(body, &blen, LOGFRAME_END, "", 0);
    files_exchange(f, pre, body, blen, false, reply, sizeof reply);
    ck_assert_str_eq(reply, "SANDBOX-FORWARD/1 200 ok {\"bytes\":70000}\r\n");
    ck_assert_int_eq(atomic_load(&fr.put_done), 1);
    ck_assert_uint_eq(fr.got_len, sizeof data);
    ck_assert_mem_eq(fr.got, data, sizeof data);
    ck_assert_str_eq(fr.path, "/work/a.bin");
    ck_assert_int_eq(fr.format, RUNTIME_FILES_RAW);
    ck_assert_int_eq(fr.size, 70000);
    ck_assert_uint_eq(fr.mode, 0750);
    ck_assert_int_eq(fr.max_bytes, 1048576);
    forward_free(f);
    free(fr.got);
}
END_TEST

/* The request line and the frames sent a byte at a time: headers and
 * payloads split across reads come out whole. */
START_TEST(test_files_put_byte_by_byte)
{
    files_runtime_t fr;
    forward_t *f = files_forwarder(&fr);
    const char *line = "{\"op\":\"put\",\"path\":\"/w\",\"format\":\"tar\",\"max_bytes\":1048576}";
    char pre[2048], reply[1024], body[2200], want[2048];
    files_preamble(GRANT_FILES_PUT, line, NULL, pre, sizeof pre);
    /* a tar of one 100-byte file: header, content, padding, end blocks */
    memset(want, 0, sizeof want);
    ck_assert_int_eq(tarstream_file_header("a.txt", 100, 0644, 0, (unsigned char *)want), TARSTREAM_BLOCK);
    for (size_t i = 0; i < 100; i++)
        want[512 + i] = (char)('a' + i % 26);
    size_t blen = 0;
    add_frame(body, &blen, LOGFRAME_STDOUT, want, 100);
    add_frame(body, &blen, LOGFRAME_STDOUT, want + 100, 1);
    add_frame(body, &blen, LOGFRAME_STDOUT, want + 101, sizeof want - 101);
    add_frame(body, &blen, LOGFRAME_END, "", 0);
    int fd = dial(f);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    for (size_t i = 0; i < strlen(pre); i++)
        ck_assert_int_eq(send(fd, pre + i, 1, MSG_NOSIGNAL), 1);
    for (size_t i = 0; i < blen; i++) {
        ck_assert_int_eq(send(fd, body + i, 1, MSG_NOSIGNAL), 1);
        if (i % 50 == 0)
            usleep(1000);   /* let some bytes arrive alone */
    }
    read_all(fd, reply, sizeof reply);
    close(fd);
    ck_assert_str_eq(reply, "SANDBOX-FORWARD/1 200 ok {\"bytes\":2048}\r\n");
    ck_assert_uint_eq(fr.got_len, sizeof want);
    ck_assert_mem_eq(fr.got, want, sizeof want);
    forward_free(f);
    free(fr.got);
}
END_TEST

/* A connection that ends before the END frame is an aborted upload: the
 * runtime's reader says so, and nothing is answered. */
START_TEST(test_files_put_aborted_upload_is_seen_by_the_runtime)
{
    files_runtime_t fr;
    forward_t *f = files_forwarder(&fr);
    const char *line = "{\"op\":\"put\",\"path\":\"/work\",\"format\":\"tar\",\"max_bytes\":1048576}";
    char pre[2048], reply[1024];
    files_preamble(GRANT_FILES_PUT, line, NULL, pre, sizeof pre);
    char body[64];
    size_t blen = 0;
    add_frame(body, &blen, LOGFRAME_STDOUT, "partial", 7);
    ck_assert_uint_eq(files_exchange(f, pre, body, blen, true, reply, sizeof reply), 0);
    ck_assert_int_eq(atomic_load(&fr.put_aborted), 1);
    ck_assert_int_eq(atomic_load(&fr.put_done), 0);
    ck_assert_uint_eq(fr.got_len, 0);   /* half a tar header: held back by the gate, never judged */
    /* Half a frame header, then the end: aborted too. */
    atomic_store(&fr.put_aborted, 0);
    ck_assert_uint_eq(files_exchange(f, pre, "\x01\x00", 2, true, reply, sizeof reply), 0);
    ck_assert_int_eq(atomic_load(&fr.put_aborted), 1);
    forward_free(f);
    free(fr.got);
}
END_TEST

START_TEST(test_files_put_refuses_bad_frames_and_maps_runtime_errors)
{
    files_runtime_t fr;
    forward_t *f = files_forwarder(&fr);
    const char *line = "{\"op\":\"put\",\"path\":\"/work\",\"format\":\"tar\",\"max_bytes\":1048576}";
    char pre[2048], reply[1024];
    files_preamble(GRANT_FILES_PUT, line, NULL, pre, sizeof pre);
    /* A stderr frame, a non-empty END, an oversized frame: 400. */
    const unsigned char bad[][5] = { { 2, 0, 0, 0, 1 }, { 3, 0, 0, 0, 1 }, { 1, 0, 1, 0, 1 } };
    for (size_t i = 0; i < 3; i++) {
        files_exchange(f, pre, (const char *)bad[i], 5, false, reply, sizeof reply);
        ck_assert_msg(strncmp(reply, "SANDBOX-FORWARD/1 400 invalid_argument an upload", 48) == 0, "got [%s]", reply);
    }
    static const struct {
        api_code_t code;
        const char *reply;
    } cases[] = {
        { API_INVALID_ARGUMENT, "SANDBOX-FORWARD/1 400 invalid_argument the fake runtime refuses\r\n" },
        { API_NOT_FOUND, "SANDBOX-FORWARD/1 404 not_found the fake runtime refuses\r\n" },
        { API_PAYLOAD_TOO_LARGE, "SANDBOX-FORWARD/1 413 payload_too_large the fake runtime refuses\r\n" },
        { API_CONFLICT, "SANDBOX-FORWARD/1 409 conflict the fake runtime refuses\r\n" },
        { API_RUNTIME_ERROR, "SANDBOX-FORWARD/1 502 upstream_unavailable the fake runtime refuses\r\n" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fr.fail_put = true;
        fr.put_fail = cases[i].code;
        fr.got_len = 0;
        char body[2100], tar[2048] = { 0 };
        tarstream_file_header("abc", 3, 0644, 0, (unsigned char *)tar);
        memcpy(tar + 512, "abc", 3);
        size_t blen = 0;
        add_frame(body, &blen, LOGFRAME_STDOUT, tar, sizeof tar);
        add_frame(body, &blen, LOGFRAME_END, "", 0);
        files_exchange(f, pre, body, blen, false, reply, sizeof reply);
        ck_assert_msg(strcmp(reply, cases[i].reply) == 0, "case %zu: got [%s]", i, reply);
    }
    /* No such sandbox on this worker. */
    fr.fail_target = true;
    fr.target_fail = API_NOT_FOUND;
    int calls = atomic_load(&fr.put_calls);
    exchange(f, pre, reply, sizeof reply);
    ck_assert_str_eq(reply, "SANDBOX-FORWARD/1 404 not_found the fake runtime has no such sandbox\r\n");
    ck_assert_int_eq(atomic_load(&fr.put_calls), calls);
    forward_free(f);
    free(fr.got);
}
END_TEST

/* Reads frames from buf[off, n): the STDOUT payloads into body, the END
 * payload into end. Returns true when an END frame came. */
static bool parse_frames(const char *buf, size_t n, size_t off, char *body, size_t *body_len, char *end)
{
    *body_len = 0;
    while (off < n) {
        logframe_t fr;
        int r = logframe_parse((const unsigned char *)buf + off, n - off, &fr);
        ck_assert_int_eq(r, 1);
        if (fr.type == LOGFRAME_END) {
            memcpy(end, fr.data, fr.len);
            end[fr.len] = '\0';
            return true;
        }
        ck_assert_int_eq(fr.type, LOGFRAME_STDOUT);
        memcpy(body + *body_len, fr.data, fr.len);
        *body_len += fr.len;
        off += fr.size;
    }
    return false;
}

START_TEST(test_files_get_answers_the_stat_then_frames)
{
    files_runtime_t fr;
    forward_t *f = files_forwarder(&fr);
    const char *line = "{\"op\":\"get\",\"path\":\"/work/report.xml\",\"format\":\"raw\"}";
    char pre[2048], end[600];
    static char reply[200000], body[100000];
    files_preamble(GRANT_FILES_GET, line, NULL, pre, sizeof pre);
    for (int round = 0; round < 2; round++) {
        fr.fail_get_midway = round == 1;
        size_t n = files_exchange(f, pre, NULL, 0, false, reply, sizeof reply);
        static const char head[] = "SANDBOX-FORWARD/1 200 ok {\"name\":\"report.xml\",\"size\":70000,\"mode\":416,"
                                   "\"mtime\":\"2020-01-02T03:04:05Z\",\"link_target\":\"\",\"type\":\"file\"}\r\n";
        ck_assert_uint_gt(n, sizeof head - 1);
        ck_assert_msg(memcmp(reply, head, sizeof head - 1) == 0, "got [%.*s]", (int)(sizeof head - 1), reply);
        size_t blen = 0;
        ck_assert(parse_frames(reply, n, sizeof head - 1, body, &blen, end));
        ck_assert_uint_eq(blen, 70000);
        for (size_t i = 0; i < blen; i++)
            ck_assert_int_eq(body[i], (char)(i * 7));
        if (round == 0)
            ck_assert_str_eq(end, "");
        else
            ck_assert_str_eq(end, "docker's archive of the file ended early");
        ck_assert_str_eq(fr.path, "/work/report.xml");
        ck_assert_int_eq(fr.format, RUNTIME_FILES_RAW);
    }
    /* Bytes after a get's request line are refused before the runtime is asked. */
    int calls = atomic_load(&fr.get_calls);
    char more[2100];
    snprintf(more, sizeof more, "%sxyz", pre);
    exchange(f, more, reply, sizeof reply);
    ck_assert_str_eq(reply, "SANDBOX-FORWARD/1 400 invalid_argument a download takes nothing after its request "
                            "line\r\n");
    ck_assert_int_eq(atomic_load(&fr.get_calls), calls);
    forward_free(f);
    free(fr.got);
}
END_TEST


/* ---- tar gates: sparse uploads, hostile downloads ---------------------- */

/* The bytes of tests/unit/data/NAME; the caller frees them. */
static char *fixture(const char *name, size_t *ret_n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", UNIT_DATA_DIR, name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    char *b = unit_xmalloc(1 << 20);
    *ret_n = fread(b, 1, 1 << 20, f);
    fclose(f);
    return b;
}

/* Appends a tar member (type, name, link, n content bytes of c) to buf. */
static void tar_add(char *buf, size_t *len, const char *name, char type, const char *link, int64_t size, char c)
{
    unsigned char *h = (unsigned char *)buf + *len;
    ck_assert_int_eq(tarstream_file_header("x", size, 04755, 0, h), TARSTREAM_BLOCK);
    memset(h, 0, 100);
    memcpy(h, name, strlen(name));
    h[156] = (unsigned char)type;
    memcpy(h + 157, link, strlen(link));
    tarstream_checksum(h);
    *len += TARSTREAM_BLOCK;
    size_t n = (size_t)size;
    memset(buf + *len, c, n);
    memset(buf + *len + n, 0, tarstream_padding(size));
    *len += n + tarstream_padding(size);
}

/* A tar upload of one small file and then fixture (its frames in body). */
START_TEST(test_files_put_refuses_sparse_members_before_the_runtime_sees_them)
{
    files_runtime_t fr;
    forward_t *f = files_forwarder(&fr);
    const char *line = "{\"op\":\"put\",\"path\":\"/work\",\"format\":\"tar\",\"max_bytes\":1048576}";
    char pre[2048];
    files_preamble(GRANT_FILES_PUT, line, NULL, pre, sizeof pre);
    static const struct {
        const char *file, *kind;
    } cases[] = {
        { "sparse-gnu.tar", TARSTREAM_SPARSE_GNU }, { "sparse-gnu-ext.tar", TARSTREAM_SPARSE_GNU },
        { "sparse-pax00.tar", TARSTREAM_SPARSE_PAX00 }, { "sparse-pax01.tar", TARSTREAM_SPARSE_PAX01 },
        { "sparse-pax10.tar", TARSTREAM_SPARSE_PAX10 },
    };
    static char tar[1 << 17], body[1 << 18], reply[2048];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = 0, tlen = 0, blen = 0;
        char *sp = fixture(cases[i].file, &n);
        tar_add(tar, &tlen, "ok.txt", '0', "", 700, 'k');
        size_t first = tlen;
        memcpy(tar + tlen, sp, n);
        tlen += n;
        free(sp);
        for (size_t off = 0; off < tlen; off += 4000)
            add_frame(body, &blen, LOGFRAME_STDOUT, tar + off, tlen - off < 4000 ? tlen - off : 4000);
        add_frame(body, &blen, LOGFRAME_END, "", 0);
        fr.got_len = 0;
        files_exchange(f, pre, body, blen, false, reply, sizeof reply);
        char want[200];
        snprintf(want, sizeof want, "SANDBOX-FORWARD/1 400 invalid_argument member %s is a sparse file (%s, "
                 "6442450944 bytes once unpacked)", strstr(cases[i].file, "ext") ? "ext.img" : "big.img",
                 cases[i].kind);
        ck_assert_msg(strncmp(reply, want, strlen(want)) == 0, "%s: got [%s]", cases[i].file, reply);
        /* the runtime had the first member whole and not a byte of the sparse one */
        ck_assert_uint_eq(fr.got_len, first);
        ck_assert_mem_eq(fr.got, tar, first);
    }
    forward_free(f);
    free(fr.got);
}
END_TEST

/* A get of a tar whose runtime answers tar: the frames' body and the END
 * frame's message (into end). */
static void get_tar(files_runtime_t *fr, forward_t *f, const char *tar, size_t n, char *body, size_t *blen,
                    char *end)
{
    const char *line = "{\"op\":\"get\",\"path\":\"/work/../data/top\",\"format\":\"tar\"}";
    char pre[2048];
    static char reply[1 << 18];
    files_preamble(GRANT_FILES_GET, line, NULL, pre, sizeof pre);
    fr->get_body = tar;
    fr->get_body_len = n;
    size_t got = files_exchange(f, pre, NULL, 0, false, reply, sizeof reply);
    const char *nl = memchr(reply, '\n', got);
    ck_assert_ptr_nonnull(nl);
    ck_assert_msg(strncmp(reply, "SANDBOX-FORWARD/1 200 ok ", 25) == 0, "got [%.*s]", (int)(nl - reply), reply);
    ck_assert_msg(parse_frames(reply, got, (size_t)(nl + 1 - reply), body, blen, end), "no END frame");
    ck_assert_str_eq(fr->path, "/data/top");   /* the runtime gets the path cleaned */
}

START_TEST(test_files_get_hands_on_only_the_asked_tree)
{
    files_runtime_t fr;
    forward_t *f = files_forwarder(&fr);
    fr.fs_bytes = 1 << 20;
    static char tar[1 << 17], body[1 << 17];
    char end[600];
    size_t tlen = 0, blen = 0;
    /* the tree itself passes whole */
    tar_add(tar, &tlen, "top/", '5', "", 0, 0);
    tar_add(tar, &tlen, "top/a.txt", '0', "", 3000, 'a');
    tar_add(tar, &tlen, "top/ln", '2', "/etc/passwd", 0, 0);
    tar_add(tar, &tlen, "top/hard", '1', "top/a.txt", 0, 0);
    memset(tar + tlen, 0, 1024);
    tlen += 1024;
    get_tar(&fr, f, tar, tlen, body, &blen, end);
    ck_assert_str_eq(end, "");
    ck_assert_uint_eq(blen, tlen);
    ck_assert_mem_eq(body, tar, tlen);
    /* each hostile member cuts the body before its header, with a reason */
    static const struct {
        const char *name;
        char type;
        const char *link;
        int64_t size;
        const char *want;
    } bad[] = {
        { "sibling", '0', "", 4, "member sibling is not the copied path's own name or below it" },
        { "top/../../x", '0', "", 4, "member top/../../x has a '.' or '..' component" },
        { "/etc/x", '0', "", 4, "member /etc/x has an absolute name" },
        { "topx/y", '0', "", 4, "member topx/y is not the copied path's own name" },
        { "top/fifo", '6', "", 0, "member top/fifo is a FIFO (tar type '6')" },
        { "top/sda", '4', "", 0, "member top/sda is a block device (tar type '4')" },
        { "top/tty", '3', "", 0, "member top/tty is a character device (tar type '3')" },
        { "top/h", '1', "/etc/shadow", 0, "hard link top/h points at /etc/shadow, outside the copy" },
        { "top/h", '1', "top/../x", 0, "hard link top/h points at top/../x, outside the copy" },
        { "top/big", '0', "", 2 << 20, "the download is larger than the sandbox's filesystem holds (1048576" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tlen = 0;
        tar_add(tar, &tlen, "top/", '5', "", 0, 0);
        tar_add(tar, &tlen, "top/a.txt", '0', "", 3000, 'a');
        size_t good = tlen;
        tar_add(tar, &tlen, bad[i].name, bad[i].type, bad[i].link, bad[i].size > 4096 ? 0 : bad[i].size, 'x');
        if (bad[i].size > 4096) {   /* the header alone says how big */
            unsigned char *h = (unsigned char *)tar + good;
            char sz[24];
            snprintf(sz, sizeof sz, "%011llo", (unsigned long long)bad[i].size);
            memcpy(h + 124, sz, 11);
            tarstream_checksum(h);
        }
        get_tar(&fr, f, tar, tlen, body, &blen, end);
        ck_assert_msg(strstr(end, bad[i].want) != NULL, "%s: END [%s]", bad[i].name, end);
        ck_assert_uint_eq(blen, good);
        ck_assert_mem_eq(body, tar, good);
    }
    /* sparse, and a stream that ends inside a member */
    size_t n = 0;
    char *sp = fixture("sparse-pax10.tar", &n);
    char *sp2 = unit_xmalloc(n + 512);
    memcpy(sp2, sp, n);
    /* renamed into the tree: GNU.sparse.name big.img -> top/b.i, same length */
    char *nm = memmem(sp2, n, "GNU.sparse.name=big.img", 23);
    ck_assert_ptr_nonnull(nm);
    memcpy(nm + 16, "top/b.i", 7);
    get_tar(&fr, f, sp2, n, body, &blen, end);
    ck_assert_msg(strstr(end, "member top/b.i is a sparse file (PAX 1.0") != NULL, "END [%s]", end);
    ck_assert_uint_eq(blen, 0);
    free(sp);
    free(sp2);
    tlen = 0;
    tar_add(tar, &tlen, "top/a.txt", '0', "", 3000, 'a');
    get_tar(&fr, f, tar, 600, body, &blen, end);
    ck_assert_msg(strstr(end, "ends inside an entry") != NULL, "END [%s]", end);
    forward_free(f);
    free(fr.got);
}
END_TEST

/* A raw get of a file its stat says is over the sandbox's filesystem: 413
 * before anything; a body past files_max_bytes is cut. */
START_TEST(test_files_get_is_bounded)
{
    files_runtime_t fr;
    files_rt_init(&fr);
    forward_options_t o = { .listen = "127.0.0.1:0", .max_connections = 4, .token = TOKEN, .worker_name = "w1",
                            .rt = &fr.base, .worker_id = worker_id_cb, .worker_id_ud = (void *)"wrk_a",
                            .files_max_bytes = 50000 };
    forward_t *f = NULL;
    char err[256] = "";
    ck_assert_int_eq(forward_new(&o, &f, err, sizeof err), 0);
    ck_assert_int_eq(forward_start(f, err, sizeof err), 0);
    const char *line = "{\"op\":\"get\",\"path\":\"/work/report.xml\",\"format\":\"raw\"}";
    char pre[2048], end[600];
    static char reply[200000], body[100000];
    files_preamble(GRANT_FILES_GET, line, NULL, pre, sizeof pre);
    /* the stat says 70000 bytes, over files_max_bytes: refused before the 200 */
    files_exchange(f, pre, NULL, 0, false, reply, sizeof reply);
    ck_assert_str_eq(reply, "SANDBOX-FORWARD/1 413 payload_too_large the file is 70000 bytes, more than the 50000 "
                            "bytes a transfer may carry (files_max_bytes)\r\n");
    /* a stat that lies: the body is cut at the bound */
    fr.stat_size = 10;
    size_t n = files_exchange(f, pre, NULL, 0, false, reply, sizeof reply);
    const char *nl = memchr(reply, '\n', n);
    size_t blen = 0;
    ck_assert(parse_frames(reply, n, (size_t)(nl + 1 - reply), body, &blen, end));
    ck_assert_uint_eq(blen, 0);
    ck_assert_str_eq(end, "the download is larger than the 50000 bytes a transfer may carry (files_max_bytes)");
    /* the sandbox's filesystem bounds a raw file too */
    forward_free(f);
    o.files_max_bytes = 0;
    fr.fs_bytes = 60000;
    fr.stat_size = 0;
    ck_assert_int_eq(forward_new(&o, &f, err, sizeof err), 0);
    ck_assert_int_eq(forward_start(f, err, sizeof err), 0);
    files_exchange(f, pre, NULL, 0, false, reply, sizeof reply);
    ck_assert_msg(strncmp(reply, "SANDBOX-FORWARD/1 413 payload_too_large the file is 70000 bytes, more than the "
                          "sandbox's filesystem holds (60000 bytes", 98) == 0, "got [%s]", reply);
    forward_free(f);
    free(fr.got);
}
END_TEST

/* The grant binds the request line: another line, another op, a bad line
 * and a grant of another purpose are refused and the runtime never asked. */
START_TEST(test_files_grants_bind_their_request_line)
{
    files_runtime_t fr;
    forward_t *f = files_forwarder(&fr);
    char pre[SBX_FILES_REQUEST_MAX * 2], reply[1024];
    const char *line = "{\"op\":\"get\",\"path\":\"/etc/shadow\",\"format\":\"raw\"}";
    const char *signed_line = "{\"op\":\"get\",\"path\":\"/work/report.xml\",\"format\":\"raw\"}";
    files_preamble(GRANT_FILES_GET, line, signed_line, pre, sizeof pre);
    exchange(f, pre, reply, sizeof reply);
    ck_assert_str_eq(reply, "SANDBOX-FORWARD/1 403 forbidden the request does not match its grant\r\n");
    /* A put grant for a get line (signed as such). */
    files_preamble(GRANT_FILES_PUT, line, NULL, pre, sizeof pre);
    exchange(f, pre, reply, sizeof reply);
    ck_assert_str_eq(reply, "SANDBOX-FORWARD/1 403 forbidden the request does not match its grant\r\n");
    /* A signed line that is not a request. */
    files_preamble(GRANT_FILES_GET, "{\"op\":\"get\",\"path\":\"rel\",\"format\":\"raw\"}", NULL, pre, sizeof pre);
    exchange(f, pre, reply, sizeof reply);
    ck_assert_msg(strncmp(reply, "SANDBOX-FORWARD/1 400 invalid_argument the request's path", 57) == 0, "got [%s]",
                  reply);
    /* A line longer than SBX_FILES_REQUEST_MAX. */
    char *lng = unit_repeat('a', SBX_FILES_REQUEST_MAX);
    files_preamble(GRANT_FILES_GET, lng, NULL, pre, sizeof pre);
    exchange(f, pre, reply, sizeof reply);
    ck_assert_msg(strncmp(reply, "SANDBOX-FORWARD/1 400 invalid_argument the request line is longer than 8192",
                          75) == 0, "got [%s]", reply);
    free(lng);
    /* A route grant followed by a files request line is a route (here: none),
     * never a file transfer. */
    unsigned char key[GRANT_KEY_BYTES];
    grant_key_from_token(TOKEN, key);
    grant_t g = { .worker_id = "wrk_a", .sandbox_id = "sbx_b", .port = 8080, .expires_unix = time(NULL) + 60 };
    char text[GRANT_MAX];
    ck_assert_int_eq(grant_sign(key, &g, text), 0);
    snprintf(pre, sizeof pre, "%s %s\r\n%s\r\n", FORWARD_PROTOCOL, text, signed_line);
    exchange(f, pre, reply, sizeof reply);
    ck_assert_str_eq(reply, "SANDBOX-FORWARD/1 404 not_found no route in the fake\r\n");
    /* A files grant whose purpose field was rewritten is no grant at all. */
    files_preamble(GRANT_FILES_PUT, signed_line, NULL, pre, sizeof pre);
    char *fp = strstr(pre, ".fput-");
    ck_assert_ptr_nonnull(fp);
    memcpy(fp, ".fget-", 6);
    exchange(f, pre, reply, sizeof reply);
    ck_assert_str_eq(reply, "SANDBOX-FORWARD/1 403 forbidden the grant is not signed for this worker\r\n");
    ck_assert_int_eq(atomic_load(&fr.get_calls), 0);
    ck_assert_int_eq(atomic_load(&fr.put_calls), 0);
    forward_free(f);
    free(fr.got);
}
END_TEST

/* ---- shells ------------------------------------------------------------ */

START_TEST(test_shell_request_lines_are_parsed_strictly)
{
    forward_shell_req_t q;
    char why[200];
    const char *ok = "{\"op\":\"shell\",\"argv\":[\"/bin/sh\",\"-l\"],\"cols\":80,\"rows\":24}";
    ck_assert_int_eq(forward_shell_request_parse(ok, strlen(ok), &q, why, sizeof why), 0);
    ck_assert_uint_eq(q.argc, 2);
    ck_assert_str_eq(q.argv[1], "-l");
    ck_assert_ptr_null(q.argv[2]);
    ck_assert_uint_eq(q.cols, 80);
    ck_assert_uint_eq(q.rows, 24);
    forward_shell_req_release(&q);
    const char *bad[] = {
        "", "[]", "{\"op\":\"shell\",\"argv\":[\"sh\"],\"cols\":80}",
        "{\"op\":\"get\",\"argv\":[\"sh\"],\"cols\":80,\"rows\":24}",
        "{\"argv\":[\"sh\"],\"cols\":80,\"rows\":24}",
        "{\"op\":\"shell\",\"argv\":[],\"cols\":80,\"rows\":24}",
        "{\"op\":\"shell\",\"argv\":\"sh\",\"cols\":80,\"rows\":24}",
        "{\"op\":\"shell\",\"argv\":[\"\"],\"cols\":80,\"rows\":24}",
        "{\"op\":\"shell\",\"argv\":[\"s\\u0000h\"],\"cols\":80,\"rows\":24}",
        "{\"op\":\"shell\",\"argv\":[1],\"cols\":80,\"rows\":24}",
        "{\"op\":\"shell\",\"argv\":[\"sh\"],\"cols\":0,\"rows\":24}",
        "{\"op\":\"shell\",\"argv\":[\"sh\"],\"cols\":1001,\"rows\":24}",
        "{\"op\":\"shell\",\"argv\":[\"sh\"],\"cols\":80.5,\"rows\":24}",
        "{\"op\":\"shell\",\"argv\":[\"sh\"],\"cols\":\"80\",\"rows\":24}",
        "{\"op\":\"shell\",\"argv\":[\"sh\"],\"cols\":80,\"rows\":-1}",
        "{\"op\":\"shell\",\"argv\":[\"sh\"],\"cols\":80,\"rows\":24,\"env\":[]}",
        "{\"op\":\"shell\",\"argv\":[\"sh\"],\"cols\":80,\"rows\":24} x",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(forward_shell_request_parse(bad[i], strlen(bad[i]), &q, why, sizeof why) == SBX_EINVAL,
                      "accepted [%s]", bad[i]);
    /* 257 argv entries are too many. */
    char line[4096];
    size_t n = (size_t)snprintf(line, sizeof line, "{\"op\":\"shell\",\"cols\":1,\"rows\":1,\"argv\":[\"a\"");
    for (int i = 0; i < 256; i++)
        n += (size_t)snprintf(line + n, sizeof line - n, ",\"a\"");
    snprintf(line + n, sizeof line - n, "]}");
    ck_assert_int_eq(forward_shell_request_parse(line, strlen(line), &q, why, sizeof why), SBX_EINVAL);
    /* Without a terminal: tty false, env as an exec's, an absolute cwd. */
    const char *pipes = "{\"op\":\"shell\",\"argv\":[\"cat\"],\"cols\":80,\"rows\":24,\"tty\":false,"
                        "\"env\":{\"A\":\"1\",\"B_2\":\"x=y\"},\"cwd\":\"/work\"}";
    ck_assert_int_eq(forward_shell_request_parse(pipes, strlen(pipes), &q, why, sizeof why), 0);
    ck_assert(!q.tty);
    ck_assert_uint_eq(q.envc, 2);
    ck_assert_str_eq(q.env[1], "B_2=x=y");
    ck_assert_ptr_null(q.env[2]);
    ck_assert_str_eq(q.cwd, "/work");
    forward_shell_req_release(&q);
    ck_assert_int_eq(forward_shell_request_parse(ok, strlen(ok), &q, why, sizeof why), 0);
    ck_assert(q.tty);
    ck_assert_ptr_null(q.env);
    ck_assert_ptr_null(q.cwd);
    forward_shell_req_release(&q);
    const char *bad2[] = {
        "{\"op\":\"shell\",\"argv\":[\"sh\"],\"cols\":80,\"rows\":24,\"tty\":0}",
        "{\"op\":\"shell\",\"argv\":[\"sh\"],\"cols\":80,\"rows\":24,\"tty\":\"false\"}",
        "{\"op\":\"shell\",\"argv\":[\"sh\"],\"cols\":80,\"rows\":24,\"env\":{\"1A\":\"x\"}}",
        "{\"op\":\"shell\",\"argv\":[\"sh\"],\"cols\":80,\"rows\":24,\"env\":{\"A\":1}}",
        "{\"op\":\"shell\",\"argv\":[\"sh\"],\"cols\":80,\"rows\":24,\"env\":\"A=1\"}",
        "{\"op\":\"shell\",\"argv\":[\"sh\"],\"cols\":80,\"rows\":24,\"cwd\":\"work\"}",
        "{\"op\":\"shell\",\"argv\":[\"sh\"],\"cols\":80,\"rows\":24,\"cwd\":\"/a\\nb\"}",
        "{\"op\":\"shell\",\"argv\":[\"sh\"],\"cols\":80,\"rows\":24,\"cwd\":\"\"}",
        "{\"op\":\"shell\",\"argv\":[\"sh\"],\"cols\":80,\"rows\":24,\"cwd\":7}",
    };
    for (size_t i = 0; i < sizeof bad2 / sizeof bad2[0]; i++)
        ck_assert_msg(forward_shell_request_parse(bad2[i], strlen(bad2[i]), &q, why, sizeof why) == SBX_EINVAL,
                      "accepted [%s]", bad2[i]);
}
END_TEST

/* A runtime whose shell is one end of a socketpair (the other end is the
 * "terminal"): it records the size and resizes, and kills on close. */
typedef struct shell_runtime {
    files_runtime_t files;
    int term;                 /* the terminal's end */
    char argv0[64];
    unsigned cols, rows;
    atomic_uint resized;      /* cols << 16 | rows of the last resize */
    atomic_int closed;
    int exit_code;
    bool tty;
    char env0[64], cwd[64];
    size_t envc;
} shell_runtime_t;

struct runtime_shell { int fd; };

static int shell_rt_open(runtime_t *rt, const runtime_shell_req_t *req, runtime_shell_t **ret, int *ret_fd,
                         runtime_shell_early_t *ret_early, api_error_t *err)
{
    shell_runtime_t *sr = (shell_runtime_t *)rt;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
        return api_error_set(err, API_RUNTIME_ERROR, "socketpair failed");
    ck_assert_str_eq(req->ref, "ctr_fake");
    snprintf(sr->argv0, sizeof sr->argv0, "%s", req->argv[0]);
    sr->cols = req->cols;
    sr->rows = req->rows;
    sr->tty = req->tty;
    sr->envc = req->envc;
    snprintf(sr->env0, sizeof sr->env0, "%s", req->envc ? req->env[0] : "");
    snprintf(sr->cwd, sizeof sr->cwd, "%s", req->cwd ? req->cwd : "");
    sr->term = sv[1];
    runtime_shell_t *s = unit_xmalloc(sizeof *s);
    s->fd = sv[0];
    *ret = s;
    *ret_fd = sv[0];
    /* Without a terminal the early bytes are framed as the stream is. */
    ret_early->data = req->tty ? "$ " : "\x01\0\0\0\0\0\0\x02$ ";
    ret_early->len = req->tty ? 2 : 10;
    return 0;
}

static int shell_rt_resize(runtime_t *rt, runtime_shell_t *s, unsigned cols, unsigned rows, api_error_t *err)
{
    (void)s, (void)err;
    atomic_store(&((shell_runtime_t *)rt)->resized, cols << 16 | rows);
    return 0;
}

static int shell_rt_exit_code(runtime_t *rt, runtime_shell_t *s, int *ret_code, api_error_t *err)
{
    (void)s, (void)err;
    *ret_code = ((shell_runtime_t *)rt)->exit_code;
    return 0;
}

static void shell_rt_close(runtime_t *rt, runtime_shell_t *s)
{
    atomic_store(&((shell_runtime_t *)rt)->closed, 1);
    close(s->fd);
    free(s);
}

static const runtime_ops_t shell_runtime_ops = {
    .name = "shell-fake", .dial = files_rt_dial, .files_target = files_rt_target, .shell_open = shell_rt_open,
    .shell_resize = shell_rt_resize, .shell_exit_code = shell_rt_exit_code, .shell_close = shell_rt_close,
};

/* Reads shell frames from fd until an EXIT frame or the end (5 s at most):
 * the DATA bytes into out, the exit code (or INT32_MIN for none). */
static int32_t shell_read_frames(int fd, char *out, size_t cap, size_t *ret_len)
{
    static char buf[1 << 16];
    size_t n = read_all_n(fd, buf, sizeof buf), off = 0;
    shellframe_dec_t *d = unit_xmalloc(sizeof *d);
    shellframe_dec_init(d, SHELLFRAME_TO_CLIENT);
    int32_t code = INT32_MIN;
    *ret_len = 0;
    while (off < n) {
        size_t used = 0;
        shellframe_t fr;
        int r = shellframe_next(d, buf + off, n - off, &used, &fr);
        ck_assert_int_ge(r, 0);
        off += used;
        if (r == 0)
            break;
        if (fr.type == SHELLFRAME_DATA) {
            ck_assert_uint_le(*ret_len + fr.len, cap);
            memcpy(out + *ret_len, fr.data, fr.len);
            *ret_len += fr.len;
        } else {
            code = fr.exit_code;
        }
    }
    free(d);
    return code;
}

START_TEST(test_shell_relays_keystrokes_resizes_and_the_exit_code)
{
    shell_runtime_t sr;
    memset(&sr, 0, sizeof sr);
    files_rt_init(&sr.files);
    sr.files.base.ops = &shell_runtime_ops;
    sr.term = -1;
    sr.exit_code = 3;
    forward_t *f = start_forwarder_on("wrk_a", 8, &sr.files.base);
    char pre[2048];
    const char *line = "{\"op\":\"shell\",\"argv\":[\"/bin/bash\"],\"cols\":100,\"rows\":30}";
    files_preamble(GRANT_SHELL, line, NULL, pre, sizeof pre);
    int fd = dial(f);
    send_all_test(fd, pre, strlen(pre));
    char head[64];
    static const char ok[] = "SANDBOX-FORWARD/1 200 ok\r\n";
    read_n(fd, head, sizeof ok - 1);
    ck_assert_str_eq(head, ok);
    ck_assert_str_eq(sr.argv0, "/bin/bash");
    ck_assert_uint_eq(sr.cols, 100);
    ck_assert_uint_eq(sr.rows, 30);
    /* Keystrokes (Ctrl-C a byte like any other) reach the terminal. */
    unsigned char h[SHELLFRAME_HEADER_BYTES], rs[SHELLFRAME_HEADER_BYTES + 4];
    shellframe_header(h, SHELLFRAME_DATA, 4);
    send_all_test(fd, h, sizeof h);
    send_all_test(fd, "ls\x03\r", 4);
    shellframe_resize(rs, 132, 43);
    send_all_test(fd, rs, sizeof rs);
    shellframe_header(h, SHELLFRAME_EOF, 0);
    send_all_test(fd, h, sizeof h);
    char got[16];
    read_n(sr.term, got, 5);
    ck_assert(memcmp(got, "ls\x03\r\x04", 5) == 0);
    for (int i = 0; i < 100 && atomic_load(&sr.resized) == 0; i++)
        usleep(10000);
    ck_assert_uint_eq(atomic_load(&sr.resized), 132u << 16 | 43u);
    /* The terminal's output, then its end: the exit code last. */
    send_all_test(sr.term, "hello\r\n", 7);
    close(sr.term);
    char out[256];
    size_t out_len = 0;
    ck_assert_int_eq(shell_read_frames(fd, out, sizeof out, &out_len), 3);
    ck_assert_uint_eq(out_len, 9);
    ck_assert(memcmp(out, "$ hello\r\n", 9) == 0);
    close(fd);
    for (int i = 0; i < 100 && !atomic_load(&sr.closed); i++)
        usleep(10000);
    ck_assert_int_eq(atomic_load(&sr.closed), 1);
    forward_free(f);
    free(sr.files.got);
}
END_TEST

START_TEST(test_shell_without_a_terminal_splits_stdout_and_stderr_and_closes_stdin)
{
    shell_runtime_t sr;
    memset(&sr, 0, sizeof sr);
    files_rt_init(&sr.files);
    sr.files.base.ops = &shell_runtime_ops;
    sr.term = -1;
    sr.exit_code = 5;
    forward_t *f = start_forwarder_on("wrk_a", 8, &sr.files.base);
    char pre[2048];
    const char *line = "{\"op\":\"shell\",\"argv\":[\"cat\"],\"cols\":80,\"rows\":24,\"tty\":false,"
                       "\"env\":{\"K\":\"v\"},\"cwd\":\"/tmp\"}";
    files_preamble(GRANT_SHELL, line, NULL, pre, sizeof pre);
    int fd = dial(f);
    send_all_test(fd, pre, strlen(pre));
    char head[64];
    static const char ok[] = "SANDBOX-FORWARD/1 200 ok\r\n";
    read_n(fd, head, sizeof ok - 1);
    ck_assert_str_eq(head, ok);
    ck_assert(!sr.tty);
    ck_assert_uint_eq(sr.envc, 1);
    ck_assert_str_eq(sr.env0, "K=v");
    ck_assert_str_eq(sr.cwd, "/tmp");
    /* stdin: the bytes, then EOF closes it (a read of 0), no Ctrl-D byte;
     * a RESIZE is ignored. */
    unsigned char h[SHELLFRAME_HEADER_BYTES], rs[SHELLFRAME_HEADER_BYTES + 4];
    shellframe_header(h, SHELLFRAME_DATA, 3);
    send_all_test(fd, h, sizeof h);
    send_all_test(fd, "abc", 3);
    shellframe_resize(rs, 132, 43);
    send_all_test(fd, rs, sizeof rs);
    shellframe_header(h, SHELLFRAME_EOF, 0);
    send_all_test(fd, h, sizeof h);
    char got[16];
    size_t n = read_all_n(sr.term, got, sizeof got);
    ck_assert_uint_eq(n, 3);
    ck_assert(memcmp(got, "abc", 3) == 0);
    ck_assert_uint_eq(atomic_load(&sr.resized), 0);
    /* Output framed by stream, a header split across writes, a stream 3 skipped. */
    send_all_test(sr.term, "\x01\0\0\0\0\0", 6);
    usleep(20000);
    static const char rest[] = "\0\x03out\x02\0\0\0\0\0\0\x03" "err\x03\0\0\0\0\0\0\x02zz";
    send_all_test(sr.term, rest, sizeof rest - 1);
    close(sr.term);
    static char buf[4096];
    n = read_all_n(fd, buf, sizeof buf);
    shellframe_dec_t *d = unit_xmalloc(sizeof *d);
    shellframe_dec_init(d, SHELLFRAME_TO_CLIENT);
    char out[64] = "", err[64] = "";
    size_t off = 0, on = 0, en = 0;
    int32_t code = INT32_MIN;
    while (off < n) {
        size_t used = 0;
        shellframe_t fr;
        int r = shellframe_next(d, buf + off, n - off, &used, &fr);
        ck_assert_int_ge(r, 0);
        off += used;
        if (r == 0)
            break;
        if (fr.type == SHELLFRAME_DATA) {
            memcpy(out + on, fr.data, fr.len);
            on += fr.len;
        } else if (fr.type == SHELLFRAME_STDERR) {
            memcpy(err + en, fr.data, fr.len);
            en += fr.len;
        } else {
            code = fr.exit_code;
        }
    }
    free(d);
    ck_assert_str_eq(out, "$ out");
    ck_assert_str_eq(err, "err");
    ck_assert_int_eq(code, 5);
    close(fd);
    forward_free(f);
    free(sr.files.got);
}
END_TEST

START_TEST(test_shell_grant_binds_its_line_and_bad_frames_end_it)
{
    shell_runtime_t sr;
    memset(&sr, 0, sizeof sr);
    files_rt_init(&sr.files);
    sr.files.base.ops = &shell_runtime_ops;
    sr.term = -1;
    forward_t *f = start_forwarder_on("wrk_a", 8, &sr.files.base);
    char pre[2048], reply[1024];
    const char *line = "{\"op\":\"shell\",\"argv\":[\"/bin/rm\",\"-rf\",\"/\"],\"cols\":80,\"rows\":24}";
    const char *signed_line = "{\"op\":\"shell\",\"argv\":[\"/bin/sh\"],\"cols\":80,\"rows\":24}";
    files_preamble(GRANT_SHELL, line, signed_line, pre, sizeof pre);
    exchange(f, pre, reply, sizeof reply);
    ck_assert_str_eq(reply, "SANDBOX-FORWARD/1 403 forbidden the request does not match its grant\r\n");
    /* A files grant for a shell line is a file transfer's, refused as one. */
    files_preamble(GRANT_FILES_GET, signed_line, NULL, pre, sizeof pre);
    exchange(f, pre, reply, sizeof reply);
    ck_assert_msg(strncmp(reply, "SANDBOX-FORWARD/1 400 invalid_argument", 38) == 0, "got [%s]", reply);
    ck_assert_int_eq(sr.term, -1);
    /* A signed but malformed line. */
    files_preamble(GRANT_SHELL, "{\"op\":\"shell\",\"argv\":[\"sh\"],\"cols\":0,\"rows\":24}", NULL, pre, sizeof pre);
    exchange(f, pre, reply, sizeof reply);
    ck_assert_msg(strncmp(reply, "SANDBOX-FORWARD/1 400 invalid_argument the request's cols", 57) == 0, "got [%s]",
                  reply);
    /* An EXIT frame from the controller's side ends the session, the command killed. */
    files_preamble(GRANT_SHELL, signed_line, NULL, pre, sizeof pre);
    int fd = dial(f);
    send_all_test(fd, pre, strlen(pre));
    static const char ok[] = "SANDBOX-FORWARD/1 200 ok\r\n";
    char head[64];
    read_n(fd, head, sizeof ok - 1);
    ck_assert_str_eq(head, ok);
    unsigned char ex[SHELLFRAME_HEADER_BYTES + 4];
    shellframe_exit(ex, 0);
    send_all_test(fd, ex, sizeof ex);
    char out[256];
    size_t out_len = 0;
    ck_assert_int_eq(shell_read_frames(fd, out, sizeof out, &out_len), INT32_MIN);
    ck_assert_uint_eq(out_len, 2); /* the prompt, then the end: no EXIT frame */
    close(fd);
    for (int i = 0; i < 100 && !atomic_load(&sr.closed); i++)
        usleep(10000);
    ck_assert_int_eq(atomic_load(&sr.closed), 1);
    if (sr.term >= 0)
        close(sr.term);
    forward_free(f);
    free(sr.files.got);
}
END_TEST

Suite *unit_suite(void)
{
    if (sodium_init() < 0) {
        fprintf(stderr, "sodium_init failed\n");
        return NULL;
    }
    Suite *s = suite_create("forward");
    unit_tcase_add(s, "preamble", UNIT_TESTS(
        test_whole_line_with_request_bytes_after_it_in_one_read,
        test_every_two_read_split_gives_the_same_line_and_rest,
        test_cr_and_lf_in_separate_reads,
        test_byte_by_byte,
        test_line_of_exactly_the_maximum_is_taken_one_more_byte_is_not,
        test_bare_line_feed_and_nul_are_refused,
        test_preamble_parse_accepts_only_the_exact_form,
        test_reply_lines,
    ));
    TCase *tl = unit_tcase_add(s, "listener", UNIT_TESTS(
        test_listener_refuses_bad_preambles_and_grants,
        test_unregistered_worker_refuses_every_grant,
        test_logs_grants_are_checked_like_route_grants,
        test_a_route_relays_to_the_connection_the_runtime_dials,
        test_a_failed_dial_is_answered_by_its_code,
        test_connections_past_the_maximum_are_busy_and_stop_closes_open_ones,
        test_options_are_checked,
    ));
    tcase_set_timeout(tl, 30);
    TCase *tf = unit_tcase_add(s, "files", UNIT_TESTS(
        test_files_request_lines_are_parsed_strictly,
        test_files_put_takes_frames_and_answers_one_line,
        test_files_put_byte_by_byte,
        test_files_put_aborted_upload_is_seen_by_the_runtime,
        test_files_put_refuses_bad_frames_and_maps_runtime_errors,
        test_files_get_answers_the_stat_then_frames,
        test_files_grants_bind_their_request_line,
        test_files_put_refuses_sparse_members_before_the_runtime_sees_them,
        test_files_get_hands_on_only_the_asked_tree,
        test_files_get_is_bounded,
    ));
    tcase_set_timeout(tf, 60);
    TCase *ts = unit_tcase_add(s, "shell", UNIT_TESTS(
        test_shell_request_lines_are_parsed_strictly,
        test_shell_relays_keystrokes_resizes_and_the_exit_code,
        test_shell_without_a_terminal_splits_stdout_and_stderr_and_closes_stdin,
        test_shell_grant_binds_its_line_and_bad_frames_end_it,
    ));
    tcase_set_timeout(ts, 30);
    return s;
}
