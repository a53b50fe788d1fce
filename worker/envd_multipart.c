/* multipart/form-data bodies in pieces of any size (envd.h): the E2B SDK's
 * file uploads. Content is handed on as it comes, only the bytes that may
 * begin a delimiter held back; a part's headers are held whole (at most
 * ENVD_MP_HEADERS_MAX). Pure: no I/O. */
#include "envd.h"
#include "errors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Boundary characters (RFC 2046 bchars): no CR or LF, so a delimiter's
 * first byte (CR) occurs nowhere else in it and a mismatch never hides the
 * start of another delimiter in the bytes held back. */
static bool mp_boundary_ok(const char *b)
{
    size_t n = strlen(b);
    if (n < 1 || n > ENVD_MP_BOUNDARY_MAX || b[n - 1] == ' ')
        return false;
    for (; *b; b++)
        if (!((*b >= 'a' && *b <= 'z') || (*b >= 'A' && *b <= 'Z') || (*b >= '0' && *b <= '9') ||
              strchr("'()+_,-./:=? ", *b)))
            return false;
    return true;
}

int envd_mp_boundary(const char *ct, char *out, size_t outlen)
{
    static const char type[] = "multipart/form-data";
    if (!ct || strncasecmp(ct, type, sizeof type - 1) != 0)
        return SBX_EINVAL;
    for (const char *p = ct + sizeof type - 1; (p = strchr(p, ';'));) {
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        if (strncasecmp(p, "boundary=", 9) != 0)
            continue;
        p += 9;
        size_t n = 0;
        char b[ENVD_MP_BOUNDARY_MAX + 2];
        if (*p == '"') {
            for (p++; *p && *p != '"' && n < sizeof b - 1; p++)
                b[n++] = *p;
            if (*p != '"')
                return SBX_EINVAL;
        } else {
            for (; *p && *p != ';' && *p != ' ' && n < sizeof b - 1; p++)
                b[n++] = *p;
        }
        b[n] = '\0';
        if (!mp_boundary_ok(b) || n + 1 > outlen)
            return SBX_EINVAL;
        memcpy(out, b, n + 1);
        return 0;
    }
    return SBX_EINVAL;
}

int envd_mp_init(envd_mp_t *m, const char *boundary, const envd_mp_callbacks_t *cb, void *ud)
{
    memset(m, 0, sizeof *m);
    if (!mp_boundary_ok(boundary))
        return SBX_EINVAL;
    m->delim_len = (size_t)snprintf(m->delim, sizeof m->delim, "\r\n--%s", boundary);
    /* The body may begin with the first delimiter itself: as if a CRLF
     * came before it. */
    m->match = 2;
    m->cb = *cb;
    m->ud = ud;
    if (!(m->head = malloc(ENVD_MP_HEADERS_MAX + 1)))
        return SBX_ENOMEM;
    return 0;
}

void envd_mp_release(envd_mp_t *m)
{
    free(m->head);
    m->head = NULL;
}

static int mp_fail(envd_mp_t *m, const char *why)
{
    snprintf(m->error, sizeof m->error, "%s", why);
    return SBX_EINVAL;
}

/* Content bytes: a part's go on, the preamble's are dropped. */
static int mp_emit(envd_mp_t *m, const char *p, size_t n)
{
    if (n == 0 || m->state != ENVD_MP_BODY)
        return 0;
    return m->cb.part_data(m->ud, p, n);
}

/* A parameter of a Content-Disposition value ("form-data; name=\"file\"; filename=\"a\""),
 * quoted or a token, into out: 1 when present, 0 absent, SBX_ETOOBIG when
 * it does not fit (never cut: a cut filename would be another path). */
static int mp_param(const char *v, const char *param, char *out, size_t outlen)
{
    size_t pl = strlen(param);
    for (const char *p = v; (p = strchr(p, ';'));) {
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        if (strncasecmp(p, param, pl) != 0 || p[pl] != '=')
            continue;
        p += pl + 1;
        size_t n = 0;
        if (*p == '"') {
            for (p++; *p && *p != '"'; p++) {
                if (*p == '\\' && p[1])
                    p++;
                if (n + 1 >= outlen)
                    return SBX_ETOOBIG;
                out[n++] = *p;
            }
        } else {
            for (; *p && *p != ';' && *p != ' ' && *p != '\t'; p++) {
                if (n + 1 >= outlen)
                    return SBX_ETOOBIG;
                out[n++] = *p;
            }
        }
        out[n] = '\0';
        return 1;
    }
    return 0;
}

/* The part's headers are complete (m->head, ending in an empty line). */
static int mp_part_begin(envd_mp_t *m)
{
    char name[256] = "", filename[SBX_FILES_PATH_MAX + 1] = "";
    m->head[m->head_len] = '\0';
    for (char *line = m->head; *line;) {
        char *eol = strstr(line, "\r\n");
        if (!eol)
            break;
        *eol = '\0';
        static const char cd[] = "content-disposition:";
        if (strncasecmp(line, cd, sizeof cd - 1) == 0) {
            const char *v = line + sizeof cd - 1;
            while (*v == ' ' || *v == '\t')
                v++;
            if (strncasecmp(v, "form-data", 9) != 0)
                return mp_fail(m, "a part's Content-Disposition must be form-data");
            if (mp_param(v, "name", name, sizeof name) < 0 || mp_param(v, "filename", filename, sizeof filename) < 0)
                return mp_fail(m, "a part's name or filename is too long (a filename is a path of at most 4096 "
                               "bytes)");
        }
        line = eol + 2;
    }
    m->head_len = 0;
    m->state = ENVD_MP_BODY;
    return m->cb.part_begin(m->ud, name, filename);
}

int envd_mp_push(envd_mp_t *m, const char *p, size_t n)
{
    size_t i = 0;
    int r;
    while (i < n) {
        switch (m->state) {
        case ENVD_MP_DONE:
            return 0;
        case ENVD_MP_AFTER_DELIM:
            m->after[m->after_len++] = p[i++];
            if (m->after_len < 2)
                break;
            m->after_len = 0;
            if (m->after[0] == '-' && m->after[1] == '-') {
                m->state = ENVD_MP_DONE;
                return 0;
            }
            if (m->after[0] != '\r' || m->after[1] != '\n')
                return mp_fail(m, "a delimiter must be followed by CRLF or \"--\"");
            m->state = ENVD_MP_HEADERS;
            m->head_len = 0;
            break;
        case ENVD_MP_HEADERS:
            if (m->head_len >= ENVD_MP_HEADERS_MAX)
                return mp_fail(m, "a part's headers are longer than 8192 bytes");
            m->head[m->head_len++] = p[i++];
            if ((m->head_len == 2 && memcmp(m->head, "\r\n", 2) == 0) ||
                (m->head_len >= 4 && memcmp(m->head + m->head_len - 4, "\r\n\r\n", 4) == 0)) {
                if (m->head_len == 2)
                    m->head_len = 0;
                else
                    m->head_len -= 2; /* keep the last header's CRLF */
                if ((r = mp_part_begin(m)) < 0)
                    return r;
            }
            break;
        case ENVD_MP_PREAMBLE:
        case ENVD_MP_BODY:
            if (m->match == 0) {
                const char *cr = memchr(p + i, '\r', n - i);
                size_t run = cr ? (size_t)(cr - (p + i)) : n - i;
                if ((r = mp_emit(m, p + i, run)) < 0)
                    return r;
                i += run;
                if (cr) {
                    m->match = 1;
                    i++;
                }
                break;
            }
            if (p[i] == m->delim[m->match]) {
                i++;
                if (++m->match == m->delim_len) {
                    m->match = 0;
                    if (m->state == ENVD_MP_BODY && (r = m->cb.part_end(m->ud)) < 0)
                        return r;
                    m->state = ENVD_MP_AFTER_DELIM;
                }
                break;
            }
            /* Not a delimiter after all: what was held back is content,
             * and this byte is looked at afresh. */
            if ((r = mp_emit(m, m->delim, m->match)) < 0)
                return r;
            m->match = 0;
            break;
        }
    }
    return 0;
}

int envd_mp_finish(envd_mp_t *m)
{
    return m->state == ENVD_MP_DONE ? 0 : mp_fail(m, "the multipart body ended before its closing delimiter");
}
