/* sandboxd: the daemon (all | controller | worker) and its admin commands
 * (migrate, token create). Start-up is a fixed sequence: settings →
 * libraries → database → controller → worker; signals are waited for on the
 * main thread, which then shuts down in reverse order. */
#include "agent.h"
#include "backup.h"
#include "config.h"
#include "controller.h"
#include "db.h"
#include "errors.h"
#include "log.h"
#include "migrate.h"
#include "pgembed.h"
#include "store.h"
#include "token.h"
#include "version.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


/* One line per setting whose roles meet mask ("--name  help (default: V)"). */
static void usage_flags(FILE *out, unsigned mask)
{
    const cfg_setting_t *s = cfg_settings();
    for (int i = 0; i < CFG__COUNT; i++) {
        if (!(cfg_setting_roles((cfg_key_t)i) & mask))
            continue;
        char flag[64];
        size_t o = 0;
        for (const char *p = s[i].name; *p && o < sizeof flag - 1; p++)
            flag[o++] = *p == '_' ? '-' : *p;
        flag[o] = '\0';
        fprintf(out, "  --%-28s %s (default: %s)\n", flag, s[i].help, *s[i].default_value ? s[i].default_value : "\"\"");
    }
}

static const char usage_common[] =
    "  --config FILE                  read settings from FILE\n"
    "  --print-config                 print the effective settings and exit\n"
    "  --help, --version\n"
    "\n"
    "exit codes: 0 ok, 1 runtime failure, 2 usage or configuration error\n";

static const char usage_settings_note[] =
    "flags (each also SANDBOX_<NAME> in the environment, or `name = value` in --config FILE):\n";

static void usage(FILE *out)
{
    fputs("usage: sandboxd COMMAND [flags]\n"
          "\n"
          "commands:\n"
          "  all          controller and worker in one process (embedded PostgreSQL without --database-url)\n"
          "  controller   the HTTP API, policy, placement and reconcile loops\n"
          "  worker       runs sandboxes in Docker for a controller\n"
          "  migrate      applies pending database migrations\n"
          "  backup FILE  writes the database to FILE (the embedded one too), while it runs\n"
          "  restore FILE replaces the database with a backup (controllers stopped)\n"
          "  token create creates an API token and prints it once\n"
          "\n"
          "`sandboxd COMMAND --help` lists only the flags of that command.\n"
          "\n",
          out);
    fputs(usage_settings_note, out);
    usage_flags(out, ~0u);
    fputs(usage_common, out);
    fputs("\ntoken create flags: --tenant T --role admin|member|worker [--name N] [--worker NAME] "
          "(needs --database-url)\n", out);
}

/* The help of one command. Returns 0, or SBX_ENOTFOUND for an unknown command. */
static int usage_command(FILE *out, const char *cmd)
{
    static const struct {
        const char *name, *text;
        unsigned mask;
    } cmds[] = {
        { "all",
          "usage: sandboxd all [flags]\n"
          "\n"
          "Runs the controller and a worker in one process; without --database-url it also runs\n"
          "an embedded PostgreSQL cluster in --data-dir. Writes the bootstrap admin token to\n"
          "DATA_DIR/admin.token (mode 600; printed once when the output is a terminal).\n",
          CFG_ROLE_CONTROLLER | CFG_ROLE_WORKER | CFG_ROLE_EMBEDDED },
        { "controller",
          "usage: sandboxd controller --database-url URL [flags]\n"
          "\n"
          "Serves the HTTP API and the route listener, runs policy, placement and the\n"
          "reconcile loop against PostgreSQL (migrating it first).\n",
          CFG_ROLE_CONTROLLER },
        { "worker",
          "usage: sandboxd worker --controller-url URL --worker-token TOKEN [flags]\n"
          "\n"
          "Registers with a controller, takes leases and runs sandboxes as Docker containers\n"
          "(runc, or gVisor's runsc when dockerd has it registered).\n",
          CFG_ROLE_WORKER },
        { "migrate",
          "usage: sandboxd migrate --database-url URL [--status | --dry-run]\n"
          "\n"
          "Applies the pending database migrations and exits.\n"
          "\n"
          "  --status                       lists every migration, applied (when) or pending, and\n"
          "                                 what the database holds that this sandboxd does not know;\n"
          "                                 changes nothing\n"
          "  --dry-run                      --status, then applies the pending ones in one\n"
          "                                 transaction and rolls it back: whether they apply\n"
          "\n"
          "Exit codes: 0 applied, or (--status, --dry-run) the schema is current; 1 the migrate\n"
          "failed, or migrations are pending (--dry-run: and apply cleanly), or the schema does not\n"
          "match this sandboxd; 2 usage, or a dry run that failed; 3 the database could not be read.\n",
          CFG_ROLE_DATABASE },
        { "backup",
          "usage: sandboxd backup FILE [--database-url URL | --data-dir DIR]\n"
          "\n"
          "Writes a consistent copy of the controller's database to FILE (\"-\": stdout) with\n"
          "PostgreSQL's pg_dump (custom format, mode 600; FILE.partial until it is whole). It\n"
          "may run while controllers do. Without --database-url it backs up the embedded\n"
          "database of `sandboxd all` in --data-dir, running or not.\n"
          "\n"
          "Exit codes: 0 written; 1 the backup failed (nothing is left at FILE); 2 usage.\n",
          CFG_ROLE_DATABASE | CFG_ROLE_EMBEDDED },
        { "restore",
          "usage: sandboxd restore FILE [--database-url URL | --data-dir DIR]\n"
          "\n"
          "Replaces everything the database holds with a backup, all or nothing, then migrates\n"
          "it to this sandboxd's schema. Stop every controller (and `sandboxd all`) using the\n"
          "database first: it is refused while another sandboxd is connected. Workers may run\n"
          "on: when the controller starts again it reconciles them with what the backup says\n"
          "(docs/operations.md#backup-and-restore).\n"
          "\n"
          "Exit codes: 0 restored; 1 the restore failed (the database is as it was); 2 usage,\n"
          "or FILE is not a sandboxd backup; 3 another sandboxd is connected.\n",
          CFG_ROLE_DATABASE | CFG_ROLE_EMBEDDED },
        { "token",
          "usage: sandboxd token create --database-url URL --tenant T --role admin|member|worker [--name N]\n"
          "                             [--worker NAME]\n"
          "\n"
          "Creates an API token (migrating the database first) and prints its secret once.\n"
          "\n"
          "  --tenant T                     tenant the token belongs to (created when missing)\n"
          "  --role ROLE                    admin, member or worker\n"
          "  --name N                       a name to recognise the token by\n"
          "  --worker NAME                  (role worker) the one worker name the token may register and act\n"
          "                                 as; without it the token is bound at its first registration\n",
          CFG_ROLE_DATABASE },
    };
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        if (strcmp(cmds[i].name, cmd) != 0)
            continue;
        fputs(cmds[i].text, out);
        fputs("\n", out);
        fputs(usage_settings_note, out);
        usage_flags(out, cmds[i].mask);
        fputs(usage_common, out);
        return 0;
    }
    return SBX_ENOTFOUND;
}

/* When the arguments ask for help (--help, -h, or `help` as the command),
 * prints it before anything else is read (a bad config file does not hide
 * it). Returns 1 when help was printed (exit 0), 2 for the help of an
 * unknown command, 0 when no help was asked for. */
static int help_requested(int argc, char **argv)
{
    bool help = false;
    const char *cmd = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            help = true;
        } else if (strncmp(a, "--", 2) == 0) {
            /* every other flag but these takes a value */
            if (!strchr(a, '=') && strcmp(a, "--print-config") != 0 && strcmp(a, "--version") != 0)
                i++;
        } else if (!cmd && strcmp(a, "help") == 0) {
            help = true;
        } else if (!cmd) {
            cmd = a;
        }
    }
    if (!help)
        return 0;
    if (!cmd) {
        usage(stdout);
        return 1;
    }
    if (usage_command(stdout, cmd) < 0) {
        fprintf(stderr, "sandboxd: unknown command \"%s\" (see sandboxd --help)\n", cmd);
        return 2;
    }
    return 1;
}

typedef struct opts {
    const char *command;
    const char *subcommand;
    bool print_config;
    bool status, dry_run; /* migrate --status, --dry-run */
    const char *tenant, *role, *name, *worker;
} opts_t;

/* Parses flags into cfg and opts. Returns 0, 1 (help/version printed) or 2. */
static int parse_args(int argc, char **argv, cfg_t *cfg, opts_t *o)
{
    const char *config_file = getenv("SANDBOX_CONFIG");
    char err[512];
    int help = help_requested(argc, argv);
    if (help)
        return help;
    /* First pass: find --config so the file is read before flags override it. */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            config_file = argv[i + 1];
        else if (strncmp(argv[i], "--config=", 9) == 0)
            config_file = argv[i] + 9;
    }
    if (config_file && cfg_load_file(cfg, config_file, err, sizeof err) < 0) {
        fprintf(stderr, "sandboxd: %s\n", err);
        return 2;
    }
    if (cfg_load_env(cfg, err, sizeof err) < 0) {
        fprintf(stderr, "sandboxd: %s\n", err);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0 || strcmp(a, "help") == 0) {
            usage(stdout);
            return 1;
        }
        if (strcmp(a, "--version") == 0) {
            printf("sandboxd %s\n", SBX_VERSION);
            return 1;
        }
        if (strcmp(a, "--print-config") == 0) {
            o->print_config = true;
            continue;
        }
        if (strcmp(a, "--status") == 0 || strcmp(a, "--dry-run") == 0) {
            *(a[2] == 's' ? &o->status : &o->dry_run) = true;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            if (!o->command)
                o->command = a;
            else if (!o->subcommand)
                o->subcommand = a;
            else {
                fprintf(stderr, "sandboxd: unexpected argument \"%s\" (see sandboxd --help)\n", a);
                return 2;
            }
            continue;
        }
        const char *eq = strchr(a, '=');
        const char *val = NULL;
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(eq ? (size_t)(eq - a) : strlen(a)), a);
        if (eq)
            val = eq + 1;
        else if (i + 1 < argc)
            val = argv[++i];
        if (!val) {
            fprintf(stderr, "sandboxd: %s needs a value (see sandboxd --help)\n", name);
            return 2;
        }
        if (strcmp(name, "--config") == 0)
            continue;
        if (strcmp(name, "--tenant") == 0) { o->tenant = val; continue; }
        if (strcmp(name, "--role") == 0) { o->role = val; continue; }
        if (strcmp(name, "--name") == 0) { o->name = val; continue; }
        if (strcmp(name, "--worker") == 0) { o->worker = val; continue; }
        int k = cfg_flag_lookup(name);
        if (k < 0) {
            fprintf(stderr, "sandboxd: unknown flag %s (see sandboxd --help)\n", name);
            return 2;
        }
        if (cfg_set(cfg, cfg_settings()[k].name, val, "flag", err, sizeof err) < 0) {
            fprintf(stderr, "sandboxd: %s\n", err);
            return 2;
        }
    }
    return 0;
}

static int wait_for_signal(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    int sig = 0;
    sigwait(&set, &sig);
    log_info("sandboxd", "received %s, shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
    return sig;
}

static int cmd_migrate(const cfg_t *cfg, const opts_t *o)
{
    const char *url = cfg_str(cfg, CFG_DATABASE_URL);
    if (!*url) {
        fprintf(stderr, "sandboxd: migrate needs --database-url (or SANDBOX_DATABASE_URL)\n");
        return 2;
    }
    char err[512];
    PGconn *c = db_connect(url, err, sizeof err);
    if (!c) {
        fprintf(stderr, "sandboxd: cannot connect to the database: %s\n", err);
        return o->status || o->dry_run ? 3 : 1;
    }
    if (o->status || o->dry_run) {
        int st = migrate_status(c, stdout, o->dry_run, err, sizeof err);
        PQfinish(c);
        if (st < 0) {
            fprintf(stderr, "sandboxd: migrate: %s\n", err);
            return 3;
        }
        return st;
    }
    int applied = 0;
    int rc = migrate_apply(c, &applied, err, sizeof err);
    PQfinish(c);
    if (rc < 0) {
        fprintf(stderr, "sandboxd: migrate failed: %s\n", err);
        return 1;
    }
    printf("applied %d migration(s); schema is current\n", applied);
    return 0;
}

/* backup FILE | restore FILE: the database of --database-url, or without
 * one the embedded cluster in --data-dir (a running `sandboxd all`'s is
 * used and left running; one this command started is stopped again). */
static int cmd_backup_restore(const cfg_t *cfg, const opts_t *o, bool restore)
{
    const char *cmd = restore ? "restore" : "backup";
    if (!o->subcommand) {
        fprintf(stderr, "sandboxd: usage: sandboxd %s FILE [--database-url URL | --data-dir DIR] (see sandboxd %s "
                        "--help)\n", cmd, cmd);
        return 2;
    }
    const char *conninfo = cfg_str(cfg, CFG_DATABASE_URL), *bindir = cfg_str(cfg, CFG_POSTGRES_BINDIR);
    const char *data_dir = cfg_str(cfg, CFG_DATA_DIR);
    char err[1024];
    pgembed_t *pg = NULL;
    if (!*conninfo) {
        struct stat st;
        if (stat(data_dir, &st) < 0) {
            fprintf(stderr, "sandboxd: %s: no --database-url, and no embedded database in %s (%s)\n", cmd, data_dir,
                    strerror(errno));
            return 2;
        }
        if (pgembed_start(data_dir, bindir, &pg, err, sizeof err) < 0) {
            fprintf(stderr, "sandboxd: %s: the embedded PostgreSQL of %s does not start: %s\n", cmd, data_dir, err);
            return 1;
        }
        conninfo = pgembed_conninfo(pg);
        bindir = pgembed_bindir(pg);
    }
    int rc, code = 0;
    if (restore) {
        int migrated = 0;
        rc = backup_restore(conninfo, bindir, o->subcommand, &migrated, err, sizeof err);
        if (rc == 0)
            printf("restored %s; %d migration(s) applied after it; schema is current\n", o->subcommand, migrated);
    } else {
        int64_t bytes = 0;
        rc = backup_dump(conninfo, bindir, o->subcommand, &bytes, err, sizeof err);
        if (rc == 0 && strcmp(o->subcommand, "-") != 0)
            printf("backed up to %s (%lld bytes); restore with: sandboxd restore %s\n", o->subcommand,
                   (long long)bytes, o->subcommand);
    }
    if (rc < 0) {
        fprintf(stderr, "sandboxd: %s: %s\n", cmd, err);
        code = rc == SBX_EINVAL ? 2 : rc == SBX_ECONFLICT ? 3 : 1;
    }
    if (pgembed_reused(pg))
        pgembed_release(pg);
    else
        pgembed_stop(pg);
    return code;
}

static int cmd_token_create(const cfg_t *cfg, const opts_t *o)
{
    const char *url = cfg_str(cfg, CFG_DATABASE_URL);
    role_t role;
    if (!o->subcommand || strcmp(o->subcommand, "create") != 0) {
        fprintf(stderr, "sandboxd: usage: sandboxd token create --database-url URL --tenant T --role admin|member|worker [--name N]\n");
        return 2;
    }
    if (!*url || !o->tenant || !o->role) {
        fprintf(stderr, "sandboxd: token create needs --database-url, --tenant and --role\n");
        return 2;
    }
    if (role_parse(o->role, &role) < 0) {
        fprintf(stderr, "sandboxd: --role must be admin, member or worker\n");
        return 2;
    }
    if (o->worker && (role != ROLE_WORKER || !store_worker_name_valid(o->worker))) {
        fprintf(stderr, "sandboxd: --worker needs --role worker and a worker name (1 to %d letters, digits, . _ or -)\n",
                SBX_MAX_NAME_BYTES);
        return 2;
    }
    char err[512], secret[SBX_TOKEN_MAX];
    PGconn *c = db_connect(url, err, sizeof err);
    if (!c) {
        fprintf(stderr, "sandboxd: cannot connect to the database: %s\n", err);
        return 1;
    }
    int rc = migrate_apply(c, NULL, err, sizeof err);
    if (rc == 0)
        rc = store_token_create(c, o->tenant, role, o->name, o->worker, secret, err, sizeof err);
    PQfinish(c);
    if (rc < 0) {
        fprintf(stderr, "sandboxd: token create failed: %s\n", err);
        return 1;
    }
    printf("%s\n", secret);
    sodium_memzero(secret, sizeof secret);
    return 0;
}

/* Reads a token file, or creates a token and writes the file (mode 600).
 * A worker token (worker_name not NULL) bound to another worker name is
 * replaced by one bound to worker_name (the embedded worker was renamed).
 * ret_created tells whether it is new. */
static int token_file(const char *conninfo, const char *path, const char *tenant, role_t role, const char *name,
                      const char *worker_name, char ret[SBX_TOKEN_MAX], bool *ret_created)
{
    *ret_created = false;
    FILE *f = fopen(path, "re");
    if (f) {
        char buf[SBX_TOKEN_MAX + 2] = "";
        bool ok = fgets(buf, sizeof buf, f) != NULL;
        fclose(f);
        buf[strcspn(buf, "\r\n")] = '\0';
        char id[SBX_ID_MAX];
        if (ok && token_parse_id(buf, id) == 0) {
            /* Still valid in this database? (a new database forgets it) */
            char err[256], hash[72];
            auth_info_t ai;
            PGconn *c = db_connect(conninfo, err, sizeof err);
            int64_t left_ms;
            int rc = c ? store_token_find(c, id, hash, &ai, &left_ms) : SBX_EDB;
            if (c)
                PQfinish(c);
            bool renamed = rc == 0 && worker_name && ai.worker_name[0] && strcmp(ai.worker_name, worker_name) != 0;
            if (rc == 0 && token_verify(buf, hash) && !renamed) {
                memcpy(ret, buf, SBX_TOKEN_MAX);
                return 0;
            }
            if (renamed)
                log_info("sandboxd", "%s acts for worker %s, not %s: making a token for %s", path, ai.worker_name,
                         worker_name, worker_name);
        }
    }
    char err[512];
    PGconn *c = db_connect(conninfo, err, sizeof err);
    if (!c) {
        log_error("sandboxd", "cannot connect to the database: %s", err);
        return SBX_EUNAVAIL;
    }
    int rc = store_token_create(c, tenant, role, name, worker_name, ret, err, sizeof err);
    PQfinish(c);
    if (rc < 0) {
        log_error("sandboxd", "failed to create the %s token: %s", role_name(role), err);
        return rc;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        log_error("sandboxd", "failed to write %s: %s", path, strerror(errno));
        return SBX_EIO;
    }
    size_t n = strlen(ret);
    bool wrote = write(fd, ret, n) == (ssize_t)n && write(fd, "\n", 1) == 1;
    close(fd);
    if (!wrote) {
        log_error("sandboxd", "failed to write %s", path);
        return SBX_EIO;
    }
    *ret_created = true;
    return 0;
}

/* For `sandboxd all`'s first screen: one line on the gvisor class, and
 * when the worker does not offer it, the reason and how to turn it on. */
static void print_gvisor_line(const cfg_t *cfg, const agent_t *agent)
{
    const char *probe = agent_probe_result(agent, ISO_GVISOR);
    const char *rtname = cfg_str(cfg, CFG_WORKER_GVISOR_RUNTIME);
    if (probe && strncmp(probe, "ok", 2) == 0) {
        printf("gVisor: offered (%s)\n", probe);
    } else if (!*rtname) {
        printf("gVisor: %s; to turn it on set worker_gvisor_runtime = runsc (--worker-gvisor-runtime runsc)\n",
               probe ? probe : "not offered");
    } else if (probe && strstr(probe, "has no runtime named")) {
        printf("gVisor: not offered: dockerd has no runtime named %s. To turn it on: tools/run.sh registers it "
               "(as root), or merge {\"runtimes\":{\"%s\":{\"path\":\"/usr/bin/runsc\",\"runtimeArgs\":"
               "[\"--network=none\"]}}} into /etc/docker/daemon.json, run `kill -HUP $(pidof dockerd)` and "
               "restart sandboxd (apt-get install runsc if /usr/bin/runsc is missing)\n",
               rtname, rtname);
    } else {
        printf("gVisor: %s. Check it with `docker run --rm --runtime=%s sandbox/busybox:latest true` and restart "
               "sandboxd\n", probe ? probe : "not offered", rtname);
    }
    fflush(stdout);
}

/* true when an executable named name is in one of PATH's directories. */
static bool in_path(const char *name)
{
    const char *path = getenv("PATH");
    char dir[1024];
    while (path && *path) {
        size_t n = strcspn(path, ":");
        if (n > 0 && n < sizeof dir - 64) {
            snprintf(dir, sizeof dir, "%.*s/%s", (int)n, path, name);
            if (access(dir, X_OK) == 0)
                return true;
        }
        path += n + (path[n] == ':');
    }
    return false;
}

/* true when every directory on the way to path (absolute or relative to
 * the working directory) lets others pass (o+x). */
static bool others_reach(const char *path)
{
    char full[1024];
    if (path[0] == '/')
        snprintf(full, sizeof full, "%s", path);
    else if (getcwd(full, sizeof full) == NULL || strlen(full) + strlen(path) + 2 > sizeof full)
        return false;
    else
        snprintf(full + strlen(full), sizeof full - strlen(full), "/%s", path);
    for (char *p = full + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            struct stat st;
            bool ok = stat(full, &st) == 0 && (st.st_mode & S_IXOTH);
            *p = c;
            if (!ok)
                return false;
            if (c == '\0')
                return true;
        }
    }
}

/* FNV-1a of a path: one VM state dir per data dir. */
static unsigned path_hash(const char *s)
{
    unsigned h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* Why `sandboxd all` cannot offer microvm by itself ("" when it can): the
 * driver sandbox-vmm beside this program, QEMU, a /boot kernel and root (QEMU
 * is started as an unprivileged user). driver gets sandbox-vmm's path. */
static const char *microvm_missing(char *driver, size_t cap)
{
    char self[1024];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return "cannot find this program's directory";
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    *slash = '\0';
    if ((size_t)snprintf(driver, cap, "%s/sandbox-vmm", self) >= cap || access(driver, X_OK) != 0)
        return "sandbox-vmm is not installed beside sandboxd";
    if (geteuid() != 0)
        return "sandboxd does not run as root (QEMU is started as an unprivileged user)";
    if (!in_path("qemu-system-x86_64") || !in_path("qemu-img"))
        return "qemu-system-x86_64 or qemu-img is not installed (apt-get install qemu-system-x86 qemu-utils)";
    DIR *boot = opendir("/boot");
    struct dirent *e;
    bool kernel = false;
    while (boot && !kernel && (e = readdir(boot)) != NULL)
        kernel = strncmp(e->d_name, "vmlinuz-", 8) == 0;
    if (boot)
        closedir(boot);
    if (!kernel)
        return "no kernel in /boot (apt-get install linux-image-amd64)";
    return "";
}

/* `sandboxd all` with worker_runtime unset: when it can, the embedded worker
 * runs docker and the microVM driver (worker_runtime = docker,external,
 * state under DATA_DIR/vmm), so microvm is offered beside container without
 * a flag; else one line says why not. Never fails the start. */
/* sandboxd all without secrets_key_file: the data dir's secrets.key, made
 * once (64 hex digits of a random key, mode 0600). */
static int all_secrets_key(cfg_t *cfg, const char *data_dir)
{
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/secrets.key", data_dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
        unsigned char key[32];
        char hex[65];
        randombytes_buf(key, sizeof key);
        sodium_bin2hex(hex, sizeof hex, key, sizeof key);
        hex[64] = '\n';
        bool ok = write(fd, hex, 65) == 65 && fsync(fd) == 0;
        sodium_memzero(key, sizeof key);
        sodium_memzero(hex, sizeof hex);
        if (close(fd) < 0 || !ok) {
            fprintf(stderr, "sandboxd: cannot write %s: %s\n", path, strerror(errno));
            unlink(path);
            return -1;
        }
    } else if (errno != EEXIST) {
        fprintf(stderr, "sandboxd: cannot create %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (cfg_set(cfg, "secrets_key_file", path, "all", err, sizeof err) < 0) {
        fprintf(stderr, "sandboxd: %s\n", err);
        return -1;
    }
    return 0;
}

static void embed_microvm(cfg_t *cfg, const char *data_dir)
{
    if (strcmp(cfg->sources[CFG_WORKER_RUNTIME], "default") != 0) {
        if (strstr(cfg_str(cfg, CFG_WORKER_RUNTIME), "external") == NULL)
            printf("microVM: not offered: worker_runtime = %s names no external driver\n",
                   cfg_str(cfg, CFG_WORKER_RUNTIME));
        return;
    }
    char driver[1024], state[1024], cmd[2200], err[256], abs_dir[PATH_MAX];
    const char *why = microvm_missing(driver, sizeof driver);
    if (realpath(data_dir, abs_dir) == NULL) /* the driver takes an absolute state dir */
        why = "cannot resolve the data dir's path";
    else
        data_dir = abs_dir;
    if (*why)
        ;
    else if ((size_t)snprintf(state, sizeof state, "%s/vmm", data_dir) >= sizeof state)
        why = "the data dir's path is too long";
    else if (!others_reach(data_dir)) /* QEMU's unprivileged user must reach its VM's directory */
        snprintf(state, sizeof state, "/var/lib/sandbox/vmm-%08x", path_hash(data_dir));
    if (!*why && strncmp(state, "/var/lib/sandbox/", 17) == 0 && mkdir("/var/lib/sandbox", 0711) < 0 &&
        errno != EEXIST)
        why = "cannot create /var/lib/sandbox for the VM state";
    if (!*why && mkdir(state, 0711) < 0 && errno != EEXIST)
        why = "cannot create the VM state dir in the data dir";
    if (!*why && (strchr(driver, '"') || strchr(driver, '\\') || strchr(state, '"') || strchr(state, '\\')))
        why = "the driver's or data dir's path holds a quote or backslash";
    if (*why) {
        printf("microVM: not offered: %s\n", why);
        log_info("sandboxd", "microvm not offered: %s", why);
        return;
    }
    snprintf(cmd, sizeof cmd, "[\"%s\",\"--state\",\"%s\"]", driver, state);
    if (cfg_set(cfg, "worker_runtime", "docker,external", "all", err, sizeof err) < 0 ||
        cfg_set(cfg, "worker_driver_command", cmd, "all", err, sizeof err) < 0) {
        printf("microVM: not offered: %s\n", err);
        return;
    }
    printf("microVM: the worker runs %s (state in %s); it offers microvm once its probe VM ran "
           "(`sandbox workers` shows the probe)\n", driver, state);
    fflush(stdout);
}

static int run_daemon(cfg_t *cfg, bool with_controller, bool with_worker)
{
    int code = 1;
    pgembed_t *pg = NULL;
    controller_t *ctl = NULL;
    agent_t *agent = NULL;
    char err[1024];
    char worker_token[SBX_TOKEN_MAX] = "";
    const char *conninfo = cfg_str(cfg, CFG_DATABASE_URL);
    const char *data_dir = cfg_str(cfg, CFG_DATA_DIR);

    if (with_controller && !with_worker && !*conninfo) {
        fprintf(stderr, "sandboxd: controller needs --database-url (or SANDBOX_DATABASE_URL); "
                        "`sandboxd all` runs an embedded PostgreSQL instead\n");
        return 2;
    }
    if (with_controller && with_worker) {
        /* 0711: the embedded cluster's unprivileged user must traverse it;
         * the token files inside are 0600. */
        if (mkdir(data_dir, 0711) < 0 && errno != EEXIST) {
            fprintf(stderr, "sandboxd: cannot create data dir %s: %s\n", data_dir, strerror(errno));
            return 1;
        }
        if (!*conninfo) {
            if (pgembed_start(data_dir, cfg_str(cfg, CFG_POSTGRES_BINDIR), &pg, err, sizeof err) < 0) {
                fprintf(stderr, "sandboxd: embedded PostgreSQL failed to start: %s\n", err);
                return 1;
            }
            conninfo = pgembed_conninfo(pg);
            log_info("sandboxd", "embedded PostgreSQL running in %s", pgembed_location(pg));
        }
        if (!*cfg_str(cfg, CFG_SECRETS_KEY_FILE) && all_secrets_key(cfg, data_dir) < 0)
            return 1;
    }
    if (with_controller) {
        if (controller_start(cfg, conninfo, &ctl, err, sizeof err) < 0) {
            fprintf(stderr, "sandboxd: controller failed to start: %s\n", err);
            goto cleanup;
        }
    }
    if (with_controller && with_worker) {
        /* The bootstrap admin token, shown once and kept in the data dir. */
        char admin[SBX_TOKEN_MAX], path[1024];
        bool created = false;
        snprintf(path, sizeof path, "%s/admin.token", data_dir);
        if (token_file(conninfo, path, "default", ROLE_ADMIN, "bootstrap admin", NULL, admin, &created) < 0)
            goto cleanup;
        /* Printed only to a terminal: where output goes to a file or a
         * journal, a secret there would be a secret in the logs. */
        if (created && isatty(STDOUT_FILENO))
            printf("admin token (shown once; also in %s):\n%s\n", path, admin);
        else if (created)
            printf("admin token: created in %s (not printed: the output is not a terminal)\n", path);
        else
            printf("admin token: in %s\n", path);
        /* With api_tls_cert the embedded worker reaches its controller over
         * TLS too, verified by worker_controller_ca (default: that
         * certificate itself, which must then name 127.0.0.1). */
        bool api_tls = *cfg_str(cfg, CFG_API_TLS_CERT) != '\0';
        printf("API: %s://127.0.0.1:%d\n", api_tls ? "https" : "http", ctl->port);
        fflush(stdout);
        sodium_memzero(admin, sizeof admin);
        snprintf(path, sizeof path, "%s/worker.token", data_dir);
        char wname[AGENT_NAME_BUF];
        if (agent_worker_name(cfg, wname) < 0) {
            fprintf(stderr, "sandboxd: worker_name is longer than %d bytes\n", SBX_MAX_NAME_BYTES);
            goto cleanup;
        }
        if (token_file(conninfo, path, "default", ROLE_WORKER, "embedded worker", wname, worker_token, &created) < 0)
            goto cleanup;
        char url[128];
        snprintf(url, sizeof url, "%s://127.0.0.1:%d", api_tls ? "https" : "http", ctl->port);
        cfg_set(cfg, "controller_url", url, "all", err, sizeof err);
        if (api_tls && !*cfg_str(cfg, CFG_WORKER_CONTROLLER_CA))
            cfg_set(cfg, "worker_controller_ca", cfg_str(cfg, CFG_API_TLS_CERT), "all", err, sizeof err);
        embed_microvm(cfg, data_dir);
    }
    if (with_worker) {
        if (agent_new(cfg, *worker_token ? worker_token : NULL, &agent, err, sizeof err) < 0) {
            fprintf(stderr, "sandboxd: worker failed to start: %s\n", err);
            goto cleanup;
        }
        if (with_controller)
            print_gvisor_line(cfg, agent);
        char aerr[600];
        if (agent_start(agent, aerr, sizeof aerr) < 0) {
            fprintf(stderr, "sandboxd: worker failed to start: %s\n", aerr);
            goto cleanup;
        }
    }
    log_info("sandboxd", "ready");
    wait_for_signal();
    code = 0;
cleanup:
    /* Reverse order: the worker finishes and reports while the controller
     * still listens; then the controller; then its database. */
    if (agent) {
        agent_stop(agent);
        agent_free(agent);
    }
    controller_stop(ctl);
    if (pg)
        pgembed_stop(pg);
    sodium_memzero(worker_token, sizeof worker_token);
    if (code == 0)
        log_info("sandboxd", "stopped");
    return code;
}

int main(int argc, char **argv)
{
    cfg_t cfg;
    opts_t o = { 0 };
    if (cfg_init(&cfg) < 0) {
        fprintf(stderr, "sandboxd: out of memory\n");
        return 1;
    }
    int pr = parse_args(argc, argv, &cfg, &o);
    if (pr != 0) {
        cfg_release(&cfg);
        return pr == 1 ? 0 : 2;
    }
    if (o.print_config) {
        cfg_print(&cfg, stdout);
        cfg_release(&cfg);
        return 0;
    }
    if (!o.command) {
        usage(stderr);
        cfg_release(&cfg);
        return 2;
    }
    if ((o.status || o.dry_run) && (strcmp(o.command, "migrate") != 0 || (o.status && o.dry_run))) {
        fprintf(stderr, "sandboxd: %s goes with migrate, alone (see sandboxd migrate --help)\n",
                o.status ? "--status" : "--dry-run");
        cfg_release(&cfg);
        return 2;
    }
    log_level_t lvl;
    if (log_level_parse(cfg_str(&cfg, CFG_LOG_LEVEL), &lvl) == 0)
        log_set_level(lvl);
    log_format_t lfmt;
    if (log_format_parse(cfg_str(&cfg, CFG_LOG_FORMAT), &lfmt) == 0)
        log_set_format(lfmt);
    if (sodium_init() < 0 || curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
        fprintf(stderr, "sandboxd: cannot initialise libsodium or libcurl\n");
        cfg_release(&cfg);
        return 1;
    }
    /* Signals are taken by sigwait() on the main thread only. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    int code;
    if (strcmp(o.command, "all") == 0)
        code = run_daemon(&cfg, true, true);
    else if (strcmp(o.command, "controller") == 0)
        code = run_daemon(&cfg, true, false);
    else if (strcmp(o.command, "worker") == 0)
        code = run_daemon(&cfg, false, true);
    else if (strcmp(o.command, "migrate") == 0)
        code = cmd_migrate(&cfg, &o);
    else if (strcmp(o.command, "token") == 0)
        code = cmd_token_create(&cfg, &o);
    else if (strcmp(o.command, "backup") == 0 || strcmp(o.command, "restore") == 0)
        code = cmd_backup_restore(&cfg, &o, o.command[0] == 'r');
    else {
        fprintf(stderr, "sandboxd: unknown command \"%s\" (see sandboxd --help)\n", o.command);
        code = 2;
    }
    curl_global_cleanup();
    cfg_release(&cfg);
    return code;
}
