/* sandbox secrets create|list|delete (docs/network.md#secrets-at-egress). */
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "cli.h"
#include "egress.h"
#include "jsonx.h"
#include "limits.h"
#include "spec.h"
#include "utf8.h"

#define SECRET_VALUE_MAX 4096

int cli_check_secrets(cli_t *cli, opts_t *o)
{
    bool create = o->npos > 0 && strcmp(o->pos[0], "create") == 0;
    bool del = o->npos > 0 && strcmp(o->pos[0], "delete") == 0;
    if (!create && (o->header || o->hosts))
        return cli_usage_error(cli->cmd, "--header and --host go with create");
    if (o->tenant && !create && !del)
        return cli_usage_error(cli->cmd, "--tenant goes with create and delete");
    int rc = cli_check_subcommand(cli, o, "create, list or delete");
    if (rc >= 0)
        return rc;
    if (!create && !del)
        return cli_usage_error(cli->cmd, "unknown subcommand '%.40s': create, list or delete", o->pos[0]);
    if (o->npos != 2)
        return cli_usage_error(cli->cmd, "%s takes one NAME", o->pos[0]);
    if (!spec_secret_name_ok(o->pos[1]))
        return cli_usage_error(cli->cmd, "'%.80s' is not a secret name (1 to %d letters, digits, _, . or -, "
                               "starting with a letter or digit)", o->pos[1], SBX_SANDBOX_NAME_MAX);
    if (create && (!o->header || !o->hosts))
        return cli_usage_error(cli->cmd, "create needs --header NAME and at least one --host DOMAIN");
    for (size_t i = 0; o->hosts && i < json_object_array_length(o->hosts); i++) {
        char canon[EGRESS_DOMAIN_MAX + 1], why[160];
        const char *h = json_object_get_string(json_object_array_get_idx(o->hosts, i));
        if (egress_domain_canon(h, canon, why, sizeof why) < 0)
            return cli_usage_error(cli->cmd, "--host: '%.80s': %s", h, why);
    }
    return 0;
}

/* The value from stdin (a terminal: asked for, not echoed), without its
 * final line break. 0, or an exit code. */
static int read_value(char *buf, size_t cap)
{
    bool tty = isatty(STDIN_FILENO);
    struct termios was, quiet;
    if (tty && tcgetattr(STDIN_FILENO, &was) == 0) {
        quiet = was;
        quiet.c_lflag &= ~(tcflag_t)ECHO;
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet);
        fputs("value (not shown; Enter ends it): ", stderr);
    } else {
        tty = false;
    }
    size_t n = 0;
    for (;;) {
        ssize_t r = read(STDIN_FILENO, buf + n, cap - n);
        if (r <= 0)
            break;
        n += (size_t)r;
        if (n == cap || (tty && memchr(buf, '\n', n)))
            break;
    }
    if (tty) {
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &was);
        fputc('\n', stderr);
    }
    if (n == cap) {
        fprintf(stderr, "sandbox: secrets: the value is longer than %d bytes\n", SECRET_VALUE_MAX);
        return EXIT_USAGE;
    }
    if (tty && memchr(buf, '\n', n))
        n = (size_t)((char *)memchr(buf, '\n', n) - buf);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        n--;
    buf[n] = '\0';
    if (n == 0 || !utf8_valid(buf, n) || utf8_has_control(buf)) {
        fputs("sandbox: secrets: give the header's value on stdin: one line of printable text\n", stderr);
        return EXIT_USAGE;
    }
    return 0;
}

static void print_secret(json_object *s)
{
    cli_put_text(stdout, jsonx_get_str(s, "name"));
    printf("\t%s\t", jsonx_get_str(s, "header") ? jsonx_get_str(s, "header") : "?");
    json_object *h = jsonx_get_arr(s, "hosts");
    for (size_t i = 0; h && i < json_object_array_length(h); i++) {
        if (i)
            putchar(',');
        cli_put_text(stdout, json_object_get_string(json_object_array_get_idx(h, i)));
    }
    printf("\t%s\t", jsonx_get_str(s, "tenant") ? jsonx_get_str(s, "tenant") : "-");
    printf("%s\n", jsonx_get_str(s, "created_at") ? jsonx_get_str(s, "created_at") : "-");
}

int cli_cmd_secrets(cli_t *cli, opts_t *o)
{
    const char *sub = o->pos[0];
    json_object *resp = NULL;
    int rc;
    if (strcmp(sub, "list") == 0) {
        if ((rc = cli_call(cli, "GET", "/v1/secrets", NULL, NULL, &resp)) != 0)
            return rc;
        if (cli->json) {
            cli_print_json(resp);
        } else {
            json_object *arr = jsonx_get_arr(resp, "secrets");
            if (arr && json_object_array_length(arr) > 0)
                puts("NAME\tHEADER\tHOSTS\tTENANT\tCREATED");
            for (size_t i = 0; arr && i < json_object_array_length(arr); i++)
                print_secret(json_object_array_get_idx(arr, i));
        }
        json_object_put(resp);
        return 0;
    }
    if (strcmp(sub, "delete") == 0) {
        char suffix[SBX_MAX_NAME_BYTES + 16] = "";
        if (o->tenant && (strlen(o->tenant) > SBX_MAX_NAME_BYTES || !spec_sandbox_name_ok(o->tenant)))
            return cli_usage_error(cli->cmd, "--tenant: not a tenant name");
        if (o->tenant)
            snprintf(suffix, sizeof suffix, "?tenant=%s", o->tenant);
        if ((rc = cli_call_id(cli, "DELETE", "/v1/secrets/", o->pos[1], suffix, "NAME", NULL, NULL, &resp)) != 0)
            return rc;
        if (cli->json)
            cli_print_json(resp);
        else
            printf("%s deleted\n", o->pos[1]);
        json_object_put(resp);
        return 0;
    }
    static char value[SECRET_VALUE_MAX + 2];
    if ((rc = read_value(value, sizeof value - 1)) != 0)
        return rc;
    json_object *body = json_object_new_object();
    jsonx_add_str(body, "name", o->pos[1]);
    jsonx_add_str(body, "header", o->header);
    jsonx_add(body, "hosts", json_object_get(o->hosts));
    jsonx_add_str(body, "value", value);
    if (o->tenant)
        jsonx_add_str(body, "tenant", o->tenant);
    memset(value, 0, sizeof value);
    rc = cli_call(cli, "POST", "/v1/secrets", body, NULL, &resp);
    json_object *v = NULL;
    if (json_object_object_get_ex(body, "value", &v))
        memset((void *)json_object_get_string(v), 0, (size_t)json_object_get_string_len(v));
    json_object_put(body);
    if (rc)
        return rc;
    if (cli->json)
        cli_print_json(resp);
    else
        print_secret(jsonx_get_obj(resp, "secret"));
    json_object_put(resp);
    return 0;
}
