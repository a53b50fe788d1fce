/* The embedded PostgreSQL cluster of `sandboxd all`: finds the installed
 * server, runs initdb/pg_ctl (as the `postgres` user when we are root, never
 * through a shell) and creates the "sandbox" database over libpq. */
#include "pgembed.h"

#include "errors.h"
#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <libpq-fe.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PGEMBED_COMPONENT   "pgembed"
#define PGEMBED_USER        "postgres"       /* system user and superuser name */
#define PGEMBED_DB          "sandbox"
#define PGEMBED_PORT        5432             /* only names the socket file in our private dir */
#define PGEMBED_PGROOT      "/usr/lib/postgresql"
#define PGEMBED_FALLBACK    "/var/lib/sandbox/embedded"
#define PGEMBED_CONF        "sandbox_embedded.conf"
#define PGEMBED_WAIT_SECS   "120"
#define PGEMBED_RETRIES     15               /* start attempts / 1 s while a stale postmaster.pid lingers */

extern char **environ;

struct pgembed {
    char bindir[PATH_MAX];
    char base[PATH_MAX];      /* data_dir, or the fallback directory */
    char pgdata[PATH_MAX];    /* base/postgres */
    char rundir[PATH_MAX];    /* base/run: the socket directory */
    char logpath[PATH_MAX];   /* base/postgres.log */
    char location[2 * PATH_MAX + 256];
    char conninfo[2 * PATH_MAX + 128];
    bool drop_privs;          /* run the server as PGEMBED_USER */
    bool reused;              /* it ran already when pgembed_start came (another sandboxd's, or a killed one's) */
    uid_t uid;
    gid_t gid;
    char **envp;              /* our environment without PG* variables */
};

static int fmt_path(char *out, size_t outlen, const char *a, const char *b)
{
    int n = snprintf(out, outlen, "%s/%s", a, b);
    return (n < 0 || (size_t)n >= outlen) ? SBX_ETOOBIG : 0;
}

/* mkdir -p; the directories it creates get `mode`. */
static int mkdir_p(const char *path, mode_t mode)
{
    char tmp[PATH_MAX];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof tmp)
        return SBX_ETOOBIG;
    memcpy(tmp, path, len + 1);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, mode) < 0 && errno != EEXIST)
            return SBX_EIO;
        *p = '/';
    }
    if (mkdir(tmp, mode) < 0 && errno != EEXIST)
        return SBX_EIO;
    return 0;
}

static bool is_exec(const char *dir, const char *name)
{
    char p[PATH_MAX];
    return fmt_path(p, sizeof p, dir, name) == 0 && access(p, X_OK) == 0;
}

/* Whether dir has every one of progs (NULL-terminated), executable. */
static bool has_all(const char *dir, const char *const *progs)
{
    for (; *progs; progs++)
        if (!is_exec(dir, *progs))
            return false;
    return true;
}

/* The newest /usr/lib/postgresql/<N>/bin with every one of progs, or
 * <prefer> when that one has them (the major version of an existing
 * cluster). */
static int find_bindir(const char *prefer, const char *const *progs, char *out, size_t outlen)
{
    if (prefer && *prefer) {
        char cand[PATH_MAX];
        int n = snprintf(cand, sizeof cand, PGEMBED_PGROOT "/%s/bin", prefer);
        if (n > 0 && (size_t)n < sizeof cand && has_all(cand, progs)) {
            if ((size_t)n >= outlen)
                return SBX_ETOOBIG;
            memcpy(out, cand, (size_t)n + 1);
            return 0;
        }
    }
    DIR *d = opendir(PGEMBED_PGROOT);
    if (!d)
        return SBX_ENOTFOUND;
    long best = -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end;
        errno = 0;
        long v = strtol(e->d_name, &end, 10);
        if (errno || end == e->d_name || *end || v <= best)
            continue;
        char cand[PATH_MAX];
        int n = snprintf(cand, sizeof cand, PGEMBED_PGROOT "/%s/bin", e->d_name);
        if (n < 0 || (size_t)n >= sizeof cand || (size_t)n >= outlen)
            continue;
        if (has_all(cand, progs)) {
            best = v;
            memcpy(out, cand, (size_t)n + 1);
        }
    }
    closedir(d);
    return best < 0 ? SBX_ENOTFOUND : 0;
}

void pgembed_tool(const char *bindir, const char *name, char *out, size_t outlen)
{
    const char *const progs[] = { name, NULL };
    char dir[PATH_MAX];
    if (bindir && *bindir)
        snprintf(out, outlen, "%s/%s", bindir, name);
    else if (find_bindir(NULL, progs, dir, sizeof dir) == 0)
        snprintf(out, outlen, "%s/%s", dir, name);
    else
        snprintf(out, outlen, "%s", name);
}

/* Everything but PG* variables, so a PGHOST or PGDATA of the caller cannot
 * steer initdb or pg_ctl elsewhere. */
char **pgembed_env_without_pg(void)
{
    size_t n = 0;
    while (environ && environ[n])
        n++;
    char **envp = calloc(n + 1, sizeof *envp);
    if (!envp)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "PG", 2) != 0)
            envp[o++] = environ[i];
    return envp;
}

/* In a forked child: become the cluster's user. Async-signal-safe calls only. */
static int child_drop_privs(const pgembed_t *pg)
{
    if (!pg->drop_privs)
        return 0;
    if (setgroups(1, &pg->gid) < 0 || setgid(pg->gid) < 0 || setuid(pg->uid) < 0)
        return -1;
    return 0;
}

/* Runs argv (argv[0] an absolute path) as the cluster's user with stdin from
 * /dev/null and stdout/stderr appended to the server log. Returns 0 with
 * *ret_status the exit status (or -1 when killed), or a negative code. */
static int run_child(const pgembed_t *pg, char *const argv[], int *ret_status)
{
    int logfd = open(pg->logpath, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (logfd < 0)
        return SBX_EIO;
    int nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (nullfd < 0) {
        close(logfd);
        return SBX_EIO;
    }
    pid_t pid = fork();
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        signal(SIGCHLD, SIG_DFL);
        if (child_drop_privs(pg) < 0 || chdir(pg->base) < 0)
            _exit(126);
        if (dup2(nullfd, 0) < 0 || dup2(logfd, 1) < 0 || dup2(logfd, 2) < 0)
            _exit(126);
        close_range(3, ~0U, 0);
        execve(argv[0], argv, pg->envp);
        _exit(127);
    }
    int saved = errno;
    close(logfd);
    close(nullfd);
    if (pid < 0) {
        errno = saved;
        return SBX_EIO;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            return SBX_EIO;
    }
    *ret_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return 0;
}

/* Whether the cluster's user can search `path` (and every directory above it). */
static bool user_can_reach(const pgembed_t *pg, const char *path)
{
    if (!pg->drop_privs)
        return access(path, X_OK) == 0;
    pid_t pid = fork();
    if (pid == 0) {
        if (child_drop_privs(pg) < 0)
            _exit(2);
        _exit(access(path, X_OK) == 0 ? 0 : 1);
    }
    if (pid < 0)
        return false;
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            return false;
    }
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* The last non-empty line of the server log (at most outlen-1 bytes), for
 * error messages; "" when there is none. */
static void log_tail(const char *path, char *out, size_t outlen)
{
    out[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    char buf[2048];
    off_t size = lseek(fd, 0, SEEK_END);
    off_t from = size > (off_t)sizeof buf - 1 ? size - (off_t)sizeof buf + 1 : 0;
    ssize_t n = pread(fd, buf, sizeof buf - 1, from);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    char *line = strrchr(buf, '\n');
    line = line ? line + 1 : buf;
    size_t len = strlen(line);
    if (len >= outlen)
        len = outlen - 1;
    memcpy(out, line, len);
    out[len] = '\0';
}

/* Makes a path ours-or-the-cluster-user's: chown when we run the cluster as
 * another user. */
static int own_path(const pgembed_t *pg, const char *path)
{
    if (pg->drop_privs && chown(path, pg->uid, pg->gid) < 0)
        return SBX_EIO;
    return 0;
}

/* Writes a single-quoted PostgreSQL string (conf file or conninfo value). */
static int quote_into(char *out, size_t outlen, const char *s, char esc)
{
    size_t o = 0;
    if (o + 1 >= outlen)
        return SBX_ETOOBIG;
    out[o++] = '\'';
    for (; *s; s++) {
        if (o + 3 >= outlen)
            return SBX_ETOOBIG;
        if (*s == '\'' || *s == '\\')
            out[o++] = *s == '\'' ? esc : '\\';
        out[o++] = *s;
    }
    out[o++] = '\'';
    out[o] = '\0';
    return 0;
}

/* Writes our settings into pgdata/sandbox_embedded.conf (rewritten at every
 * start, so a moved data dir gets its new socket path) and includes it from
 * postgresql.conf once. */
static int write_conf(const pgembed_t *pg)
{
    char path[PATH_MAX], qrun[2 * PATH_MAX + 4];
    int r = SBX_EIO;
    FILE *f = NULL;
    char *text = NULL;

    if (fmt_path(path, sizeof path, pg->pgdata, PGEMBED_CONF) < 0 ||
        quote_into(qrun, sizeof qrun, pg->rundir, '\'') < 0) {
        r = SBX_ETOOBIG;
        goto cleanup;
    }
    f = fopen(path, "we");
    if (!f)
        goto cleanup;
    fprintf(f, "# Written by sandboxd at every start of the embedded cluster; edits are lost.\n"
               "listen_addresses = ''\n"
               "port = %d\n"
               "unix_socket_directories = %s\n"
               "unix_socket_permissions = 0700\n",
            PGEMBED_PORT, qrun);
    if (fclose(f) != 0) {
        f = NULL;
        goto cleanup;
    }
    f = NULL;
    if (own_path(pg, path) < 0)
        goto cleanup;

    /* include it from postgresql.conf unless already done */
    if (fmt_path(path, sizeof path, pg->pgdata, "postgresql.conf") < 0) {
        r = SBX_ETOOBIG;
        goto cleanup;
    }
    f = fopen(path, "re");
    if (!f)
        goto cleanup;
    size_t cap = 1 << 16, len = 0;
    text = malloc(cap);
    if (!text) {
        r = SBX_ENOMEM;
        goto cleanup;
    }
    size_t n;
    while ((n = fread(text + len, 1, cap - 1 - len, f)) > 0) {
        len += n;
        if (len == cap - 1) {
            char *bigger = realloc(text, cap * 2);
            if (!bigger) {
                r = SBX_ENOMEM;
                goto cleanup;
            }
            text = bigger;
            cap *= 2;
        }
    }
    text[len] = '\0';
    fclose(f);
    f = NULL;
    if (!strstr(text, "include_if_exists = '" PGEMBED_CONF "'")) {
        f = fopen(path, "ae");
        if (!f)
            goto cleanup;
        fprintf(f, "\n# sandboxd's settings for the embedded cluster\ninclude_if_exists = '" PGEMBED_CONF "'\n");
        if (fclose(f) != 0) {
            f = NULL;
            goto cleanup;
        }
        f = NULL;
    }
    r = 0;
cleanup:
    if (f)
        fclose(f);
    free(text);
    return r;
}

/* Builds the conninfo of database `db` into out. */
static int make_conninfo(const pgembed_t *pg, const char *db, const char *extra, char *out, size_t outlen)
{
    char qrun[2 * PATH_MAX + 4];
    if (quote_into(qrun, sizeof qrun, pg->rundir, '\\') < 0)
        return SBX_ETOOBIG;
    int n = snprintf(out, outlen, "host=%s port=%d dbname=%s user=" PGEMBED_USER "%s", qrun, PGEMBED_PORT, db,
                     extra);
    return (n < 0 || (size_t)n >= outlen) ? SBX_ETOOBIG : 0;
}

/* PQping of the cluster's socket: OK when it accepts connections, REJECT
 * while it starts or stops, NO_RESPONSE when nothing listens. */
static PGPing ping_cluster(const pgembed_t *pg)
{
    char conninfo[sizeof pg->conninfo];
    if (make_conninfo(pg, "postgres", " connect_timeout=5", conninfo, sizeof conninfo) < 0)
        return PQPING_NO_ATTEMPT;
    return PQping(conninfo);
}

static bool has_pid_file(const pgembed_t *pg)
{
    char path[PATH_MAX];
    return fmt_path(path, sizeof path, pg->pgdata, "postmaster.pid") == 0 && access(path, F_OK) == 0;
}

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* Creates database "sandbox" if it is missing. */
static int create_database(const pgembed_t *pg, char *err, size_t errlen)
{
    char conninfo[sizeof pg->conninfo];
    PGconn *c = NULL;
    PGresult *res = NULL;
    int r = SBX_EDB;

    if (make_conninfo(pg, "postgres", " connect_timeout=30", conninfo, sizeof conninfo) < 0) {
        snprintf(err, errlen, "socket directory path too long");
        return SBX_ETOOBIG;
    }
    c = PQconnectdb(conninfo);
    if (!c || PQstatus(c) != CONNECTION_OK) {
        snprintf(err, errlen, "cannot connect to the embedded PostgreSQL in %s: %s", pg->rundir,
                 c ? PQerrorMessage(c) : "out of memory");
        goto cleanup;
    }
    const char *const params[1] = { PGEMBED_DB };
    res = PQexecParams(c, "SELECT 1 FROM pg_database WHERE datname = $1", 1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        snprintf(err, errlen, "cannot list databases of the embedded PostgreSQL: %s", PQerrorMessage(c));
        goto cleanup;
    }
    bool exists = PQntuples(res) > 0;
    PQclear(res);
    res = NULL;
    if (!exists) {
        res = PQexec(c, "CREATE DATABASE " PGEMBED_DB);
        if (PQresultStatus(res) != PGRES_COMMAND_OK) {
            snprintf(err, errlen, "cannot create database " PGEMBED_DB ": %s", PQerrorMessage(c));
            goto cleanup;
        }
        log_debug(PGEMBED_COMPONENT, "created database " PGEMBED_DB);
    }
    r = 0;
cleanup:
    PQclear(res);
    PQfinish(c);
    if (r < 0) {
        /* libpq messages end with a newline; keep err one line */
        for (char *p = err; *p; p++)
            if (*p == '\n')
                *p = ' ';
    }
    return r;
}

/* Runs pg_ctl with the given action and extra arguments; returns its exit
 * status (negative on spawn failure). */
static int pg_ctl(const pgembed_t *pg, const char *action, const char *mode)
{
    char prog[PATH_MAX];
    if (fmt_path(prog, sizeof prog, pg->bindir, "pg_ctl") < 0)
        return SBX_ETOOBIG;
    char *argv[16];
    int i = 0;
    argv[i++] = prog;
    argv[i++] = (char *)action;
    argv[i++] = "-D";
    argv[i++] = (char *)pg->pgdata;
    if (strcmp(action, "start") == 0) {
        argv[i++] = "-l";
        argv[i++] = (char *)pg->logpath;
    }
    if (mode) {
        argv[i++] = "-m";
        argv[i++] = (char *)mode;
    }
    if (strcmp(action, "status") != 0) {
        argv[i++] = "-w";
        argv[i++] = "-t";
        argv[i++] = PGEMBED_WAIT_SECS;
        argv[i++] = "-s";
    }
    argv[i] = NULL;
    int status;
    int r = run_child(pg, argv, &status);
    return r < 0 ? r : status;
}

/* Reads the major version of an existing cluster ("15"), or "" if none. */
static void cluster_version(const char *pgdata, char *out, size_t outlen)
{
    char path[PATH_MAX];
    out[0] = '\0';
    if (fmt_path(path, sizeof path, pgdata, "PG_VERSION") < 0)
        return;
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    if (fgets(out, (int)outlen, f))
        out[strcspn(out, "\r\n")] = '\0';
    else
        out[0] = '\0';
    fclose(f);
}

/* 64-bit FNV-1a: names the fallback directory of one data dir. */
static uint64_t fnv1a(const char *s)
{
    uint64_t h = 14695981039346656037ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

/* Chooses base (data_dir or the fallback) and fills the derived paths. */
static int choose_location(pgembed_t *pg, const char *data_dir, char *err, size_t errlen)
{
    char abs[PATH_MAX];
    if (mkdir_p(data_dir, 0755) < 0) {
        snprintf(err, errlen, "cannot create data directory %s: %s", data_dir, strerror(errno));
        return SBX_EIO;
    }
    if (!realpath(data_dir, abs)) {
        snprintf(err, errlen, "cannot resolve data directory %s: %s", data_dir, strerror(errno));
        return SBX_EIO;
    }
    const char *why = NULL;
    size_t socklen = strlen(abs) + strlen("/run/.s.PGSQL.5432.lock");
    if (socklen >= sizeof(((struct sockaddr_un *)0)->sun_path))
        why = "the socket path under the data directory would be too long";
    else if (!user_can_reach(pg, abs))
        why = "user " PGEMBED_USER " cannot reach the data directory";

    if (!why) {
        snprintf(pg->base, sizeof pg->base, "%s", abs);
        snprintf(pg->location, sizeof pg->location, "%s/postgres", abs);
    } else {
        if (!pg->drop_privs) {
            snprintf(err, errlen, "cannot use %s for the embedded PostgreSQL: %s", abs, why);
            return SBX_EINVAL;
        }
        snprintf(pg->base, sizeof pg->base, PGEMBED_FALLBACK "/%016llx", (unsigned long long)fnv1a(abs));
        if (mkdir_p(PGEMBED_FALLBACK, 0755) < 0 || (mkdir(pg->base, 0700) < 0 && errno != EEXIST)) {
            snprintf(err, errlen, "cannot create %s: %s", pg->base, strerror(errno));
            return SBX_EIO;
        }
        if (own_path(pg, pg->base) < 0) {
            snprintf(err, errlen, "cannot chown %s: %s", pg->base, strerror(errno));
            return SBX_EIO;
        }
        snprintf(pg->location, sizeof pg->location, "%s/postgres (instead of %s/postgres: %s)", pg->base, abs,
                 why);
    }
    if (fmt_path(pg->pgdata, sizeof pg->pgdata, pg->base, "postgres") < 0 ||
        fmt_path(pg->rundir, sizeof pg->rundir, pg->base, "run") < 0 ||
        fmt_path(pg->logpath, sizeof pg->logpath, pg->base, "postgres.log") < 0) {
        snprintf(err, errlen, "data directory path too long: %s", abs);
        return SBX_ETOOBIG;
    }
    return 0;
}

/* Creates pgdata, the socket dir and the log file with the right owner. */
static int prepare_dirs(const pgembed_t *pg, char *err, size_t errlen)
{
    const char *dirs[2] = { pg->pgdata, pg->rundir };
    for (int i = 0; i < 2; i++) {
        if (mkdir(dirs[i], 0700) < 0 && errno != EEXIST) {
            snprintf(err, errlen, "cannot create %s: %s", dirs[i], strerror(errno));
            return SBX_EIO;
        }
        if (own_path(pg, dirs[i]) < 0 || chmod(dirs[i], 0700) < 0) {
            snprintf(err, errlen, "cannot set owner/mode of %s: %s", dirs[i], strerror(errno));
            return SBX_EIO;
        }
    }
    int fd = open(pg->logpath, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open %s: %s", pg->logpath, strerror(errno));
        return SBX_EIO;
    }
    close(fd);
    if (own_path(pg, pg->logpath) < 0) {
        snprintf(err, errlen, "cannot chown %s: %s", pg->logpath, strerror(errno));
        return SBX_EIO;
    }
    return 0;
}

static int run_initdb(const pgembed_t *pg, char *err, size_t errlen)
{
    char prog[PATH_MAX], pgdata_arg[PATH_MAX + 16];
    if (fmt_path(prog, sizeof prog, pg->bindir, "initdb") < 0)
        return SBX_ETOOBIG;
    snprintf(pgdata_arg, sizeof pgdata_arg, "--pgdata=%s", pg->pgdata);
    char *argv[] = { prog, pgdata_arg, "--username=" PGEMBED_USER, "--auth=trust", "--encoding=UTF8",
                     "--no-locale", "--no-instructions", NULL };
    int status;
    if (run_child(pg, argv, &status) < 0) {
        snprintf(err, errlen, "cannot run %s: %s", prog, strerror(errno));
        return SBX_EUNAVAIL;
    }
    if (status != 0) {
        char tail[512];
        log_tail(pg->logpath, tail, sizeof tail);
        snprintf(err, errlen, "initdb of %s failed (exit %d): %s (log: %s)", pg->pgdata, status, tail, pg->logpath);
        return SBX_EUNAVAIL;
    }
    return 0;
}

/* Running as root: the cluster runs as the system user PGEMBED_USER. */
static int choose_user(pgembed_t *pg, char *err, size_t errlen)
{
    if (geteuid() == 0) {
        struct passwd *pw = getpwnam(PGEMBED_USER);
        if (!pw) {
            snprintf(err, errlen,
                     "running as root, the embedded PostgreSQL needs the system user \"" PGEMBED_USER
                     "\", which does not exist (install postgresql, or set database_url)");
            return SBX_EUNAVAIL;
        }
        pg->drop_privs = true;
        pg->uid = pw->pw_uid;
        pg->gid = pw->pw_gid;
    }
    return 0;
}

/* The PostgreSQL binaries: bindir when set, else the installed version
 * that made the cluster (version, "" for a new one) or the newest. */
static int choose_bindir(pgembed_t *pg, const char *bindir, const char *version, char *err, size_t errlen)
{
    static const char *const server_progs[] = { "initdb", "pg_ctl", NULL };
    if (bindir && *bindir) {
        if (!has_all(bindir, server_progs)) {
            snprintf(err, errlen, "postgres_bindir %s has no executable initdb and pg_ctl", bindir);
            return SBX_EUNAVAIL;
        }
        snprintf(pg->bindir, sizeof pg->bindir, "%s", bindir);
    } else if (find_bindir(version, server_progs, pg->bindir, sizeof pg->bindir) < 0) {
        snprintf(err, errlen,
                 "PostgreSQL is not installed: no " PGEMBED_PGROOT "/<N>/bin with initdb and pg_ctl "
                 "(apt-get install postgresql, set postgres_bindir, or set database_url)");
        return SBX_EUNAVAIL;
    }
    return 0;
}

/* Reuses the cluster when it already runs (one left running by a killed
 * `sandboxd all` is ours), else starts it with pg_ctl, waiting a little for
 * a killed postmaster's lock file to go. Asks the socket, not pg_ctl
 * status: a killed postmaster that is not reaped yet still looks alive to
 * kill(pid, 0). */
static int start_cluster(pgembed_t *pg, char *err, size_t errlen)
{
    PGPing ping = ping_cluster(pg);
    for (int i = 0; ping == PQPING_REJECT && i < PGEMBED_RETRIES * 2; i++) {
        sleep_ms(500);
        ping = ping_cluster(pg);
    }
    if (ping == PQPING_OK) {
        log_debug(PGEMBED_COMPONENT, "reusing the running cluster in %s", pg->pgdata);
        pg->reused = true;
        return 0;
    }
    for (int attempt = 1;; attempt++) {
        int st = pg_ctl(pg, "start", NULL);
        if (st == 0)
            break;
        /* the lock file of a killed postmaster blocks the start until
         * that process is gone; wait for it a little */
        if (attempt < PGEMBED_RETRIES && has_pid_file(pg)) {
            sleep_ms(1000);
            continue;
        }
        char tail[512];
        log_tail(pg->logpath, tail, sizeof tail);
        snprintf(err, errlen, "pg_ctl start of %s failed (%s %d): %s (log: %s)", pg->pgdata,
                 st < 0 ? "error" : "exit", st, tail, pg->logpath);
        return SBX_EUNAVAIL;
    }
    return 0;
}

int pgembed_start(const char *data_dir, const char *bindir, pgembed_t **ret, char *err, size_t errlen)
{
    pgembed_t *pg = NULL;
    bool started = false;
    int r;

    if (!data_dir || !*data_dir) {
        snprintf(err, errlen, "the embedded PostgreSQL needs a data directory");
        return SBX_EINVAL;
    }
    pg = calloc(1, sizeof *pg);
    if (!pg || !(pg->envp = pgembed_env_without_pg())) {
        snprintf(err, errlen, "out of memory");
        r = SBX_ENOMEM;
        goto cleanup;
    }
    if ((r = choose_user(pg, err, errlen)) < 0)
        goto cleanup;
    if ((r = choose_location(pg, data_dir, err, errlen)) < 0)
        goto cleanup;

    char version[32];
    cluster_version(pg->pgdata, version, sizeof version);
    if ((r = choose_bindir(pg, bindir, version, err, errlen)) < 0)
        goto cleanup;
    if ((r = prepare_dirs(pg, err, errlen)) < 0)
        goto cleanup;

    if (!*version) {
        log_debug(PGEMBED_COMPONENT, "initdb %s with %s", pg->pgdata, pg->bindir);
        if ((r = run_initdb(pg, err, errlen)) < 0)
            goto cleanup;
    }
    if ((r = write_conf(pg)) < 0) {
        snprintf(err, errlen, "cannot write the settings of %s: %s", pg->pgdata,
                 r == SBX_EIO ? strerror(errno) : sbx_strerror(r));
        goto cleanup;
    }

    started = true;
    if ((r = start_cluster(pg, err, errlen)) < 0)
        goto cleanup;

    if (make_conninfo(pg, PGEMBED_DB, "", pg->conninfo, sizeof pg->conninfo) < 0) {
        snprintf(err, errlen, "socket directory path too long");
        r = SBX_ETOOBIG;
        goto cleanup;
    }
    if ((r = create_database(pg, err, errlen)) < 0)
        goto cleanup;

    *ret = pg;
    pg = NULL;
    r = 0;
cleanup:
    if (pg) {
        if (started)
            pg_ctl(pg, "stop", "fast");
        free(pg->envp);
        free(pg);
    }
    return r;
}

const char *pgembed_conninfo(const pgembed_t *pg) { return pg ? pg->conninfo : ""; }

const char *pgembed_location(const pgembed_t *pg) { return pg ? pg->location : "(none)"; }

const char *pgembed_bindir(const pgembed_t *pg) { return pg ? pg->bindir : ""; }

bool pgembed_reused(const pgembed_t *pg) { return pg && pg->reused; }

void pgembed_release(pgembed_t *pg)
{
    if (!pg)
        return;
    free(pg->envp);
    free(pg);
}

void pgembed_stop(pgembed_t *pg)
{
    if (!pg)
        return;
    int st = pg_ctl(pg, "stop", "fast");
    if (st != 0 && pg_ctl(pg, "status", NULL) == 0) {
        log_debug(PGEMBED_COMPONENT, "fast stop of %s failed (%d), stopping immediately", pg->pgdata, st);
        pg_ctl(pg, "stop", "immediate");
    }
    free(pg->envp);
    free(pg);
}
