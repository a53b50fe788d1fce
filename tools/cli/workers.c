/* sandbox workers list, drain and resume. */
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "errors.h"
#include "jsonx.h"
#include "limits.h"
#include "version.h"

int cli_check_workers(cli_t *cli, opts_t *o)
{
    int rc = cli_check_subcommand(cli, o, "list, drain or resume");
    if (rc >= 0)
        return rc;
    const char *sub = o->pos[0];
    if (strcmp(sub, "drain") == 0 || strcmp(sub, "resume") == 0) {
        if (o->npos != 2)
            return cli_usage_error(cli->cmd, "%s needs a worker NAME", sub);
        return cli_check_id(cli->cmd, "NAME", o->pos[1]);
    }
    return cli_usage_error(cli->cmd, "unknown subcommand '%s' (list, drain or resume)", sub);
}

static void print_worker_row(json_object *w)
{
    json_object *cap = jsonx_get_obj(w, "capacity"), *al = jsonx_get_obj(w, "allocated");
    static const char *const res[3] = { "cpu_millis", "memory_mib", "slots" };
    int64_t c[3] = { 0 }, a[3] = { 0 };
    for (int i = 0; i < 3; i++) {
        jsonx_get_int(cap, res[i], &c[i]);
        jsonx_get_int(al, res[i], &a[i]);
    }
    cli_put_text(stdout, jsonx_get_str(w, "name"));
    putchar(' ');
    cli_put_text(stdout, jsonx_get_str(w, "state"));
    bool stopping = false;
    if (jsonx_get_bool(w, "stopping", &stopping) && stopping)
        fputs(",stopping", stdout);
    printf(" cpu=%lld/%lldm memory=%lld/%lldMiB slots=%lld/%lld heartbeat=", (long long)a[0], (long long)c[0],
           (long long)a[1], (long long)c[1], (long long)a[2], (long long)c[2]);
    cli_put_text(stdout, jsonx_get_str(w, "last_heartbeat"));
    /* Classes with their network modes: container(none,restricted,open) */
    json_object *nets = jsonx_get_obj(w, "networks");
    fputs(" classes=", stdout);
    int nc = 0;
    if (nets) {
        json_object_object_foreach(nets, cls, modes) {
            fputs(nc++ ? "," : "", stdout);
            cli_put_text(stdout, cls);
            putchar('(');
            for (size_t i = 0; json_object_is_type(modes, json_type_array) && i < json_object_array_length(modes); i++) {
                fputs(i ? "+" : "", stdout);
                cli_put_text(stdout, json_object_get_string(json_object_array_get_idx(modes, i)));
            }
            putchar(')');
        }
    }
    if (!nc)
        fputs("none", stdout);
    putchar('\n');
    json_object *away = jsonx_get_obj(w, "unreachable");
    if (away) {
        fputs("  unreachable: ", stdout);
        cli_put_text(stdout, jsonx_get_str(away, "reason") ? jsonx_get_str(away, "reason") : "?");
        fputs(" since ", stdout);
        cli_put_text(stdout, jsonx_get_str(away, "since") ? jsonx_get_str(away, "since") : "?");
        fputs("; its sandboxes are lost at ", stdout);
        cli_put_text(stdout, jsonx_get_str(away, "lost_at") ? jsonx_get_str(away, "lost_at") : "?");
        fputs(" unless it returns\n", stdout);
    }
    json_object *probes = jsonx_get_obj(w, "probes");
    if (probes) {
        json_object_object_foreach(probes, pc, pt) {
            fputs("  probe ", stdout);
            cli_put_text(stdout, pc);
            fputs(": ", stdout);
            cli_put_text(stdout, json_object_is_type(pt, json_type_string) ? json_object_get_string(pt) : "?");
            putchar('\n');
        }
    }
}

int cli_cmd_workers(cli_t *cli, opts_t *o)
{
    int rc;
    json_object *resp = NULL;
    const char *sub = o->pos[0];
    if (strcmp(sub, "list") == 0) {
        rc = cli_call(cli, "GET", "/v1/workers", NULL, NULL, &resp);
    } else {
        rc = cli_call_id(cli, "POST", "/v1/workers/", o->pos[1], strcmp(sub, "drain") == 0 ? "/drain" : "/resume",
                         "NAME", NULL, NULL, &resp);
    }
    return cli_print_listing(cli, rc, resp, "worker", "workers", print_worker_row);
}

/* ---- sandbox images ---- */

int cli_check_images(cli_t *cli, opts_t *o)
{
    if (o->npos != 0)
        return cli_usage_error(cli->cmd, "takes no arguments (did you mean --tenant %s?)", o->pos[0]);
    return cli_check_name(cli->cmd, "--tenant", o->tenant);
}

/* Joins a JSON array of strings with commas. */
static void put_list(json_object *a)
{
    size_t n = a && json_object_is_type(a, json_type_array) ? json_object_array_length(a) : 0;
    for (size_t i = 0; i < n; i++) {
        fputs(i ? "," : "", stdout);
        cli_put_text(stdout, json_object_get_string(json_object_array_get_idx(a, i)));
    }
    if (!n)
        putchar('-');
}

int cli_cmd_images(cli_t *cli, opts_t *o)
{
    char path[SBX_MAX_NAME_BYTES + 32];
    json_object *resp = NULL;
    int rc = 0;
    snprintf(path, sizeof path, "/v1/images");
    if (o->tenant)
        rc = cli_path(path, sizeof path, "/v1/images?tenant=", o->tenant, "");
    if (rc == 0)
        rc = cli_call(cli, "GET", path, NULL, NULL, &resp);
    if (rc != 0)
        return rc;
    if (cli->json) {
        cli_print_json(resp);
        json_object_put(resp);
        return 0;
    }
    json_object *arr = jsonx_get_arr(resp, "images");
    size_t n = arr ? json_object_array_length(arr) : 0;
    const char *def = jsonx_get_str(resp, "default_image");
    if (!o->quiet && n)
        printf("%-40s %-24s %-9s %-7s %s\n", "IMAGE", "ISOLATION", "SIZE", "CREATED", "WORKERS");
    for (size_t i = 0; i < n; i++) {
        json_object *img = json_object_array_get_idx(arr, i);
        const char *name = jsonx_get_str(img, "name");
        if (o->quiet) {
            cli_put_text(stdout, name);
            putchar('\n');
            continue;
        }
        cli_put_text(stdout, name);
        bool is_def = def && name && strcmp(def, name) == 0;
        int w = (int)(name ? strlen(name) : 0) + (is_def ? 10 : 0);
        if (is_def)
            fputs(" (default)", stdout);
        printf("%*s ", w < 40 ? 40 - w : 0, "");
        json_object *iso = jsonx_get_arr(img, "isolation");
        put_list(iso);
        size_t il = 0;
        for (size_t k = 0; iso && k < json_object_array_length(iso); k++)
            il += strlen(json_object_get_string(json_object_array_get_idx(iso, k))) + (k ? 1 : 0);
        printf("%*s ", il < 24 ? (int)(24 - il) : 0, "");
        /* docker images' habit: decimal megabytes, an age */
        int64_t size = -1;
        char sz[16], age[16] = "-";
        if (!jsonx_get_int(img, "size", &size))
            size = -1;
        cli_format_bytes(size, sz, sizeof sz);
        if (jsonx_get_str(img, "created"))
            cli_format_age(cli_age_seconds(jsonx_get_str(img, "created")), age, sizeof age);
        printf("%-9s %-7s ", sz, age);
        put_list(jsonx_get_arr(img, "workers"));
        putchar('\n');
    }
    if (!o->quiet) {
        int64_t hidden = 0;
        const char *tenant = jsonx_get_str(resp, "tenant");
        json_object *allowed = jsonx_get_arr(resp, "allowed");
        if (n == 0)
            fputs("sandbox: no image on a ready worker", stderr);
        if (n == 0 && tenant)
            fputs(" that this tenant may use", stderr);
        if (n == 0)
            fputs(def ? "; a create without --image uses " : "\n", stderr);
        if (n == 0 && def)
            fprintf(stderr, "%s, pulled if the server may pull it\n", def);
        if (jsonx_get_int(resp, "not_allowed", &hidden) && hidden > 0) {
            fprintf(stderr, "sandbox: %lld more on the workers that tenant %s's policy does not allow (images: ",
                    (long long)hidden, tenant ? tenant : "?");
            for (size_t k = 0; allowed && k < json_object_array_length(allowed); k++)
                fprintf(stderr, "%s%s", k ? ", " : "", json_object_get_string(json_object_array_get_idx(allowed, k)));
            fputs(allowed ? ")\n" : "any; its registries or the server's image_registries)\n", stderr);
        }
    }
    json_object_put(resp);
    return 0;
}

/* ---- sandbox version ---- */

int cli_check_version(cli_t *cli, opts_t *o)
{
    (void)o;
    if (!cli->json) {
        printf("client: sandbox %s\n", SBX_VERSION);
        fflush(stdout);
    }
    return 0;
}

int cli_cmd_version(cli_t *cli, opts_t *o)
{
    (void)o;
    json_object *resp = NULL;
    int rc = cli_call(cli, "GET", "/v1/version", NULL, NULL, &resp);
    if (rc != 0)
        return rc;
    if (cli->json) {
        json_object *out = json_object_new_object(), *cl = json_object_new_object();
        jsonx_add_str(cl, "version", SBX_VERSION);
        jsonx_add(out, "client", cl);
        jsonx_add_str(resp, "url", cli->url);
        jsonx_add(out, "server", resp);
        cli_print_json(out);
        json_object_put(out);
        return 0;
    }
    fputs("server: sandboxd ", stdout);
    cli_put_text(stdout, jsonx_get_str(resp, "version") ? jsonx_get_str(resp, "version") : "?");
    fputs(" (api ", stdout);
    cli_put_text(stdout, jsonx_get_str(resp, "api") ? jsonx_get_str(resp, "api") : "?");
    fputs(", schema ", stdout);
    cli_put_text(stdout, jsonx_get_str(resp, "schema") ? jsonx_get_str(resp, "schema") : "?");
    fputs(") at ", stdout);
    cli_put_text(stdout, cli->url);
    putchar('\n');
    /* workers: 2 at 0.1.0, 1 at 0.0.9; and a skew line when one differs */
    json_object *wv = jsonx_get_arr(resp, "workers");
    size_t n = wv ? json_object_array_length(wv) : 0;
    const char *mine = jsonx_get_str(resp, "version");
    bool skew = false;
    if (wv) {
        fputs("workers: ", stdout);
        if (n == 0)
            fputs("none ready", stdout);
        for (size_t i = 0; i < n; i++) {
            json_object *e = json_object_array_get_idx(wv, i);
            int64_t k = 0;
            jsonx_get_int(e, "workers", &k);
            const char *v = jsonx_get_str(e, "version");
            printf("%s%lld at ", i ? ", " : "", (long long)k);
            cli_put_text(stdout, v);
            if (!v || !mine || strcmp(v, mine) != 0)
                skew = true;
        }
        putchar('\n');
    }
    if (skew)
        puts("skew: some workers run another version than the controller (sandbox workers list shows which)");
    json_object_put(resp);
    return 0;
}
