/* What the files of the `sandbox` CLI share (docs/cli.md: the flags, output
 * and exit codes are a stable contract): the options, the flag and command
 * tables, the connection, output helpers and each group's handlers. */
#ifndef SBX_CLI_H
#define SBX_CLI_H

#include <json-c/json.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "client.h"
#include "httpc.h"

#define CLI_DEFAULT_WAIT_TIMEOUT 900      /* seconds, wait / --wait */
#define CLI_POLL_WAIT_MAX        30       /* ?wait= per long-poll */
#define CLI_ARG_ID_MAX           128      /* an id argument; real ids are < SBX_ID_MAX */
#define CLI_IDEM_KEY_MAX         128
#define CLI_WAIT_TIMEOUT_MAX     (7 * 24 * 3600) /* --timeout of a wait */

/* ---------------------------------------------------------------- options */

typedef client_opt_int_t num_opt_t;

/* Everything any command may be given; each command's flag table says which
 * of these it accepts. */
/* --exclude given at most this many times, each pattern at most this long. */
#define CLI_EXCLUDES_MAX 64
/* positional arguments a command takes at most (delete ID...) */
#define CLI_POS_MAX 256
#define CLI_EXCLUDE_MAX_BYTES 1024

typedef struct opts {
    const char *url, *token, *ca_file, *context;
    const char *tenant, *image, *network, *idem_key, *cwd, *role, *name, *policy, *isolation, *auth;
    const char *sandbox, *operation, *kind;  /* events filters */
    const char *worker;                      /* tokens create: the worker name a worker token acts for */
    const char *upload;                      /* create: LOCAL:/path to upload once running */
    const char *cursor;                      /* list --after: a previous answer's next */
    const char *phase;                       /* list --phase P[,P2]: only sandboxes in those phases */
    const char *from;                        /* create --from: the snapshot to start from */
    const char *name_prefix;                 /* fork --name-prefix P: the forks are named P-1..P-K */
    num_opt_t cpu_millis, memory_mib, disk_mib, ttl, timeout, max_output, limit, port, after, tail, count;
    num_opt_t size;                          /* pools create: members kept ready */
    num_opt_t size_mib;                      /* volumes create --size-mib */
    const char *output;                      /* volumes download -o FILE */
    const char *exec_user;                   /* exec -u USER[:GROUP] */
    bool untrusted_repo, generated_code, hostile, wait, json, all, read_only_root, hardened, follow;
    bool interactive;                        /* exec -i: send this process's stdin */
    bool tty;                                /* exec -t: on a pseudo-terminal (sandbox shell) */
    bool detach;                             /* exec --detach: print the operation id, do not wait */
    json_object *env, *labels, *selector; /* owned; NULL until a flag adds to them */
    const char *excludes[CLI_EXCLUDES_MAX];  /* cp, create --upload: --exclude PATTERN... */
    int n_excludes;
    bool no_ignore;                          /* create --upload: send .git and .gitignore'd files too */
    bool quiet;                              /* images, list -q: names or ids only */
    bool keep_snapshot;                      /* fork --keep-snapshot: do not delete the snapshot */
    bool memory;                             /* snapshot --memory: the VM's memory too (microvm) */
    bool no_memory;                          /* fork --no-memory: a microvm's files only */
    const char *template_ref;                /* create --template NAME[:VERSION] */
    bool auto_pause;                         /* create --auto-pause: paused, not deleted, when its TTL passes */
    const char *file;                        /* templates build -f DOCKERFILE */
    json_object *build_args;                 /* templates build --build-arg K=V...; owned, NULL until given */
    json_object *volumes;                    /* create --volume NAME:/path[:ro]...; owned, NULL until given */
    json_object *egress;                     /* create, network: --allow/--deny as {"allow":[…],"deny":[…]};
                                              * owned, NULL until given */
    const char *egress_default;              /* --egress-default allow|deny */
    bool netlog;                             /* network --log: its network log */
    json_object *secrets;                    /* create --secret NAME...; owned, NULL until given */
    json_object *hosts;                      /* secrets create --host D...; owned, NULL until given */
    const char *header;                      /* secrets create --header NAME */
    const char *verdict;                     /* network --log --verdict allowed|refused */
    num_opt_t version;                       /* templates delete --version N */
    bool keep_build_sandbox;                 /* templates build --keep-build-sandbox */
    bool server_build;                       /* templates build --server */
    const char *pos[CLI_POS_MAX]; /* positional arguments */
    int npos;
    char **cmd_argv;            /* exec: everything after "--" */
    int cmd_argc;
    bool saw_dashdash;
} opts_t;

typedef enum { F_BOOL, F_STR, F_NUM, F_ENV, F_LABEL, F_SELECTOR, F_EXCLUDE, F_BUILD_ARG, F_VOLUME, F_ALLOW,
               F_DENY, F_UDP, F_STRLIST } flag_kind_t;

typedef struct flag_def {
    const char *name;   /* "--tenant" */
    flag_kind_t kind;
    size_t off;         /* target inside opts_t */
    int64_t min, max;   /* F_NUM bounds */
    const char *short_name; /* "-f", "-e", or NULL */
} flag_def_t;

/* ---------------------------------------------------------------- state */

typedef struct cli {
    const char *cmd;     /* command name, for messages */
    char *url;           /* resolved base URL, owned */
    char *token;         /* resolved token, owned; never printed */
    httpc_t *http;
    client_t client;     /* over http */
    bool json;
} cli_t;

/* One row of the command table: a command, its flags and its help. */
typedef struct command {
    const char *name;
    const char *alias;
    int (*check)(cli_t *cli, opts_t *o);  /* validation that needs no server */
    int (*run)(cli_t *cli, opts_t *o);
    const flag_def_t *flags;
    int max_pos;
    bool takes_argv;
    const char *usage;
    bool offline;        /* runs without a server (no token needed) */
} command_t;

/* ---------------------------------------------------------------- main.c */

/* Prints "sandbox: CMD: problem" and the pointer to help; returns EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* An id argument: present, short, printable; else a usage error. */
int cli_check_id(const char *cmd, const char *what, const char *id);

/* A --tenant-like value: at most SBX_MAX_NAME_BYTES printable bytes. */
int cli_check_name(const char *cmd, const char *flag, const char *v);

/* Matches the controller's rule: 1 to 128 printable ASCII characters. */
int cli_check_idem_key(const char *cmd, const char *k);

/* The subcommand of a group (o->pos[0]): a usage error naming names when
 * it is missing, the check of "list" (no argument), or -1 for any other. */
int cli_check_subcommand(cli_t *cli, const opts_t *o, const char *names);

/* "--timeout needs --wait" when --timeout came without --wait. */
int cli_check_timeout_wait(const char *cmd, const opts_t *o);

/* ---------------------------------------------------------------- call.c */

/* A plain call: on success *ret is a new reference to the response object;
 * otherwise the error is printed and its exit code returned. */
int cli_call(cli_t *cli, const char *method, const char *path, json_object *body, const char *idem_key,
             json_object **ret);

/* A call on prefix<escaped id>suffix; a usage error "WHAT too long" when
 * that does not fit. Otherwise as cli_call. */
int cli_call_id(cli_t *cli, const char *method, const char *prefix, const char *id, const char *suffix,
                const char *what, json_object *body, const char *idem_key, json_object **ret);

/* The end of a tenants, tokens or workers command: rc when the call failed,
 * else the answer printed by cli_print_one_or_list (resp is taken) and 0. */
int cli_print_listing(cli_t *cli, int rc, json_object *resp, const char *one, const char *many,
                      void (*row)(json_object *));

/* Prints a failed call's error (docs/cli.md) and returns its exit code. */
int cli_call_failed(cli_t *cli, const char *method, const char *path, const client_error_t *e);
/* SIGINT and SIGTERM go to handler from here; their old actions into
 * old_int and old_term when not NULL (the caller puts them back). */
void cli_catch_signals(void (*handler)(int), struct sigaction *old_int, struct sigaction *old_term);

/* "cannot reach URL: why" or "URL answered HTTP N" for a retryable failure. */
void cli_problem_text(const cli_t *cli, const client_error_t *e, char *buf, size_t n);

/* prefix, the escaped id and suffix into buf: 0, or EXIT_API (no memory) or
 * EXIT_USAGE (too long), printing nothing. */
int cli_path(char *buf, size_t n, const char *prefix, const char *id, const char *suffix);

/* Waits for an operation until it is terminal or timeout_s passes, noting
 * outages on stderr. *ret_last gets the last {"operation":…} answer (new
 * reference) or NULL. Returns EXIT_OK (succeeded), EXIT_OP_FAILED
 * (failed/cancelled; printed), EXIT_TIMEOUT (printed) or the exit code of
 * an API error (printed). */
int cli_wait(cli_t *cli, const char *op_id, int64_t timeout_s, json_object **ret_last);

/* "sandbox: <problem>; retrying" for the first lost answer of an outage,
 * "sandbox: reconnected" (e NULL) when answers come back. */
void cli_outage_note(cli_t *cli, const client_error_t *e);

/* POST path with body under Idempotency-Key key, sent again with the same
 * key while no answer came or the controller was restarting (retryable),
 * at most attempts times (a backoff between, ended early by an interrupt).
 * 0 with *ret; otherwise as cli_call (the error printed). */
int cli_post_keyed(cli_t *cli, int attempts, const char *path, json_object *body, const char *key, json_object **ret);

/* The --timeout of a wait, or the default. */
int64_t cli_wait_timeout(const opts_t *o);

/* The end of a mutation answered with {"operation":…}: prints its id (or
 * the JSON), or with --wait waits for it and prints 'ID succeeded'. Takes
 * resp. Returns the exit code. */
int cli_print_or_wait_op(cli_t *cli, opts_t *o, json_object *resp, const char *what);

/* ---------------------------------------------------------------- output.c */

/* Writes s with control characters replaced, so that text from the server
 * cannot drive the terminal. NULL prints as "-". */
void cli_put_text(FILE *f, const char *s);
/* Prints "error: CODE: MESSAGE" with the server's text made safe. */
void cli_print_error(const char *code, const char *message);
/* Pretty JSON on stdout. */
void cli_print_json(json_object *o);
/* A sandbox, an operation, and a sandbox's operations, for people. */
void cli_print_sandbox(json_object *s);
/* A sandbox's phase as people see it: "running (unreachable)" while its
 * worker is unreachable (buf holds it then), else the phase itself. */
const char *cli_phase_shown(json_object *s, char *buf, size_t len);
void cli_print_operation(json_object *op);
void cli_print_op_details(json_object *op, int ind);
/* Seconds since an RFC 3339 UTC time (-1 unreadable), and "12s"/"5m"/"3h"/"2d". */
int64_t cli_age_seconds(const char *ts);
void cli_format_age(int64_t s, char *buf, size_t n);
/* A table cell padded to width (last: the end of the line). */
int cli_cell_width(const char *s);
void cli_print_cell(const char *s, int width, bool last);
/* lead, then the fields of o (a NULL-ended list) separated by spaces, and a newline. */
void cli_print_fields(const char *lead, json_object *o, const char *const *fields);
/* A size in bytes as docker images shows one: "1.23GB", "45.6MB", "7.8kB";
 * "-" when negative (unknown). */
void cli_format_bytes(int64_t bytes, char *buf, size_t n);
/* A snapshot, for people. */
void cli_print_snapshot(json_object *s);
/* A volume (get): its fields, one per line, and who mounts it. */
void cli_print_volume(json_object *v);
/* Prints {"<one>":…} or {"<many>":[…]} a row each (or the JSON). */
void cli_print_one_or_list(cli_t *cli, json_object *resp, const char *one, const char *many,
                           void (*row)(json_object *));

/* ---------------------------------------------------------------- the command groups */

/* sandboxes.c */
/* --egress-default checked and folded into o->egress (create, network) */
int cli_check_egress(cli_t *cli, opts_t *o);
int cli_check_create(cli_t *cli, opts_t *o);
int cli_cmd_create(cli_t *cli, opts_t *o);
int cli_check_sandbox_id(cli_t *cli, opts_t *o);
int cli_cmd_get(cli_t *cli, opts_t *o);
int cli_check_list(cli_t *cli, opts_t *o);
int cli_cmd_list(cli_t *cli, opts_t *o);
int cli_check_delete(cli_t *cli, opts_t *o);
int cli_cmd_delete(cli_t *cli, opts_t *o);
int cli_check_extend(cli_t *cli, opts_t *o);
int cli_cmd_extend(cli_t *cli, opts_t *o);
/* pause and resume (cli->cmd says which) */
int cli_check_pause(cli_t *cli, opts_t *o);
int cli_check_network(cli_t *cli, opts_t *o);
int cli_check_secrets(cli_t *cli, opts_t *o);
int cli_cmd_secrets(cli_t *cli, opts_t *o);
int cli_cmd_network(cli_t *cli, opts_t *o);
int cli_cmd_pause(cli_t *cli, opts_t *o);
/* operations.c */
int cli_check_op_id(cli_t *cli, opts_t *o);
int cli_cmd_wait(cli_t *cli, opts_t *o);
int cli_cmd_operation(cli_t *cli, opts_t *o);
/* exec.c */
int cli_check_exec(cli_t *cli, opts_t *o);
int cli_cmd_exec(cli_t *cli, opts_t *o);
int cli_cmd_output(cli_t *cli, opts_t *o);
/* The kept output of exec op_id, as 'sandbox output OP' prints it (stdout
 * and stderr to ours; to_stderr: its stdout to our stderr too): an exit
 * code. follow_s > 0: as it comes, until the exec ends (EXIT_TIMEOUT when
 * follow_s seconds pass first). */
int cli_output_print(cli_t *cli, const char *op_id, bool to_stderr, int64_t follow_s);
int cli_cmd_cancel(cli_t *cli, opts_t *o);
/* routes.c */
int cli_check_share(cli_t *cli, opts_t *o);
int cli_cmd_share(cli_t *cli, opts_t *o);
int cli_cmd_routes(cli_t *cli, opts_t *o);
int cli_check_unshare(cli_t *cli, opts_t *o);
int cli_cmd_unshare(cli_t *cli, opts_t *o);
/* events.c */
int cli_check_events(cli_t *cli, opts_t *o);
int cli_cmd_events(cli_t *cli, opts_t *o);
/* logs.c */
int cli_cmd_logs(cli_t *cli, opts_t *o);
/* files.c */
int cli_check_shell(cli_t *cli, opts_t *o);
int cli_cmd_shell(cli_t *cli, opts_t *o);
/* sandbox exec -i with more stdin than fits inline: the command over a
 * shell connection without a terminal (tty=false), head (stdin's first
 * head_len bytes, already read) and then the rest of stdin streamed to it,
 * its stdout and stderr written here as they come (within --max-output),
 * killed after timeout_s (exit 137). Returns its exit code or ours. */
int cli_exec_streamed(cli_t *cli, opts_t *o, const char *head, size_t head_len, int64_t timeout_s);
int cli_check_cp(cli_t *cli, opts_t *o);
int cli_cmd_cp(cli_t *cli, opts_t *o);
/* What an upload leaves out: GNU tar exclude patterns, and with vcs the
 * version control folders and what .gitignore files (and the other VCS
 * ignore files) list. */
typedef struct cli_upload_filter {
    const char *const *patterns;
    int n;
    bool vcs;
} cli_upload_filter_t;
/* Makes sbx's dest a copy of the local file or directory (into it, as
 * docker cp does, when into_existing_dir and dest is a directory there),
 * without what f leaves out (f may be NULL); prints the result unless
 * quiet. Returns the exit code. */
/* Packs paths (relative to dir; a directory with all under it) as a
 * gzipped tar with the local tar into *ret (malloc'd, *ret_len bytes): 0,
 * SBX_ETOOBIG over max bytes, SBX_EIO when tar failed, SBX_ENOMEM. */
int cli_tar_pack(const char *dir, char *const *paths, size_t n, size_t max, unsigned char **ret, size_t *ret_len);
int cli_upload(cli_t *cli, const char *local, const char *sbx, const char *dest, bool into_existing_dir,
               bool quiet, const cli_upload_filter_t *f);
/* Copies what the local directory dir holds (not dir itself) into sbx's
 * existing directory dest, quietly, as cli_upload packs and sends (one tar
 * of dir's entries, in name order); nothing is sent when dir is empty.
 * Returns the exit code. */
int cli_upload_contents(cli_t *cli, const char *dir, const char *sbx, const char *dest);
/* A tar of sandbox sbx's path written to fd, as 'sandbox cp SBX:PATH -'
 * writes it to stdout; an exit code, the failure printed. */
int cli_tar_out(cli_t *cli, const char *sbx, const char *path, int fd);
/* The tar read from fd unpacked into sandbox sbx's directory dir, quietly,
 * as 'sandbox cp - SBX:DIR' does; an exit code, the failure printed. */
int cli_tar_in(cli_t *cli, int fd, const char *sbx, const char *dir);
/* exec.c: runs spec in sandbox sbx as sandbox exec does, its stdout and
 * stderr written here as they come (its stdout to stderr too with
 * to_stderr), for up to timeout_s. Returns 0 with *ret_code (the exit code
 * sandbox exec would exit with: 128+N for signal N, 137 when it timed out)
 * and *ret_timed_out, or an exit code (printed) when it could not be run or
 * followed. */
int cli_exec_live(cli_t *cli, const char *sbx, const client_exec_spec_t *spec, int64_t timeout_s, bool to_stderr,
                  int *ret_code, bool *ret_timed_out);
/* main.c: the command table (for completion) */
const command_t *cli_commands(size_t *n);
/* config.c: context list|show|use, completion bash|zsh */
int cli_check_context(cli_t *cli, opts_t *o);
int cli_cmd_context(cli_t *cli, opts_t *o);
int cli_check_completion(cli_t *cli, opts_t *o);
int cli_cmd_completion(cli_t *cli, opts_t *o);
/* tenants.c, tokens.c, workers.c */
int cli_check_tenants(cli_t *cli, opts_t *o);
int cli_cmd_tenants(cli_t *cli, opts_t *o);
int cli_check_tokens(cli_t *cli, opts_t *o);
int cli_cmd_tokens(cli_t *cli, opts_t *o);
int cli_check_workers(cli_t *cli, opts_t *o);
int cli_cmd_workers(cli_t *cli, opts_t *o);
int cli_check_images(cli_t *cli, opts_t *o);
int cli_check_version(cli_t *cli, opts_t *o);
int cli_cmd_version(cli_t *cli, opts_t *o);
int cli_cmd_images(cli_t *cli, opts_t *o);
/* pools.c */
int cli_check_pools(cli_t *cli, opts_t *o);
int cli_cmd_pools(cli_t *cli, opts_t *o);
/* snapshots.c: snapshot SANDBOX; snapshots list|get|delete */
int cli_check_snapshot(cli_t *cli, opts_t *o);
int cli_cmd_snapshot(cli_t *cli, opts_t *o);
int cli_check_snapshots(cli_t *cli, opts_t *o);
/* volumes.c: volumes create|list|get|delete (docs/volumes.md) */
int cli_check_volumes(cli_t *cli, opts_t *o);
int cli_cmd_volumes(cli_t *cli, opts_t *o);
int cli_cmd_snapshots(cli_t *cli, opts_t *o);
/* fork.c: fork SANDBOX (a snapshot, K creates from it, the snapshot deleted) */
#define CLI_FORK_MAX 32
int cli_check_fork(cli_t *cli, opts_t *o);
int cli_cmd_fork(cli_t *cli, opts_t *o);
/* templates.c: templates list|get|delete|build (docs/templates.md); build's
 * Dockerfile is read, parsed and its COPY sources found by the check,
 * before any call */
#define CLI_TEMPLATE_BUILD_TIMEOUT 1800 /* templates build --timeout's default, seconds */
int cli_check_templates(cli_t *cli, opts_t *o);
int cli_cmd_templates(cli_t *cli, opts_t *o);
/* create --template's value: NAME or NAME:VERSION (a template name is a
 * snapshot name's rule; VERSION 1, 2, ...). */
bool cli_template_ref_ok(const char *ref);

#endif
