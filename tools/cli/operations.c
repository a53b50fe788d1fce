/* sandbox wait and operation. */
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "errors.h"
#include "jsonx.h"
#include "limits.h"

int cli_check_op_id(cli_t *cli, opts_t *o)
{
    return cli_check_id(cli->cmd, "OPERATION_ID", o->pos[0]);
}

int cli_cmd_wait(cli_t *cli, opts_t *o)
{
    json_object *last = NULL;
    int rc = cli_wait(cli, o->pos[0], cli_wait_timeout(o), &last);
    if (cli->json && last)
        cli_print_json(last);
    else if (rc == EXIT_OK)
        printf("%s succeeded\n", o->pos[0]);
    json_object_put(last);
    return rc;
}

int cli_cmd_operation(cli_t *cli, opts_t *o)
{
    json_object *resp = NULL;
    int rc = cli_call_id(cli, "GET", "/v1/operations/", o->pos[0], NULL, "OPERATION_ID", NULL, NULL, &resp);
    if (rc != 0)
        return rc;
    if (cli->json)
        cli_print_json(resp);
    else
        cli_print_operation(jsonx_get_obj(resp, "operation"));
    json_object_put(resp);
    return 0;
}
