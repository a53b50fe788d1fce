/* Unit tests for worker/vmm/vmm_agent: the host side of the agent channel
 * against a fake guest on a unix socket (a forked child), as a hostile guest
 * would talk: output over the bound, a frame over the size limit, another
 * protocol version. */
#include "check_util.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "limits.h"
#include "vmm_internal.h"

typedef enum { GUEST_GOOD, GUEST_HUGE_FRAME, GUEST_OLD_VERSION } guest_mode_t;

static void put_frame(int fd, uint8_t type, uint32_t ch, const void *p, uint32_t n)
{
    uint8_t h[VMM_FRAME_HEADER];
    vmm_frame_header_put(h, type, ch, n);
    if (write(fd, h, sizeof(h)) != (ssize_t)sizeof(h) || (n && write(fd, p, n) != (ssize_t)n))
        _exit(3);
}

/* Reads one whole frame (payload into buf, cap bytes); -1 at EOF. */
static int get_frame(int fd, vmm_frame_t *f, uint8_t *buf, size_t cap)
{
    uint8_t h[VMM_FRAME_HEADER];
    size_t n = 0;
    while (n < sizeof(h)) {
        ssize_t r = read(fd, h + n, sizeof(h) - n);
        if (r <= 0)
            return -1;
        n += (size_t)r;
    }
    if (vmm_frame_header_parse(h, sizeof(h), f) != 0 || f->len > cap)
        return -1;
    for (n = 0; n < f->len; ) {
        ssize_t r = read(fd, buf + n, f->len - n);
        if (r <= 0)
            return -1;
        n += (size_t)r;
    }
    return 0;
}

/* The fake guest: answers HELLO, then every OPEN with OPENED, 100000 bytes of
 * stdout and EXIT code 3 (GUEST_GOOD) or a header claiming 16 MiB. */
static void fake_guest(int listener, guest_mode_t mode)
{
    int c = accept(listener, NULL, NULL);
    static uint8_t buf[SBX_VMM_FRAME_MAX];
    vmm_frame_t f;
    while (c >= 0 && get_frame(c, &f, buf, sizeof(buf)) == 0) {
        if (f.type == VMM_F_HELLO) {
            uint8_t b[4 + 4];
            vmm_put_u32(b, mode == GUEST_OLD_VERSION ? 0 : VMM_PROTO_VERSION);
            memcpy(b + 4, "fake", 4);
            put_frame(c, VMM_F_HELLO, 0, b, sizeof(b));
        } else if (f.type == VMM_F_OPEN) {
            uint8_t pid[4] = {1, 0, 0, 0};
            put_frame(c, VMM_F_OPENED, f.channel, pid, 4);
            memset(buf, 'x', 50000);
            put_frame(c, VMM_F_OUT, f.channel, buf, 50000);
            put_frame(c, VMM_F_OUT, f.channel, buf, 50000);
            if (mode == GUEST_HUGE_FRAME) {
                uint8_t h[VMM_FRAME_HEADER];
                vmm_frame_header_put(h, VMM_F_OUT, f.channel, 16u << 20);
                if (write(c, h, sizeof(h)) != (ssize_t)sizeof(h))
                    _exit(3);
            } else {
                uint8_t e[5] = {VMM_EXIT_CODE};
                vmm_put_u32(e + 1, 3);
                put_frame(c, VMM_F_EXIT, f.channel, e, 5);
            }
        }
    }
    _exit(0);
}

typedef struct {
    char dir[64];
    pid_t guest;
    vmm_t *vm;
} fixture_t;

static int start(fixture_t *fx, guest_mode_t mode, char *why)
{
    snprintf(fx->dir, sizeof(fx->dir), "/tmp/sbx-vmmunit.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(fx->dir));
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof(a.sun_path), "%s/agent.sock", fx->dir);
    int l = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert_int_eq(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(l, 1), 0);
    fx->guest = fork();
    if (fx->guest == 0)
        fake_guest(l, mode);
    close(l);
    fx->vm = calloc(1, sizeof(*fx->vm));
    fx->vm->fd = -1;
    snprintf(fx->vm->dir, sizeof(fx->vm->dir), "%s", fx->dir);
    return vmm__agent_connect(fx->vm, 5000, why);
}

static void stop(fixture_t *fx)
{
    vmm__free(fx->vm);
    kill(fx->guest, SIGKILL);
    waitpid(fx->guest, NULL, 0);
    vmm__rm_tree(fx->dir);
}

static size_t got;
static void count(void *arg, int stream, const void *p, size_t n)
{
    (void)arg; (void)stream; (void)p;
    got += n;
}

START_TEST(test_output_over_the_bound_is_cut_and_counted)
{
    fixture_t fx;
    char why[VMM_WHY_MAX] = "";
    ck_assert_int_eq(start(&fx, GUEST_GOOD, why), 0);
    ck_assert_str_eq(vmm_guest_release(fx.vm), "fake");
    const char *argv[] = {"x"};
    vmm_exec_req_t req = {.cmd = {.argv = argv, .argc = 1}, .stdin_fd = -1, .max_output = 1000, .on_output = count};
    vmm_exec_result_t r;
    got = 0;
    ck_assert_int_eq(vmm_exec(fx.vm, &req, &r, why), 0);
    ck_assert_uint_eq(got, 1000);
    ck_assert_int_eq(r.truncated[1], 1);
    ck_assert_uint_eq(r.bytes[1], 100000);
    ck_assert_int_eq(r.how, VMM_EXIT_CODE);
    ck_assert_int_eq(r.code, 3);
    stop(&fx);
}
END_TEST

START_TEST(test_a_frame_over_the_limit_breaks_the_channel)
{
    fixture_t fx;
    char why[VMM_WHY_MAX] = "";
    ck_assert_int_eq(start(&fx, GUEST_HUGE_FRAME, why), 0);
    const char *argv[] = {"x"};
    vmm_exec_req_t req = {.cmd = {.argv = argv, .argc = 1}, .stdin_fd = -1, .on_output = count};
    vmm_exec_result_t r;
    ck_assert_int_eq(vmm_exec(fx.vm, &req, &r, why), SBX_EIO);
    /* and stays broken: no call reads on into the rest of a bad stream */
    ck_assert_int_eq(vmm_exec(fx.vm, &req, &r, why), SBX_EIO);
    stop(&fx);
}
END_TEST

START_TEST(test_another_protocol_version_is_refused_at_once)
{
    fixture_t fx;
    char why[VMM_WHY_MAX] = "";
    ck_assert_int_eq(start(&fx, GUEST_OLD_VERSION, why), SBX_EUNAVAIL);
    ck_assert_ptr_nonnull(strstr(why, "protocol version 0"));
    stop(&fx);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("vmm_agent");
    unit_tcase_add(s, "hostile guest", UNIT_TESTS(
        test_output_over_the_bound_is_cut_and_counted,
        test_a_frame_over_the_limit_breaks_the_channel,
        test_another_protocol_version_is_refused_at_once,
    ));
    return s;
}
