/* sandbox shell: an interactive terminal in a sandbox (POST
 * /v1/sandboxes/{id}/shell, upgraded): this terminal in raw mode (restored
 * on every way out), its size sent at the start and on SIGWINCH, every
 * byte typed (Ctrl-C too) sent to the sandbox's terminal, its output
 * written here, and the remote command's exit code as our own. Without a
 * terminal on stdin, stdin's bytes are sent and its end with them.
 * cli_exec_streamed is the same connection without a terminal (tty=false):
 * `sandbox exec -i` with a stdin too large to send inline. */
#include <curl/curl.h>
#include <errno.h>
#include <json-c/json.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "cli.h"
#include "errors.h"
#include "jsonx.h"
#include "limits.h"
#include "sbuf.h"
#include "shellframe.h"
#include "utf8.h"

/* The answer's head (and an error body) is at most this. */
#define SHELL_HEAD_MAX   16384
/* The 101 (or the refusal) must come within this. */
#define SHELL_HEAD_MS    30000

static volatile sig_atomic_t shell_winch, shell_stop;

static void shell_on_winch(int sig)
{
    (void)sig;
    shell_winch = 1;
}

static void shell_on_stop(int sig)
{
    (void)sig;
    shell_stop = 1;
}

int cli_check_shell(cli_t *cli, opts_t *o)
{
    int rc = cli_check_id(cli->cmd, "SANDBOX", o->pos[0]);
    if (rc)
        return rc;
    if (o->saw_dashdash && o->cmd_argc == 0)
        return cli_usage_error(cli->cmd, "nothing after --: sandbox shell SANDBOX [-- ARGV...]");
    if (o->cmd_argc > SBX_MAX_ARGV)
        return cli_usage_error(cli->cmd, "the command has %d arguments; at most %d are allowed", o->cmd_argc,
                               SBX_MAX_ARGV);
    size_t total = 0;
    for (int i = 0; i < o->cmd_argc; i++) {
        if (!o->cmd_argv[i][0])
            return cli_usage_error(cli->cmd, "argument %d of the command is empty", i + 1);
        total += strlen(o->cmd_argv[i]) + 1;
    }
    if (total > SBX_FILES_REQUEST_MAX / 2)
        return cli_usage_error(cli->cmd, "the command line is %zu bytes; a shell's takes at most %d", total,
                               SBX_FILES_REQUEST_MAX / 2);
    return 0;
}

/* The terminal's size (stdin's, else stdout's; 80x24 without one). */
static void shell_size(unsigned *cols, unsigned *rows)
{
    struct winsize ws;
    *cols = 80;
    *rows = 24;
    if ((ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) == 0 || ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0) && ws.ws_col &&
        ws.ws_row) {
        *cols = ws.ws_col > SHELLFRAME_SIZE_MAX ? SHELLFRAME_SIZE_MAX : ws.ws_col;
        *rows = ws.ws_row > SHELLFRAME_SIZE_MAX ? SHELLFRAME_SIZE_MAX : ws.ws_row;
    }
}

/* Appends "&NAME=escaped(v)" to ret: 0, or EXIT_API. */
static int shell_param(sbuf_t *ret, const char *name, const char *v)
{
    char *e = httpc_escape(v);
    if (!e)
        return EXIT_API;
    sbuf_printf(ret, "&%s=%s", name, e);
    free(e);
    return 0;
}

/* The request's path: /v1/sandboxes/ID/shell?cols=&rows=[&argv=...], o's
 * --env and --cwd (exec -i, exec -it); without a terminal also tty=false. */
static int shell_path(cli_t *cli, const opts_t *o, unsigned cols, unsigned rows, bool tty, sbuf_t *ret)
{
    char base[512];
    int rc = cli_path(base, sizeof base, "/v1/sandboxes/", o->pos[0], "/shell");
    if (rc)
        return rc;
    (void)cli;
    sbuf_printf(ret, "%s?cols=%u&rows=%u", base, cols, rows);
    for (int i = 0; i < o->cmd_argc; i++)
        if (shell_param(ret, "argv", o->cmd_argv[i]) != 0)
            return EXIT_API;
    if (!tty)
        sbuf_printf(ret, "&tty=false");
    {
        if (o->env) {
            json_object_object_foreach(o->env, key, val) {
                sbuf_t kv;
                sbuf_init(&kv, SBX_FILES_REQUEST_MAX);
                sbuf_printf(&kv, "%s=%s", key, json_object_get_string(val));
                rc = kv.truncated ? EXIT_USAGE : shell_param(ret, "env", sbuf_cstr(&kv));
                sbuf_release(&kv);
                if (rc)
                    return rc;
            }
        }
        if (o->cwd && shell_param(ret, "cwd", o->cwd) != 0)
            return EXIT_API;
    }
    return ret->truncated ? EXIT_USAGE : 0;
}

typedef struct shell_conn {
    CURL *h;
    int fd;
    char out[SHELLFRAME_MAX * 2];   /* frames not yet sent */
    size_t out_off, out_len;
} shell_conn_t;

/* Sends what is pending without blocking: 0, or SBX_EIO. */
static int shell_flush(shell_conn_t *c)
{
    while (c->out_off < c->out_len) {
        size_t sent = 0;
        CURLcode cr = curl_easy_send(c->h, c->out + c->out_off, c->out_len - c->out_off, &sent);
        if (cr == CURLE_AGAIN)
            return 0;
        if (cr != CURLE_OK)
            return SBX_EIO;
        c->out_off += sent;
    }
    c->out_off = c->out_len = 0;
    return 0;
}

/* Queues a frame (the caller made sure there is room). */
static void shell_queue(shell_conn_t *c, int type, const void *data, size_t n)
{
    if (c->out_off > 0 && c->out_off == c->out_len)
        c->out_off = c->out_len = 0;
    shellframe_header((unsigned char *)c->out + c->out_len, type, (uint32_t)n);
    c->out_len += SHELLFRAME_HEADER_BYTES;
    if (n)
        memcpy(c->out + c->out_len, data, n);
    c->out_len += n;
}

static void shell_queue_resize(shell_conn_t *c)
{
    unsigned cols, rows;
    shell_size(&cols, &rows);
    unsigned char f[SHELLFRAME_HEADER_BYTES + 4];
    shellframe_resize(f, cols, rows);
    memcpy(c->out + c->out_len, f, sizeof f);
    c->out_len += sizeof f;
}

/* Reads the answer's head: 0 with the bytes after it in *rest (101), or
 * the exit code of the refusal (printed). */
static int shell_head(cli_t *cli, shell_conn_t *c, sbuf_t *rest)
{
    sbuf_t h;
    sbuf_init(&h, SHELL_HEAD_MAX);
    int64_t until = time(NULL) + SHELL_HEAD_MS / 1000;
    long status = 0, clen = -1;
    size_t hlen = 0;
    int rc = EXIT_API;
    for (;;) {
        char buf[4096];
        size_t got = 0;
        CURLcode cr = curl_easy_recv(c->h, buf, sizeof buf, &got);
        if (cr == CURLE_AGAIN) {
            if (time(NULL) > until) {
                fprintf(stderr, "sandbox: shell: %s did not answer within %d s\n", cli->url, SHELL_HEAD_MS / 1000);
                goto cleanup;
            }
            struct pollfd p = { .fd = c->fd, .events = POLLIN };
            poll(&p, 1, 500);
            continue;
        }
        if (cr != CURLE_OK || got == 0) {
            if (hlen)
                break; /* the refusal's body ended with the connection */
            fprintf(stderr, "sandbox: shell: %s closed the connection without an answer\n", cli->url);
            goto cleanup;
        }
        sbuf_append_bounded(&h, buf, got);
        if (!hlen) {
            const char *e = memmem(sbuf_cstr(&h), h.len, "\r\n\r\n", 4);
            if (!e) {
                if (h.truncated) {
                    fprintf(stderr, "sandbox: shell: %s answered a head too long\n", cli->url);
                    goto cleanup;
                }
                continue;
            }
            hlen = (size_t)(e - sbuf_cstr(&h)) + 4;
            if (sscanf(sbuf_cstr(&h), "HTTP/1.%*d %ld", &status) != 1) {
                fprintf(stderr, "sandbox: shell: %s did not answer HTTP\n", cli->url);
                goto cleanup;
            }
            const char *cl = strcasestr(sbuf_cstr(&h), "\r\ncontent-length:");
            if (cl && cl < e)
                clen = strtol(cl + 17, NULL, 10);
            if (status == 101) {
                sbuf_append(rest, h.data + hlen, h.len - hlen);
                rc = 0;
                goto cleanup;
            }
        }
        if ((clen >= 0 && h.len - hlen >= (size_t)clen) || h.truncated)
            break;
    }
    /* A refusal: its JSON error as every command prints one. */
    json_object *o = json_tokener_parse(sbuf_cstr(&h) + hlen);
    json_object *er = o ? jsonx_get_obj(o, "error") : NULL;
    const char *code = er ? jsonx_get_str(er, "code") : NULL, *msg = er ? jsonx_get_str(er, "message") : NULL;
    if (code && msg) {
        cli_print_error(code, msg);
        int ac = api_code_parse(code);
        rc = ac >= 0 ? api_code_info((api_code_t)ac)->cli_exit : EXIT_API;
    } else {
        fprintf(stderr, "sandbox: shell: %s answered HTTP %ld, not 101 Switching Protocols\n", cli->url, status);
    }
    if (o)
        json_object_put(o);
cleanup:
    sbuf_release(&h);
    return rc;
}

/* How a session relays: on a terminal (sandbox shell) or without one
 * (cli_exec_streamed: stdin's first bytes already read, a deadline, a
 * bound on the bytes written per stream). */
typedef struct shell_opts {
    bool term;                /* this terminal is in raw mode: CRLF in our notes */
    bool tty;                 /* the remote command has a terminal */
    const char *head;         /* sent before stdin's next bytes */
    size_t head_len;
    int64_t timeout_s;        /* 0: none */
    int64_t cap;              /* bytes written per stream at most; < 0: no bound */
} shell_opts_t;

/* One line on stderr, on its own line even in raw mode. */
static void shell_note(const shell_opts_t *so, const char *msg)
{
    fprintf(stderr, so->term ? "\r\nsandbox: %s: %s\r\n" : "sandbox: %s: %s\n", so->tty ? "shell" : "exec", msg);
}

/* Writes n bytes of stream fd within the bound: 0, or -1 when it fails. */
static int shell_write(int fd, const unsigned char *p, size_t n, const shell_opts_t *so, uint64_t *written)
{
    if (so->cap >= 0) {
        uint64_t room = (uint64_t)so->cap > *written ? (uint64_t)so->cap - *written : 0;
        n = n > room ? (size_t)room : n;
    }
    *written += n;
    for (size_t off = 0; off < n;) {
        ssize_t w = write(fd, p + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        off += (size_t)w;
    }
    return 0;
}

/* Writes the output frames of the n bytes at *p (taken from them): true
 * when the session is over, *rc then its exit code (the EXIT frame's, or
 * EXIT_API for a malformed frame or a failed write). */
static bool shell_output(shellframe_dec_t *dec, const char **p, size_t *n, const shell_opts_t *so,
                         uint64_t written[2], int *rc)
{
    while (*n > 0) {
        size_t used = 0;
        shellframe_t f;
        int r = shellframe_next(dec, *p, *n, &used, &f);
        *p += used;
        *n -= used;
        if (r < 0) {
            shell_note(so, "the server sent a malformed frame");
            *rc = EXIT_API;
            return true;
        }
        if (r == 0)
            return false;
        if (f.type == SHELLFRAME_EXIT) {
            *rc = f.exit_code >= 0 && f.exit_code <= 255 ? f.exit_code : EXIT_API;
            if (f.exit_code < 0)
                shell_note(so, "the command's exit code is unknown");
            return true;
        }
        bool err = f.type == SHELLFRAME_STDERR;
        if (shell_write(err ? STDERR_FILENO : STDOUT_FILENO, f.data, f.len, so, &written[err]) < 0) {
            *rc = EXIT_API;
            return true;
        }
    }
    return false;
}

/* Relays until the EXIT frame: the remote exit code, EXIT_API, or 137 when
 * so->timeout_s passed first (the connection's end kills the command). */
static int shell_relay(shell_conn_t *c, const sbuf_t *early, const shell_opts_t *so)
{
    shellframe_dec_t *dec = malloc(sizeof *dec);
    char *buf = malloc(SHELLFRAME_PAYLOAD_MAX);
    bool in_open = true;
    int rc = EXIT_API;
    size_t head_off = 0;
    uint64_t written[2] = { 0, 0 };
    time_t until = so->timeout_s > 0 ? time(NULL) + so->timeout_s : 0;
    if (!dec || !buf)
        goto cleanup;
    shellframe_dec_init(dec, SHELLFRAME_TO_CLIENT);
    const char *pending = early->data;
    size_t npending = early->len;
    for (;;) {
        if (shell_output(dec, &pending, &npending, so, written, &rc))
            goto cleanup;
        if (shell_stop) {
            shell_note(so, "stopped by a signal");
            goto cleanup;
        }
        if (until && time(NULL) >= until) {
            char msg[80];
            snprintf(msg, sizeof msg, "command timed out after %lld s", (long long)so->timeout_s);
            shell_note(so, msg);
            rc = 128 + 9;
            goto cleanup;
        }
        if (shell_winch && so->tty && c->out_len + 9 <= sizeof c->out) {
            shell_winch = 0;
            shell_queue_resize(c);
        }
        if (head_off < so->head_len && c->out_len == 0) {
            size_t k = so->head_len - head_off;
            k = k > SHELLFRAME_PAYLOAD_MAX ? SHELLFRAME_PAYLOAD_MAX : k;
            shell_queue(c, SHELLFRAME_DATA, so->head + head_off, k);
            head_off += k;
        }
        if (shell_flush(c) < 0) {
            shell_note(so, "the connection failed");
            goto cleanup;
        }
        bool room = c->out_len == 0 && head_off == so->head_len;
        struct pollfd p[2] = {
            { .fd = c->fd, .events = (short)(POLLIN | (c->out_len ? POLLOUT : 0)) },
            { .fd = in_open && room ? STDIN_FILENO : -1, .events = POLLIN },
        };
        int n = poll(p, 2, head_off < so->head_len && c->out_len == 0 ? 0 : 1000);
        if (n < 0 && errno != EINTR)
            goto cleanup;
        if (n <= 0)
            continue;
        if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t got = read(STDIN_FILENO, buf, SHELLFRAME_PAYLOAD_MAX);
            if (got > 0) {
                shell_queue(c, SHELLFRAME_DATA, buf, (size_t)got);
            } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
                in_open = false;
                shell_queue(c, SHELLFRAME_EOF, NULL, 0);
            }
        }
        if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            size_t got = 0;
            CURLcode cr = curl_easy_recv(c->h, buf, SHELLFRAME_PAYLOAD_MAX, &got);
            if (cr == CURLE_AGAIN)
                continue;
            if (cr != CURLE_OK || got == 0) {
                shell_note(so, "the connection ended before the command's exit code");
                goto cleanup;
            }
            /* buf is reused: decode from a copy kept in the decoder. */
            pending = buf;
            npending = got;
        }
    }
cleanup:
    free(dec);
    free(buf);
    return rc;
}

/* Opens the upgraded connection and relays a session as so says: the exit
 * code the command gave, or ours (a refusal printed). */
static int shell_session(cli_t *cli, opts_t *o, shell_opts_t *so)
{
    unsigned cols, rows;
    shell_size(&cols, &rows);
    sbuf_t path, early;
    sbuf_init(&path, SBX_FILES_REQUEST_MAX * 4);
    sbuf_init(&early, SHELL_HEAD_MAX);
    shell_conn_t *c = calloc(1, sizeof *c);
    struct termios saved;
    bool raw = false;
    int rc = c ? shell_path(cli, o, cols, rows, so->tty, &path) : EXIT_API;
    if (rc) {
        if (rc == EXIT_USAGE)
            cli_usage_error(cli->cmd, so->tty ? "the command line is too long"
                                              : "the command line, --env and --cwd are too long");
        goto cleanup;
    }
    char err[256] = "";
    void *h = NULL;
    if (httpc_upgrade_open(cli->http, sbuf_cstr(&path), "sandbox-shell", &h, &c->fd, err, sizeof err) < 0) {
        fprintf(stderr, "sandbox: %s: cannot reach %s: ", cli->cmd, cli->url);
        cli_put_text(stderr, err);
        fputc('\n', stderr);
        rc = EXIT_API;
        goto cleanup;
    }
    c->h = h;
    if ((rc = shell_head(cli, c, &early)) != 0)
        goto cleanup;
    struct sigaction sa = { .sa_handler = shell_on_winch };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGWINCH, &sa, NULL);
    sa.sa_handler = shell_on_stop;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGINT, &sa, NULL); /* only without a terminal: in raw mode Ctrl-C is a byte */
    signal(SIGPIPE, SIG_IGN);
    if (so->term && tcgetattr(STDIN_FILENO, &saved) == 0) {
        struct termios t = saved;
        cfmakeraw(&t);
        raw = tcsetattr(STDIN_FILENO, TCSANOW, &t) == 0;
    }
    so->term = raw;
    rc = shell_relay(c, &early, so);
cleanup:
    if (raw)
        tcsetattr(STDIN_FILENO, TCSANOW, &saved);
    if (c && c->h)
        curl_easy_cleanup(c->h);
    free(c);
    sbuf_release(&path);
    sbuf_release(&early);
    return rc;
}

int cli_cmd_shell(cli_t *cli, opts_t *o)
{
    bool tty = isatty(STDIN_FILENO) == 1;
    shell_opts_t so = { .term = tty, .tty = true, .cap = -1 };
    return shell_session(cli, o, &so);
}

int cli_exec_streamed(cli_t *cli, opts_t *o, const char *head, size_t head_len, int64_t timeout_s)
{
    shell_opts_t so = { .tty = false, .head = head, .head_len = head_len, .timeout_s = timeout_s,
                        .cap = o->max_output.set ? o->max_output.v : -1 };
    return shell_session(cli, o, &so);
}
