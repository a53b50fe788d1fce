/* sandbox pools list, create, get and delete: warm pools. */
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "errors.h"
#include "jsonx.h"
#include "limits.h"

int cli_check_pools(cli_t *cli, opts_t *o)
{
    bool create = o->npos > 0 && strcmp(o->pos[0], "create") == 0;
    if (o->npos > 0 && !create && (o->size.set || o->image || o->tenant || o->cpu_millis.set || o->memory_mib.set ||
                                   o->disk_mib.set || o->network || o->isolation || o->read_only_root ||
                                   o->ttl.set))
        return cli_usage_error(cli->cmd, "the spec flags (--size, --image, ...) go with create");
    int rc = cli_check_subcommand(cli, o, "list, create, get or delete");
    if (rc >= 0)
        return rc;
    const char *sub = o->pos[0];
    if (create || strcmp(sub, "get") == 0 || strcmp(sub, "delete") == 0) {
        if (o->npos != 2)
            return cli_usage_error(cli->cmd, "%s needs a pool NAME", sub);
        if (create && !o->size.set)
            return cli_usage_error(cli->cmd, "create needs --size N");
        return cli_check_id(cli->cmd, "NAME", o->pos[1]);
    }
    return cli_usage_error(cli->cmd, "unknown subcommand '%s' (list, create, get or delete)", sub);
}

/* NAME TENANT(or *) IMAGE ISOLATION/NETWORK size= ready= creating= hits= misses= */
static void print_pool_row(json_object *p)
{
    const char *tenant = jsonx_get_str(p, "tenant");
    cli_put_text(stdout, jsonx_get_str(p, "name"));
    putchar(' ');
    cli_put_text(stdout, tenant ? tenant : "*");
    putchar(' ');
    cli_put_text(stdout, jsonx_get_str(p, "image"));
    putchar(' ');
    cli_put_text(stdout, jsonx_get_str(p, "isolation"));
    putchar('/');
    cli_put_text(stdout, jsonx_get_str(p, "network"));
    static const char *const nums[] = { "size", "ready", "creating", "hits", "misses", NULL };
    for (const char *const *k = nums; *k; k++) {
        int64_t v = 0;
        jsonx_get_int(p, *k, &v);
        printf(" %s=%lld", *k, (long long)v);
    }
    putchar('\n');
}

/* The body of POST /v1/pools from the flags. */
static json_object *pool_body(const opts_t *o)
{
    json_object *b = json_object_new_object();
    jsonx_add_str(b, "name", o->pos[1]);
    jsonx_add_int(b, "size", o->size.v);
    if (o->tenant)
        jsonx_add_str(b, "tenant", o->tenant);
    if (o->image)
        jsonx_add_str(b, "image", o->image);
    if (o->cpu_millis.set)
        jsonx_add_int(b, "cpu_millis", o->cpu_millis.v);
    if (o->memory_mib.set)
        jsonx_add_int(b, "memory_mib", o->memory_mib.v);
    if (o->disk_mib.set)
        jsonx_add_int(b, "disk_mib", o->disk_mib.v);
    if (o->network)
        jsonx_add_str(b, "network", o->network);
    if (o->isolation)
        jsonx_add_str(b, "isolation", o->isolation);
    if (o->read_only_root)
        json_object_object_add(b, "read_only_root", json_object_new_boolean(true));
    if (o->ttl.set)
        jsonx_add_int(b, "ttl_seconds", o->ttl.v);
    return b;
}

int cli_cmd_pools(cli_t *cli, opts_t *o)
{
    int rc;
    json_object *resp = NULL;
    const char *sub = o->pos[0];
    if (strcmp(sub, "create") == 0) {
        json_object *body = pool_body(o);
        rc = cli_call(cli, "POST", "/v1/pools", body, NULL, &resp);
        json_object_put(body);
    } else if (strcmp(sub, "get") == 0 || strcmp(sub, "delete") == 0) {
        rc = cli_call_id(cli, strcmp(sub, "get") == 0 ? "GET" : "DELETE", "/v1/pools/", o->pos[1], NULL, "NAME",
                         NULL, NULL, &resp);
    } else {
        rc = cli_call(cli, "GET", "/v1/pools", NULL, NULL, &resp);
    }
    return cli_print_listing(cli, rc, resp, "pool", "pools", print_pool_row);
}
