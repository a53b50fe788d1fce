/* sandbox cp: files and directories into and out of a sandbox, streamed
 * through PUT and GET /v1/sandboxes/ID/files as tar (never held whole).
 * An upload is packed by the system's GNU tar (the user's own files); a
 * download is unpacked in process (client/untar.h), as data, not
 * instructions: only inside the destination, following no symlink, no
 * device or FIFO made, no setuid bit or owner kept, whatever the sandbox
 * answered. `-` is a tar stream on stdin or stdout, passed through as is. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <linux/limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "errors.h"
#include "fdutil.h"
#include "ids.h"
#include "jsonx.h"
#include "limits.h"
#include "spec.h"
#include "untar.h"

#define CP_PATH_MAX (SBX_FILES_PATH_MAX * 3 + 256) /* an escaped path in a URL */
/* tar --transform's delimiter: a byte no name we pass may hold. */
#define CP_DELIM    '\001'

/* One side of a copy: SANDBOX:/path, a local path, or "-". */
typedef struct cp_end {
    bool remote;
    bool stdio;
    char sandbox[CLI_ARG_ID_MAX];
    const char *path;
} cp_end_t;

/* "sbx_…:/path" and "NAME:/path" (a sandbox's name, as docker cp's
 * CONTAINER:PATH) are remote; anything else is local (write ./x:/y for a
 * local name of that shape). */
static void cp_parse(const char *arg, cp_end_t *ret)
{
    memset(ret, 0, sizeof *ret);
    ret->path = arg;
    if (strcmp(arg, "-") == 0) {
        ret->stdio = true;
        return;
    }
    const char *colon = strchr(arg, ':');
    size_t n = colon ? (size_t)(colon - arg) : 0;
    if (!colon || n == 0 || n >= sizeof ret->sandbox)
        return;
    char who[CLI_ARG_ID_MAX];
    memcpy(who, arg, n);
    who[n] = '\0';
    bool id = n > 4 && strncmp(who, "sbx_", 4) == 0;
    for (size_t i = 4; id && i < n; i++)
        if (!((who[i] >= 'a' && who[i] <= 'z') || (who[i] >= 'A' && who[i] <= 'Z') || (who[i] >= '0' && who[i] <= '9')))
            id = false;
    if (!id && !(colon[1] == '/' && spec_sandbox_name_ok(who)))
        return;
    memcpy(ret->sandbox, who, n + 1);
    ret->remote = true;
    ret->path = colon + 1;
}

static bool cp_printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return false;
    return true;
}

int cli_check_cp(cli_t *cli, opts_t *o)
{
    if (o->npos != 2)
        return cli_usage_error(cli->cmd, "needs SOURCE and DESTINATION (one of them SANDBOX:/path)");
    cp_end_t a, b;
    cp_parse(o->pos[0], &a);
    cp_parse(o->pos[1], &b);
    if (a.remote == b.remote)
        return cli_usage_error(cli->cmd, a.remote ? "both sides are in a sandbox: one must be local (or -)"
                                                  : "neither side is in a sandbox: write SANDBOX:/path for one");
    const cp_end_t *r = a.remote ? &a : &b, *l = a.remote ? &b : &a;
    if (r->path[0] != '/')
        return cli_usage_error(cli->cmd, "the sandbox's path must be absolute: %s:/path", r->sandbox);
    if (strlen(r->path) > SBX_FILES_PATH_MAX || !cp_printable(r->path))
        return cli_usage_error(cli->cmd, "the sandbox's path is too long or holds control characters");
    if (!l->stdio && (!*l->path || strlen(l->path) >= PATH_MAX || !cp_printable(l->path)))
        return cli_usage_error(cli->cmd, "the local path is empty, too long or holds control characters");
    if (o->n_excludes > 0 && (a.remote || a.stdio))
        return cli_usage_error(cli->cmd, "--exclude applies to an upload of a local file or directory");
    return 0;
}

/* ---- paths -------------------------------------------------------------- */

/* Splits path into its parent and last name (trailing slashes dropped):
 * "/a/b/" -> "/a", "b"; "b" -> ".", "b". SBX_EINVAL for "/" or "". */
static int cp_split(const char *path, char *parent, size_t pn, char *name, size_t nn)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    if (n == 0 || (n == 1 && path[0] == '/'))
        return SBX_EINVAL;
    size_t s = n;
    while (s > 0 && path[s - 1] != '/')
        s--;
    if (n - s >= nn || strncmp(path + s, ".", n - s) == 0 || (n - s == 2 && strncmp(path + s, "..", 2) == 0))
        return SBX_EINVAL;
    memcpy(name, path + s, n - s);
    name[n - s] = '\0';
    size_t p = s;
    while (p > 1 && path[p - 1] == '/')
        p--;
    if (p == 0)
        snprintf(parent, pn, ".");
    else
        snprintf(parent, pn, "%.*s", (int)p, path);
    return 0;
}

/* Appends s to buf escaped for a GNU tar --transform regex (basic) or
 * replacement. */
static void cp_escape(char *buf, size_t n, const char *s, bool regex)
{
    size_t l = strlen(buf);
    for (; *s && l + 3 < n; s++) {
        if (strchr(regex ? "\\.*[]^$" : "\\&", *s))
            buf[l++] = '\\';
        buf[l++] = *s;
    }
    buf[l] = '\0';
}

/* The two --transform expressions that rename the top member from to to
 * (and everything under it), leaving symlink targets alone. */
static void cp_transforms(const char *from, const char *to, char x1[], char x2[], size_t n)
{
    snprintf(x1, n, "s%c^", CP_DELIM);
    cp_escape(x1, n, from, true);
    snprintf(x1 + strlen(x1), n - strlen(x1), "$%c", CP_DELIM);
    cp_escape(x1, n, to, false);
    snprintf(x1 + strlen(x1), n - strlen(x1), "%crhS", CP_DELIM);
    snprintf(x2, n, "s%c^", CP_DELIM);
    cp_escape(x2, n, from, true);
    snprintf(x2 + strlen(x2), n - strlen(x2), "/%c", CP_DELIM);
    cp_escape(x2, n, to, false);
    snprintf(x2 + strlen(x2), n - strlen(x2), "/%crhS", CP_DELIM);
}

/* ---- the local tar (an upload's packing) -------------------------------- */

typedef struct cp_tar {
    pid_t pid;
    int fd;              /* our end of its stdout; -1 once closed */
} cp_tar_t;

/* Runs tar with argv, its stdout a pipe to us (its stdin in_fd when >= 0). */
static int cp_tar_start(char *const argv[], int in_fd, cp_tar_t *t)
{
    int p[2];
    t->pid = -1;
    t->fd = -1;
    if (pipe2(p, O_CLOEXEC) < 0)
        return SBX_EIO;
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return SBX_EIO;
    }
    if (pid == 0) {
        dup2(p[1], STDOUT_FILENO);
        if (in_fd >= 0)
            dup2(in_fd, STDIN_FILENO);
        fd_close_from(3);
        execvp("tar", argv);
        fprintf(stderr, "sandbox: cp: cannot run tar: %s\n", strerror(errno));
        _exit(127);
    }
    close(p[1]);
    t->pid = pid;
    t->fd = p[0];
    return 0;
}

/* Closes our end and waits: 0 when tar succeeded. */
static int cp_tar_finish(cp_tar_t *t)
{
    if (t->fd >= 0)
        close(t->fd);
    t->fd = -1;
    if (t->pid <= 0)
        return 0;
    int st = 0;
    while (waitpid(t->pid, &st, 0) < 0 && errno == EINTR)
        ;
    t->pid = -1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : SBX_EIO;
}

int cli_tar_pack(const char *dir, char *const *paths, size_t n, size_t max, unsigned char **ret, size_t *ret_len)
{
    *ret = NULL;
    *ret_len = 0;
    const char *tmpdir = getenv("TMPDIR");
    int list_fd = open(tmpdir && *tmpdir ? tmpdir : "/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    bool ok = list_fd >= 0;
    for (size_t i = 0; ok && i < n; i++)
        ok = write(list_fd, paths[i], strlen(paths[i]) + 1) == (ssize_t)(strlen(paths[i]) + 1);
    ok = ok && lseek(list_fd, 0, SEEK_SET) == 0;
    if (!ok) {
        if (list_fd >= 0)
            close(list_fd);
        return SBX_EIO;
    }
    char *argv[] = { "tar", "-c", "-z", "-f", "-", "-C", (char *)dir, "--null", "--verbatim-files-from", "-T", "-",
                     NULL };
    cp_tar_t t;
    int started = cp_tar_start(argv, list_fd, &t);
    close(list_fd);
    if (started < 0)
        return SBX_EIO;
    unsigned char *buf = malloc(max + 1);
    size_t have = 0;
    int rc = buf ? 0 : SBX_ENOMEM;
    while (rc == 0) {
        ssize_t r = read(t.fd, buf + have, max + 1 - have);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            rc = SBX_EIO;
        if (r <= 0)
            break;
        have += (size_t)r;
        if (have > max)
            rc = SBX_ETOOBIG;
    }
    if (rc != 0 && t.pid > 0)
        kill(t.pid, SIGTERM);
    if (cp_tar_finish(&t) != 0 && rc == 0)
        rc = SBX_EIO;
    if (rc != 0) {
        free(buf);
        return rc;
    }
    *ret = buf;
    *ret_len = have;
    return 0;
}

/* ---- an upload ---------------------------------------------------------- */

typedef struct cp_up {
    int fd;
    cp_tar_t *tar;       /* NULL: fd is stdin */
    bool tar_failed;
    char *head;          /* what cp_up_prefetch read, sent first */
    size_t head_len, head_off;
    bool head_is_all;    /* the source ended within it */
} cp_up_t;

/* A small upload (the usual file or two) is read whole before it is sent:
 * its size is known, so it goes with a Content-Length and without waiting
 * for 100 Continue, where a stream goes chunked. */
#define CP_PREFETCH_MAX (256 * 1024)

static long cp_up_read(void *ud, char *buf, size_t n);

/* Reads up to CP_PREFETCH_MAX bytes of u's source into u->head; the size
 * of the whole upload when the source ended within them, else -1. */
static int64_t cp_up_prefetch(cp_up_t *u)
{
    char *buf = malloc(CP_PREFETCH_MAX);
    size_t len = 0;
    int64_t size = -1;
    if (!buf)
        return -1;
    while (len < CP_PREFETCH_MAX) {
        long k = cp_up_read(u, buf + len, CP_PREFETCH_MAX - len);
        if (k < 0)
            break; /* the transfer's first read says so again */
        if (k == 0) {
            size = (int64_t)len;
            break;
        }
        len += (size_t)k;
    }
    /* set only now: cp_up_read serves the head once there is one */
    u->head = buf;
    u->head_len = len;
    u->head_is_all = size >= 0;
    return size;
}

static long cp_up_read(void *ud, char *buf, size_t n)
{
    cp_up_t *u = ud;
    if (u->head && u->head_off < u->head_len) {
        size_t k = u->head_len - u->head_off < n ? u->head_len - u->head_off : n;
        memcpy(buf, u->head + u->head_off, k);
        u->head_off += k;
        return (long)k;
    }
    if (u->head && u->head_is_all)
        return 0;
    if (u->tar_failed)
        return -1;
    for (;;) {
        ssize_t k = read(u->fd, buf, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1;
        /* A pack that ends badly must not look like a whole upload. */
        if (k == 0 && u->tar && cp_tar_finish(u->tar) < 0) {
            u->tar_failed = true;
            return -1;
        }
        return (long)k;
    }
}

/* /v1/sandboxes/SBX/files?<query>path=<path escaped> into url (query ""
 * or "k=v&"): 0, or SBX_ETOOBIG when it does not fit. */
static int cp_url(char *url, size_t n, const char *sbx, const char *query, const char *path)
{
    char *ep = httpc_escape(path);
    int rc = ep && cli_path(url, n, "/v1/sandboxes/", sbx, "/files?") == 0 ? 0 : SBX_ETOOBIG;
    if (rc == 0) {
        size_t l = strlen(url);
        int w = snprintf(url + l, n - l, "%spath=%s", query, ep);
        if (w < 0 || (size_t)w >= n - l)
            rc = SBX_ETOOBIG;
    }
    free(ep);
    return rc;
}

/* The sandbox path's type: "dir", "file", ... or "" when it does not
 * exist; an API error other than 404 is printed and returned. */
static int cp_remote_type(cli_t *cli, const char *sbx, const char *path, char *type, size_t tn)
{
    char url[CP_PATH_MAX];
    if (cp_url(url, sizeof url, sbx, "format=stat&", path) < 0)
        return cli_usage_error(cli->cmd, "path too long");
    httpc_response_t resp;
    int r = httpc_request(cli->http, "GET", url, NULL, NULL, 60000, &resp);
    type[0] = '\0';
    int rc = EXIT_OK;
    if (r == 0 && resp.status == 200) {
        const char *t = jsonx_get_str(jsonx_get_obj(resp.json, "stat"), "type");
        snprintf(type, tn, "%s", t ? t : "other");
    } else if (!(r == 0 && resp.status == 404)) {
        client_error_t e;
        client_error_decode(&cli->client, "GET", url, r, &resp, &e);
        rc = cli_call_failed(cli, "GET", url, &e);
    }
    httpc_response_release(&resp);
    return rc;
}

/* PUT the tar from u into dir of sandbox sbx; prints the answer. */
static int cp_put(cli_t *cli, const char *sbx, const char *dir, cp_up_t *u, const char *shown, bool quiet)
{
    char url[CP_PATH_MAX];
    if (cp_url(url, sizeof url, sbx, "", dir) < 0)
        return cli_usage_error(cli->cmd, "path too long");
    httpc_response_t resp;
    int64_t size = cp_up_prefetch(u);
    int r = httpc_transfer(cli->http, "PUT", url, size, cp_up_read, NULL, u, NULL, NULL, 0, &resp);
    free(u->head);
    u->head = NULL;
    int rc = EXIT_OK;
    if (u->tar_failed) {
        fprintf(stderr, "sandbox: cp: tar could not pack the source (see its message above); nothing was "
                        "reported as copied\n");
        rc = EXIT_OP_FAILED;
    } else if (r == 0 && resp.status == 200) {
        if (quiet) {
        } else if (cli->json) {
            cli_print_json(resp.json);
        } else {
            int64_t bytes = 0;
            jsonx_get_int(resp.json, "bytes", &bytes);
            printf("copied %lld bytes (tar) to %s:", (long long)bytes, sbx);
            cli_put_text(stdout, shown);
            fputc('\n', stdout);
        }
    } else {
        client_error_t e;
        client_error_decode(&cli->client, "PUT", url, r, &resp, &e);
        rc = cli_call_failed(cli, "PUT", url, &e);
    }
    httpc_response_release(&resp);
    return rc;
}

/* The files git would keep of the directory dir (tracked, and untracked
 * ones its ignore rules do not exclude), each as "name/PATH\0", in an
 * unlinked temporary file read from its start: tar's list (--null -T -).
 * -1 when dir is not in a git work tree or git cannot run: the caller
 * falls back to tar's own reading of .gitignore, as when git keeps nothing
 * of it. Names git lists that are gone from the folder (deleted, not
 * committed) are left out. */
static int cp_git_list(const char *dir, const char *name)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(p[1], STDOUT_FILENO);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0)
            dup2(devnull, STDERR_FILENO);
        fd_close_from(3);
        execlp("git", "git", "-C", dir, "ls-files", "-z", "--cached", "--others", "--exclude-standard", (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    const char *tmpdir = getenv("TMPDIR");
    int out = open(tmpdir && *tmpdir ? tmpdir : "/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    FILE *in = fdopen(p[0], "r");
    bool ok = out >= 0 && in;
    size_t kept = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while (ok && (n = getdelim(&line, &cap, '\0', in)) > 0) {
        char path[PATH_MAX];
        struct stat st;
        if (snprintf(path, sizeof path, "%s/%s", dir, line) >= (int)sizeof path || lstat(path, &st) < 0)
            continue;
        if (dprintf(out, "%s/%s", name, line) < 0 || write(out, "", 1) != 1)
            ok = false;
        kept++;
    }
    free(line);
    if (in)
        fclose(in);
    else
        close(p[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    /* Nothing kept: the folder is one git ignores (a build output): its
     * rules are not the folder's own, tar's reading applies. */
    if (!ok || kept == 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || lseek(out, 0, SEEK_SET) != 0) {
        if (out >= 0)
            close(out);
        return -1;
    }
    return out;
}

int cli_upload(cli_t *cli, const char *local, const char *sbx, const char *dest, bool into_existing_dir,
               bool quiet, const cli_upload_filter_t *f)
{
    char lparent[PATH_MAX], lname[NAME_MAX + 1], dparent[SBX_FILES_PATH_MAX + 1], dname[NAME_MAX + 1];
    char resolved[PATH_MAX];
    struct stat st;
    /* "." or "dir/..": the directory it names, by its own name. */
    size_t ll = strlen(local);
    while (ll > 1 && local[ll - 1] == '/')
        ll--;
    if ((ll == 1 && local[0] == '.') || (ll >= 2 && strncmp(local + ll - 2, "/.", 2) == 0) ||
        (ll == 2 && strncmp(local, "..", 2) == 0) || (ll >= 3 && strncmp(local + ll - 3, "/..", 3) == 0)) {
        if (!realpath(local, resolved)) {
            fprintf(stderr, "sandbox: %s: %s: %s\n", cli->cmd, local, strerror(errno));
            return EXIT_OP_FAILED;
        }
        local = resolved;
    }
    if (cp_split(local, lparent, sizeof lparent, lname, sizeof lname) < 0)
        return cli_usage_error(cli->cmd, "cannot copy %s: name a file or directory", local);
    if (lstat(local, &st) < 0) {
        fprintf(stderr, "sandbox: %s: %s: %s\n", cli->cmd, local, strerror(errno));
        return EXIT_OP_FAILED;
    }
    char type[16] = "";
    int rc = into_existing_dir ? cp_remote_type(cli, sbx, dest, type, sizeof type) : 0;
    if (rc != 0)
        return rc;
    if (strcmp(type, "dir") == 0) {
        /* An existing directory: the copy goes inside it, as docker cp does. */
        snprintf(dparent, sizeof dparent, "%s", dest);
        snprintf(dname, sizeof dname, "%s", lname);
    } else if (cp_split(dest, dparent, sizeof dparent, dname, sizeof dname) < 0) {
        return cli_usage_error(cli->cmd, "cannot copy onto %s: name a file or directory in the sandbox", dest);
    }
    char x1[3 * NAME_MAX + 32], x2[3 * NAME_MAX + 32];
    cp_transforms(lname, dname, x1, x2, sizeof x1);
    /* tar -c -f - -C PARENT [--exclude-vcs --exclude-vcs-ignores] [--exclude=P]... --transform X1 --transform X2
     * -- NAME */
    char *argv[16 + 2 * CLI_EXCLUDES_MAX];
    char excl[CLI_EXCLUDES_MAX][CLI_EXCLUDE_MAX_BYTES + 16];
    int ac = 0;
    /* A directory in a git work tree: what git keeps of it (its own ignore
     * rules, exactly); elsewhere tar's reading of .gitignore files (which
     * does not know a pattern ending in '/'). */
    int list_fd = f && f->vcs && S_ISDIR(st.st_mode) ? cp_git_list(local, lname) : -1;
    argv[ac++] = "tar", argv[ac++] = "-c", argv[ac++] = "-f", argv[ac++] = "-", argv[ac++] = "-C";
    argv[ac++] = lparent;
    if (f && f->vcs && list_fd < 0)
        argv[ac++] = "--exclude-vcs", argv[ac++] = "--exclude-vcs-ignores";
    for (int i = 0; f && i < f->n && i < CLI_EXCLUDES_MAX; i++) {
        snprintf(excl[i], sizeof excl[i], "--exclude=%s", f->patterns[i]);
        argv[ac++] = excl[i];
    }
    argv[ac++] = "--transform", argv[ac++] = x1, argv[ac++] = "--transform", argv[ac++] = x2;
    if (list_fd >= 0) {
        argv[ac++] = "--null", argv[ac++] = "--verbatim-files-from", argv[ac++] = "--no-recursion";
        argv[ac++] = "-T", argv[ac++] = "-";
    } else {
        argv[ac++] = "--", argv[ac++] = lname;
    }
    argv[ac] = NULL;
    cp_tar_t t;
    int started = cp_tar_start(argv, list_fd, &t);
    if (list_fd >= 0)
        close(list_fd);
    if (started < 0) {
        fprintf(stderr, "sandbox: %s: cannot start tar: %s\n", cli->cmd, strerror(errno));
        return EXIT_OP_FAILED;
    }
    cp_up_t u = { .fd = t.fd, .tar = &t };
    char shown[SBX_FILES_PATH_MAX + NAME_MAX + 2];
    snprintf(shown, sizeof shown, "%s%s%s", dparent, strcmp(dparent, "/") == 0 ? "" : "/", dname);
    rc = cp_put(cli, sbx, dparent, &u, shown, quiet);
    if (t.pid > 0) {
        kill(t.pid, SIGTERM);
        cp_tar_finish(&t);
    }
    return rc;
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int cli_upload_contents(cli_t *cli, const char *dir, const char *sbx, const char *dest)
{
    /* dir's entries, in name order, as tar's list (--null -T -) in an
     * unlinked temporary file: no argv bound, no name taken for a flag. */
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "sandbox: %s: %s: %s\n", cli->cmd, dir, strerror(errno));
        return EXIT_OP_FAILED;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    bool ok = true;
    struct dirent *e;
    while (ok && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 32;
            char **nn = realloc(names, cap * sizeof *nn);
            ok = nn != NULL;
            names = ok ? nn : names;
        }
        if (ok && !(names[n++] = strdup(e->d_name)))
            ok = false, n--;
    }
    closedir(d);
    int rc = EXIT_OK, list_fd = -1;
    if (ok && n > 0) {
        qsort(names, n, sizeof *names, name_cmp);
        const char *tmpdir = getenv("TMPDIR");
        list_fd = open(tmpdir && *tmpdir ? tmpdir : "/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        for (size_t i = 0; ok && i < n; i++)
            ok = list_fd >= 0 && write(list_fd, names[i], strlen(names[i]) + 1) == (ssize_t)(strlen(names[i]) + 1);
        ok = ok && lseek(list_fd, 0, SEEK_SET) == 0;
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (!ok) {
        fprintf(stderr, "sandbox: %s: cannot list %s for tar: %s\n", cli->cmd, dir, strerror(errno));
        if (list_fd >= 0)
            close(list_fd);
        return EXIT_OP_FAILED;
    }
    if (n == 0)
        return EXIT_OK; /* nothing to send: an empty upload is refused */
    char *argv[] = { "tar", "-c", "-f", "-", "-C", (char *)dir, "--null", "--verbatim-files-from", "-T", "-", NULL };
    cp_tar_t t;
    int started = cp_tar_start(argv, list_fd, &t);
    close(list_fd);
    if (started < 0) {
        fprintf(stderr, "sandbox: %s: cannot start tar: %s\n", cli->cmd, strerror(errno));
        return EXIT_OP_FAILED;
    }
    cp_up_t u = { .fd = t.fd, .tar = &t };
    rc = cp_put(cli, sbx, dest, &u, dest, true);
    if (t.pid > 0) {
        kill(t.pid, SIGTERM);
        cp_tar_finish(&t);
    }
    return rc;
}

/* ---- a download --------------------------------------------------------- */

typedef struct cp_down {
    cli_t *cli;
    int fd;              /* stdout (the raw tar), when untar_opts is NULL */
    const untar_opts_t *untar_opts;   /* the unpacking to start at the first byte */
    untar_t *untar;
    int64_t bytes;
    bool write_failed;   /* stdout */
    bool refused;        /* the unpacking failed (untar_error) */
} cp_down_t;

static int cp_down_write(void *ud, const char *data, size_t n)
{
    cp_down_t *d = ud;
    if (d->untar_opts) {
        if (!d->untar && untar_new(d->untar_opts, &d->untar) < 0) {
            d->write_failed = true;
            return -1;
        }
        d->bytes += (int64_t)n;
        if (untar_push(d->untar, data, n) < 0) {
            d->refused = true;
            return -1;
        }
        return 0;
    }
    while (n > 0) {
        ssize_t k = write(d->fd, data, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            d->write_failed = true;
            return -1;
        }
        data += k;
        n -= (size_t)k;
        d->bytes += k;
    }
    return 0;
}

/* Why a download of path from sbx ended early, as the controller recorded
 * it (the files.downloaded event's error): into why, "" when it says none. */
static void cp_down_why(cli_t *cli, const char *sbx, const char *path, char *why, size_t n)
{
    char url[CP_PATH_MAX];
    why[0] = '\0';
    if (cli_path(url, sizeof url, "/v1/events?kind=files.downloaded&tail=5&sandbox=", sbx, "") < 0)
        return;
    httpc_response_t resp;
    if (httpc_request(cli->http, "GET", url, NULL, NULL, 10000, &resp) == 0 && resp.status == 200) {
        json_object *evs = jsonx_get_arr(resp.json, "events");
        for (size_t i = evs ? json_object_array_length(evs) : 0; i > 0 && !why[0]; i--) {
            json_object *data = jsonx_get_obj(json_object_array_get_idx(evs, i - 1), "data");
            const char *p = jsonx_get_str(data, "path"), *e = jsonx_get_str(data, "error");
            if (p && e && strcmp(p, path) == 0)
                snprintf(why, n, "%s", e);
        }
    }
    httpc_response_release(&resp);
}

static int cp_get(cli_t *cli, const cp_end_t *src, const cp_end_t *dst)
{
    char lparent[PATH_MAX], lname[NAME_MAX + 1], sparent[SBX_FILES_PATH_MAX + 1], sname[NAME_MAX + 1];
    cp_down_t d = { .cli = cli, .fd = STDOUT_FILENO };
    untar_opts_t uo = { .dir_fd = -1, .from = sname, .to = lname, .warn = stderr };
    if (!dst->stdio) {
        if (cp_split(src->path, sparent, sizeof sparent, sname, sizeof sname) < 0)
            return cli_usage_error(cli->cmd, "cannot copy %s: name a file or directory in the sandbox", src->path);
        struct stat st;
        if (stat(dst->path, &st) == 0 && S_ISDIR(st.st_mode)) {
            /* An existing directory: the copy goes inside it. */
            snprintf(lparent, sizeof lparent, "%s", dst->path);
            snprintf(lname, sizeof lname, "%s", sname);
        } else if (cp_split(dst->path, lparent, sizeof lparent, lname, sizeof lname) < 0) {
            return cli_usage_error(cli->cmd, "cannot copy onto %s: name a file or directory", dst->path);
        }
        /* The user's own path is theirs to follow; below it nothing is. */
        uo.dir_fd = open(lparent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (uo.dir_fd < 0) {
            fprintf(stderr, "sandbox: cp: %s: %s\n", lparent, strerror(errno));
            return EXIT_OP_FAILED;
        }
        d.untar_opts = &uo;
    }
    char url[CP_PATH_MAX];
    if (cp_url(url, sizeof url, src->sandbox, "", src->path) < 0) {
        if (uo.dir_fd >= 0)
            close(uo.dir_fd);
        return cli_usage_error(cli->cmd, "path too long");
    }
    httpc_response_t resp;
    char *stat_hdr = NULL;   /* a 200 download's head carries it: the answer began */
    int r = httpc_transfer(cli->http, "GET", url, -1, NULL, cp_down_write, &d, "X-Sandbox-Stat", &stat_hdr, 0, &resp);
    bool began = resp.status == 200 || stat_hdr != NULL;
    free(stat_hdr);
    int rc = EXIT_OK;
    if (r == 0 && resp.status == 200 && d.untar && untar_finish(d.untar) < 0)
        d.refused = true;
    if (r == 0 && resp.status == 200 && !d.write_failed && !d.refused && (d.untar || !d.untar_opts)) {
        if (cli->json) {
            json_object *o = json_object_new_object();
            jsonx_add(o, "sandbox_id", json_object_new_string(src->sandbox));
            jsonx_add(o, "path", json_object_new_string(src->path));
            jsonx_add(o, "bytes", json_object_new_int64(d.bytes));
            if (!dst->stdio)
                cli_print_json(o);
            json_object_put(o);
        } else if (!dst->stdio) {
            printf("copied %lld bytes (tar) from %s:", (long long)d.bytes, src->sandbox);
            cli_put_text(stdout, src->path);
            fputc('\n', stdout);
        }
    } else if (d.refused) {
        fprintf(stderr, "sandbox: cp: ");
        cli_put_text(stderr, untar_error(d.untar));
        fprintf(stderr, "; the copy stopped there (what was written before it stays)\n");
        rc = EXIT_OP_FAILED;
    } else if (d.write_failed) {
        fprintf(stderr, "sandbox: cp: %s\n", dst->stdio ? "cannot write to stdout" : "out of memory");
        rc = EXIT_OP_FAILED;
    } else if (r == 0 && resp.status == 200) {
        fprintf(stderr, "sandbox: cp: the copy of ");
        cli_put_text(stderr, src->path);
        fprintf(stderr, " is empty: nothing was written\n");
        rc = EXIT_OP_FAILED;
    } else if (r < 0 && began) {
        char why[600];
        cp_down_why(cli, src->sandbox, src->path, why, sizeof why);
        fprintf(stderr, "sandbox: cp: the copy of ");
        cli_put_text(stderr, src->path);
        fprintf(stderr, " ended early (");
        cli_put_text(stderr, why[0] ? why : resp.error[0] ? resp.error : "the connection closed");
        fprintf(stderr, "); what was written is incomplete\n");
        rc = EXIT_API;
    } else {
        client_error_t e;
        client_error_decode(&cli->client, "GET", url, r, &resp, &e);
        rc = cli_call_failed(cli, "GET", url, &e);
    }
    httpc_response_release(&resp);
    untar_free(d.untar);
    if (uo.dir_fd >= 0)
        close(uo.dir_fd);
    return rc;
}

int cli_tar_out(cli_t *cli, const char *sbx, const char *path, int fd)
{
    cp_end_t a = { .remote = true, .path = path }, b = { .stdio = true, .path = "-" };
    snprintf(a.sandbox, sizeof a.sandbox, "%s", sbx);
    signal(SIGPIPE, SIG_IGN);
    int saved = -1;
    if (fd != STDOUT_FILENO) {
        fflush(stdout);
        saved = dup(STDOUT_FILENO);
        if (saved < 0 || dup2(fd, STDOUT_FILENO) < 0) {
            if (saved >= 0)
                close(saved);
            fprintf(stderr, "sandbox: cannot write the tar: %s\n", strerror(errno));
            return EXIT_OP_FAILED;
        }
    }
    int rc = cp_get(cli, &a, &b);
    if (saved >= 0) {
        dup2(saved, STDOUT_FILENO);
        close(saved);
    }
    return rc;
}

int cli_tar_in(cli_t *cli, int fd, const char *sbx, const char *dir)
{
    cp_up_t u = { .fd = fd };
    signal(SIGPIPE, SIG_IGN);
    return cp_put(cli, sbx, dir, &u, dir, true);
}

int cli_cmd_cp(cli_t *cli, opts_t *o)
{
    cp_end_t a, b;
    cp_parse(o->pos[0], &a);
    cp_parse(o->pos[1], &b);
    signal(SIGPIPE, SIG_IGN);
    if (a.remote)
        return cp_get(cli, &a, &b);
    if (!a.stdio)
        return cli_upload(cli, a.path, b.sandbox, b.path, true, false,
                          &(cli_upload_filter_t){ .patterns = o->excludes, .n = o->n_excludes });
    cp_up_t u = { .fd = STDIN_FILENO };
    return cp_put(cli, b.sandbox, b.path, &u, b.path, false);
}
