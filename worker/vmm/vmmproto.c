/* The agent channel's frames and OPEN payloads (see vmmproto.h); libc only. */
#include "vmmproto.h"

#include <string.h>

#include "limits.h"

void vmm_put_u16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }

void vmm_put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}

uint16_t vmm_get_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

uint32_t vmm_get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

void vmm_frame_header_put(uint8_t *out, uint8_t type, uint32_t channel, uint32_t len)
{
    vmm_put_u16(out, VMM_FRAME_MAGIC);
    out[2] = type;
    out[3] = 0;
    vmm_put_u32(out + 4, channel);
    vmm_put_u32(out + 8, len);
}

int vmm_frame_header_parse(const uint8_t *buf, size_t n, vmm_frame_t *ret_frame)
{
    if (n >= 2 && vmm_get_u16(buf) != VMM_FRAME_MAGIC)
        return -1;
    if (n < VMM_FRAME_HEADER)
        return 1;
    if (buf[3] != 0 || buf[2] == 0 || buf[2] > VMM_F_CLOSE)
        return -1;
    uint32_t len = vmm_get_u32(buf + 8);
    if (len > SBX_VMM_FRAME_MAX)
        return -1;
    ret_frame->type = buf[2];
    ret_frame->channel = vmm_get_u32(buf + 4);
    ret_frame->len = len;
    return 0;
}

/* Appends s with its NUL at *off; -1 when it does not fit. */
static int put_str(uint8_t *out, size_t cap, size_t *off, const char *s)
{
    if (s == NULL)
        return -1;
    size_t n = strlen(s) + 1;
    if (n > cap - *off)
        return -1;
    memcpy(out + *off, s, n);
    *off += n;
    return 0;
}

long vmm_open_cmd_encode(uint8_t kind, const vmm_cmd_t *cmd, uint8_t *out, size_t cap)
{
    if ((kind != VMM_OPEN_EXEC && kind != VMM_OPEN_PTY) || cmd->argc == 0 ||
        cmd->argc > SBX_MAX_ARGV || cmd->envc > SBX_MAX_ENV)
        return -1;
    size_t head = 1 + (kind == VMM_OPEN_PTY ? 4 : 0) + 8;
    if (cap < head)
        return -1;
    size_t off = 0;
    out[off++] = kind;
    if (kind == VMM_OPEN_PTY) {
        vmm_put_u16(out + off, cmd->rows);
        vmm_put_u16(out + off + 2, cmd->cols);
        off += 4;
    }
    vmm_put_u32(out + off, cmd->argc);
    vmm_put_u32(out + off + 4, cmd->envc);
    off += 8;
    if (put_str(out, cap, &off, cmd->cwd ? cmd->cwd : "") != 0)
        return -1;
    for (uint32_t i = 0; i < cmd->argc; i++)
        if (put_str(out, cap, &off, cmd->argv[i]) != 0)
            return -1;
    for (uint32_t i = 0; i < cmd->envc; i++)
        if (put_str(out, cap, &off, cmd->env[i]) != 0)
            return -1;
    return (long)off;
}

/* Takes the NUL-ended string at *off; -1 when no NUL is left in len. */
static int get_str(const uint8_t *p, size_t len, size_t *off, const char **ret)
{
    const uint8_t *nul = *off < len ? memchr(p + *off, 0, len - *off) : NULL;
    if (nul == NULL)
        return -1;
    *ret = (const char *)(p + *off);
    *off = (size_t)(nul - p) + 1;
    return 0;
}

int vmm_open_cmd_decode(const uint8_t *payload, size_t len, vmm_cmd_t *ret_cmd,
                        const char **argv, size_t argv_cap, const char **env, size_t env_cap)
{
    vmm_cmd_t c;
    memset(&c, 0, sizeof(c));
    if (len < 1 || (payload[0] != VMM_OPEN_EXEC && payload[0] != VMM_OPEN_PTY))
        return -1;
    size_t off = 1;
    if (payload[0] == VMM_OPEN_PTY) {
        if (len < off + 4)
            return -1;
        c.rows = vmm_get_u16(payload + off);
        c.cols = vmm_get_u16(payload + off + 2);
        off += 4;
    }
    if (len < off + 8)
        return -1;
    c.argc = vmm_get_u32(payload + off);
    c.envc = vmm_get_u32(payload + off + 4);
    off += 8;
    if (c.argc == 0 || c.argc > SBX_MAX_ARGV || c.argc > argv_cap || c.envc > SBX_MAX_ENV || c.envc > env_cap)
        return -1;
    if (get_str(payload, len, &off, &c.cwd) != 0)
        return -1;
    for (uint32_t i = 0; i < c.argc; i++)
        if (get_str(payload, len, &off, &argv[i]) != 0)
            return -1;
    argv[c.argc] = NULL;
    for (uint32_t i = 0; i < c.envc; i++)
        if (get_str(payload, len, &off, &env[i]) != 0)
            return -1;
    env[c.envc] = NULL;
    if (off != len)
        return -1;
    c.argv = argv;
    c.env = env;
    *ret_cmd = c;
    return 0;
}
