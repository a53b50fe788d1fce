/* libFuzzer harness: the strict JSON parser and every decoder of a client's
 * or a worker's JSON (tests/fuzz/README.md): the create spec, the exec
 * request, a tenant policy, an observed container state. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "jsonx.h"
#include "observed.h"
#include "policy.h"
#include "spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_object *o = NULL;
    api_error_t err = { 0 };
    if (jsonx_parse((const char *)data, size, &o, &err) < 0) {
        if (!err.message[0])
            abort();            /* a refusal always says why */
        return 0;
    }
    sandbox_spec_t spec;
    if (spec_from_json_default(o, "sandbox/busybox:latest", &spec, &err) == 0)
        spec_release(&spec);
    exec_spec_t x;
    if (exec_spec_from_json(o, &x, &err) == 0)
        exec_spec_release(&x);
    policy_t p;
    policy_init(&p);
    if (policy_from_json(o, &p, &err) == 0)
        policy_release(&p);
    observed_t ob;
    if (observed_from_json(o, "inventory[0]", &ob, &err) == 0) {
        char msg[512];
        observed_message(&ob, msg, sizeof msg);
        if (strlen(msg) >= sizeof msg)
            abort();
    }
    json_object_put(o);
    return 0;
}
