/* sandbox create, get, list, delete and extend. */
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "client.h"
#include "errors.h"
#include "jsonx.h"
#include "limits.h"
#include "spec.h"
#include "utf8.h"

int cli_check_egress(cli_t *cli, opts_t *o)
{
    if (o->egress_default && strcmp(o->egress_default, "allow") != 0 && strcmp(o->egress_default, "deny") != 0)
        return cli_usage_error(cli->cmd, "--egress-default: '%.40s' is not allow or deny", o->egress_default);
    if (o->egress_default) {
        if (!o->egress && !(o->egress = json_object_new_object()))
            return cli_usage_error(cli->cmd, "out of memory");
        jsonx_add_str(o->egress, "default", o->egress_default);
    }
    return 0;
}

int cli_check_create(cli_t *cli, opts_t *o)
{
    if (o->upload) {
        const char *sep = strstr(o->upload, ":/");
        while (sep && strstr(sep + 1, ":/"))
            sep = strstr(sep + 1, ":/");
        if (!sep || sep == o->upload || strlen(sep + 1) > SBX_FILES_PATH_MAX || utf8_has_control(o->upload))
            return cli_usage_error(cli->cmd, "--upload: LOCAL:/path, as --upload ./src:/work");
        o->wait = true; /* the upload needs the sandbox running */
    } else if (o->n_excludes > 0 || o->no_ignore) {
        return cli_usage_error(cli->cmd, "%s applies to --upload", o->no_ignore ? "--no-ignore" : "--exclude");
    }
    int rc = cli_check_timeout_wait(cli->cmd, o);
    if (rc)
        return rc;
    if (o->network && strcmp(o->network, "none") != 0 && strcmp(o->network, "restricted") != 0 &&
        strcmp(o->network, "open") != 0)
        return cli_usage_error(cli->cmd, "--network: '%s' is not one of none, restricted, open", o->network);
    if ((rc = cli_check_egress(cli, o)) != 0)
        return rc;
    if (o->egress && !(o->network && strcmp(o->network, "open") == 0))
        return cli_usage_error(cli->cmd, "--allow, --deny, --udp and --egress-default apply to --network open");
    for (size_t i = 0; o->secrets && i < json_object_array_length(o->secrets); i++)
        if (!spec_secret_name_ok(json_object_get_string(json_object_array_get_idx(o->secrets, i))))
            return cli_usage_error(cli->cmd, "--secret: '%.80s' is not a secret name",
                                   json_object_get_string(json_object_array_get_idx(o->secrets, i)));
    if (o->secrets && !(o->network && strcmp(o->network, "open") == 0))
        return cli_usage_error(cli->cmd, "--secret needs --network open and egress rules (--allow)");
    if (o->isolation && strcmp(o->isolation, "container") != 0 && strcmp(o->isolation, "gvisor") != 0 &&
        strcmp(o->isolation, "microvm") != 0)
        return cli_usage_error(cli->cmd, "--isolation: '%s' is not one of container, gvisor, microvm", o->isolation);
    if (o->image && (strlen(o->image) > SBX_MAX_IMAGE_BYTES || utf8_has_control(o->image)))
        return cli_usage_error(cli->cmd, "--image: at most %d printable bytes", SBX_MAX_IMAGE_BYTES);
    if ((rc = cli_check_name(cli->cmd, "--tenant", o->tenant)) != 0)
        return rc;
    if (o->from && (strlen(o->from) > CLI_ARG_ID_MAX || !spec_snapshot_ref_ok(o->from)))
        return cli_usage_error(cli->cmd, "--from: '%.80s' is not a snapshot id (snp_...) or name", o->from);
    if (o->template_ref && !cli_template_ref_ok(o->template_ref))
        return cli_usage_error(cli->cmd, "--template: '%.80s' is not NAME or NAME:VERSION (a template name, a "
                                         "version 1, 2, ...)", o->template_ref);
    if (o->template_ref && o->from)
        return cli_usage_error(cli->cmd, "--template and --from exclude each other");
    if (o->name && !spec_sandbox_name_ok(o->name))
        return cli_usage_error(cli->cmd,
                               "--name: '%s' is not a sandbox name (1 to %d letters, digits, _, . or -, starting "
                               "with a letter or digit, not sbx_...)", o->name, SBX_SANDBOX_NAME_MAX);
    return cli_check_idem_key(cli->cmd, o->idem_key);
}

/* create --upload LOCAL:/path, once the sandbox runs: /path becomes a copy
 * of LOCAL. */
static int create_upload(cli_t *cli, const opts_t *o, const char *sid)
{
    const char *sep = strstr(o->upload, ":/");
    while (strstr(sep + 1, ":/"))
        sep = strstr(sep + 1, ":/");
    char local[4096];
    snprintf(local, sizeof local, "%.*s", (int)(sep - o->upload), o->upload);
    int rc = cli_upload(cli, local, sid, sep + 1, false, true,
                        &(cli_upload_filter_t){ .patterns = o->excludes, .n = o->n_excludes, .vcs = !o->no_ignore });
    if (rc != 0)
        fprintf(stderr, "sandbox: create: sandbox %s runs, but --upload failed (it was not deleted)\n", sid);
    return rc;
}

static client_flag_t flag_of(bool b) { return b ? CLIENT_FLAG_TRUE : CLIENT_FLAG_FALSE; }

/* The create request the flags describe (client_create_body). */
static client_create_spec_t create_spec(const opts_t *o)
{
    return (client_create_spec_t){
        .name = o->name, .tenant = o->tenant, .image = o->image, .from = o->from, .template = o->template_ref,
        .network = o->network, .isolation = o->isolation,
        .cpu_millis = o->cpu_millis, .memory_mib = o->memory_mib, .disk_mib = o->disk_mib,
        .ttl_seconds = o->ttl,
        .untrusted_repo = flag_of(o->untrusted_repo), .generated_code = flag_of(o->generated_code),
        .hostile = flag_of(o->hostile),
        .read_only_root = o->read_only_root ? CLIENT_FLAG_TRUE : CLIENT_FLAG_UNSET,
        .hardened = o->hardened ? CLIENT_FLAG_TRUE : CLIENT_FLAG_UNSET,
        .auto_pause = o->auto_pause ? CLIENT_FLAG_TRUE : CLIENT_FLAG_UNSET,
        .env = o->env, .labels = o->labels, .selector = o->selector, .volumes = o->volumes, .egress = o->egress,
        .secrets = o->secrets,
    };
}

/* create --wait --json: {"sandbox":…,"operation":…} with the sandbox as it
 * is now (phase, worker, expires_at), else as created, and the last
 * operation seen. */
static void print_created_json(cli_t *cli, int rc, const char *sid, json_object *sbx, json_object *op,
                               json_object *last)
{
    char path[CLI_ARG_ID_MAX * 3 + 32];
    json_object *now = NULL, *out = json_object_new_object();
    if (rc != EXIT_API && cli_path(path, sizeof path, "/v1/sandboxes/", sid, NULL) == 0) {
        client_req_t req = { .method = "GET", .path = path };
        json_object *got = NULL;
        client_error_t e;
        if (client_call(&cli->client, &req, &got, &e) == 0)
            now = json_object_get(jsonx_get_obj(got, "sandbox"));
        json_object_put(got);
    }
    json_object *lop = jsonx_get_obj(last, "operation");
    jsonx_add(out, "sandbox", now ? now : json_object_get(sbx));
    jsonx_add(out, "operation", json_object_get(lop ? lop : op));
    cli_print_json(out);
    json_object_put(out);
}

int cli_cmd_create(cli_t *cli, opts_t *o)
{
    json_object *body = NULL;
    client_create_spec_t spec = create_spec(o);
    if (client_create_body(&spec, &body) < 0)
        return EXIT_API;
    json_object *resp = NULL;
    int rc = cli_call(cli, "POST", "/v1/sandboxes", body, o->idem_key, &resp);
    json_object_put(body);
    if (rc)
        return rc;
    json_object *sbx = jsonx_get_obj(resp, "sandbox");
    json_object *op = jsonx_get_obj(resp, "operation");
    const char *sid = jsonx_get_str(sbx, "id"), *oid = jsonx_get_str(op, "id");
    if (!sid || !oid || strlen(oid) > CLI_ARG_ID_MAX || strlen(sid) > CLI_ARG_ID_MAX) {
        fputs("error: bad_response: the create answer has no sandbox.id or operation.id\n", stderr);
        json_object_put(resp);
        return EXIT_API;
    }
    if (!o->wait) {
        if (cli->json)
            cli_print_json(resp);
        else
            printf("%s %s\n", sid, oid);
        json_object_put(resp);
        return 0;
    }
    /* Print the ids before waiting, so a script keeps them (to delete the
     * sandbox) whatever the wait ends with. */
    if (!cli->json) {
        printf("%s %s\n", sid, oid);
        fflush(stdout);
    }
    json_object *last = NULL;
    rc = cli_wait(cli, oid, cli_wait_timeout(o), &last);
    if (rc == 0 && o->upload)
        rc = create_upload(cli, o, sid);
    if (cli->json)
        print_created_json(cli, rc, sid, sbx, op, last);
    json_object_put(last);
    json_object_put(resp);
    return rc;
}

int cli_check_sandbox_id(cli_t *cli, opts_t *o)
{
    return cli_check_id(cli->cmd, "SANDBOX", o->pos[0]);
}

int cli_cmd_get(cli_t *cli, opts_t *o)
{
    json_object *resp = NULL;
    int rc = cli_call_id(cli, "GET", "/v1/sandboxes/", o->pos[0], NULL, "SANDBOX", NULL, NULL, &resp);
    if (rc != 0)
        return rc;
    if (cli->json) {
        cli_print_json(resp);
    } else {
        cli_print_sandbox(jsonx_get_obj(resp, "sandbox"));
        json_object *ops = jsonx_get_arr(resp, "operations");
        size_t n = ops ? json_object_array_length(ops) : 0;
        printf("operations:%s\n", n ? "" : "     none");
        for (size_t i = 0; i < n; i++) {
            static const char *const fields[] = { "id", "kind", "state", "created_at", NULL };
            json_object *op = json_object_array_get_idx(ops, i);
            cli_print_fields("  ", op, fields);
            cli_print_op_details(op, 4);
        }
    }
    json_object_put(resp);
    return 0;
}

int cli_cmd_list(cli_t *cli, opts_t *o)
{
    char *t = o->tenant ? httpc_escape(o->tenant) : NULL;
    if (o->tenant && !t)
        return EXIT_API;
    char *a = o->cursor ? httpc_escape(o->cursor) : NULL;
    if (o->cursor && !a) {
        free(t);
        return EXIT_API;
    }
    /* --label K=V... as label=K=V,K2=V2 (every one must match), --phase */
    char labels[3072] = "";
    size_t ll = 0;
    int lr = o->labels ? client_labels_query(o->labels, "&", labels, sizeof labels, &ll) : 0;
    char *ph = o->phase ? httpc_escape(o->phase) : NULL;
    char path[4096];
    int w = snprintf(path, sizeof path, "/v1/sandboxes?limit=%lld%s%s%s%s%s%s%s%s",
                     (long long)(o->limit.set ? o->limit.v : SBX_LIST_DEFAULT), o->all ? "&all=true" : "",
                     t ? "&tenant=" : "", t ? t : "", a ? "&after=" : "", a ? a : "", labels, ph ? "&phase=" : "",
                     ph ? ph : "");
    free(t);
    free(a);
    free(ph);
    if (w < 0 || (size_t)w >= sizeof path || lr < 0)
        return cli_usage_error(cli->cmd, "--tenant, --label or --phase is too long");
    json_object *resp = NULL;
    int rc = cli_call(cli, "GET", path, NULL, NULL, &resp);
    if (rc)
        return rc;
    json_object *arr = jsonx_get_arr(resp, "sandboxes");
    if (!arr) {
        fputs("error: bad_response: the list answer has no sandboxes array\n", stderr);
        json_object_put(resp);
        return EXIT_API;
    }
    if (cli->json) {
        cli_print_json(resp);
        json_object_put(resp);
        return 0;
    }
    if (o->quiet) { /* ids only, for xargs and $(...) */
        for (size_t i = 0; i < json_object_array_length(arr); i++) {
            cli_put_text(stdout, jsonx_get_str(json_object_array_get_idx(arr, i), "id"));
            putchar('\n');
        }
        const char *next = jsonx_get_str(resp, "next");
        if (next)
            fprintf(stderr, "next: --after %s\n", next);
        json_object_put(resp);
        return 0;
    }
    static const char *const heads[] = { "ID", "NAME", "TENANT", "IMAGE", "PHASE", "WORKER", "AGE" };
    static const char *const fields[] = { "id", "name", "tenant", "image", "phase", "worker" };
    enum { NCOL = 7 };
    int width[NCOL];
    for (int c = 0; c < NCOL; c++)
        width[c] = (int)strlen(heads[c]);
    size_t n = json_object_array_length(arr);
    char phase[64];
    for (size_t i = 0; i < n; i++) {
        json_object *s = json_object_array_get_idx(arr, i);
        for (int c = 0; c < NCOL - 1; c++) {
            int cw = cli_cell_width(c == 4 ? cli_phase_shown(s, phase, sizeof phase) : jsonx_get_str(s, fields[c]));
            if (cw > width[c])
                width[c] = cw;
        }
    }
    for (int c = 0; c < NCOL; c++)
        cli_print_cell(heads[c], width[c], c == NCOL - 1);
    for (size_t i = 0; i < n; i++) {
        json_object *s = json_object_array_get_idx(arr, i);
        for (int c = 0; c < NCOL - 1; c++)
            cli_print_cell(c == 4 ? cli_phase_shown(s, phase, sizeof phase) : jsonx_get_str(s, fields[c]), width[c],
                           false);
        char age[32];
        cli_format_age(cli_age_seconds(jsonx_get_str(s, "created_at")), age, sizeof age);
        cli_print_cell(age, 0, true);
    }
    if (n == 0)
        fputs("sandbox: no sandboxes\n", stderr);
    const char *next = jsonx_get_str(resp, "next");
    if (next)
        fprintf(stderr, "next: --after %s\n", next);
    json_object_put(resp);
    return 0;
}

int cli_check_delete(cli_t *cli, opts_t *o)
{
    int rc;
    if (o->npos == 0 && !o->labels)
        return cli_usage_error(cli->cmd, "missing SANDBOX (or --label K=V)");
    if (o->npos > 0 && o->labels)
        return cli_usage_error(cli->cmd, "give SANDBOXs or --label, not both");
    for (int i = 0; i < o->npos; i++)
        if ((rc = cli_check_id(cli->cmd, "SANDBOX", o->pos[i])) != 0)
            return rc;
    if (o->idem_key && (o->npos != 1 || o->labels))
        return cli_usage_error(cli->cmd, "--idempotency-key is for one SANDBOX");
    if (o->tenant && !o->labels)
        return cli_usage_error(cli->cmd, "--tenant goes with --label");
    if ((rc = cli_check_name(cli->cmd, "--tenant", o->tenant)) != 0)
        return rc;
    if ((rc = cli_check_timeout_wait(cli->cmd, o)) != 0)
        return rc;
    return cli_check_idem_key(cli->cmd, o->idem_key);
}

/* The ids of the sandboxes (not deleted) with all of o->labels, every
 * page: a malloc'd array of malloc'd ids, or an exit code. */
static int ids_by_label(cli_t *cli, opts_t *o, char ***ret, size_t *ret_n)
{
    char labels[3072] = "", path[4096], cursor[160] = "";
    size_t ll = 0, n = 0, cap = 0;
    char **ids = NULL;
    if (client_labels_query(o->labels, "&", labels, sizeof labels, &ll) < 0)
        return cli_usage_error(cli->cmd, "--label is too long");
    for (int page = 0; page < 1000; page++) {
        snprintf(path, sizeof path, "/v1/sandboxes?limit=%d%s%s%s%s", SBX_LIST_MAX, labels,
                 o->tenant ? "&tenant=" : "", o->tenant ? o->tenant : "", cursor);
        json_object *resp = NULL;
        int rc = cli_call(cli, "GET", path, NULL, NULL, &resp);
        if (rc) {
            for (size_t i = 0; i < n; i++)
                free(ids[i]);
            free(ids);
            return rc;
        }
        json_object *arr = jsonx_get_arr(resp, "sandboxes");
        for (size_t i = 0; arr && i < json_object_array_length(arr); i++) {
            json_object *sb = json_object_array_get_idx(arr, i);
            const char *id = jsonx_get_str(sb, "id"), *ph = jsonx_get_str(sb, "phase");
            if (!id || (ph && (strcmp(ph, "deleting") == 0 || strcmp(ph, "deleted") == 0)))
                continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 16;
                char **nids = realloc(ids, cap * sizeof *ids);
                if (!nids)
                    break;
                ids = nids;
            }
            ids[n++] = strdup(id);
        }
        const char *next = jsonx_get_str(resp, "next");
        if (next && strlen(next) < 128)
            snprintf(cursor, sizeof cursor, "&after=%s", next);
        json_object_put(resp);
        if (!next)
            break;
    }
    *ret = ids;
    *ret_n = n;
    return 0;
}

/* sandbox delete ID [ID...] | --label K=V: each deleted in turn; the exit
 * code is the first failure's (the others are still deleted). */
int cli_cmd_delete(cli_t *cli, opts_t *o)
{
    char **byl = NULL;
    size_t n = (size_t)o->npos;
    if (o->labels) {
        int rc = ids_by_label(cli, o, &byl, &n);
        if (rc)
            return rc;
        if (n == 0)
            fputs("sandbox: no sandbox has those labels\n", stderr);
    }
    int worst = 0;
    for (size_t i = 0; i < n; i++) {
        const char *id = byl ? byl[i] : o->pos[i];
        json_object *resp = NULL;
        int rc = cli_call_id(cli, "DELETE", "/v1/sandboxes/", id, NULL, "SANDBOX", NULL, o->idem_key, &resp);
        if (rc == 0)
            rc = cli_print_or_wait_op(cli, o, resp, "delete");
        if (rc && !worst)
            worst = rc;
    }
    for (size_t i = 0; byl && i < n; i++)
        free(byl[i]);
    free(byl);
    return worst;
}

int cli_check_list(cli_t *cli, opts_t *o)
{
    int rc = cli_check_name(cli->cmd, "--tenant", o->tenant);
    if (rc)
        return rc;
    if (o->phase && (strlen(o->phase) > 200 || strspn(o->phase, "abcdefghijklmnopqrstuvwxyz,") != strlen(o->phase)))
        return cli_usage_error(cli->cmd, "--phase takes phases, comma-separated (running,failed)");
    /* The controller judges the cursor; here only its size and alphabet. */
    size_t n = o->cursor ? strlen(o->cursor) : 0;
    bool ok = !o->cursor || (n > 0 && n <= 128);
    for (size_t i = 0; ok && i < n; i++) {
        char ch = o->cursor[i];
        ok = (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' || ch == '.';
    }
    return ok ? 0 : cli_usage_error(cli->cmd, "--after takes the CURSOR a previous list printed after 'next:'");
}

int cli_check_extend(cli_t *cli, opts_t *o)
{
    int rc = cli_check_id(cli->cmd, "SANDBOX", o->pos[0]);
    if (rc)
        return rc;
    if (!o->ttl.set)
        return cli_usage_error(cli->cmd, "--ttl SECONDS is required: the seconds from now the sandbox should live");
    return cli_check_idem_key(cli->cmd, o->idem_key);
}

int cli_cmd_extend(cli_t *cli, opts_t *o)
{
    json_object *body = NULL, *resp = NULL;
    client_extend_spec_t spec = { .ttl_seconds = o->ttl.v };
    if (client_extend_body(&spec, &body) < 0)
        return EXIT_API;
    int rc = cli_call_id(cli, "POST", "/v1/sandboxes/", o->pos[0], "/extend", "SANDBOX", body, o->idem_key, &resp);
    json_object_put(body);
    if (rc != 0)
        return rc;
    json_object *op = jsonx_get_obj(resp, "operation");
    json_object *res = jsonx_get_obj(op, "result");
    const char *oid = jsonx_get_str(op, "id"), *state = jsonx_get_str(op, "state");
    if (!oid || !state || (strcmp(state, "succeeded") == 0 && !res)) {
        fputs("error: bad_response: the extend answer has no operation with a state and a result\n", stderr);
        json_object_put(resp);
        return EXIT_API;
    }
    if (strcmp(state, "succeeded") != 0) {
        /* Never so today: the controller finishes an extend before it answers. */
        json_object *err = jsonx_get_obj(op, "error");
        cli_print_error(jsonx_get_str(err, "code") ? jsonx_get_str(err, "code") : state,
                        jsonx_get_str(err, "message") ? jsonx_get_str(err, "message") : "the extend did not succeed");
        rc = EXIT_OP_FAILED;
    } else if (cli->json) {
        cli_print_json(resp);
    } else {
        const char *exp = jsonx_get_str(res, "expires_at");
        cli_put_text(stdout, exp);
        putchar('\n');
        if (!exp) {
            fprintf(stderr, "sandbox: extend: %s is not running yet: it expires %lld s after it starts\n", o->pos[0],
                    (long long)o->ttl.v);
        }
    }
    json_object_put(resp);
    return rc;
}

/* ---------------------------------------------------------------- pause, resume */

int cli_check_pause(cli_t *cli, opts_t *o)
{
    int rc = cli_check_id(cli->cmd, "SANDBOX", o->pos[0]);
    if (rc)
        return rc;
    if ((rc = cli_check_timeout_wait(cli->cmd, o)) != 0)
        return rc;
    return cli_check_idem_key(cli->cmd, o->idem_key);
}

int cli_check_network(cli_t *cli, opts_t *o)
{
    int rc = cli_check_id(cli->cmd, "SANDBOX", o->pos[0]);
    if (rc || (rc = cli_check_egress(cli, o)) != 0 || (rc = cli_check_timeout_wait(cli->cmd, o)) != 0 ||
        (rc = cli_check_idem_key(cli->cmd, o->idem_key)) != 0)
        return rc;
    if (!o->egress && (o->wait || o->idem_key))
        return cli_usage_error(cli->cmd, "%s applies to a change (--allow, --deny, --udp or --egress-default)",
                               o->wait ? "--wait" : "--idempotency-key");
    if (o->netlog && o->egress)
        return cli_usage_error(cli->cmd, "--log reads the log; a change is --allow, --deny, --udp, --egress-default");
    if (!o->netlog && (o->verdict || o->after.set || o->limit.set))
        return cli_usage_error(cli->cmd, "%s applies to --log",
                               o->verdict ? "--verdict" : o->after.set ? "--after" : "--limit");
    if (o->verdict && strcmp(o->verdict, "allowed") != 0 && strcmp(o->verdict, "refused") != 0)
        return cli_usage_error(cli->cmd, "--verdict: '%.40s' is not allowed or refused", o->verdict);
    return 0;
}

/* sandbox network SANDBOX --log: one line an entry. */
static int network_log(cli_t *cli, opts_t *o)
{
    char suffix[96];
    int n = snprintf(suffix, sizeof suffix, "/network/log?limit=%lld",
                     (long long)(o->limit.set ? o->limit.v : SBX_LIST_DEFAULT));
    if (o->after.set)
        n += snprintf(suffix + n, sizeof suffix - (size_t)n, "&after=%lld", (long long)o->after.v);
    if (o->verdict)
        snprintf(suffix + n, sizeof suffix - (size_t)n, "&verdict=%s", o->verdict);
    json_object *resp = NULL;
    int rc = cli_call_id(cli, "GET", "/v1/sandboxes/", o->pos[0], suffix, "SANDBOX", NULL, NULL, &resp);
    if (rc)
        return rc;
    if (cli->json) {
        cli_print_json(resp);
        json_object_put(resp);
        return 0;
    }
    json_object *arr = jsonx_get_arr(resp, "entries");
    for (size_t i = 0; arr && i < json_object_array_length(arr); i++) {
        json_object *e = json_object_array_get_idx(arr, i);
        int64_t id = 0, port = 0, bo = -1, bi = -1;
        jsonx_get_int(e, "id", &id);
        const char *kind = jsonx_get_str(e, "kind");
        bool tcp = kind && (strcmp(kind, "tcp") == 0 || strcmp(kind, "udp") == 0); /* a port */
        printf("%-6lld %s %-3s %-7s ", (long long)id, jsonx_get_str(e, "at") ? jsonx_get_str(e, "at") : "-",
               kind ? kind : "?", jsonx_get_str(e, "verdict") ? jsonx_get_str(e, "verdict") : "?");
        const char *name = jsonx_get_str(e, "name");
        cli_put_text(stdout, name && *name ? name : "-");
        if (tcp && jsonx_get_int(e, "port", &port))
            printf(":%lld", (long long)port);
        printf(" %s ", jsonx_get_str(e, "addr") ? jsonx_get_str(e, "addr") : "-");
        cli_put_text(stdout, jsonx_get_str(e, "why") ? jsonx_get_str(e, "why") : "");
        if (jsonx_get_int(e, "bytes_out", &bo) && jsonx_get_int(e, "bytes_in", &bi))
            printf(" (out %lld, in %lld bytes)", (long long)bo, (long long)bi);
        putchar('\n');
    }
    json_object_put(resp);
    return 0;
}

/* sandbox network SANDBOX: its rules; with --allow/--deny/--egress-default
 * the change's operation, as pause prints it. */
int cli_cmd_network(cli_t *cli, opts_t *o)
{
    json_object *resp = NULL;
    if (o->netlog)
        return network_log(cli, o);
    if (!o->egress) {
        int rc = cli_call_id(cli, "GET", "/v1/sandboxes/", o->pos[0], "", "SANDBOX", NULL, NULL, &resp);
        if (rc)
            return rc;
        json_object *eg = jsonx_get_obj(jsonx_get_obj(resp, "sandbox"), "egress");
        if (cli->json) {
            json_object *out = json_object_new_object();
            jsonx_add(out, "egress", eg ? json_object_get(eg) : NULL);
            cli_print_json(out);
            json_object_put(out);
        } else if (!eg) {
            printf("no egress rules (network %s)\n",
                   jsonx_get_str(jsonx_get_obj(resp, "sandbox"), "network") ?
                   jsonx_get_str(jsonx_get_obj(resp, "sandbox"), "network") : "?");
        } else {
            const char *keys[] = { "allow", "deny" };
            for (int k = 0; k < 2; k++) {
                json_object *a = jsonx_get_arr(eg, keys[k]);
                for (size_t i = 0; a && i < json_object_array_length(a); i++) {
                    printf("%-8s", keys[k]);
                    cli_put_text(stdout, json_object_get_string(json_object_array_get_idx(a, i)));
                    putchar('\n');
                }
            }
            json_object *u = jsonx_get_arr(eg, "udp");
            for (size_t i = 0; u && i < json_object_array_length(u); i++)
                printf("%-8s%d\n", "udp", json_object_get_int(json_object_array_get_idx(u, i)));
            printf("%-8s%s\n", "default", jsonx_get_str(eg, "default") ? jsonx_get_str(eg, "default") : "?");
        }
        json_object_put(resp);
        return 0;
    }
    json_object *body = json_object_new_object();
    jsonx_add(body, "egress", json_object_get(o->egress));
    int rc = cli_call_id(cli, "PATCH", "/v1/sandboxes/", o->pos[0], "/network", "SANDBOX", body, o->idem_key,
                         &resp);
    json_object_put(body);
    if (rc)
        return rc;
    return cli_print_or_wait_op(cli, o, resp, "network");
}

/* sandbox pause|resume SANDBOX (docs/pause.md): the operation's id, or with
 * --wait 'OPERATION_ID succeeded', as delete prints them; a pause that kept
 * no memory says so on stderr. */
int cli_cmd_pause(cli_t *cli, opts_t *o)
{
    bool pause = strcmp(cli->cmd, "pause") == 0;
    json_object *resp = NULL;
    int rc = cli_call_id(cli, "POST", "/v1/sandboxes/", o->pos[0], pause ? "/pause" : "/resume", "SANDBOX", NULL,
                         o->idem_key, &resp);
    if (rc)
        return rc;
    if (!o->wait)
        return cli_print_or_wait_op(cli, o, resp, cli->cmd);
    const char *oid = jsonx_get_str(jsonx_get_obj(resp, "operation"), "id");
    if (!oid || strlen(oid) > CLI_ARG_ID_MAX) {
        fprintf(stderr, "error: bad_response: the %s answer has no operation.id\n", cli->cmd);
        json_object_put(resp);
        return EXIT_API;
    }
    json_object *last = NULL;
    rc = cli_wait(cli, oid, cli_wait_timeout(o), &last);
    if (cli->json) {
        cli_print_json(last ? last : resp);
    } else if (rc == EXIT_OK) {
        printf("%s succeeded\n", oid);
        bool memory = true;
        json_object *res = jsonx_get_obj(jsonx_get_obj(last, "operation"), "result");
        if (pause && jsonx_get_bool(res, "memory", &memory) && !memory) {
            fputs("sandbox: pause: ", stderr);
            cli_put_text(stderr, o->pos[0]);
            fputs("'s memory was not kept: its main process starts again on resume\n", stderr);
        }
    }
    json_object_put(last);
    json_object_put(resp);
    return rc;
}
