/* libFuzzer harness: the worker's readers of Docker Engine answers
 * (worker/docker/docker_parse.c): a container list into the inventory, a
 * container inspect into how it ended and its disk quota label, an exec
 * inspect, an archive answer's path stat. Whatever the Engine (or whoever sits on its socket) answers,
 * the ids that come out are URL-safe names, the texts fit and are one line
 * of valid UTF-8, and the numbers stay in range. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "docker_parse.h"
#include "jsonx.h"
#include "limits.h"
#include "utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_inventory(json_object *o)
{
    runtime_object_t *objs = NULL;
    size_t n = 0;
    if (docker_inventory_parse(o, "w1", &objs, &n) < 0)
        return;
    for (size_t i = 0; i < n; i++) {
        if (!docker_name_ok(objs[i].sandbox_id, sizeof objs[i].sandbox_id) ||
            !docker_name_ok(objs[i].ref, sizeof objs[i].ref) || !objs[i].state[0] ||
            strspn(objs[i].state, "abcdefghijklmnopqrstuvwxyz_") != strlen(objs[i].state) ||
            !utf8_valid(objs[i].tenant, strlen(objs[i].tenant)) || utf8_has_control(objs[i].tenant))
            abort();
    }
    free(objs);
}

static void check_inspect(json_object *o)
{
    runtime_exit_t e;
    memset(&e, 0, sizeof e);
    docker_exit_from_inspect(o, &e);
    size_t el = strlen(e.error);
    if (e.exit_code < -1 || !e.state[0] || strspn(e.state, "abcdefghijklmnopqrstuvwxyz_") != strlen(e.state) ||
        !utf8_valid(e.error, el) || strpbrk(e.error, "\r\n\t") || el >= sizeof e.error ||
        strlen(e.finished_at) >= sizeof e.finished_at)
        abort();
    int64_t q = docker_disk_label(jsonx_get_obj(jsonx_get_obj(o, "Config"), "Labels"));
    if (q != 0 && (q < SBX_DISK_MIB_MIN || q > SBX_DISK_MIB_MAX))
        abort();
    runtime_files_stat_t ps;
    if (docker_path_stat_parse(o, &ps) && (ps.size < 0 || ps.mode > 07777 || !ps.type ||
                                           strlen(ps.name) >= sizeof ps.name))
        abort();
    docker_exec_state_t st;
    docker_exec_from_inspect(o, &st);
    if (st.exit_code < -1 || st.pid < 0 || (st.container[0] && !docker_name_ok(st.container, sizeof st.container)))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_object *o = NULL;
    if (jsonx_parse((const char *)data, size, &o, NULL) < 0 || !o)
        return 0;
    check_inventory(o);
    check_inspect(o);
    /* a list's members are containers as an inspect has them, too */
    if (json_object_is_type(o, json_type_array) && json_object_array_length(o) > 0)
        check_inspect(json_object_array_get_idx(o, 0));
    json_object_put(o);
    return 0;
}
