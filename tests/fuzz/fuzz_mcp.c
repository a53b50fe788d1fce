/* libFuzzer harness: sandbox-mcp's reading of one JSON-RPC line. */
#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "mcp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mcp_msg_t m;
    json_object *error = NULL;
    int r = mcp_decode((const char *)data, size, &m, &error);
    if (r == 0) {
        if (!m.root)
            abort();
        if (m.kind != MCP_MSG_RESPONSE && !m.method)
            abort();
        mcp_msg_release(&m);
    } else if (r < 0) {
        if (!error)
            abort();        /* every refusal has an answer to send */
        json_object_put(error);
    }
    return 0;
}
