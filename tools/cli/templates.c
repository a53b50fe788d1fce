/* sandbox templates list, get, delete and build (docs/templates.md). build
 * is not an API call but a composition of calls the API has, made here: a
 * build sandbox (create), each Dockerfile instruction as an exec or a file
 * upload in it, a snapshot of it as the template's next version, and its
 * delete. The Dockerfile is read, parsed (dockerfile.c) and its COPY
 * sources found by the check, before any call: a Dockerfile the build
 * cannot run creates nothing. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <json-c/json.h>
#include <linux/limits.h>
#include <signal.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "b64.h"
#include "cli.h"
#include "client.h"
#include "dockerfile.h"
#include "errors.h"
#include "ids.h"
#include "jsonx.h"
#include "limits.h"
#include "spec.h"
#include "timeutil.h"
#include "utf8.h"

#define TPL_POST_ATTEMPTS     3          /* a POST whose answer was lost, sent again with its key */
#define TPL_DELETE_WAIT_S     120        /* the build sandbox's delete, waited for at most */
#define TPL_EXIT_INTERRUPTED  130        /* Ctrl-C, as a shell reports SIGINT */
#define TPL_HEADER_TEXT_MAX   300        /* bytes of an instruction a step's header line shows */
/* What one upload may carry unless the operator set less: the server's
 * files_max_bytes default (docs/api.md, Files). */
#define TPL_UPLOAD_MAX        (2LL * 1024 * 1024 * 1024)

bool cli_template_ref_ok(const char *ref)
{
    char name[SBX_SNAPSHOT_NAME_MAX + 1];
    const char *colon = strrchr(ref, ':');
    size_t n = colon ? (size_t)(colon - ref) : strlen(ref);
    if (n == 0 || n >= sizeof name)
        return false;
    memcpy(name, ref, n);
    name[n] = '\0';
    if (!spec_snapshot_name_ok(name))
        return false;
    if (!colon)
        return true;
    size_t vl = strlen(colon + 1);
    return vl > 0 && vl <= 9 && strspn(colon + 1, "0123456789") == vl && colon[1] != '0';
}

/* ---------------------------------------------------------------- build: what the check found */

/* One thing a COPY uploads: a file (or symlink, copied as one) that becomes
 * the sandbox path dest, or a directory whose entries go into dest. */
typedef struct copy_item {
    char *local;
    char *rel;            /* local as the context names it ("." for the context) */
    bool is_dir;
    char *dest;
    bool into_existing;   /* a file onto a path not ending in /: inside it when it is a directory */
} copy_item_t;

/* A COPY (or ADD) step: the directory to make first, then its items. */
typedef struct copy_plan {
    char *mkdir;
    copy_item_t *items;
    size_t n;
} copy_plan_t;

static struct {
    dockerfile_t *df;
    const char *file;         /* as given (messages name it) */
    char *context;            /* realpath of CONTEXT */
    copy_plan_t *plans;       /* one per step (COPY steps only have items) */
} build;

/* Set by the signal handler: a lock-free atomic_int is async-signal-safe. */
static atomic_int build_interrupted;

static void on_signal(int sig)
{
    (void)sig;
    build_interrupted = 1;
}

static bool interrupted(void *ud)
{
    (void)ud;
    return atomic_load(&build_interrupted) != 0;
}

/* "sandbox: templates build: " and the message, on stderr. */
__attribute__((format(printf, 1, 2))) static void say(const char *fmt, ...)
{
    va_list ap;
    fputs("sandbox: templates build: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static int64_t left_s(int64_t deadline)
{
    int64_t ms = deadline - time_mono_ms();
    return ms > 0 ? (ms + 999) / 1000 : 0;
}

/* ---------------------------------------------------------------- build: the check */

/* The bytes a tar of path takes (headers, content padded to blocks),
 * summed by nftw. */
static int64_t tar_bytes;

static int count_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)flag;
    (void)ftw;
    int64_t size = S_ISREG(st->st_mode) ? (int64_t)st->st_size : 0;
    int64_t names = strlen(path) > 99 ? 1024 : 0; /* a long name's extra header */
    tar_bytes += 512 + names + (size + 511) / 512 * 512;
    return 0;
}

static bool inside(const char *real, const char *root)
{
    size_t n = strlen(root);
    return strcmp(root, "/") == 0 || (strncmp(real, root, n) == 0 && (real[n] == '\0' || real[n] == '/'));
}

/* "FILE:LINE: INSTRUCTION " and the problem; EXIT_USAGE. */
__attribute__((format(printf, 2, 3))) static int step_error(const df_step_t *s, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "sandbox: templates build: %s:%d: %s ", build.file, s->line, s->instruction);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return EXIT_USAGE;
}

static char *join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s%s%s", a, strcmp(a, "/") == 0 ? "" : "/", b);
    return p;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* One local path a COPY names (a source, or a match of one): checked to be
 * in the context (the directories above it are followed, the path itself
 * is not: a symlink is copied as one), counted, added to the plan. */
static int plan_path(const df_step_t *s, copy_plan_t *pl, const char *path, const char *shown, bool as_dir_dest,
                     int64_t *bytes)
{
    struct stat st;
    char real[PATH_MAX], parent[PATH_MAX];
    if (lstat(path, &st) < 0)
        return step_error(s, "%s: %s in the build context %s", shown, strerror(errno), build.context);
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode))
        return step_error(s, "%s: not a file, a directory or a symlink", shown);
    snprintf(parent, sizeof parent, "%s", path);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent)
        *slash = '\0';
    if (!realpath(S_ISDIR(st.st_mode) ? path : parent, real) || !inside(real, build.context))
        return step_error(s, "%s: leaves the build context %s (through a symlink)", shown, build.context);
    tar_bytes = 0;
    if (S_ISDIR(st.st_mode)) {
        if (nftw(real, count_entry, 64, FTW_PHYS) != 0)
            return step_error(s, "%s: cannot read it: %s", shown, strerror(errno));
    } else {
        struct FTW f = { 0 };
        count_entry(path, &st, FTW_F, &f);
    }
    *bytes += tar_bytes;
    copy_item_t *items = realloc(pl->items, (pl->n + 1) * sizeof *items);
    if (!items)
        return EXIT_API;
    pl->items = items;
    copy_item_t *it = &pl->items[pl->n++];
    *it = (copy_item_t){ .is_dir = S_ISDIR(st.st_mode) };
    it->local = strdup(S_ISDIR(st.st_mode) ? real : path);
    it->rel = strdup(shown);
    /* a directory's entries go into the destination; a file into it when
     * it is a directory, else it becomes the destination */
    it->dest = it->is_dir || !as_dir_dest ? strdup(s->dest) : join(s->dest, base_name(shown));
    it->into_existing = !it->is_dir && !as_dir_dest;
    return it->local && it->rel && it->dest ? 0 : EXIT_API;
}

/* The plan of a COPY: its sources found in the context (a source with * ? [
 * is a pattern: each match), the directory to make, the size bound. */
static int plan_copy(const df_step_t *s, copy_plan_t *pl)
{
    char **paths = NULL, **shown = NULL;
    size_t n = 0;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < s->nsrcs; i++) {
        char *full = strcmp(s->srcs[i], ".") == 0 ? strdup(build.context) : join(build.context, s->srcs[i]);
        if (!full)
            return EXIT_API;
        glob_t g = { 0 };
        bool pattern = strpbrk(s->srcs[i], "*?[") != NULL;
        size_t k = 0;
        if (pattern && glob(full, 0, NULL, &g) != 0) {
            rc = step_error(s, "%s: no file in the build context %s matches it", s->srcs[i], build.context);
        }
        for (size_t j = 0; rc == 0 && j < (pattern ? g.gl_pathc : 1); j++) {
            const char *p = pattern ? g.gl_pathv[j] : full;
            const char *b = base_name(p);
            if (pattern && (strcmp(b, ".") == 0 || strcmp(b, "..") == 0))
                continue; /* ".*" matches them: never the context's parent */
            char **np = realloc(paths, (n + 1) * sizeof *np), **ns = np ? realloc(shown, (n + 1) * sizeof *ns) : NULL;
            if (np)
                paths = np;
            if (ns)
                shown = ns;
            if (!np || !ns || !(paths[n] = strdup(p)) || !(shown[n] = strdup(p + strlen(build.context) +
                                                                              (strcmp(p, build.context) ? 1 : 0)))) {
                rc = EXIT_API;
                break;
            }
            if (!shown[n][0]) {
                free(shown[n]);
                shown[n] = strdup(".");
            }
            n++;
            k++;
        }
        if (rc == 0 && pattern && k == 0)
            rc = step_error(s, "%s: no file in the build context %s matches it", s->srcs[i], build.context);
        if (pattern)
            globfree(&g);
        free(full);
    }
    bool as_dir = s->dest_dir || n > 1;
    int64_t bytes = 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = plan_path(s, pl, paths[i], shown[i], as_dir, &bytes);
    if (rc == 0) {
        bool one_file = pl->n == 1 && !pl->items[0].is_dir && !as_dir;
        if (one_file) {
            char *d = strdup(s->dest), *slash = d ? strrchr(d, '/') : NULL;
            if (slash)
                *(slash == d ? slash + 1 : slash) = '\0';
            pl->mkdir = d;
        } else {
            pl->mkdir = strdup(s->dest);
        }
        if (!pl->mkdir)
            rc = EXIT_API;
    }
    if (rc == 0 && bytes > TPL_UPLOAD_MAX)
        rc = step_error(s, "sources are %lld bytes as a tar: an upload carries at most %lld (files_max_bytes' "
                           "default); copy less, or fetch it with RUN", (long long)bytes, (long long)TPL_UPLOAD_MAX);
    for (size_t i = 0; i < n; i++) {
        free(paths[i]);
        free(shown[i]);
    }
    free(paths);
    free(shown);
    return rc;
}

/* Reads the Dockerfile (at most DF_TEXT_MAX bytes): malloc'd, or NULL
 * (said on stderr). */
static char *read_dockerfile(const char *path, size_t *ret_len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        say("cannot read %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        say("cannot read %s: not a file", path);
        close(fd);
        return NULL;
    }
    char *buf = malloc(DF_TEXT_MAX + 2);
    size_t n = 0;
    while (buf && n <= DF_TEXT_MAX) {
        ssize_t k = read(fd, buf + n, DF_TEXT_MAX + 1 - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            if (k < 0) {
                say("cannot read %s: %s", path, strerror(errno));
                free(buf);
                buf = NULL;
            }
            break;
        }
        n += (size_t)k;
    }
    close(fd);
    if (buf && n > DF_TEXT_MAX) {
        say("%s is longer than %d bytes: not a Dockerfile it takes", path, DF_TEXT_MAX);
        free(buf);
        return NULL;
    }
    if (buf)
        buf[n] = '\0';
    *ret_len = n;
    return buf;
}

static int check_build(cli_t *cli, opts_t *o)
{
    if (o->npos < 2)
        return cli_usage_error(cli->cmd, "build needs a template NAME: sandbox templates build NAME -f DOCKERFILE "
                                         "[CONTEXT]");
    if (o->server_build && o->keep_build_sandbox)
        return cli_usage_error(cli->cmd, "--keep-build-sandbox goes with a build this command drives, not --server");
    if (o->network && strcmp(o->network, "none") != 0 && strcmp(o->network, "restricted") != 0 &&
        strcmp(o->network, "open") != 0)
        return cli_usage_error(cli->cmd, "--network: '%s' is not one of none, restricted, open", o->network);
    if (o->isolation && strcmp(o->isolation, "container") != 0 && strcmp(o->isolation, "gvisor") != 0 &&
        strcmp(o->isolation, "microvm") != 0)
        return cli_usage_error(cli->cmd, "--isolation: '%s' is not one of container, gvisor, microvm", o->isolation);
    if (!spec_snapshot_name_ok(o->pos[1]))
        return cli_usage_error(cli->cmd, "'%.80s' is not a template name (1 to %d letters, digits, _, . or -, "
                                         "starting with a letter or digit, not snp_... or sbx_...)",
                               o->pos[1], SBX_SNAPSHOT_NAME_MAX);
    const char *ctx = o->npos > 2 ? o->pos[2] : ".";
    static char deffile[PATH_MAX];
    char real[PATH_MAX];
    struct stat st;
    if (!realpath(ctx, real))
        return cli_usage_error(cli->cmd, "CONTEXT %s: %s", ctx, strerror(errno));
    if (stat(real, &st) < 0 || !S_ISDIR(st.st_mode))
        return cli_usage_error(cli->cmd, "CONTEXT %s is not a directory", ctx);
    build.context = strdup(real);
    if (!o->file)
        snprintf(deffile, sizeof deffile, "%s/Dockerfile", ctx);
    build.file = o->file ? o->file : deffile;
    size_t len = 0;
    char *text = read_dockerfile(build.file, &len);
    if (!text || !build.context) {
        free(text);
        return EXIT_USAGE;
    }
    /* --build-arg K=V..., as the parser takes them */
    size_t nargs = o->build_args ? (size_t)json_object_object_length(o->build_args) : 0, i = 0;
    df_kv_t *args = calloc(nargs + 1, sizeof *args);
    if (!args) {
        free(text);
        return EXIT_API;
    }
    if (o->build_args) {
        json_object_object_foreach(o->build_args, k, v) {
            args[i].key = k;
            args[i++].value = (char *)json_object_get_string(v);
        }
    }
    char err[1024];
    int r = dockerfile_parse(build.file, text, len, args, nargs, &build.df, err, sizeof err);
    free(args);
    free(text);
    if (r < 0) {
        say("%s", err);
        return r == SBX_ENOMEM ? EXIT_API : EXIT_USAGE;
    }
    build.plans = calloc(build.df->nsteps + 1, sizeof *build.plans);
    if (!build.plans)
        return EXIT_API;
    for (size_t k = 0; k < build.df->nsteps; k++) {
        if (build.df->steps[k].kind != DF_STEP_COPY)
            continue;
        int rc = plan_copy(&build.df->steps[k], &build.plans[k]);
        if (rc)
            return rc;
    }
    for (size_t k = 0; k < build.df->nnotes; k++)
        say("%s", build.df->notes[k]);
    return 0;
}

int cli_check_templates(cli_t *cli, opts_t *o)
{
    const char *sub = o->npos > 0 ? o->pos[0] : "";
    bool is_build = strcmp(sub, "build") == 0;
    if (o->npos > 0 && !is_build &&
        (o->file || o->build_args || o->network || o->isolation || o->untrusted_repo || o->cpu_millis.set ||
         o->memory_mib.set || o->disk_mib.set || o->timeout.set || o->keep_build_sandbox || o->server_build))
        return cli_usage_error(cli->cmd, "the build flags (-f, --build-arg, --network, --timeout, ...) go with build");
    if (o->npos > 0 && o->quiet && strcmp(sub, "list") != 0)
        return cli_usage_error(cli->cmd, "-q goes with list");
    if (o->npos > 0 && o->version.set && strcmp(sub, "delete") != 0 && strcmp(sub, "logs") != 0)
        return cli_usage_error(cli->cmd, "--version goes with delete and logs");
    int rc = cli_check_subcommand(cli, o, "build, builds, cancel, list, get, logs or delete");
    if (rc >= 0)
        return rc;
    if (is_build)
        return check_build(cli, o);
    bool builds = strcmp(sub, "builds") == 0;
    if (strcmp(sub, "cancel") == 0 && (o->npos != 3 || !ids_valid("bld", o->pos[2])))
        return cli_usage_error(cli->cmd, "cancel needs a template NAME and a BUILD id (bld_...)");
    if (strcmp(sub, "get") != 0 && strcmp(sub, "delete") != 0 && strcmp(sub, "logs") != 0 && !builds &&
        strcmp(sub, "cancel") != 0)
        return cli_usage_error(cli->cmd, "unknown subcommand '%s' (build, builds, cancel, list, get, logs or "
                                         "delete)", sub);
    if (builds && (o->npos < 2 || o->npos > 3))
        return cli_usage_error(cli->cmd, "builds needs a template NAME, and may name one BUILD");
    if (builds && o->npos == 3 && !ids_valid("bld", o->pos[2]))
        return cli_usage_error(cli->cmd, "'%.80s' is not a build id (bld_...)", o->pos[2]);
    if (!builds && strcmp(sub, "cancel") != 0 && o->npos != 2)
        return cli_usage_error(cli->cmd, "%s needs one template NAME", sub);
    if (!spec_snapshot_name_ok(o->pos[1]))
        return cli_usage_error(cli->cmd, "'%.80s' is not a template name (1 to %d letters, digits, _, . or -, "
                                         "starting with a letter or digit)", o->pos[1], SBX_SNAPSHOT_NAME_MAX);
    return 0;
}

/* ---------------------------------------------------------------- list, get, delete */

/* A size cell: "-" when unknown. */
static void size_cell(json_object *s, char *buf, size_t n)
{
    int64_t size = -1;
    if (!s || !jsonx_get_int(s, "size_bytes", &size))
        size = -1;
    cli_format_bytes(size, buf, n);
}

/* NAME VERSIONS LATEST STATE SIZE WORKER CREATED: the newest ready version's. */
static void print_templates(json_object *arr)
{
    static const char *const heads[] = { "NAME", "VERSIONS", "LATEST", "STATE", "SIZE", "WORKER", "CREATED" };
    enum { NCOL = 7 };
    size_t n = json_object_array_length(arr);
    int width[NCOL];
    for (int c = 0; c < NCOL; c++)
        width[c] = (int)strlen(heads[c]);
    char cell[NCOL][64];
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            for (int c = 0; c < NCOL; c++)
                cli_print_cell(heads[c], width[c], c == NCOL - 1);
        for (size_t i = 0; i < n; i++) {
            json_object *t = json_object_array_get_idx(arr, i), *latest = jsonx_get_obj(t, "latest");
            int64_t versions = 0, version = 0;
            jsonx_get_int(t, "versions", &versions);
            snprintf(cell[1], sizeof cell[1], "%lld", (long long)versions);
            if (latest && jsonx_get_int(latest, "version", &version))
                snprintf(cell[2], sizeof cell[2], "%lld", (long long)version);
            else
                snprintf(cell[2], sizeof cell[2], "-");
            size_cell(latest, cell[4], sizeof cell[4]);
            cli_format_age(latest ? cli_age_seconds(jsonx_get_str(latest, "created_at")) : -1, cell[6],
                           sizeof cell[6]);
            const char *v[NCOL] = { jsonx_get_str(t, "name"), cell[1], cell[2],
                                    latest ? jsonx_get_str(latest, "state") : "none ready", cell[4],
                                    latest ? jsonx_get_str(latest, "worker") : "-", cell[6] };
            for (int c = 0; c < NCOL; c++) {
                if (pass == 0 && cli_cell_width(v[c]) > width[c])
                    width[c] = cli_cell_width(v[c]);
                else if (pass == 1)
                    cli_print_cell(v[c], width[c], c == NCOL - 1);
            }
        }
    }
}

/* An argv of a config as JSON text on one line. */
static void print_config_argv(const char *key, json_object *a)
{
    if (!a)
        return;
    printf("%-15s ", key);
    cli_put_text(stdout, json_object_to_json_string_ext(a, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    putchar('\n');
}

/* get: the template, its versions (VERSION SNAPSHOT STATE SIZE WORKER
 * CREATED, newest first), and the config of the newest ready one. */
static void print_template(json_object *t)
{
    printf("%-15s ", "name:");
    cli_put_text(stdout, jsonx_get_str(t, "name"));
    printf("\n%-15s ", "tenant:");
    cli_put_text(stdout, jsonx_get_str(t, "tenant"));
    putchar('\n');
    json_object *vs = jsonx_get_arr(t, "versions"), *ready = NULL;
    size_t n = vs ? json_object_array_length(vs) : 0;
    printf("versions:%s\n", n ? "" : "       none");
    static const char *const heads[] = { "  VERSION", "SNAPSHOT", "STATE", "SIZE", "WORKER", "CREATED" };
    enum { NCOL = 6 };
    int width[NCOL];
    for (int c = 0; c < NCOL; c++)
        width[c] = (int)strlen(heads[c]);
    char cell[NCOL][64];
    for (int pass = 0; n > 0 && pass < 2; pass++) {
        if (pass == 1)
            for (int c = 0; c < NCOL; c++)
                cli_print_cell(heads[c], width[c], c == NCOL - 1);
        for (size_t i = 0; i < n; i++) {
            json_object *v = json_object_array_get_idx(vs, i);
            int64_t version = 0;
            jsonx_get_int(v, "version", &version);
            snprintf(cell[0], sizeof cell[0], "  %lld", (long long)version);
            size_cell(v, cell[3], sizeof cell[3]);
            cli_format_age(cli_age_seconds(jsonx_get_str(v, "created_at")), cell[5], sizeof cell[5]);
            const char *row[NCOL] = { cell[0], jsonx_get_str(v, "id"), jsonx_get_str(v, "state"), cell[3],
                                      jsonx_get_str(v, "worker"), cell[5] };
            for (int c = 0; c < NCOL; c++) {
                if (pass == 0 && cli_cell_width(row[c]) > width[c])
                    width[c] = cli_cell_width(row[c]);
                else if (pass == 1)
                    cli_print_cell(row[c], width[c], c == NCOL - 1);
            }
            const char *st = jsonx_get_str(v, "state");
            if (!ready && st && strcmp(st, "ready") == 0)
                ready = v;
        }
    }
    json_object *cfg = jsonx_get_obj(ready, "config");
    if (!cfg)
        return;
    int64_t version = 0;
    jsonx_get_int(ready, "version", &version);
    printf("config of version %lld:\n", (long long)version);
    json_object *env = jsonx_get_obj(cfg, "env");
    if (env) {
        json_object_object_foreach(env, k, val) {
            printf("  env:          ");
            cli_put_text(stdout, k);
            putchar('=');
            cli_put_text(stdout, json_object_get_string(val));
            putchar('\n');
        }
    }
    if (jsonx_get_str(cfg, "workdir")) {
        printf("  workdir:      ");
        cli_put_text(stdout, jsonx_get_str(cfg, "workdir"));
        putchar('\n');
    }
    if (jsonx_get_str(cfg, "user")) {
        printf("  user:         ");
        cli_put_text(stdout, jsonx_get_str(cfg, "user"));
        putchar('\n');
    }
    print_config_argv("  cmd:", jsonx_get_arr(cfg, "cmd"));
    print_config_argv("  entrypoint:", jsonx_get_arr(cfg, "entrypoint"));
    print_config_argv("  expose:", jsonx_get_arr(cfg, "expose"));
}

static int templates_list(cli_t *cli, const opts_t *o)
{
    json_object *resp = NULL;
    int rc = cli_call(cli, "GET", "/v1/templates", NULL, NULL, &resp);
    if (rc)
        return rc;
    json_object *arr = jsonx_get_arr(resp, "templates");
    if (!arr) {
        fputs("error: bad_response: the list answer has no templates array\n", stderr);
        json_object_put(resp);
        return EXIT_API;
    }
    size_t n = json_object_array_length(arr);
    if (cli->json) {
        cli_print_json(resp);
    } else if (o->quiet) {
        for (size_t i = 0; i < n; i++) {
            cli_put_text(stdout, jsonx_get_str(json_object_array_get_idx(arr, i), "name"));
            putchar('\n');
        }
    } else if (n == 0) {
        fputs("sandbox: no templates (sandbox templates build NAME -f Dockerfile . makes one)\n", stderr);
    } else {
        print_templates(arr);
    }
    json_object_put(resp);
    return 0;
}

static int templates_delete(cli_t *cli, const opts_t *o)
{
    char suffix[32] = "";
    if (o->version.set)
        snprintf(suffix, sizeof suffix, "?version=%lld", (long long)o->version.v);
    json_object *resp = NULL;
    int rc = cli_call_id(cli, "DELETE", "/v1/templates/", o->pos[1], suffix, "NAME", NULL, NULL, &resp);
    if (rc)
        return rc;
    if (cli->json) {
        cli_print_json(resp);
    } else {
        json_object *t = jsonx_get_obj(resp, "template");
        int64_t n = 0;
        jsonx_get_int(t, "deleted_versions", &n);
        cli_put_text(stdout, jsonx_get_str(t, "name") ? jsonx_get_str(t, "name") : o->pos[1]);
        if (o->version.set)
            printf(":%lld", (long long)o->version.v);
        printf(" deleted (%lld version%s)\n", (long long)n, n == 1 ? "" : "s");
    }
    json_object_put(resp);
    return 0;
}

/* ---------------------------------------------------------------- build: the calls */

/* "#N LINE: INSTRUCTION" on stderr before a step (the text cut when long). */
static void header(int n, int line, const char *text)
{
    fprintf(stderr, "#%d %d: ", n, line);
    size_t len = strlen(text);
    if (len > TPL_HEADER_TEXT_MAX) {
        char cut[TPL_HEADER_TEXT_MAX + 1];
        memcpy(cut, text, TPL_HEADER_TEXT_MAX);
        cut[TPL_HEADER_TEXT_MAX] = '\0';
        cli_put_text(stderr, cut);
        fputs("...", stderr);
    } else {
        cli_put_text(stderr, text);
    }
    fputc('\n', stderr);
    fflush(stderr);
}

/* FROM names one of the tenant's templates (NAME, or NAME:VERSION of a
 * version it has): "NAME[:VERSION]" into tmpl; else it is an image (tmpl
 * ""). A 404 says it is no template; another failure is printed and its
 * exit code returned. */
static int from_template(cli_t *cli, const char *ref, char *tmpl, size_t n)
{
    tmpl[0] = '\0';
    if (!cli_template_ref_ok(ref))
        return 0; /* a registry, a path, a tag or a digest: an image */
    char name[SBX_SNAPSHOT_NAME_MAX + 1], path[CLIENT_PATH_MAX];
    const char *colon = strrchr(ref, ':');
    snprintf(name, sizeof name, "%.*s", (int)(colon ? (size_t)(colon - ref) : strlen(ref)), ref);
    if (cli_path(path, sizeof path, "/v1/templates/", name, NULL) != 0)
        return 0;
    client_req_t req = { .method = "GET", .path = path };
    json_object *resp = NULL;
    client_error_t e;
    if (client_call(&cli->client, &req, &resp, &e) < 0) {
        if (e.kind == CLIENT_E_API && e.status == 404)
            return 0;
        return cli_call_failed(cli, "GET", path, &e);
    }
    bool is = !colon;
    json_object *vs = jsonx_get_arr(jsonx_get_obj(resp, "template"), "versions");
    for (size_t i = 0; !is && vs && i < json_object_array_length(vs); i++) {
        int64_t v = 0;
        is = jsonx_get_int(json_object_array_get_idx(vs, i), "version", &v) && v == strtoll(colon + 1, NULL, 10);
    }
    json_object_put(resp);
    if (is)
        snprintf(tmpl, n, "%s", ref);
    return 0;
}

/* The build sandbox's create: FROM's image or template, the flags, the
 * TTL of --timeout, labelled template-build=NAME. */
static int create_build_sandbox(cli_t *cli, const opts_t *o, const char *tmpl, int64_t timeout, const char *key,
                                json_object **ret)
{
    json_object *labels = json_object_new_object(), *body = NULL;
    if (!labels)
        return EXIT_API;
    jsonx_add_str(labels, "template-build", o->pos[1]);
    client_create_spec_t spec = {
        .image = tmpl[0] ? NULL : build.df->from, .template = tmpl[0] ? tmpl : NULL, .network = o->network,
        .isolation = o->isolation, .cpu_millis = o->cpu_millis, .memory_mib = o->memory_mib,
        .disk_mib = o->disk_mib, .ttl_seconds = { timeout, true },
        .untrusted_repo = o->untrusted_repo ? CLIENT_FLAG_TRUE : CLIENT_FLAG_UNSET, .labels = labels,
    };
    int rc = client_create_body(&spec, &body) < 0 ? EXIT_API : cli_post_keyed(cli, TPL_POST_ATTEMPTS, "/v1/sandboxes", body, key, ret);
    json_object_put(body);
    json_object_put(labels);
    return rc;
}

/* An exec of the build: argv with the step's env and cwd, within the
 * deadline. Returns 0 with *code, EXIT_TIMEOUT when the deadline passed
 * (said), or the exit code of a failure (printed). */
static int build_exec(cli_t *cli, const char *sid, char *const *argv, size_t argc, const df_step_t *s,
                      int64_t deadline, bool to_stderr, int *code)
{
    int64_t left = left_s(deadline);
    if (left < 1)
        return EXIT_TIMEOUT;
    int64_t tmo = left < SBX_EXEC_TIMEOUT_MAX ? left : SBX_EXEC_TIMEOUT_MAX;
    json_object *env = NULL;
    if (s && s->kind == DF_STEP_RUN && s->nenv > 0) {
        env = json_object_new_object();
        for (size_t i = 0; env && i < s->nenv; i++)
            jsonx_add_str(env, s->env[i].key, s->env[i].value);
        if (!env)
            return EXIT_API;
    }
    client_exec_spec_t spec = { .argv = argv, .argc = (int)argc, .env = env,
                                .cwd = s && s->kind == DF_STEP_RUN ? s->cwd : NULL,
                                .user = s && s->kind == DF_STEP_RUN ? s->user : NULL,
                                .timeout_seconds = { tmo, true } };
    bool timed_out = false;
    int rc = cli_exec_live(cli, sid, &spec, tmo, to_stderr, code, &timed_out);
    json_object_put(env);
    if (rc == 0 && timed_out && tmo == left)
        return EXIT_TIMEOUT;
    return rc;
}

/* mkdir -p DIR, quietly unless it fails (*said then). */
static int make_dir(cli_t *cli, const char *sid, const df_step_t *s, const char *dir, int64_t deadline, bool json,
                    bool *said)
{
    char *argv[] = { "mkdir", "-p", "--", (char *)dir, NULL };
    int code = 0;
    int rc = build_exec(cli, sid, argv, 4, NULL, deadline, json, &code);
    if (rc == 0 && code != 0) {
        say("%s:%d: %s: mkdir -p %s exited with code %d", build.file, s->line, s->instruction, dir, code);
        *said = true;
        return EXIT_OP_FAILED;
    }
    return rc;
}

/* One step of the build: its exit code (0 done); *said when its failure
 * was worded already. */
static int step_do(cli_t *cli, const char *sid, size_t k, int64_t deadline, bool json, bool *said)
{
    const df_step_t *s = &build.df->steps[k];
    int code = 0, rc = 0;
    switch (s->kind) {
    case DF_STEP_WORKDIR:
        rc = make_dir(cli, sid, s, s->dir, deadline, json, said);
        break;
    case DF_STEP_RUN:
        rc = build_exec(cli, sid, s->argv, s->argc, s, deadline, json, &code);
        if (rc == 0 && code != 0) {
            say("%s:%d: RUN exited with code %d", build.file, s->line, code);
            *said = true;
            rc = EXIT_OP_FAILED;
        }
        break;
    case DF_STEP_COPY: {
        const copy_plan_t *pl = &build.plans[k];
        rc = make_dir(cli, sid, s, pl->mkdir, deadline, json, said);
        for (size_t i = 0; rc == 0 && i < pl->n && !atomic_load(&build_interrupted); i++) {
            const copy_item_t *it = &pl->items[i];
            rc = it->is_dir ? cli_upload_contents(cli, it->local, sid, it->dest)
                            : cli_upload(cli, it->local, sid, it->dest, it->into_existing, true, NULL);
        }
        break;
    }
    }
    return rc;
}

static int run_step(cli_t *cli, const char *sid, size_t k, int64_t deadline, bool json)
{
    const df_step_t *s = &build.df->steps[k];
    bool said = false;
    int rc = step_do(cli, sid, k, deadline, json, &said);
    /* a failure not worded yet (an API error, tar) gets its line; a
     * timeout and Ctrl-C are worded at the end */
    if (rc && !said && rc != EXIT_TIMEOUT && !atomic_load(&build_interrupted))
        say("%s:%d: %s failed", build.file, s->line, s->instruction);
    return rc;
}

static json_object *str_array(char **v, size_t n)
{
    json_object *a = json_object_new_array();
    for (size_t i = 0; a && i < n; i++)
        json_object_array_add(a, json_object_new_string(v[i]));
    return a;
}

/* {"template":NAME,"config":{env, workdir, user, cmd, entrypoint, expose}}:
 * what the Dockerfile set. */
static json_object *snapshot_body(const char *name)
{
    const dockerfile_t *df = build.df;
    json_object *body = json_object_new_object(), *cfg = json_object_new_object();
    if (!body || !cfg) {
        json_object_put(body);
        json_object_put(cfg);
        return NULL;
    }
    jsonx_add_str(body, "template", name);
    if (df->nenv > 0) {
        json_object *env = json_object_new_object();
        for (size_t i = 0; env && i < df->nenv; i++)
            jsonx_add_str(env, df->env[i].key, df->env[i].value);
        jsonx_add(cfg, "env", env);
    }
    if (df->workdir)
        jsonx_add_str(cfg, "workdir", df->workdir);
    if (df->user)
        jsonx_add_str(cfg, "user", df->user);
    if (df->has_cmd)
        jsonx_add(cfg, "cmd", str_array(df->cmd, df->ncmd));
    if (df->has_entrypoint)
        jsonx_add(cfg, "entrypoint", str_array(df->entrypoint, df->nentrypoint));
    if (df->nexpose > 0) {
        json_object *a = json_object_new_array();
        for (size_t i = 0; a && i < df->nexpose; i++)
            json_object_array_add(a, json_object_new_int(df->expose[i]));
        jsonx_add(cfg, "expose", a);
    }
    jsonx_add(body, "config", cfg);
    return body;
}

/* The snapshot of the build sandbox as NAME's next version, waited for;
 * *ret the ready snapshot (GET /v1/snapshots/ID). */
static int snapshot_version(cli_t *cli, const char *name, const char *sid, const char *key, int64_t deadline,
                            json_object **ret)
{
    char path[CLIENT_PATH_MAX], skey[SBX_ID_MAX + 16];
    if (cli_path(path, sizeof path, "/v1/sandboxes/", sid, "/snapshots") != 0)
        return EXIT_API;
    snprintf(skey, sizeof skey, "%s-snapshot", key);
    json_object *body = snapshot_body(name), *resp = NULL, *last = NULL;
    int rc = body ? cli_post_keyed(cli, TPL_POST_ATTEMPTS, path, body, skey, &resp) : EXIT_API;
    json_object_put(body);
    if (rc)
        return rc;
    const char *snp = jsonx_get_str(jsonx_get_obj(resp, "snapshot"), "id");
    const char *oid = jsonx_get_str(jsonx_get_obj(resp, "operation"), "id");
    if (!snp || !oid || strlen(snp) > CLI_ARG_ID_MAX || strlen(oid) > CLI_ARG_ID_MAX) {
        fputs("error: bad_response: the snapshot answer has no snapshot.id or operation.id\n", stderr);
        json_object_put(resp);
        return EXIT_API;
    }
    int64_t left = left_s(deadline);
    rc = left < 1 ? EXIT_TIMEOUT : cli_wait(cli, oid, left, &last);
    json_object_put(last);
    if (rc == EXIT_OK) {
        json_object *got = NULL;
        rc = cli_call_id(cli, "GET", "/v1/snapshots/", snp, NULL, "SNAPSHOT", NULL, NULL, &got);
        if (rc == 0) {
            *ret = json_object_get(jsonx_get_obj(got, "snapshot"));
            if (!*ret) {
                fputs("error: bad_response: the snapshot answer has no snapshot\n", stderr);
                rc = EXIT_API;
            }
        }
        json_object_put(got);
    }
    json_object_put(resp);
    return rc;
}

/* The build sandbox's delete, waited for (so 'sandbox list' no longer
 * shows it); said on stderr when it did not happen. */
static void delete_build_sandbox(cli_t *cli, const char *sid)
{
    char path[CLIENT_PATH_MAX];
    json_object *resp = NULL, *last = NULL;
    int rc = cli_path(path, sizeof path, "/v1/sandboxes/", sid, NULL);
    client_req_t req = { .method = "DELETE", .path = path };
    client_error_t e;
    for (int attempt = 1; rc == 0; attempt++) {
        if (client_call(&cli->client, &req, &resp, &e) == 0)
            break;
        if (!e.retryable || attempt == TPL_POST_ATTEMPTS) {
            rc = cli_call_failed(cli, "DELETE", path, &e);
            break;
        }
        client_sleep_ms(&cli->client, (int64_t)CLIENT_RETRY_MS * attempt);
    }
    const char *oid = rc == 0 ? jsonx_get_str(jsonx_get_obj(resp, "operation"), "id") : NULL;
    if (rc == 0 && oid && strlen(oid) <= CLI_ARG_ID_MAX)
        rc = cli_wait(cli, oid, TPL_DELETE_WAIT_S, &last);
    else if (rc == 0)
        rc = EXIT_API;
    if (rc)
        say("the build sandbox %s was not deleted (its TTL ends it): sandbox delete %s", sid, sid);
    json_object_put(last);
    json_object_put(resp);
}

static int templates_build(cli_t *cli, opts_t *o)
{
    const char *name = o->pos[1];
    int64_t timeout = o->timeout.set ? o->timeout.v : CLI_TEMPLATE_BUILD_TIMEOUT;
    int64_t deadline = time_mono_ms() + timeout * 1000;
    char key[SBX_ID_MAX], tmpl[SBX_SNAPSHOT_NAME_MAX + 16], sid[CLI_ARG_ID_MAX + 1] = "";
    if (sodium_init() < 0) {
        say("cannot initialise libsodium");
        return EXIT_API;
    }
    ids_new("tbuild", key);
    struct sigaction old_int, old_term;
    cli_catch_signals(on_signal, &old_int, &old_term);
    signal(SIGPIPE, SIG_IGN);
    /* 1. the build sandbox, from FROM's template or image */
    int rc = from_template(cli, build.df->from, tmpl, sizeof tmpl);
    json_object *resp = NULL, *last = NULL, *snap = NULL;
    int at = build.df->from_line; /* the line under way, for a timeout's message */
    if (rc == 0 && atomic_load(&build_interrupted))
        rc = TPL_EXIT_INTERRUPTED;
    if (rc == 0) {
        header(1, build.df->from_line, build.df->from_text);
        rc = create_build_sandbox(cli, o, tmpl, timeout, key, &resp);
    }
    const char *s = rc == 0 ? jsonx_get_str(jsonx_get_obj(resp, "sandbox"), "id") : NULL;
    const char *oid = rc == 0 ? jsonx_get_str(jsonx_get_obj(resp, "operation"), "id") : NULL;
    if (rc == 0 && (!s || !oid || strlen(s) > CLI_ARG_ID_MAX || strlen(oid) > CLI_ARG_ID_MAX ||
                    utf8_has_control(s))) {
        fputs("error: bad_response: the create answer has no sandbox.id or operation.id\n", stderr);
        rc = EXIT_API;
    }
    if (rc == 0) {
        snprintf(sid, sizeof sid, "%s", s);
        say("build sandbox %s (%s %s)", sid, tmpl[0] ? "template" : "image", tmpl[0] ? tmpl : build.df->from);
        /* From here Ctrl-C stops what is under way; the sandbox is deleted. */
        cli->client.cancelled = interrupted;
        httpc_set_abort_flag(cli->http, &build_interrupted);
        int64_t left = left_s(deadline);
        rc = left < 1 ? EXIT_TIMEOUT : cli_wait(cli, oid, left, &last);
        if (rc == EXIT_OP_FAILED)
            say("%s:%d: FROM: the build sandbox did not start", build.file, build.df->from_line);
    }
    /* 2. the steps */
    int n = 2;
    for (size_t k = 0; rc == 0 && k < build.df->nsteps && !atomic_load(&build_interrupted); k++) {
        const df_step_t *st = &build.df->steps[k];
        at = st->line;
        header(n++, st->line, st->text);
        rc = run_step(cli, sid, k, deadline, cli->json);
    }
    /* 3. the snapshot, the template's next version */
    if (rc == 0 && !atomic_load(&build_interrupted)) {
        at = 0;
        fprintf(stderr, "#%d snapshot: %s, its next version\n", n, name);
        rc = snapshot_version(cli, name, sid, key, deadline, &snap);
        if (rc == EXIT_OP_FAILED)
            say("%s: the snapshot of the build sandbox failed: no version was made", build.file);
    }
    /* 4. the build sandbox goes, whatever happened (Ctrl-C again: at once) */
    cli->client.cancelled = NULL;
    httpc_set_abort_flag(cli->http, NULL);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (atomic_load(&build_interrupted)) {
        rc = TPL_EXIT_INTERRUPTED;
        say("interrupted%s", sid[0] && !o->keep_build_sandbox ? ": deleting the build sandbox" : "");
    } else if (rc == EXIT_TIMEOUT && at > 0) {
        say("%s:%d: --timeout %lld s passed before the build finished", build.file, at, (long long)timeout);
    } else if (rc == EXIT_TIMEOUT) {
        say("%s: --timeout %lld s passed before the snapshot was ready", build.file, (long long)timeout);
    }
    if (sid[0] && o->keep_build_sandbox)
        say("kept the build sandbox %s (sandbox delete %s)", sid, sid);
    else if (sid[0])
        delete_build_sandbox(cli, sid);
    if (rc == 0) {
        int64_t version = 0;
        jsonx_get_int(snap, "version", &version);
        if (cli->json) {
            json_object *out = json_object_new_object();
            jsonx_add(out, "snapshot", json_object_get(snap));
            cli_print_json(out);
            json_object_put(out);
        } else {
            cli_put_text(stdout, name);
            printf(" %lld ", (long long)version);
            cli_put_text(stdout, jsonx_get_str(snap, "id"));
            putchar('\n');
        }
    }
    json_object_put(snap);
    json_object_put(last);
    json_object_put(resp);
    return rc;
}

/* ---------------------------------------------------------------- build --server */

/* Each COPY's sources packed (a gzipped tar of them as the context names
 * them) and uploaded as a build file (PUT /v1/build-files/SHA256), its
 * name in hashes[k]. Before anything else is made: a COPY over a build
 * file's bound is a usage error naming its line. */
static int server_uploads(cli_t *cli, char (*hashes)[2 * crypto_hash_sha256_BYTES + 1])
{
    for (size_t k = 0; k < build.df->nsteps; k++) {
        const df_step_t *st = &build.df->steps[k];
        const copy_plan_t *pl = &build.plans[k];
        if (st->kind != DF_STEP_COPY)
            continue;
        char **rels = calloc(pl->n ? pl->n : 1, sizeof *rels);
        if (!rels)
            return EXIT_API;
        for (size_t i = 0; i < pl->n; i++)
            rels[i] = pl->items[i].rel;
        unsigned char *tar = NULL, h[crypto_hash_sha256_BYTES];
        size_t len = 0;
        int rc = cli_tar_pack(build.context, rels, pl->n, SBX_BUILD_FILE_MAX, &tar, &len);
        free(rels);
        if (rc == SBX_ETOOBIG)
            return step_error(st, "sources are over %u bytes as a gzipped tar: a build the server drives copies "
                              "at most that a COPY (build without --server to upload more)", SBX_BUILD_FILE_MAX);
        if (rc < 0) {
            say("%s:%d: %s: cannot pack its sources with tar", build.file, st->line, st->instruction);
            return EXIT_OP_FAILED;
        }
        crypto_hash_sha256(h, tar, len);
        sodium_bin2hex(hashes[k], sizeof hashes[k], h, sizeof h);
        char *b64 = b64_encode(tar, len), path[CLIENT_PATH_MAX];
        free(tar);
        json_object *body = json_object_new_object(), *resp = NULL;
        if (!b64 || !body || cli_path(path, sizeof path, "/v1/build-files/", hashes[k], NULL) != 0) {
            free(b64);
            json_object_put(body);
            return EXIT_API;
        }
        jsonx_add_str(body, "data_b64", b64);
        free(b64);
        rc = cli_call(cli, "PUT", path, body, NULL, &resp);
        json_object_put(body);
        json_object_put(resp);
        if (rc)
            return rc;
    }
    return 0;
}

/* The build's steps for the server: WORKDIR as mkdir -p, RUN as its exec
 * (env, cwd, user, a timeout within the build's), COPY and ADD as a copy
 * step of their build file (hashes: server_uploads'). NULL out of memory. */
static json_object *server_steps(int64_t timeout, char (*hashes)[2 * crypto_hash_sha256_BYTES + 1])
{
    json_object *steps = json_object_new_array();
    int64_t tmo = timeout < SBX_EXEC_TIMEOUT_MAX ? timeout : SBX_EXEC_TIMEOUT_MAX;
    for (size_t k = 0; steps && k < build.df->nsteps; k++) {
        const df_step_t *st = &build.df->steps[k];
        if (st->kind == DF_STEP_COPY) {
            /* the sources as the Dockerfile names them, unpacked and matched
             * again there; a directory destination says so by its / */
            json_object *c = json_object_new_object(), *one = json_object_new_object(), *srcs = json_object_new_array();
            bool as_dir = st->dest_dir || build.plans[k].n > 1;
            char *dest = as_dir && st->dest[strlen(st->dest) - 1] != '/' ? join(st->dest, "") : strdup(st->dest);
            for (size_t i = 0; i < st->nsrcs; i++)
                json_object_array_add(srcs, json_object_new_string(st->srcs[i]));
            jsonx_add_str(c, "files", hashes[k]);
            jsonx_add(c, "src", srcs);
            jsonx_add_str(c, "dest", dest ? dest : "/");
            free(dest);
            jsonx_add(one, "copy", c);
            json_object_array_add(steps, one);
            continue;
        }
        char *mk[] = { "mkdir", "-p", "--", st->dir, NULL };
        json_object *env = NULL, *one = NULL;
        if (st->kind == DF_STEP_RUN && st->nenv > 0) {
            env = json_object_new_object();
            for (size_t i = 0; env && i < st->nenv; i++)
                jsonx_add_str(env, st->env[i].key, st->env[i].value);
        }
        bool run = st->kind == DF_STEP_RUN;
        client_exec_spec_t spec = { .argv = run ? st->argv : mk, .argc = run ? (int)st->argc : 4, .env = env,
                                    .cwd = run ? st->cwd : NULL, .user = run ? st->user : NULL,
                                    .timeout_seconds = { tmo, true } };
        int rc = client_exec_body(&spec, &one);
        json_object_put(env);
        if (rc < 0) {
            json_object_put(steps);
            return NULL;
        }
        json_object_array_add(steps, one);
    }
    return steps;
}

/* The server's build, followed: each step's header and kept output once it
 * ran, until the build ends, --timeout passes or Ctrl-C (the build goes on
 * on the server then). */
static int templates_build_server(cli_t *cli, opts_t *o)
{
    const char *name = o->pos[1];
    int64_t timeout = o->timeout.set ? o->timeout.v : CLI_TEMPLATE_BUILD_TIMEOUT;
    int64_t deadline = time_mono_ms() + timeout * 1000;
    char key[SBX_ID_MAX], tmpl[SBX_SNAPSHOT_NAME_MAX + 16], path[CLIENT_PATH_MAX], bid[CLI_ARG_ID_MAX + 1] = "";
    if (sodium_init() < 0) {
        say("cannot initialise libsodium");
        return EXIT_API;
    }
    ids_new("tbuild", key);
    int rc = from_template(cli, build.df->from, tmpl, sizeof tmpl);
    if (rc)
        return rc;
    json_object *labels = json_object_new_object(), *sbody = NULL, *body = json_object_new_object();
    jsonx_add_str(labels, "template-build", name);
    client_create_spec_t spec = {
        .image = tmpl[0] ? NULL : build.df->from, .template = tmpl[0] ? tmpl : NULL, .network = o->network,
        .isolation = o->isolation, .cpu_millis = o->cpu_millis, .memory_mib = o->memory_mib,
        .disk_mib = o->disk_mib, .ttl_seconds = { timeout, true },
        .untrusted_repo = o->untrusted_repo ? CLIENT_FLAG_TRUE : CLIENT_FLAG_UNSET, .labels = labels,
    };
    char (*hashes)[2 * crypto_hash_sha256_BYTES + 1] = calloc(build.df->nsteps + 1, sizeof *hashes);
    if (!hashes || (rc = server_uploads(cli, hashes)) != 0) {
        free(hashes);
        json_object_put(labels);
        json_object_put(body);
        return rc ? rc : EXIT_API;
    }
    json_object *steps = server_steps(timeout, hashes), *snap = snapshot_body(name), *resp = NULL;
    free(hashes);
    if (client_create_body(&spec, &sbody) < 0 || !steps || !snap || !body ||
        cli_path(path, sizeof path, "/v1/templates/", name, "/builds") != 0) {
        rc = EXIT_API;
    } else {
        jsonx_add(body, "sandbox", json_object_get(sbody));
        jsonx_add(body, "steps", json_object_get(steps));
        jsonx_add(body, "config", json_object_get(jsonx_get_obj(snap, "config")));
        rc = cli_post_keyed(cli, TPL_POST_ATTEMPTS, path, body, key, &resp);
    }
    json_object_put(labels);
    json_object_put(sbody);
    json_object_put(steps);
    json_object_put(snap);
    json_object_put(body);
    const char *id = rc == 0 ? jsonx_get_str(jsonx_get_obj(resp, "build"), "id") : NULL;
    if (rc == 0 && (!id || !ids_valid("bld", id))) {
        fputs("error: bad_response: the build answer has no build.id\n", stderr);
        rc = EXIT_API;
    }
    if (rc) {
        json_object_put(resp);
        return rc;
    }
    snprintf(bid, sizeof bid, "%s", id);
    const char *bsbx = jsonx_get_str(jsonx_get_obj(resp, "build"), "sandbox_id");
    say("build %s on the server, in build sandbox %s (%s %s)", bid, bsbx ? bsbx : "?", tmpl[0] ? "template" : "image",
        tmpl[0] ? tmpl : build.df->from);
    header(1, build.df->from_line, build.df->from_text);
    json_object_put(resp);
    resp = NULL;
    struct sigaction old_int, old_term;
    cli_catch_signals(on_signal, &old_int, &old_term);
    cli->client.cancelled = interrupted;
    httpc_set_abort_flag(cli->http, &build_interrupted);
    if (cli_path(path, sizeof path, "/v1/templates/", name, "/builds/") != 0 ||
        strlen(path) + strlen(bid) >= sizeof path) {
        rc = EXIT_API;
    } else {
        strcat(path, bid);
    }
    size_t shown = 0;
    const char *state = "building";
    json_object *b = NULL;
    while (rc == 0 && !atomic_load(&build_interrupted)) {
        json_object_put(resp);
        resp = NULL;
        if ((rc = cli_call(cli, "GET", path, NULL, NULL, &resp)) != 0)
            break;
        b = jsonx_get_obj(resp, "build");
        state = jsonx_get_str(b, "state") ? jsonx_get_str(b, "state") : "?";
        json_object *done = jsonx_get_arr(b, "steps");
        size_t n = done ? json_object_array_length(done) : 0;
        for (; shown < n && shown < build.df->nsteps && rc == 0; shown++) {
            const df_step_t *st = &build.df->steps[shown];
            const char *op = jsonx_get_str(json_object_array_get_idx(done, shown), "operation");
            header((int)shown + 2, st->line, st->text);
            if (op && st->kind == DF_STEP_RUN && strlen(op) <= CLI_ARG_ID_MAX)
                rc = cli_output_print(cli, op, cli->json, 0);
        }
        /* the step under way: its header now and its output as it comes */
        int64_t started = 0;
        const char *cur = jsonx_get_str(b, "operation_id");
        if (rc == 0 && strcmp(state, "building") == 0 && jsonx_get_int(b, "steps_started", &started) &&
            started == (int64_t)shown + 1 && shown < build.df->nsteps && cur && strlen(cur) <= CLI_ARG_ID_MAX) {
            const df_step_t *st = &build.df->steps[shown];
            header((int)shown + 2, st->line, st->text);
            int64_t left = left_s(deadline);
            if (st->kind == DF_STEP_RUN && left > 0) {
                rc = cli_output_print(cli, cur, cli->json, left);
                if (rc == EXIT_TIMEOUT && !atomic_load(&build_interrupted))
                    rc = 0; /* the deadline check below words it */
            }
            shown++;
            if (atomic_load(&build_interrupted))
                rc = 0;
        }
        bool over = strcmp(state, "building") != 0 && strcmp(state, "snapshotting") != 0;
        if (over || rc)
            break;
        if (time_mono_ms() >= deadline) {
            rc = EXIT_TIMEOUT;
            break;
        }
        client_sleep_ms(&cli->client, 500);
    }
    cli->client.cancelled = NULL;
    httpc_set_abort_flag(cli->http, NULL);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (atomic_load(&build_interrupted) || rc == EXIT_TIMEOUT) {
        say("%s: the build goes on on the server: sandbox templates builds %s %s",
            rc == EXIT_TIMEOUT ? "--timeout passed" : "interrupted", name, bid);
        json_object_put(resp);
        return rc == EXIT_TIMEOUT ? rc : TPL_EXIT_INTERRUPTED;
    }
    if (rc == 0 && strcmp(state, "ready") != 0) {
        json_object *err = jsonx_get_obj(b, "error");
        size_t n = jsonx_get_arr(b, "steps") ? json_object_array_length(jsonx_get_arr(b, "steps")) : 0;
        const char *msg = jsonx_get_str(err, "message") ? jsonx_get_str(err, "message") : state;
        if (n > 0 && n <= build.df->nsteps && strncmp(msg, "step ", 5) == 0)
            say("%s:%d: %s: %s", build.file, build.df->steps[n - 1].line, build.df->steps[n - 1].instruction, msg);
        else
            say("%s: the build %s %s: %s", build.file, bid, state, msg);
        rc = EXIT_OP_FAILED;
    } else if (rc == 0) {
        fprintf(stderr, "#%zu snapshot: %s, its next version\n", build.df->nsteps + 2, name);
        const char *snp = jsonx_get_str(b, "snapshot_id");
        if (cli->json) {
            /* as a build this command drives prints it: the ready version */
            json_object *got = NULL;
            rc = snp ? cli_call_id(cli, "GET", "/v1/snapshots/", snp, NULL, "SNAPSHOT", NULL, NULL, &got) : EXIT_API;
            if (rc == 0)
                cli_print_json(got);
            json_object_put(got);
        } else {
            int64_t version = 0;
            jsonx_get_int(b, "version", &version);
            cli_put_text(stdout, name);
            printf(" %lld ", (long long)version);
            cli_put_text(stdout, jsonx_get_str(b, "snapshot_id") ? jsonx_get_str(b, "snapshot_id") : "?");
            putchar('\n');
        }
    }
    json_object_put(resp);
    return rc;
}

/* One build: ID STATE STEPS VERSION CREATED, then the error of a failed one. */
static void print_build(json_object *b)
{
    json_object *done = jsonx_get_arr(b, "steps");
    int64_t total = 0, version = 0;
    jsonx_get_int(b, "steps_total", &total);
    bool has_version = jsonx_get_int(b, "version", &version);
    const char *fields[] = { jsonx_get_str(b, "id"), jsonx_get_str(b, "state") };
    for (size_t i = 0; i < 2; i++) {
        cli_put_text(stdout, fields[i] ? fields[i] : "-");
        putchar(' ');
    }
    printf("%zu/%lld ", done ? json_object_array_length(done) : 0, (long long)total);
    if (has_version)
        printf("v%lld ", (long long)version);
    else
        fputs("- ", stdout);
    cli_put_text(stdout, jsonx_get_str(b, "created_at") ? jsonx_get_str(b, "created_at") : "-");
    const char *msg = jsonx_get_str(jsonx_get_obj(b, "error"), "message");
    if (msg) {
        fputs("  ", stdout);
        cli_put_text(stdout, msg);
    }
    putchar('\n');
}

/* templates builds NAME [BUILD]: the server's builds of NAME, or one;
 * templates cancel NAME BUILD: cancels that one. */
static int templates_builds(cli_t *cli, const opts_t *o, bool cancel)
{
    char path[CLIENT_PATH_MAX];
    json_object *resp = NULL;
    int rc = cli_path(path, sizeof path, "/v1/templates/", o->pos[1], "/builds");
    if (rc == 0 && o->npos > 2) {
        char tail[CLIENT_PATH_MAX];
        rc = cli_path(tail, sizeof tail, "/", o->pos[2], NULL);
        if (rc == 0 && strlen(path) + strlen(tail) < sizeof path)
            strcat(path, tail);
        else if (rc == 0)
            rc = EXIT_USAGE;
    }
    if (rc)
        return cli_usage_error(cli->cmd, "NAME or BUILD too long");
    rc = cli_call(cli, cancel ? "DELETE" : "GET", path, NULL, NULL, &resp);
    if (rc == 0 && cancel && !cli->json) {
        cli_put_text(stdout, o->pos[2]);
        fputs(" cancelled\n", stdout);
        json_object_put(resp);
        return 0;
    }
    return cli_print_listing(cli, rc, resp, "build", "builds", print_build);
}

static void build_release(void)
{
    for (size_t k = 0; build.plans && build.df && k < build.df->nsteps; k++) {
        for (size_t i = 0; i < build.plans[k].n; i++) {
            free(build.plans[k].items[i].local);
            free(build.plans[k].items[i].rel);
            free(build.plans[k].items[i].dest);
        }
        free(build.plans[k].items);
        free(build.plans[k].mkdir);
    }
    free(build.plans);
    dockerfile_free(build.df);
    free(build.context);
    memset(&build, 0, sizeof build);
}

/* templates logs NAME [--version N]: what the build of a version ran and
 * printed, from its build sandbox's exec operations (their kept output;
 * docs/templates.md). */
static int templates_logs(cli_t *cli, const opts_t *o)
{
    json_object *resp = NULL;
    int rc = cli_call_id(cli, "GET", "/v1/templates/", o->pos[1], NULL, "NAME", NULL, NULL, &resp);
    if (rc)
        return rc;
    json_object *vers = jsonx_get_arr(jsonx_get_obj(resp, "template"), "versions"), *pick = NULL;
    int64_t best = 0;
    for (size_t i = 0; vers && i < json_object_array_length(vers); i++) {
        json_object *v = json_object_array_get_idx(vers, i);
        int64_t n = 0;
        jsonx_get_int(v, "version", &n);
        if (o->version.set ? n == o->version.v : n > best) {
            best = n;
            pick = v;
        }
    }
    const char *sbx = jsonx_get_str(pick, "sandbox_id");
    if (!pick || !sbx) {
        fprintf(stderr, "sandbox: templates: %s has no version %s\n", o->pos[1], o->version.set ? "of that number"
                                                                                               : "yet");
        json_object_put(resp);
        return EXIT_API;
    }
    char sid[CLI_ARG_ID_MAX];
    snprintf(sid, sizeof sid, "%s", sbx);
    if (!cli->json)
        printf("# %s version %lld, built in sandbox %s\n", o->pos[1], (long long)best, sid);
    json_object_put(resp);
    /* The build's execs, in order: the first event of each exec operation
     * of the build sandbox, paged by the events cursor. */
    json_object *steps = cli->json ? json_object_new_array() : NULL, *seen = json_object_new_object();
    int64_t after = 0;
    for (int page = 0; page < 100 && rc == 0; page++) {
        char path[CLIENT_PATH_MAX];
        snprintf(path, sizeof path, "/v1/events?sandbox=%s&limit=500&after=%lld", sid, (long long)after);
        json_object *ev = NULL;
        if ((rc = cli_call(cli, "GET", path, NULL, NULL, &ev)) != 0)
            break;
        json_object *arr = jsonx_get_arr(ev, "events");
        size_t n = arr ? json_object_array_length(arr) : 0;
        for (size_t i = 0; i < n && rc == 0; i++) {
            json_object *e = json_object_array_get_idx(arr, i);
            const char *op = jsonx_get_str(e, "operation_id");
            const char *kind = jsonx_get_str(jsonx_get_obj(e, "data"), "kind");
            if (!op || !kind || strcmp(kind, "exec") != 0 || json_object_object_get_ex(seen, op, NULL))
                continue;
            json_object_object_add(seen, op, NULL);
            json_object *got = NULL;
            if ((rc = cli_call_id(cli, "GET", "/v1/operations/", op, NULL, "OPERATION", NULL, NULL, &got)) != 0)
                break;
            json_object *opj = jsonx_get_obj(got, "operation");
            if (steps) {
                json_object_array_add(steps, json_object_get(opj));
            } else {
                /* (an operation's argv is never shown back: it may hold
                 * what a build passed on a command line) */
                int64_t code = -1;
                jsonx_get_int(jsonx_get_obj(opj, "result"), "exit_code", &code);
                fputs("==> exec ", stdout);
                cli_put_text(stdout, op);
                printf(": %s", jsonx_get_str(opj, "state") ? jsonx_get_str(opj, "state") : "?");
                if (code >= 0)
                    printf(", exit %lld", (long long)code);
                putchar('\n');
                fflush(stdout);
                rc = cli_output_print(cli, op, false, 0);
            }
            json_object_put(got);
        }
        int64_t next = after;
        jsonx_get_int(ev, "next_after", &next);
        json_object_put(ev);
        if (n == 0 || next <= after)
            break;
        after = next;
    }
    json_object_put(seen);
    if (steps) {
        json_object *out = json_object_new_object();
        jsonx_add_str(out, "sandbox_id", sid);
        jsonx_add_int(out, "version", best);
        jsonx_add(out, "steps", steps);
        if (rc == 0)
            cli_print_json(out);
        json_object_put(out);
    }
    return rc;
}

int cli_cmd_templates(cli_t *cli, opts_t *o)
{
    const char *sub = o->pos[0];
    if (strcmp(sub, "logs") == 0)
        return templates_logs(cli, o);
    if (strcmp(sub, "list") == 0)
        return templates_list(cli, o);
    if (strcmp(sub, "delete") == 0)
        return templates_delete(cli, o);
    if (strcmp(sub, "builds") == 0 || strcmp(sub, "cancel") == 0)
        return templates_builds(cli, o, strcmp(sub, "cancel") == 0);
    if (strcmp(sub, "build") == 0) {
        int rc = o->server_build ? templates_build_server(cli, o) : templates_build(cli, o);
        build_release();
        return rc;
    }
    json_object *resp = NULL;
    int rc = cli_call_id(cli, "GET", "/v1/templates/", o->pos[1], NULL, "NAME", NULL, NULL, &resp);
    if (rc)
        return rc;
    if (cli->json)
        cli_print_json(resp);
    else
        print_template(jsonx_get_obj(resp, "template"));
    json_object_put(resp);
    return 0;
}
