/* sandbox volumes create, list, get and delete (docs/volumes.md); create
 * --volume mounts one. */
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "client.h"
#include "errors.h"
#include "ids.h"
#include "jsonx.h"
#include "limits.h"
#include "spec.h"

int cli_check_volumes(cli_t *cli, opts_t *o)
{
    bool list = o->npos > 0 && strcmp(o->pos[0], "list") == 0;
    bool create = o->npos > 0 && strcmp(o->pos[0], "create") == 0;
    bool down = o->npos > 0 && strcmp(o->pos[0], "download") == 0;
    bool up = o->npos > 0 && strcmp(o->pos[0], "upload") == 0;
    if (o->npos > 0 && !down && o->output)
        return cli_usage_error(cli->cmd, "-o goes with download");
    if (down || up) {
        if (o->npos < 2 || o->npos > (up ? 3 : 2))
            return cli_usage_error(cli->cmd, up ? "upload takes VOLUME [FILE]" : "download takes one VOLUME");
        if (!spec_volume_ref_ok(o->pos[1]))
            return cli_usage_error(cli->cmd, "'%s' is not a volume id (vol_...) or name", o->pos[1]);
        if (down && !o->output && isatty(STDOUT_FILENO))
            return cli_usage_error(cli->cmd, "download writes a tar: give -o FILE, or send stdout to a file or pipe");
        return 0;
    }
    if (o->timeout.set)
        return cli_usage_error(cli->cmd, "--timeout goes with download and upload");
    if (o->npos > 0 && !list && o->quiet)
        return cli_usage_error(cli->cmd, "-q goes with list");
    if (o->npos > 0 && !create && o->size_mib.set)
        return cli_usage_error(cli->cmd, "--size-mib goes with create");
    int rc = cli_check_subcommand(cli, o, "create, list, get, delete, download or upload");
    if (rc > 0)
        return rc;
    if (rc == 0)
        return 0;
    const char *sub = o->pos[0];
    if (create) {
        if (o->npos != 2)
            return cli_usage_error(cli->cmd, "create takes one NAME");
        if (!spec_volume_name_ok(o->pos[1]))
            return cli_usage_error(cli->cmd,
                                   "'%.80s' is not a volume name (1 to %d letters, digits, _, . or -, starting with "
                                   "a letter or digit, not vol_...)", o->pos[1], SBX_SANDBOX_NAME_MAX);
        if (!o->size_mib.set)
            return cli_usage_error(cli->cmd, "create needs --size-mib N (%d to %d)", SBX_VOLUME_MIB_MIN,
                                   SBX_VOLUME_MIB_MAX);
        return 0;
    }
    bool get = strcmp(sub, "get") == 0;
    if (!get && strcmp(sub, "delete") != 0)
        return cli_usage_error(cli->cmd, "unknown subcommand '%s' (create, list, get, delete, download or upload)",
                               sub);
    if (o->npos < 2)
        return cli_usage_error(cli->cmd, "%s needs a VOLUME (its id or name)", sub);
    if (get && o->npos > 2)
        return cli_usage_error(cli->cmd, "get takes one VOLUME");
    for (int i = 1; i < o->npos; i++) {
        if ((rc = cli_check_id(cli->cmd, "VOLUME", o->pos[i])) != 0)
            return rc;
        if (!spec_volume_ref_ok(o->pos[i]))
            return cli_usage_error(cli->cmd, "'%s' is not a volume id (vol_...) or name", o->pos[i]);
    }
    return 0;
}

/* The table of volumes: ID NAME SIZE WORKER MOUNTED CREATED. */
static void print_table(json_object *arr)
{
    static const char *const heads[] = { "ID", "NAME", "SIZE", "WORKER", "MOUNTED", "CREATED" };
    static const char *const fields[] = { "id", "name", NULL, "worker", NULL, NULL };
    enum { NCOL = 6, SIZE_COL = 2, MOUNTED_COL = 4, CREATED_COL = 5 };
    size_t n = json_object_array_length(arr);
    int width[NCOL];
    for (int c = 0; c < NCOL; c++)
        width[c] = (int)strlen(heads[c]);
    char cell[NCOL][48];
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            for (int c = 0; c < NCOL; c++)
                cli_print_cell(heads[c], width[c], c == NCOL - 1);
        for (size_t i = 0; i < n; i++) {
            json_object *v = json_object_array_get_idx(arr, i);
            int64_t mib = 0;
            jsonx_get_int(v, "size_mib", &mib);
            snprintf(cell[SIZE_COL], sizeof cell[SIZE_COL], "%lld MiB", (long long)mib);
            json_object *m = jsonx_get_arr(v, "mounted_by");
            size_t k = m ? json_object_array_length(m) : 0;
            if (k == 0)
                snprintf(cell[MOUNTED_COL], sizeof cell[MOUNTED_COL], "-");
            else if (k == 1)
                snprintf(cell[MOUNTED_COL], sizeof cell[MOUNTED_COL], "%.40s",
                         jsonx_get_str(json_object_array_get_idx(m, 0), "sandbox"));
            else
                snprintf(cell[MOUNTED_COL], sizeof cell[MOUNTED_COL], "%zu sandboxes", k);
            cli_format_age(cli_age_seconds(jsonx_get_str(v, "created_at")), cell[CREATED_COL],
                           sizeof cell[CREATED_COL]);
            for (int c = 0; c < NCOL; c++) {
                const char *val = fields[c] ? jsonx_get_str(v, fields[c]) : cell[c];
                if (!val)
                    val = "-";
                if (pass == 0 && cli_cell_width(val) > width[c])
                    width[c] = cli_cell_width(val);
                else if (pass == 1)
                    cli_print_cell(val, width[c], c == NCOL - 1);
            }
        }
    }
}

static int volumes_list(cli_t *cli, const opts_t *o)
{
    json_object *resp = NULL;
    int rc = cli_call(cli, "GET", "/v1/volumes", NULL, NULL, &resp);
    if (rc)
        return rc;
    json_object *arr = jsonx_get_arr(resp, "volumes");
    if (!arr) {
        fputs("error: bad_response: the list answer has no volumes array\n", stderr);
        json_object_put(resp);
        return EXIT_API;
    }
    size_t n = json_object_array_length(arr);
    if (cli->json) {
        cli_print_json(resp);
    } else if (o->quiet) {
        for (size_t i = 0; i < n; i++) {
            cli_put_text(stdout, jsonx_get_str(json_object_array_get_idx(arr, i), "id"));
            putchar('\n');
        }
    } else if (n == 0) {
        fputs("sandbox: no volumes\n", stderr);
    } else {
        print_table(arr);
    }
    json_object_put(resp);
    return 0;
}

/* Where a helper sandbox mounts the volume it moves. */
#define VOL_HELPER_PATH "/volume"

/* A helper sandbox that mounts volume vol at VOL_HELPER_PATH (read-only
 * for a download), running: its id into sid. An exit code. */
static int helper_start(cli_t *cli, const opts_t *o, const char *vol, bool ro, char sid[CLI_ARG_ID_MAX])
{
    json_object *vols = json_object_new_array(), *e = json_object_new_object(), *labels = json_object_new_object();
    jsonx_add_str(e, "volume", vol);
    jsonx_add_str(e, "path", VOL_HELPER_PATH);
    jsonx_add_bool(e, "read_only", ro);
    json_object_array_add(vols, e);
    jsonx_add_str(labels, "sandbox.volume-helper", ro ? "download" : "upload");
    client_create_spec_t spec = { .tenant = o->tenant, .cpu_millis = { 250, true }, .memory_mib = { 128, true },
                                  .ttl_seconds = { 3600, true }, .volumes = vols, .labels = labels };
    json_object *body = NULL, *resp = NULL;
    int rc = client_create_body(&spec, &body) < 0 ? EXIT_API : 0;
    json_object_put(vols);
    json_object_put(labels);
    if (rc == 0)
        rc = cli_call(cli, "POST", "/v1/sandboxes", body, NULL, &resp);
    json_object_put(body);
    if (rc)
        return rc;
    const char *id = jsonx_get_str(jsonx_get_obj(resp, "sandbox"), "id");
    const char *op = jsonx_get_str(jsonx_get_obj(resp, "operation"), "id");
    if (!id || !op || strlen(id) >= CLI_ARG_ID_MAX) {
        fputs("error: bad_response: the create answer has no sandbox.id or operation.id\n", stderr);
        json_object_put(resp);
        return EXIT_API;
    }
    snprintf(sid, CLI_ARG_ID_MAX, "%s", id);
    json_object *last = NULL;
    rc = cli_wait(cli, op, cli_wait_timeout(o), &last);
    json_object_put(last);
    json_object_put(resp);
    if (rc)
        fprintf(stderr, "sandbox: volumes: the helper sandbox %s that mounts %s did not start\n", sid, vol);
    return rc;
}

/* Deletes the helper sandbox and waits for it (so that the volume is free
 * again when the command ends). */
static void helper_end(cli_t *cli, const char *sid)
{
    json_object *resp = NULL, *last = NULL;
    if (cli_call_id(cli, "DELETE", "/v1/sandboxes/", sid, NULL, "SANDBOX", NULL, NULL, &resp) == 0) {
        const char *op = jsonx_get_str(jsonx_get_obj(resp, "operation"), "id");
        if (op)
            cli_wait(cli, op, 300, &last);
    } else {
        fprintf(stderr, "sandbox: volumes: the helper sandbox %s was not deleted (its TTL ends it): sandbox "
                        "delete %s\n", sid, sid);
    }
    json_object_put(last);
    json_object_put(resp);
}

/* volumes download VOLUME [-o FILE]: a tar of its files (entries ./...).
 * volumes upload VOLUME [FILE]: a tar unpacked into it. Both through a
 * helper sandbox that mounts it, deleted after. */
static int volumes_move(cli_t *cli, const opts_t *o, bool down)
{
    const char *vol = o->pos[1], *file = down ? o->output : (o->npos > 2 ? o->pos[2] : NULL);
    int fd = down ? STDOUT_FILENO : STDIN_FILENO;
    if (file && strcmp(file, "-") != 0) {
        fd = down ? open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : open(file, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            fprintf(stderr, "sandbox: volumes: %s: %s\n", file, strerror(errno));
            return EXIT_OP_FAILED;
        }
    }
    char sid[CLI_ARG_ID_MAX] = "";
    int rc = helper_start(cli, o, vol, down, sid);
    if (rc == 0)
        rc = down ? cli_tar_out(cli, sid, VOL_HELPER_PATH "/.", fd) : cli_tar_in(cli, fd, sid, VOL_HELPER_PATH);
    if (sid[0])
        helper_end(cli, sid);
    if (fd != STDOUT_FILENO && fd != STDIN_FILENO && close(fd) < 0 && rc == 0) {
        fprintf(stderr, "sandbox: volumes: %s: %s\n", file, strerror(errno));
        rc = EXIT_OP_FAILED;
    }
    if (rc == 0 && !down)
        fprintf(stderr, "sandbox: volumes: unpacked into %s\n", vol);
    return rc;
}

int cli_cmd_volumes(cli_t *cli, opts_t *o)
{
    const char *sub = o->pos[0];
    json_object *resp = NULL;
    int rc;
    if (strcmp(sub, "list") == 0)
        return volumes_list(cli, o);
    if (strcmp(sub, "download") == 0 || strcmp(sub, "upload") == 0)
        return volumes_move(cli, o, sub[0] == 'd');
    if (strcmp(sub, "create") == 0) {
        json_object *body = json_object_new_object();
        jsonx_add_str(body, "name", o->pos[1]);
        jsonx_add_int(body, "size_mib", o->size_mib.v);
        if (o->tenant)
            jsonx_add_str(body, "tenant", o->tenant);
        /* sent again under one key while no answer came: one volume */
        char key[SBX_ID_MAX];
        if (sodium_init() < 0) {
            json_object_put(body);
            fputs("sandbox: volumes: cannot initialise libsodium\n", stderr);
            return EXIT_API;
        }
        ids_new("vol", key);
        rc = cli_post_keyed(cli, 4, "/v1/volumes", body, key, &resp);
        json_object_put(body);
        if (rc)
            return rc;
        if (cli->json) {
            cli_print_json(resp);
        } else {
            cli_put_text(stdout, jsonx_get_str(jsonx_get_obj(resp, "volume"), "id"));
            putchar('\n');
        }
        json_object_put(resp);
        return 0;
    }
    if (strcmp(sub, "get") == 0) {
        rc = cli_call_id(cli, "GET", "/v1/volumes/", o->pos[1], NULL, "VOLUME", NULL, NULL, &resp);
        if (rc)
            return rc;
        if (cli->json)
            cli_print_json(resp);
        else
            cli_print_volume(jsonx_get_obj(resp, "volume"));
        json_object_put(resp);
        return 0;
    }
    /* delete VOLUME...: each in turn; the exit code is the first failure's
     * (the others are still deleted). */
    int worst = 0;
    for (int i = 1; i < o->npos; i++) {
        resp = NULL;
        rc = cli_call_id(cli, "DELETE", "/v1/volumes/", o->pos[i], NULL, "VOLUME", NULL, NULL, &resp);
        if (rc == 0 && cli->json) {
            cli_print_json(resp);
        } else if (rc == 0) {
            json_object *v = jsonx_get_obj(resp, "volume");
            cli_put_text(stdout, jsonx_get_str(v, "id"));
            putchar(' ');
            cli_put_text(stdout, jsonx_get_str(v, "state"));
            putchar('\n');
        }
        json_object_put(resp);
        if (rc && !worst)
            worst = rc;
    }
    return worst;
}
