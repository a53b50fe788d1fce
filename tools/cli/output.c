/* sandbox: printing for people (sandboxes, operations, tables) and JSON. */
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "errors.h"
#include "jsonx.h"
#include "limits.h"
#include "timeutil.h"
#include <time.h>

/* Writes s with control characters replaced, so that text from the server
 * cannot drive the terminal. NULL prints as "-". */
void cli_put_text(FILE *f, const char *s)
{
    if (!s) {
        fputc('-', f);
        return;
    }
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        fputc(ch < 0x20 || ch == 0x7f ? '?' : ch, f);
    }
}

/* Prints "error: CODE: MESSAGE" with the server's text made safe. */
void cli_print_error(const char *code, const char *message)
{
    fputs("error: ", stderr);
    cli_put_text(stderr, code);
    fputs(": ", stderr);
    cli_put_text(stderr, message);
    fputc('\n', stderr);
}

void cli_print_json(json_object *o)
{
    const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE);
    fputs(s ? s : "null", stdout);
    fputc('\n', stdout);
}

/* Seconds since an RFC 3339 UTC time, or -1 when it cannot be read. */
int64_t cli_age_seconds(const char *ts)
{
    if (!ts)
        return -1;
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *end = strptime(ts, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!end)
        return -1;
    if (*end == '.')
        for (end++; *end >= '0' && *end <= '9'; end++) {
        }
    if (strcmp(end, "Z") != 0 && strcmp(end, "+00:00") != 0)
        return -1;
    time_t t = timegm(&tm);
    int64_t d = (int64_t)(time_wall_ms() / 1000) - (int64_t)t;
    return d < 0 ? 0 : d;
}

void cli_format_age(int64_t s, char *buf, size_t n)
{
    if (s < 0)
        snprintf(buf, n, "-");
    else if (s < 120)
        snprintf(buf, n, "%llds", (long long)s);
    else if (s < 2 * 3600)
        snprintf(buf, n, "%lldm", (long long)(s / 60));
    else if (s < 2 * 86400)
        snprintf(buf, n, "%lldh", (long long)(s / 3600));
    else
        snprintf(buf, n, "%lldd", (long long)(s / 86400));
}

static void kv_line(const char *key, const char *value)
{
    printf("%-15s ", key);
    cli_put_text(stdout, value);
    putchar('\n');
}

static void kv_num(const char *key, json_object *o, const char *field, const char *unit)
{
    int64_t v;
    if (jsonx_get_int(o, field, &v))
        printf("%-15s %lld%s\n", key, (long long)v, unit);
    else
        kv_line(key, NULL);
}

/* One "label: value" line per row: a string field, or a number with its unit. */
typedef struct kv_row {
    const char *label, *field;
    const char *unit;   /* NULL: a string field */
} kv_row_t;

/* rows ends with a NULL label. */
static void kv_rows(json_object *o, const kv_row_t *rows)
{
    for (; rows->label; rows++) {
        if (rows->unit)
            kv_num(rows->label, o, rows->field, rows->unit);
        else
            kv_line(rows->label, jsonx_get_str(o, rows->field));
    }
}

#define KV_ROWS(o, ...) kv_rows(o, (const kv_row_t[]){ __VA_ARGS__, { NULL } })

/* "a, b" from the true members of trust, or "none". */
static void print_trust(json_object *trust)
{
    static const char *const names[] = { "untrusted_repo", "generated_code", "hostile", NULL };
    printf("%-15s ", "trust:");
    int n = 0;
    for (const char *const *p = names; *p; p++) {
        bool b = false;
        if (jsonx_get_bool(trust, *p, &b) && b)
            printf("%s%s", n++ ? ", " : "", *p);
    }
    puts(n ? "" : "none");
}

static void print_labels(json_object *labels)
{
    printf("%-15s ", "labels:");
    int n = 0;
    if (labels && json_object_is_type(labels, json_type_object)) {
        json_object_object_foreach(labels, k, v) {
            fputs(n++ ? ", " : "", stdout);
            cli_put_text(stdout, k);
            putchar('=');
            cli_put_text(stdout, json_object_is_type(v, json_type_string) ? json_object_get_string(v) : "?");
        }
    }
    puts(n ? "" : "none");
}

/* "failure: exited with code 137 at T: message", one line, when the
 * runtime saw the sandbox stop by itself. */
static void print_failure(json_object *f)
{
    const char *reason = jsonx_get_str(f, "reason");
    if (!reason)
        return;
    int64_t code = 0;
    bool has_code = jsonx_get_int(f, "exit_code", &code);
    const char *at = jsonx_get_str(f, "at");
    const char *msg = jsonx_get_str(f, "message");
    printf("%-15s ", "failure:");
    cli_put_text(stdout, reason);
    if (has_code)
        printf(" with code %lld", (long long)code);
    if (at) {
        fputs(" at ", stdout);
        cli_put_text(stdout, at);
    }
    if (msg) {
        fputs(": ", stdout);
        cli_put_text(stdout, msg);
    }
    putchar('\n');
}

/* "paused: since T, memory kept: no, TTL left: 3412 s" for a paused
 * sandbox (docs/pause.md). */
static void print_paused(json_object *p)
{
    if (!p)
        return;
    bool memory = false;
    int64_t left = 0;
    printf("%-15s since ", "paused:");
    cli_put_text(stdout, jsonx_get_str(p, "at"));
    fputs(", memory kept: ", stdout);
    fputs(!jsonx_get_bool(p, "memory", &memory) ? "-" : memory ? "yes" : "no", stdout);
    if (jsonx_get_int(p, "ttl_seconds_left", &left))
        printf(", TTL left: %lld s\n", (long long)left);
    else
        fputs(", TTL left: -\n", stdout);
}

const char *cli_phase_shown(json_object *s, char *buf, size_t len)
{
    const char *ph = jsonx_get_str(s, "phase");
    if (!ph || !jsonx_get_obj(s, "unreachable"))
        return ph;
    snprintf(buf, len, "%.40s (unreachable)", ph);
    return buf;
}

void cli_print_sandbox(json_object *s)
{
    KV_ROWS(s, { "id:", "id" });
    if (jsonx_get_str(s, "name"))
        kv_line("name:", jsonx_get_str(s, "name"));
    char phase[64];
    KV_ROWS(s, { "tenant:", "tenant" }, { "image:", "image" });
    if (jsonx_get_str(s, "from"))
        kv_line("from:", jsonx_get_str(s, "from")); /* the snapshot it started from */
    kv_line("phase:", cli_phase_shown(s, phase, sizeof phase));
    print_paused(jsonx_get_obj(s, "paused"));
    KV_ROWS(s, { "desired state:", "desired_state" }, { "worker:", "worker" });
    json_object *away = jsonx_get_obj(s, "unreachable");
    if (away) {
        /* its worker is away: why, since when, and when it is given up */
        printf("%-15s ", "unreachable:");
        fputs("worker ", stdout);
        cli_put_text(stdout, jsonx_get_str(away, "worker") ? jsonx_get_str(away, "worker") : "?");
        fputs(" ", stdout);
        cli_put_text(stdout, jsonx_get_str(away, "reason") ? jsonx_get_str(away, "reason") : "?");
        fputs(" since ", stdout);
        cli_put_text(stdout, jsonx_get_str(away, "since") ? jsonx_get_str(away, "since") : "?");
        fputs("; lost at ", stdout);
        cli_put_text(stdout, jsonx_get_str(away, "lost_at") ? jsonx_get_str(away, "lost_at") : "?");
        fputs(" unless it returns\n", stdout);
    }
    /* microvm (kvm) / microvm (tcg): how its VM runs */
    const char *iso = jsonx_get_str(s, "isolation"), *accel = jsonx_get_str(s, "accelerator");
    char isobuf[96];
    if (iso && accel)
        snprintf(isobuf, sizeof isobuf, "%.40s (%.40s)", iso, accel);
    kv_line("isolation:", iso && accel ? isobuf : iso);
    KV_ROWS(s, { "cpu:", "cpu_millis", " millicpu" }, { "memory:", "memory_mib", " MiB" },
            { "disk:", "disk_mib", " MiB" }, { "ttl:", "ttl_seconds", " s" },
            { "network:", "network" });
    print_trust(jsonx_get_obj(s, "trust"));
    bool ro = false, hard = false;
    jsonx_get_bool(s, "read_only_root", &ro);
    jsonx_get_bool(s, "hardened", &hard);
    kv_line("hardening:", hard && ro ? "no capabilities, read-only root"
                          : hard     ? "no capabilities"
                          : ro       ? "standard, read-only root"
                                     : "standard");
    print_labels(jsonx_get_obj(s, "labels"));
    json_object *sel = jsonx_get_obj(s, "selector");
    if (sel && json_object_object_length(sel) > 0) {
        printf("%-15s ", "selector:");
        int n = 0;
        json_object_object_foreach(sel, k, v) {
            fputs(n++ ? ", " : "", stdout);
            cli_put_text(stdout, k);
            putchar('=');
            cli_put_text(stdout, json_object_is_type(v, json_type_string) ? json_object_get_string(v) : "?");
        }
        putchar('\n');
    }
    json_object *cls = jsonx_get_obj(s, "classification");
    json_object *why = cls ? jsonx_get_arr(cls, "reasons") : NULL;
    for (size_t i = 0; why && i < json_object_array_length(why); i++) {
        json_object *r = json_object_array_get_idx(why, i);
        printf("%-15s ", i == 0 ? "classified:" : "");
        cli_put_text(stdout, json_object_is_type(r, json_type_string) ? json_object_get_string(r) : "?");
        putchar('\n');
    }
    print_failure(jsonx_get_obj(s, "failure"));
    KV_ROWS(s, { "expires:", "expires_at" }, { "created:", "created_at" }, { "updated:", "updated_at" });
}

/* The state history of an operation (from the controller's events), one
 * line per transition, indented by ind spaces after a label column. */
static void print_history(json_object *op, int ind, int label_width)
{
    json_object *h = jsonx_get_arr(op, "history");
    size_t n = h ? json_object_array_length(h) : 0;
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(h, i);
        const char *st = jsonx_get_str(e, "state");
        if (!st)
            st = "?";
        printf("%*s%-*s ", ind, "", label_width, i == 0 ? "history:" : "");
        cli_put_text(stdout, st);
        printf("%*s", strlen(st) < 10 ? (int)(10 - strlen(st)) : 1, "");
        cli_put_text(stdout, jsonx_get_str(e, "at"));
        putchar('\n');
    }
}

/* The error and placement lines of an operation: labels after ind spaces
 * in a column lw wide (0: as wide as the label). */
static void print_error_placement(json_object *op, int ind, int lw)
{
    json_object *err = jsonx_get_obj(op, "error");
    if (err) {
        printf("%*s%-*s ", ind, "", lw, "error:");
        cli_put_text(stdout, jsonx_get_str(err, "code"));
        fputs(": ", stdout);
        cli_put_text(stdout, jsonx_get_str(err, "message"));
        putchar('\n');
    }
    json_object *pl = jsonx_get_obj(op, "placement");
    if (pl) {
        printf("%*s%-*s ", ind, "", lw, "placement:");
        cli_put_text(stdout, jsonx_get_str(pl, "summary") ? jsonx_get_str(pl, "summary") : jsonx_get_str(pl, "worker"));
        putchar('\n');
        json_object *reasons = jsonx_get_arr(pl, "reasons");
        size_t n = reasons ? json_object_array_length(reasons) : 0;
        for (size_t i = 0; i < n; i++) {
            json_object *r = json_object_array_get_idx(reasons, i);
            printf("%*s- ", ind + (lw ? lw + 1 : 2), "");
            cli_put_text(stdout, json_object_is_type(r, json_type_string) ? json_object_get_string(r) : "?");
            putchar('\n');
        }
    }
}

/* Error and placement lines of an operation, indented by ind spaces. */
void cli_print_op_details(json_object *op, int ind)
{
    print_error_placement(op, ind, 0);
    print_history(op, ind, 8);
}

void cli_print_fields(const char *lead, json_object *o, const char *const *fields)
{
    fputs(lead, stdout);
    for (const char *const *f = fields; *f; f++) {
        if (f != fields)
            putchar(' ');
        cli_put_text(stdout, jsonx_get_str(o, *f));
    }
    putchar('\n');
}

void cli_print_operation(json_object *op)
{
    KV_ROWS(op, { "id:", "id" }, { "kind:", "kind" }, { "state:", "state" }, { "sandbox:", "sandbox_id" },
            { "attempt:", "attempt", "" }, { "created:", "created_at" }, { "updated:", "updated_at" },
            { "finished:", "finished_at" });
    print_error_placement(op, 0, 15);
    print_history(op, 0, 15);
    json_object *res = jsonx_get_obj(op, "result");
    if (res) {
        int64_t code = 0, sig = 0, dur = 0, ob = 0, eb = 0;
        bool to = false, otr = false, etr = false;
        if (jsonx_get_int(res, "exit_code", &code)) {
            jsonx_get_int(res, "signal", &sig);
            jsonx_get_int(res, "duration_ms", &dur);
            jsonx_get_int(res, "stdout_bytes", &ob);
            jsonx_get_int(res, "stderr_bytes", &eb);
            jsonx_get_bool(res, "timed_out", &to);
            jsonx_get_bool(res, "stdout_truncated", &otr);
            jsonx_get_bool(res, "stderr_truncated", &etr);
            printf("%-15s %lld\n", "exit code:", (long long)code);
            printf("%-15s %lld\n", "signal:", (long long)sig);
            printf("%-15s %s\n", "timed out:", to ? "yes" : "no");
            printf("%-15s %lld ms\n", "duration:", (long long)dur);
            printf("%-15s %lld bytes%s\n", "stdout:", (long long)ob, otr ? " (truncated)" : "");
            printf("%-15s %lld bytes%s\n", "stderr:", (long long)eb, etr ? " (truncated)" : "");
        }
    }
}

void cli_format_bytes(int64_t bytes, char *buf, size_t n)
{
    if (bytes < 0)
        snprintf(buf, n, "-");
    else if (bytes >= 1000000000)
        snprintf(buf, n, "%.2fGB", (double)bytes / 1e9);
    else if (bytes >= 1000000)
        snprintf(buf, n, "%.1fMB", (double)bytes / 1e6);
    else
        snprintf(buf, n, "%.1fkB", (double)bytes / 1e3);
}

/* "45.6MB (45612345 bytes)", or "-" while it is not known (null). */
static void kv_size(const char *key, json_object *o, const char *field)
{
    int64_t v = -1;
    char human[32];
    if (!jsonx_get_int(o, field, &v) || v < 0) {
        kv_line(key, NULL);
        return;
    }
    cli_format_bytes(v, human, sizeof human);
    printf("%-15s %s (%lld bytes)\n", key, human, (long long)v);
}

void cli_print_snapshot(json_object *s)
{
    KV_ROWS(s, { "id:", "id" }, { "name:", "name" }, { "tenant:", "tenant" }, { "state:", "state" },
            { "sandbox:", "sandbox_id" }, { "image:", "image" }, { "isolation:", "isolation" },
            { "worker:", "worker" });
    json_object *cp = jsonx_get_arr(s, "copies");
    for (size_t i = 0; cp && i < json_object_array_length(cp); i++) {
        json_object *e = json_object_array_get_idx(cp, i);
        printf("%-15s ", i == 0 ? "copies:" : "");
        cli_put_text(stdout, jsonx_get_str(e, "worker"));
        fputs(" (", stdout);
        cli_put_text(stdout, jsonx_get_str(e, "state"));
        fputs(")\n", stdout);
    }
    kv_size("size:", s, "size_bytes");
    kv_size("image size:", s, "image_bytes");
    kv_line("operation:", jsonx_get_str(s, "operation_id"));
    json_object *err = jsonx_get_obj(s, "error");
    if (err) {
        printf("%-15s ", "error:");
        cli_put_text(stdout, jsonx_get_str(err, "code"));
        fputs(": ", stdout);
        cli_put_text(stdout, jsonx_get_str(err, "message"));
        putchar('\n');
    }
    KV_ROWS(s, { "created:", "created_at" }, { "ready:", "ready_at" });
    if (jsonx_get_str(s, "deleted_at"))
        kv_line("deleted:", jsonx_get_str(s, "deleted_at"));
}

void cli_print_volume(json_object *v)
{
    KV_ROWS(v, { "id:", "id" }, { "name:", "name" }, { "tenant:", "tenant" }, { "state:", "state" },
            { "worker:", "worker" });
    int64_t mib = 0;
    jsonx_get_int(v, "size_mib", &mib);
    printf("%-15s %lld MiB\n", "size:", (long long)mib);
    json_object *m = jsonx_get_arr(v, "mounted_by");
    size_t n = m ? json_object_array_length(m) : 0;
    if (n == 0)
        kv_line("mounted by:", "none");
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(m, i);
        bool ro = false;
        jsonx_get_bool(e, "read_only", &ro);
        printf("%-15s ", i == 0 ? "mounted by:" : "");
        cli_put_text(stdout, jsonx_get_str(e, "sandbox"));
        fputs(" at ", stdout);
        cli_put_text(stdout, jsonx_get_str(e, "path"));
        fputs(ro ? " (read-only)\n" : " (read-write)\n", stdout);
    }
    KV_ROWS(v, { "created:", "created_at" });
    if (jsonx_get_str(v, "placed_at"))
        kv_line("placed:", jsonx_get_str(v, "placed_at"));
    if (jsonx_get_str(v, "deleted_at"))
        kv_line("deleted:", jsonx_get_str(v, "deleted_at"));
}

/* Display width of a cell (bytes; ids and names are ASCII), capped. */
int cli_cell_width(const char *s)
{
    size_t n = s ? strlen(s) : 1;
    return n > 64 ? 64 : (int)n;
}

void cli_print_cell(const char *s, int width, bool last)
{
    cli_put_text(stdout, s);
    if (last) {
        putchar('\n');
        return;
    }
    int pad = width - cli_cell_width(s) + 2;
    printf("%*s", pad > 1 ? pad : 1, "");
}

/* Prints {"<one>":…} or {"<many>":[…]} a row each (or the JSON). */
void cli_print_one_or_list(cli_t *cli, json_object *resp, const char *one, const char *many,
                              void (*row)(json_object *))
{
    if (cli->json) {
        cli_print_json(resp);
    } else if (jsonx_get_obj(resp, one)) {
        row(jsonx_get_obj(resp, one));
    } else {
        json_object *arr = jsonx_get_arr(resp, many);
        for (size_t i = 0; arr && i < json_object_array_length(arr); i++)
            row(json_object_array_get_idx(arr, i));
    }
}
