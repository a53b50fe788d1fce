/* Unit tests for worker/runsc: recognising runsc processes by their command
 * line, parsing `runsc ps`, and picking the exec tree a timeout kills. */
#include "check_util.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "errors.h"
#include "docker/runsc.h"

#define CID "e32d89c986378fee62c245bce96dad4fc6778ecd19833a2d6cb8d5b1e117a5ca"
#define EXEC "1b9ffb3fbb68b078cfefc919ef46b6267b209b63d8e7e2113796aeb56c9f56f9"
#define TASK "/var/run/docker/containerd/daemon/io.containerd.runtime.v2.task/moby/" CID

/* A cmdline as /proc gives it: arguments joined by NUL, NUL-terminated. */
static size_t cmdline(char *buf, size_t cap, const char *const *args)
{
    size_t n = 0;
    for (const char *const *a = args; *a; a++) {
        size_t l = strlen(*a) + 1;
        ck_assert_uint_le(n + l, cap);
        memcpy(buf + n, *a, l);
        n += l;
    }
    return n;
}

/* What containerd-shim ran on this machine for `docker exec`. */
static const char *const exec_args[] = {
    "runsc-exec", "--network=none", "--root", "/var/run/docker/runtime-runc/moby", "--log", TASK "/log.json",
    "--log-format", "json", "exec", "--process", "/tmp/runc-process3486493457", "--pid-file", TASK "/" EXEC ".pid",
    CID, NULL
};
/* And the sandbox process (Docker's State.Pid of the container). */
static const char *const sandbox_args[] = {
    "runsc-sandbox", "--root=/var/run/docker/runtime-runc/moby", "--log=" TASK "/log.json", "--network=none",
    "boot", "--bundle=" TASK, "--cpu-num", "2", "--stdio-fds=13", CID, NULL
};

START_TEST(test_exec_cmdline_matches_its_container_and_exec)
{
    char buf[4096], root[RUNSC_PATH_MAX] = "";
    size_t n = cmdline(buf, sizeof buf, exec_args);
    ck_assert_int_eq(runsc_cmdline_match(buf, n, CID, EXEC, root), 0);
    ck_assert_str_eq(root, "/var/run/docker/runtime-runc/moby");
    ck_assert_int_eq(runsc_cmdline_match(buf, n, CID, NULL, root), 0);
}
END_TEST

START_TEST(test_exec_cmdline_of_another_exec_or_container_does_not_match)
{
    char buf[4096], root[RUNSC_PATH_MAX] = "";
    size_t n = cmdline(buf, sizeof buf, exec_args);
    ck_assert_int_eq(runsc_cmdline_match(buf, n, CID, "0000ffb3fbb68b078cfefc919ef46b6267b209b63d8e7e2113796aeb56c9f56f9",
                                         root), SBX_EINVAL);
    /* a prefix of the exec id is not the exec id */
    ck_assert_int_eq(runsc_cmdline_match(buf, n, CID, "1b9ffb3f", root), SBX_EINVAL);
    /* the container id appears inside paths too, but only a whole argument counts */
    ck_assert_int_eq(runsc_cmdline_match(buf, n, "e32d89c98637", NULL, root), SBX_EINVAL);
    ck_assert_int_eq(runsc_cmdline_match(buf, n, "", NULL, root), SBX_EINVAL);
    ck_assert_str_eq(root, "");
}
END_TEST

START_TEST(test_sandbox_cmdline_is_not_an_exec)
{
    char buf[4096], root[RUNSC_PATH_MAX] = "";
    size_t n = cmdline(buf, sizeof buf, sandbox_args);
    ck_assert_int_eq(runsc_cmdline_match(buf, n, CID, NULL, root), 0);
    ck_assert_str_eq(root, "/var/run/docker/runtime-runc/moby");
    ck_assert_int_eq(runsc_cmdline_match(buf, n, CID, EXEC, root), SBX_EINVAL);
}
END_TEST

START_TEST(test_non_runsc_or_rootless_cmdlines_do_not_match)
{
    static const char *const sleep_args[] = { "/bin/sleep", CID, NULL };
    static const char *const no_root[] = { "/usr/bin/runsc", "exec", CID, NULL };
    static const char *const relative_root[] = { "runsc", "--root", "state", "exec", CID, NULL };
    char buf[4096], root[RUNSC_PATH_MAX];
    size_t n = cmdline(buf, sizeof buf, sleep_args);
    ck_assert_int_eq(runsc_cmdline_match(buf, n, CID, NULL, root), SBX_EINVAL);
    n = cmdline(buf, sizeof buf, no_root);
    ck_assert_int_eq(runsc_cmdline_match(buf, n, CID, NULL, root), SBX_EINVAL);
    n = cmdline(buf, sizeof buf, relative_root);
    ck_assert_int_eq(runsc_cmdline_match(buf, n, CID, NULL, root), SBX_EINVAL);
    /* not NUL-terminated: refused rather than read past the end */
    ck_assert_int_eq(runsc_cmdline_match("runsc", 5, CID, NULL, root), SBX_EINVAL);
    ck_assert_int_eq(runsc_cmdline_match("", 0, CID, NULL, root), SBX_EINVAL);
}
END_TEST

START_TEST(test_host_from_pid_refuses_a_process_that_is_not_runsc)
{
    runsc_host_t h;
    /* this test process: not runsc, whatever the container id */
    ck_assert_int_eq(runsc_host_from_pid(getpid(), CID, NULL, "/usr/bin/runsc", &h), SBX_EINVAL);
    ck_assert_int_eq(runsc_host_from_pid(1, CID, NULL, "/usr/bin/runsc", &h), SBX_EINVAL);
    ck_assert_int_eq(runsc_host_from_pid(getpid(), CID, NULL, "relative/runsc", &h), SBX_EINVAL);
    ck_assert(!runsc_pid_matches(getpid(), CID, NULL, "/usr/bin/runsc"));
}
END_TEST

static const char ps_output[] =
    "UID       PID       PPID      C         TTY       STIME     TIME      CMD\n"
    "0         1         0         0         ?         18:36     0s        docker-init\n"
    "0         2         1         0         ?         18:36     0s        sleep\n"
    "0         3         0         0         ?         18:36     10ms      sleep\n"
    "0         7         0         0         ?         18:37     10ms      sh\n"
    "0         8         7         0         ?         18:37     0s        sleep\n"
    "0         9         8         0         ?         18:37     0s        sleep\n"
    "0         10        1         0         ?         18:37     0s        orphan\n";

START_TEST(test_ps_table_is_parsed)
{
    runsc_proc_t p[16];
    size_t n = 0;
    ck_assert_int_eq(runsc_ps_parse(ps_output, p, 16, &n), 0);
    ck_assert_uint_eq(n, 7);
    ck_assert_int_eq(p[0].pid, 1);
    ck_assert_int_eq(p[0].ppid, 0);
    ck_assert_int_eq(p[5].pid, 9);
    ck_assert_int_eq(p[5].ppid, 8);
    ck_assert_int_eq(runsc_max_pid(p, n), 10);
    /* bounded by max */
    ck_assert_int_eq(runsc_ps_parse(ps_output, p, 3, &n), 0);
    ck_assert_uint_eq(n, 3);
}
END_TEST

START_TEST(test_ps_without_header_is_refused)
{
    runsc_proc_t p[4];
    size_t n = 99;
    ck_assert_int_eq(runsc_ps_parse("", p, 4, &n), SBX_EINVAL);
    ck_assert_int_eq(runsc_ps_parse("0 1 0 0 ? 18:36 0s init\n", p, 4, &n), SBX_EINVAL);
    ck_assert_int_eq(runsc_ps_parse("error: container not found\n", p, 4, &n), SBX_EINVAL);
    ck_assert_uint_eq(n, 99);
    /* garbage rows after a header are skipped */
    ck_assert_int_eq(runsc_ps_parse("UID PID PPID C\n0 x 0\n0 -4 0\n0 5 1 0 ? t 0s a\n", p, 4, &n), 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(p[0].pid, 5);
}
END_TEST

START_TEST(test_exec_root_is_the_one_exec_started_after_the_mark)
{
    runsc_proc_t p[16];
    size_t n = 0;
    int root = 0;
    ck_assert_int_eq(runsc_ps_parse(ps_output, p, 16, &n), 0);
    /* execs 3 and 7 are running; only 7 started after pid 5 */
    ck_assert_int_eq(runsc_exec_root(p, n, 5, &root), 0);
    ck_assert_int_eq(root, 7);
    /* both started after pid 2: which one is ours is unknown */
    root = 0;
    ck_assert_int_eq(runsc_exec_root(p, n, 2, &root), SBX_ECONFLICT);
    ck_assert_int_eq(root, 0);
    /* none started after pid 9 (the orphan 10 has parent 1: not an exec) */
    ck_assert_int_eq(runsc_exec_root(p, n, 9, &root), SBX_ENOTFOUND);
}
END_TEST

START_TEST(test_descendants_cover_the_whole_tree_only)
{
    runsc_proc_t p[16];
    size_t n = 0;
    int set[8] = { 7 };
    ck_assert_int_eq(runsc_ps_parse(ps_output, p, 16, &n), 0);
    size_t k = runsc_descendants(p, n, set, 1, 8);
    ck_assert_uint_eq(k, 3);
    ck_assert_int_eq(set[0], 7);
    ck_assert(set[1] == 8 || set[2] == 8);
    ck_assert(set[1] == 9 || set[2] == 9);
    /* bounded */
    int small[2] = { 7 };
    ck_assert_uint_eq(runsc_descendants(p, n, small, 1, 2), 2);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("runsc");
    unit_tcase_add(s, "core", UNIT_TESTS(
        test_exec_cmdline_matches_its_container_and_exec,
        test_exec_cmdline_of_another_exec_or_container_does_not_match,
        test_sandbox_cmdline_is_not_an_exec,
        test_non_runsc_or_rootless_cmdlines_do_not_match,
        test_host_from_pid_refuses_a_process_that_is_not_runsc,
        test_ps_table_is_parsed,
        test_ps_without_header_is_refused,
        test_exec_root_is_the_one_exec_started_after_the_mark,
        test_descendants_cover_the_whole_tree_only,
    ));
    return s;
}
