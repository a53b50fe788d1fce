/* sandbox-mcp's volume tools: sandbox_volume_create, sandbox_volumes,
 * sandbox_volume_delete (docs/volumes.md). sandbox_create's "volumes" is a
 * create field (client/request.c). */
#include <json-c/json.h>
#include <stdint.h>

#include "jsonx.h"
#include "limits.h"
#include "mcp.h"
#include "mcp_int.h"

json_object *tool_volume_create(call_t *c, json_object *args)
{
    json_object *bad = NULL, *resp = NULL;
    const char *name = NULL;
    int64_t size_mib = 0;
    api_err_t e;
    if (!tool_arg_str(args, "name", &name, &bad) ||
        !tool_arg_int(args, "size_mib", SBX_VOLUME_MIB_MIN, SBX_VOLUME_MIB_MAX, 0, &size_mib, &bad))
        return bad;
    json_object *body = json_object_new_object();
    if (!body)
        return mcp_tool_error("internal", "out of memory");
    jsonx_add_str(body, "name", name);
    jsonx_add_int(body, "size_mib", size_mib);
    /* Not an operation: the volume exists (unplaced) when the answer comes. */
    int r = api(c, "POST", "/v1/volumes", body, NULL, deadline_in(MCP_REQUEST_TIMEOUT_MS), &resp, &e);
    json_object_put(body);
    if (r < 0)
        return api_failure(&e);
    return mcp_tool_ok(resp);
}

json_object *tool_volumes(call_t *c, json_object *args)
{
    (void)args;
    return get_result(c, "/v1/volumes");
}

json_object *tool_volume_delete(call_t *c, json_object *args)
{
    json_object *bad = NULL, *resp = NULL;
    const char *vol = NULL;
    char path[MCP_PATH_MAX];
    api_err_t e;
    if (!tool_arg_str(args, "volume", &vol, &bad) || !tool_id_path(path, sizeof path, "/v1/volumes/", vol, NULL, &bad))
        return bad;
    /* Not an operation: the volume is deleted when the answer comes; its
     * worker removes the bytes on its next heartbeat. */
    if (api(c, "DELETE", path, NULL, NULL, deadline_in(MCP_REQUEST_TIMEOUT_MS), &resp, &e) < 0)
        return api_failure(&e);
    return mcp_tool_ok(resp);
}
