/* worker/vmm's small helpers: subprocesses, paths, files, directory removal. */
#include "vmm_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "errors.h"
#include "fdutil.h"

void vmm__why(char *why, const char *fmt, ...)
{
    if (why == NULL)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, VMM_WHY_MAX, fmt, ap);
    va_end(ap);
}

uint64_t vmm__fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

long long vmm__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int vmm__path(char *out, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, cap, fmt, ap);
    va_end(ap);
    return n < 0 || (size_t)n >= cap ? SBX_ETOOBIG : 0;
}

int vmm__id_ok(const char *id)
{
    size_t n = id ? strlen(id) : 0;
    if (n == 0 || n >= VMM_ID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
            return 0;
    }
    return 1;
}

int vmm__cache_dir(const vmm_config_t *cfg, char *out, size_t cap)
{
    return vmm__path(out, cap, "%s/cache", cfg->state_dir);
}

int vmm__vm_dir(const vmm_config_t *cfg, const char *id, char *out, size_t cap)
{
    if (!vmm__id_ok(id))
        return SBX_EINVAL;
    return vmm__path(out, cap, "%s/vms/%s", cfg->state_dir, id);
}

int vmm__run(const char *const *argv, int in_fd, int out_fd, long timeout_ms, char *why)
{
    int cap[2] = {-1, -1}, rc = SBX_ERUNTIME;
    char out[2048];
    size_t nout = 0;
    if (pipe2(cap, O_CLOEXEC) != 0) {
        vmm__why(why, "pipe: %s", strerror(errno));
        return SBX_EIO;
    }
    pid_t pid = fork();
    if (pid < 0) {
        vmm__why(why, "fork: %s", strerror(errno));
        close(cap[0]);
        close(cap[1]);
        return SBX_EIO;
    }
    if (pid == 0) {
        int nul = open("/dev/null", O_RDWR);
        dup2(in_fd >= 0 ? in_fd : nul, 0);
        dup2(out_fd >= 0 ? out_fd : cap[1], 1);
        dup2(cap[1], 2);
        fd_close_from(3);
        execvp(argv[0], (char *const *)argv);
        dprintf(2, "cannot run: %s\n", strerror(errno));
        _exit(127);
    }
    close(cap[1]);
    long long deadline = timeout_ms > 0 ? vmm__now_ms() + timeout_ms : 0;
    int timed_out = 0;
    for (;;) {
        struct pollfd pf = {.fd = cap[0], .events = POLLIN};
        int wait = deadline ? (int)(deadline - vmm__now_ms()) : -1;
        if (deadline && wait <= 0) {
            timed_out = 1;
            kill(pid, SIGKILL);
            break;
        }
        int pr = poll(&pf, 1, wait);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr == 0)
            continue;
        char buf[1024];
        ssize_t n = read(cap[0], buf, sizeof(buf));
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n; i++) { /* keep the tail */
            if (nout == sizeof(out) - 1) {
                memmove(out, out + 1024, nout - 1024);
                nout -= 1024;
            }
            out[nout++] = buf[i];
        }
    }
    close(cap[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    out[nout] = '\0';
    while (nout > 0 && (out[nout - 1] == '\n' || out[nout - 1] == ' '))
        out[--nout] = '\0';
    char *last = strrchr(out, '\n');
    last = last ? last + 1 : out;
    if (timed_out) {
        vmm__why(why, "%s: timed out after %ld ms", argv[0], timeout_ms);
        rc = SBX_ETIMEOUT;
    } else if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
        rc = 0;
    } else if (WIFEXITED(st)) {
        vmm__why(why, "%s: exit %d: %s", argv[0], WEXITSTATUS(st), last);
    } else {
        vmm__why(why, "%s: signal %d", argv[0], WTERMSIG(st));
    }
    return rc;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)ftw;
    int rc = flag == FTW_DP ? rmdir(path) : unlink(path);
    return rc != 0 && errno != ENOENT ? -1 : 0;
}

int vmm__rm_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -1;
    return nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

int vmm__write_file(const char *path, const void *data, size_t n, mode_t mode)
{
    char tmp[VMM_PATH_MAX];
    if (vmm__path(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) != 0)
        return SBX_ETOOBIG;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        return SBX_EIO;
    const char *p = data;
    size_t left = n;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            close(fd);
            unlink(tmp);
            return SBX_EIO;
        }
        p += w;
        left -= (size_t)w;
    }
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        unlink(tmp);
        return SBX_EIO;
    }
    return 0;
}

long vmm__read_file(const char *path, char *buf, size_t cap)
{
    /* a VM's directory is its QEMU's user's: no link, no FIFO to hang on */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    size_t n = 0;
    while (n + 1 < cap) {
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    return (long)n;
}
