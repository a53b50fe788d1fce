/* sandbox share, routes and unshare: a sandbox port's public routes. */
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "errors.h"
#include "jsonx.h"
#include "limits.h"

int cli_check_share(cli_t *cli, opts_t *o)
{
    int rc = cli_check_id(cli->cmd, "SANDBOX", o->pos[0]);
    if (rc)
        return rc;
    if (!o->port.set)
        return cli_usage_error(cli->cmd, "--port is required");
    if (o->auth && strcmp(o->auth, "token") != 0 && strcmp(o->auth, "public") != 0)
        return cli_usage_error(cli->cmd, "--auth: '%s' is not one of token, public", o->auth);
    if ((rc = cli_check_timeout_wait(cli->cmd, o)) != 0)
        return rc;
    return cli_check_idem_key(cli->cmd, o->idem_key);
}

int cli_cmd_share(cli_t *cli, opts_t *o)
{
    int rc;
    char path[CLI_ARG_ID_MAX * 3 + 32];
    if (cli_path(path, sizeof path, "/v1/sandboxes/", o->pos[0], "/routes") != 0)
        return cli_usage_error(cli->cmd, "SANDBOX too long");
    json_object *body = NULL;
    client_share_spec_t spec = { .port = o->port.v, .ttl_seconds = o->ttl, .auth = o->auth };
    if (client_share_body(&spec, &body) < 0)
        return EXIT_API;
    json_object *resp = NULL;
    rc = cli_call(cli, "POST", path, body, o->idem_key, &resp);
    json_object_put(body);
    if (rc != 0)
        return rc;
    /* A copy: the wait below replaces the operation object in resp. */
    char oid[CLI_ARG_ID_MAX + 1] = "";
    const char *op_id = jsonx_get_str(jsonx_get_obj(resp, "operation"), "id");
    if (op_id && strlen(op_id) <= CLI_ARG_ID_MAX)
        snprintf(oid, sizeof oid, "%s", op_id);
    if (o->wait && oid[0]) {
        json_object *last = NULL;
        rc = cli_wait(cli, oid, cli_wait_timeout(o), &last);
        if (last)
            jsonx_add(resp, "operation", last);
    }
    if (cli->json) {
        cli_print_json(resp);
    } else {
        json_object *route = jsonx_get_obj(resp, "route");
        cli_put_text(stdout, route ? jsonx_get_str(route, "url") : NULL);
        putchar('\n');
        const char *tok = jsonx_get_str(resp, "access_token");
        if (tok) {
            cli_put_text(stdout, tok);
            putchar('\n');
            fputs("sandbox: the second line is the route's access token (send it as 'Authorization: Bearer "
                  "TOKEN'); it is shown only now\n",
                  stderr);
        }
        fputs("route ", stderr);
        cli_put_text(stderr, route ? jsonx_get_str(route, "id") : NULL);
        fputs(", operation ", stderr);
        cli_put_text(stderr, oid[0] ? oid : NULL);
        fputc('\n', stderr);
    }
    json_object_put(resp);
    return rc;
}

int cli_cmd_routes(cli_t *cli, opts_t *o)
{
    json_object *resp = NULL;
    int rc = cli_call_id(cli, "GET", "/v1/sandboxes/", o->pos[0], o->all ? "/routes?all=true" : "/routes", "SANDBOX",
                         NULL, NULL, &resp);
    if (rc != 0)
        return rc;
    if (cli->json) {
        cli_print_json(resp);
        json_object_put(resp);
        return 0;
    }
    json_object *routes = jsonx_get_arr(resp, "routes");
    size_t n = routes ? json_object_array_length(routes) : 0;
    if (n > 0)
        printf("%-30s %-5s %-6s %-7s %-24s %s\n", "ROUTE", "PORT", "AUTH", "STATE", "EXPIRES", "URL");
    for (size_t i = 0; i < n; i++) {
        json_object *r = json_object_array_get_idx(routes, i);
        int64_t port = 0;
        jsonx_get_int(r, "port", &port);
        const char *fields[] = { jsonx_get_str(r, "id"), NULL, jsonx_get_str(r, "auth"), jsonx_get_str(r, "state"),
                                 jsonx_get_str(r, "expires_at"), jsonx_get_str(r, "url") };
        static const int widths[] = { 30, 5, 6, 7, 24, 0 };
        for (int k = 0; k < 6; k++) {
            char num[16];
            const char *v = fields[k];
            if (k == 1) {
                snprintf(num, sizeof num, "%lld", (long long)port);
                v = num;
            }
            cli_put_text(stdout, v ? v : "-");
            if (widths[k]) {
                int pad = widths[k] - (int)strlen(v ? v : "-");
                printf("%*s", pad > 0 ? pad + 1 : 1, "");
            }
        }
        putchar('\n');
    }
    if (n == 0)
        fputs("sandbox: no routes\n", stderr);
    json_object_put(resp);
    return 0;
}

int cli_check_unshare(cli_t *cli, opts_t *o)
{
    int rc = cli_check_id(cli->cmd, "SANDBOX", o->pos[0]);
    if (rc == 0)
        rc = cli_check_id(cli->cmd, "ROUTE_ID", o->pos[1]);
    if (rc == 0)
        rc = cli_check_timeout_wait(cli->cmd, o);
    return rc;
}

int cli_cmd_unshare(cli_t *cli, opts_t *o)
{
    char suffix[CLI_ARG_ID_MAX * 3 + 16];
    char *e = httpc_escape(o->pos[1]);
    if (!e)
        return cli_usage_error(cli->cmd, "out of memory");
    snprintf(suffix, sizeof suffix, "/routes/%s", e);
    free(e);
    json_object *resp = NULL;
    int rc = cli_call_id(cli, "DELETE", "/v1/sandboxes/", o->pos[0], suffix, "SANDBOX", NULL, NULL, &resp);
    if (rc != 0)
        return rc;
    return cli_print_or_wait_op(cli, o, resp, "unshare");
}
