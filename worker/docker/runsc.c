/* gVisor (runsc) host-side helpers: command-line checks, `runsc ps` and
 * `runsc kill --pid` (see runsc.h). */
#include "runsc.h"
#include "errors.h"
#include "fdutil.h"
#include "sbuf.h"
#include "timeutil.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* A /proc cmdline of runsc is a few KiB (bundle paths, fd flags). */
#define RUNSC_CMDLINE_MAX   (64u * 1024u)
/* `runsc ps` output kept: about 80 bytes a process. */
#define RUNSC_PS_OUTPUT_MAX (RUNSC_MAX_PROCS * 128u)
/* SIGSTOP rounds of the tree walk: each catches children forked while the
 * previous round's processes were being stopped. */
#define RUNSC_STOP_ROUNDS   5

/* ---- command lines ----------------------------------------------------- */

/* The next argument of a NUL-separated cmdline after *pos, or NULL. */
static const char *runsc_next_arg(const char *cmdline, size_t len, size_t *pos)
{
    if (*pos >= len)
        return NULL;
    const char *a = cmdline + *pos;
    const char *end = memchr(a, '\0', len - *pos);
    *pos = end ? (size_t)(end - cmdline) + 1 : len;
    return a;
}

int runsc_cmdline_match(const char *cmdline, size_t len, const char *container_id, const char *exec_id,
                        char ret_root[RUNSC_PATH_MAX])
{
    size_t pos = 0;
    const char *a, *argv0 = runsc_next_arg(cmdline, len, &pos);
    bool names_container = false, is_exec = false, pid_file_ok = true;
    char root[RUNSC_PATH_MAX] = "";
    if (!argv0 || !container_id || !*container_id || len == 0 || cmdline[len - 1] != '\0')
        return SBX_EINVAL;
    const char *base = strrchr(argv0, '/');
    base = base ? base + 1 : argv0;
    if (strncmp(base, "runsc", 5) != 0)
        return SBX_EINVAL;
    while ((a = runsc_next_arg(cmdline, len, &pos)) != NULL) {
        const char *value = NULL;
        if (strcmp(a, container_id) == 0)
            names_container = true;
        else if (strcmp(a, "exec") == 0)
            is_exec = true;
        if (strcmp(a, "--root") == 0 || strcmp(a, "-root") == 0) {
            value = runsc_next_arg(cmdline, len, &pos);
            if (value && strlen(value) < sizeof root)
                snprintf(root, sizeof root, "%s", value);
        } else if (strncmp(a, "--root=", 7) == 0 || strncmp(a, "-root=", 6) == 0) {
            value = strchr(a, '=') + 1;
            if (strlen(value) < sizeof root)
                snprintf(root, sizeof root, "%s", value);
        } else if (exec_id && (strcmp(a, "--pid-file") == 0 || strcmp(a, "-pid-file") == 0 ||
                               strncmp(a, "--pid-file=", 11) == 0 || strncmp(a, "-pid-file=", 10) == 0)) {
            value = strchr(a, '=') ? strchr(a, '=') + 1 : runsc_next_arg(cmdline, len, &pos);
            const char *file = value ? strrchr(value, '/') : NULL;
            file = file ? file + 1 : value;
            size_t el = strlen(exec_id);
            pid_file_ok = file && strncmp(file, exec_id, el) == 0 && strcmp(file + el, ".pid") == 0;
        }
    }
    if (!names_container || root[0] != '/' || (exec_id && (!is_exec || !pid_file_ok)))
        return SBX_EINVAL;
    snprintf(ret_root, RUNSC_PATH_MAX, "%s", root);
    return 0;
}

/* True when a and b name the same file (device and inode). */
static bool runsc_same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int runsc_host_from_pid(pid_t pid, const char *container_id, const char *exec_id, const char *trusted_exe,
                        runsc_host_t *ret)
{
    char path[64];
    char *buf = NULL;
    int r = 0;
    if (pid <= 1 || !trusted_exe || trusted_exe[0] != '/' || strlen(trusted_exe) >= RUNSC_PATH_MAX)
        return SBX_EINVAL;
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return SBX_ENOTFOUND;
    if (!(buf = malloc(RUNSC_CMDLINE_MAX))) {
        close(fd);
        return SBX_ENOMEM;
    }
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fd, buf + len, RUNSC_CMDLINE_MAX - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
        if (len == RUNSC_CMDLINE_MAX)
            break;
    }
    close(fd);
    runsc_host_t h;
    memset(&h, 0, sizeof h);
    if (len == 0 || len == RUNSC_CMDLINE_MAX) {
        r = len == 0 ? SBX_ENOTFOUND : SBX_EINVAL;
        goto cleanup;
    }
    if (runsc_cmdline_match(buf, len, container_id, exec_id, h.root) < 0) {
        r = SBX_EINVAL;
        goto cleanup;
    }
    /* Only ever run the binary dockerd was configured with, and only for a
     * process that is that binary. */
    snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
    if (!runsc_same_file(path, trusted_exe)) {
        r = SBX_EINVAL;
        goto cleanup;
    }
    snprintf(h.exe, sizeof h.exe, "%s", trusted_exe);
    *ret = h;
cleanup:
    free(buf);
    return r;
}

bool runsc_pid_matches(pid_t pid, const char *container_id, const char *exec_id, const char *trusted_exe)
{
    runsc_host_t h;
    return runsc_host_from_pid(pid, container_id, exec_id, trusted_exe, &h) == 0;
}

/* ---- ps output --------------------------------------------------------- */

int runsc_ps_parse(const char *text, runsc_proc_t *ret, size_t max, size_t *ret_n)
{
    size_t n = 0;
    bool header = false;
    const char *line = text;
    while (line && *line) {
        const char *nl = strchr(line, '\n');
        size_t ll = nl ? (size_t)(nl - line) : strlen(line);
        char buf[256];
        snprintf(buf, sizeof buf, "%.*s", (int)(ll < sizeof buf - 1 ? ll : sizeof buf - 1), line);
        line = nl ? nl + 1 : NULL;
        char uid[32], pidw[32], ppidw[32];
        if (sscanf(buf, "%31s %31s %31s", uid, pidw, ppidw) != 3)
            continue;
        if (!header) {
            if (strcmp(uid, "UID") == 0 && strcmp(pidw, "PID") == 0 && strcmp(ppidw, "PPID") == 0)
                header = true;
            continue;
        }
        char *e1, *e2;
        errno = 0;
        long pid = strtol(pidw, &e1, 10), ppid = strtol(ppidw, &e2, 10);
        if (errno || *e1 || *e2 || pid <= 0 || ppid < 0 || pid > 0x7fffffffL || ppid > 0x7fffffffL)
            continue;
        if (n < max) {
            ret[n].pid = (int)pid;
            ret[n].ppid = (int)ppid;
            n++;
        }
    }
    if (!header)
        return SBX_EINVAL;
    *ret_n = n;
    return 0;
}

int runsc_max_pid(const runsc_proc_t *p, size_t n)
{
    int m = 0;
    for (size_t i = 0; i < n; i++)
        if (p[i].pid > m)
            m = p[i].pid;
    return m;
}

int runsc_exec_root(const runsc_proc_t *p, size_t n, int after_pid, int *ret_pid)
{
    int found = 0;
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i].ppid == 0 && p[i].pid > 1 && p[i].pid > after_pid) {
            found = p[i].pid;
            count++;
        }
    }
    if (count == 0)
        return SBX_ENOTFOUND;
    if (count > 1)
        return SBX_ECONFLICT;
    *ret_pid = found;
    return 0;
}

static bool runsc_in_set(const int *set, size_t n, int pid)
{
    for (size_t i = 0; i < n; i++)
        if (set[i] == pid)
            return true;
    return false;
}

size_t runsc_descendants(const runsc_proc_t *p, size_t np, int *set, size_t n, size_t max)
{
    bool grew = true;
    while (grew && n < max) {
        grew = false;
        for (size_t i = 0; i < np && n < max; i++) {
            if (p[i].pid > 1 && runsc_in_set(set, n, p[i].ppid) && !runsc_in_set(set, n, p[i].pid)) {
                set[n++] = p[i].pid;
                grew = true;
            }
        }
    }
    return n;
}

/* ---- running runsc ----------------------------------------------------- */

/* Runs h->exe with argv (argv[0] included), stdout into out (bounded),
 * stdin and stderr on /dev/null, a clean signal mask and a fixed PATH.
 * Killed after RUNSC_CALL_TIMEOUT_MS. Returns 0 when it exited 0. */
static int runsc_run(const runsc_host_t *h, char *const argv[], sbuf_t *out)
{
    static char *const envp[] = { "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", NULL };
    int pfd[2] = { -1, -1 }, r = 0;
    pid_t pid = -1;
    bool fa_ok = false, attr_ok = false;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    if (pipe2(pfd, O_CLOEXEC) < 0)
        return SBX_EIO;
    fa_ok = posix_spawn_file_actions_init(&fa) == 0;
    attr_ok = posix_spawnattr_init(&attr) == 0;
    if (!fa_ok || !attr_ok) {
        r = SBX_ENOMEM;
        goto cleanup;
    }
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    fd_spawn_close_from(&fa, 3);
    /* The worker's threads block every signal; runsc gets the defaults. */
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    if (posix_spawn(&pid, h->exe, &fa, &attr, argv, envp) != 0) {
        pid = -1;
        r = SBX_ERUNTIME;
        goto cleanup;
    }
    close(pfd[1]);
    pfd[1] = -1;
    int64_t deadline = time_deadline_ms(RUNSC_CALL_TIMEOUT_MS);
    for (;;) {
        int left = time_left_ms(deadline);
        if (left == 0) {
            r = SBX_ETIMEOUT;
            break;
        }
        struct pollfd pf = { .fd = pfd[0], .events = POLLIN };
        int pr = poll(&pf, 1, left);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0) {
            r = pr == 0 ? SBX_ETIMEOUT : SBX_EIO;
            break;
        }
        char buf[4096];
        ssize_t n = read(pfd[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (out && sbuf_append_bounded(out, buf, (size_t)n) < 0) {
            r = SBX_ENOMEM;
            break;
        }
    }
cleanup:
    if (pid > 0) {
        if (r < 0)
            kill(pid, SIGKILL);
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
        if (r == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
            r = SBX_ERUNTIME;
    }
    if (pfd[0] >= 0)
        close(pfd[0]);
    if (pfd[1] >= 0)
        close(pfd[1]);
    if (fa_ok)
        posix_spawn_file_actions_destroy(&fa);
    if (attr_ok)
        posix_spawnattr_destroy(&attr);
    return r;
}

int runsc_ps(const runsc_host_t *h, const char *container_id, runsc_proc_t **ret, size_t *ret_n)
{
    char *argv[] = { (char *)"runsc", (char *)"--root", (char *)h->root, (char *)"ps", (char *)container_id, NULL };
    sbuf_t out;
    runsc_proc_t *p = NULL;
    sbuf_init(&out, RUNSC_PS_OUTPUT_MAX);
    int r = runsc_run(h, argv, &out);
    if (r == 0 && !(p = calloc(RUNSC_MAX_PROCS, sizeof *p)))
        r = SBX_ENOMEM;
    if (r == 0 && runsc_ps_parse(sbuf_cstr(&out), p, RUNSC_MAX_PROCS, ret_n) < 0)
        r = SBX_ERUNTIME;
    if (r == 0) {
        *ret = p;
        p = NULL;
    }
    free(p);
    sbuf_release(&out);
    return r;
}

int runsc_kill_pid(const runsc_host_t *h, const char *container_id, int pid, const char *signal)
{
    char pidtext[16];
    snprintf(pidtext, sizeof pidtext, "%d", pid);
    char *argv[] = { (char *)"runsc", (char *)"--root", (char *)h->root, (char *)"kill", (char *)"--pid", pidtext,
                     (char *)container_id, (char *)signal, NULL };
    return runsc_run(h, argv, NULL);
}

int runsc_kill_exec_tree(const runsc_host_t *h, const char *container_id, int after_pid, size_t *ret_killed)
{
    int tree[RUNSC_KILL_MAX];
    size_t n = 0, stopped = 0;
    runsc_proc_t *procs = NULL;
    size_t np = 0;
    int root = 0;
    *ret_killed = 0;
    int r = runsc_ps(h, container_id, &procs, &np);
    if (r < 0)
        return r;
    r = runsc_exec_root(procs, np, after_pid, &root);
    if (r < 0)
        goto cleanup;
    tree[n++] = root;
    for (int round = 0; round < RUNSC_STOP_ROUNDS; round++) {
        n = runsc_descendants(procs, np, tree, n, RUNSC_KILL_MAX);
        size_t before = stopped;
        for (; stopped < n; stopped++)
            runsc_kill_pid(h, container_id, tree[stopped], "STOP");
        if (stopped == before || n == RUNSC_KILL_MAX)
            break;
        /* Children forked while their parents were being stopped. */
        free(procs);
        procs = NULL;
        if (runsc_ps(h, container_id, &procs, &np) < 0)
            break;
    }
    for (size_t i = 0; i < n; i++)
        if (runsc_kill_pid(h, container_id, tree[i], "KILL") == 0)
            (*ret_killed)++;
    r = 0;
cleanup:
    free(procs);
    return r;
}
