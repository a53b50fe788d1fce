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
