/* The Docker backend's readers of Engine answers (docker_parse.h). */
#include "docker_parse.h"
#include "errors.h"
#include "jsonx.h"
#include "limits.h"
#include "observed.h"
#include "utf8.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool docker_name_ok(const char *s, size_t max)
{
    size_t n = 0;
    if (!s || !*s)
        return false;
    for (; s[n]; n++) {
        char c = s[n];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '-' || c == '.'))
            return false;
    }
    return n < max;
}

void docker_text_line(const char *s, char *out, size_t outlen)
{
    out[0] = '\0';
    if (!s || outlen == 0)
        return;
    char *fixed = utf8_sanitize(s, strlen(s));
    if (!fixed)
        return;
    size_t n = strlen(fixed);
    if (n >= outlen) {
        n = outlen - 1;
        while (n > 0 && ((unsigned char)fixed[n] & 0xC0) == 0x80)
            n--;
    }
    for (size_t i = 0; i < n; i++)
        out[i] = (unsigned char)fixed[i] < 0x20 || fixed[i] == 0x7f ? ' ' : fixed[i];
    out[n] = '\0';
    while (n > 0 && out[n - 1] == ' ')
        out[--n] = '\0';
    free(fixed);
}

void docker_exit_from_inspect(json_object *inspect, runtime_exit_t *ret)
{
    json_object *st = jsonx_get_obj(inspect, "State");
    const char *status = jsonx_get_str(st, "Status");
    const char *fin = jsonx_get_str(st, "FinishedAt");
    int64_t code = -1;
    bool oom = false;
    if (!jsonx_get_int(st, "ExitCode", &code) || code < -1 || code > INT32_MAX)
        code = -1;
    jsonx_get_bool(st, "OOMKilled", &oom);
    ret->known = st != NULL;
    snprintf(ret->state, sizeof ret->state, "%s",
             status && strlen(status) < sizeof ret->state && strspn(status, "abcdefghijklmnopqrstuvwxyz_") ==
                 strlen(status) && *status ? status : "unknown");
    ret->exit_code = (int)code;
    ret->oom_killed = oom;
    snprintf(ret->finished_at, sizeof ret->finished_at, "%s", fin && observed_time_ok(fin) ? fin : "");
    docker_text_line(jsonx_get_str(st, "Error"), ret->error, sizeof ret->error);
}

int64_t docker_disk_label(json_object *labels)
{
    const char *v = jsonx_get_str(labels, RUNTIME_LABEL_DISK_MIB);
    if (!v || !*v || strspn(v, "0123456789") != strlen(v) || strlen(v) > 12)
        return 0;
    errno = 0;
    long long q = strtoll(v, NULL, 10);
    return errno == 0 && q >= SBX_DISK_MIB_MIN && q <= SBX_DISK_MIB_MAX ? (int64_t)q : 0;
}

int docker_inventory_parse(json_object *list, const char *worker_name, runtime_object_t **ret, size_t *ret_n)
{
    *ret = NULL;
    *ret_n = 0;
    if (!list || !json_object_is_type(list, json_type_array))
        return SBX_EINVAL;
    size_t n = json_object_array_length(list), k = 0;
    runtime_object_t *objs = calloc(n ? n : 1, sizeof *objs);
    if (!objs)
        return SBX_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        json_object *c = json_object_array_get_idx(list, i);
        json_object *labels = jsonx_get_obj(c, "Labels");
        const char *id = jsonx_get_str(c, "Id");
        const char *sbx = jsonx_get_str(labels, RUNTIME_LABEL_SANDBOX);
        const char *tenant = jsonx_get_str(labels, RUNTIME_LABEL_TENANT);
        const char *state = jsonx_get_str(c, "State");
        const char *maker = jsonx_get_str(labels, RUNTIME_LABEL_WORKER);
        /* Nothing the controller could match without a sandbox id (nor
         * anything it would refuse the whole heartbeat for). */
        if (!id || !sbx || !docker_name_ok(sbx, sizeof objs[k].sandbox_id) || !docker_name_ok(id, sizeof objs[k].ref))
            continue;
        if (tenant && (strlen(tenant) >= sizeof objs[k].tenant || utf8_has_control(tenant) ||
                       !utf8_valid(tenant, strlen(tenant))))
            tenant = NULL;
        if (state && (strlen(state) >= sizeof objs[k].state || !*state ||
                      strspn(state, "abcdefghijklmnopqrstuvwxyz_") != strlen(state)))
            state = NULL;
        /* Another worker's on a shared Docker host: not ours to report. */
        if (worker_name && *worker_name && maker && strcmp(maker, worker_name) != 0)
            continue;
        snprintf(objs[k].sandbox_id, sizeof objs[k].sandbox_id, "%s", sbx);
        snprintf(objs[k].tenant, sizeof objs[k].tenant, "%s", tenant ? tenant : "");
        snprintf(objs[k].ref, sizeof objs[k].ref, "%s", id);
        snprintf(objs[k].state, sizeof objs[k].state, "%s", state ? state : "unknown");
        k++;
    }
    *ret = objs;
    *ret_n = k;
    return 0;
}

void docker_exec_from_inspect(json_object *o, docker_exec_state_t *ret)
{
    int64_t code = -1, pid = 0;
    bool running = false;
    memset(ret, 0, sizeof *ret);
    jsonx_get_bool(o, "Running", &running);
    if (!jsonx_get_int(o, "ExitCode", &code) || code < -1 || code > INT32_MAX)
        code = -1;
    if (!jsonx_get_int(o, "Pid", &pid) || pid < 0 || pid > INT32_MAX)
        pid = 0;
    const char *cid = jsonx_get_str(o, "ContainerID");
    snprintf(ret->container, sizeof ret->container, "%s", cid && docker_name_ok(cid, sizeof ret->container) ? cid : "");
    ret->running = running;
    ret->exit_code = (int)code;
    ret->pid = (pid_t)pid;
}

/* Go's os.FileMode bits in the Engine's stat. */
#define GO_MODE_DIR       (1u << 31)
#define GO_MODE_SYMLINK   (1u << 27)
#define GO_MODE_DEVICE    (1u << 26)
#define GO_MODE_PIPE      (1u << 25)
#define GO_MODE_SOCKET    (1u << 24)
#define GO_MODE_SETUID    (1u << 23)
#define GO_MODE_SETGID    (1u << 22)
#define GO_MODE_CHARDEV   (1u << 21)
#define GO_MODE_STICKY    (1u << 20)
#define GO_MODE_IRREGULAR (1u << 19)

bool docker_path_stat_parse(json_object *o, runtime_files_stat_t *ret)
{
    memset(ret, 0, sizeof *ret);
    ret->type = "other";
    int64_t size = 0, mode = 0;
    const char *name = jsonx_get_str(o, "name"), *mtime = jsonx_get_str(o, "mtime");
    const char *link = jsonx_get_str(o, "linkTarget");
    if (!name || !jsonx_get_int(o, "size", &size) || size < 0 || !jsonx_get_int(o, "mode", &mode) || mode < 0 ||
        mode > (int64_t)UINT32_MAX)
        return false;
    unsigned m = (unsigned)mode;
    snprintf(ret->name, sizeof ret->name, "%s", name);
    ret->size = size;
    ret->mode = (m & 0777u) | (m & GO_MODE_SETUID ? 04000u : 0) | (m & GO_MODE_SETGID ? 02000u : 0) |
                (m & GO_MODE_STICKY ? 01000u : 0);
    if (m & GO_MODE_DIR)
        ret->type = "dir";
    else if (m & GO_MODE_SYMLINK)
        ret->type = "symlink";
    else if (!(m & (GO_MODE_DEVICE | GO_MODE_PIPE | GO_MODE_SOCKET | GO_MODE_CHARDEV | GO_MODE_IRREGULAR)))
        ret->type = "file";
    snprintf(ret->mtime, sizeof ret->mtime, "%s", mtime ? mtime : "");
    snprintf(ret->link_target, sizeof ret->link_target, "%s", link ? link : "");
    return true;
}
