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
    const char *sub = o->pos[0];
    if (!sub)
        return cli_usage_error(cli->cmd, "missing subcommand: list, drain or resume");
    if (strcmp(sub, "list") == 0)
        return o->npos == 1 ? 0 : cli_usage_error(cli->cmd, "list takes no argument");
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
    int64_t cc = 0, cm = 0, cs = 0, ac = 0, am = 0, as = 0;
    jsonx_get_int(cap, "cpu_millis", &cc);
    jsonx_get_int(cap, "memory_mib", &cm);
    jsonx_get_int(cap, "slots", &cs);
    jsonx_get_int(al, "cpu_millis", &ac);
    jsonx_get_int(al, "memory_mib", &am);
    jsonx_get_int(al, "slots", &as);
    cli_put_text(stdout, jsonx_get_str(w, "name"));
    putchar(' ');
    cli_put_text(stdout, jsonx_get_str(w, "state"));
    printf(" cpu=%lld/%lldm memory=%lld/%lldMiB slots=%lld/%lld heartbeat=", (long long)ac, (long long)cc,
           (long long)am, (long long)cm, (long long)as, (long long)cs);
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
        char path[CLI_ARG_ID_MAX * 3 + 32];
        if (cli_path(path, sizeof path, "/v1/workers/", o->pos[1], strcmp(sub, "drain") == 0 ? "/drain" : "/resume") != 0)
            return cli_usage_error(cli->cmd, "NAME too long");
        rc = cli_call(cli, "POST", path, NULL, NULL, &resp);
    }
    if (rc != 0)
        return rc;
    cli_print_one_or_list(cli, resp, "worker", "workers", print_worker_row);
    json_object_put(resp);
    return 0;
}
