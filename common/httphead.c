/* The HTTP/1.x request-head parser (see httphead.h). */
#include "httphead.h"
#include "errors.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

size_t httphead_end(const char *buf, size_t len, bool bare_lf)
{
    for (size_t i = 0; i < len; i++) {
        if (buf[i] != '\n')
            continue;
        bool crlf = i > 0 && buf[i - 1] == '\r';
        if (!crlf && !bare_lf)
            continue;
        if (bare_lf && i + 1 < len && buf[i + 1] == '\n')
            return i + 2;
        if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n')
            return i + 3;
    }
    return 0;
}

/* RFC 9110 token characters (methods and header names). */
static bool httphead_tchar(char ch)
{
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9'))
        return true;
    return ch && strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

/* Sets why and returns SBX_EINVAL. */
static int httphead_refuse(char *why, size_t whylen, const char *reason)
{
    if (why && whylen)
        snprintf(why, whylen, "%s", reason);
    return SBX_EINVAL;
}

/* The next line of buf[*off, len), NUL-terminated in place without its line
 * end, into *ret_line / *ret_n; SBX_EINVAL for a line without end, a CR not
 * followed by LF, or a bare LF when opts do not allow it. */
static int httphead_next_line(char *buf, size_t len, size_t *off, const httphead_opts_t *opts, char **ret_line,
                              size_t *ret_n)
{
    char *p = buf + *off;
    char *lf = memchr(p, '\n', len - *off);
    if (!lf)
        return SBX_EINVAL;
    size_t n = (size_t)(lf - p);
    if (n > 0 && p[n - 1] == '\r')
        n--;
    else if (!opts->bare_lf)
        return SBX_EINVAL;
    if (memchr(p, '\r', n))
        return SBX_EINVAL;
    p[n] = '\0';
    *ret_line = p;
    *ret_n = n;
    *off += (size_t)(lf - p) + 1;
    return 0;
}

/* "METHOD SP TARGET SP VERSION", single spaces, into ret. */
static int httphead_request_line(char *line, size_t n, httphead_t *ret, char *why, size_t whylen)
{
    char *sp1 = memchr(line, ' ', n);
    char *sp2 = sp1 ? memchr(sp1 + 1, ' ', n - (size_t)(sp1 + 1 - line)) : NULL;
    if (!sp1 || !sp2 || memchr(sp2 + 1, ' ', n - (size_t)(sp2 + 1 - line)))
        return httphead_refuse(why, whylen, "the request line must be METHOD TARGET HTTP/1.1");
    *sp1 = *sp2 = '\0';
    size_t ml = (size_t)(sp1 - line);
    if (ml == 0 || ml > SBX_HTTP_METHOD_MAX)
        return httphead_refuse(why, whylen, "the request line must start with a method");
    for (size_t i = 0; i < ml; i++)
        if (!httphead_tchar(line[i]))
            return httphead_refuse(why, whylen, "the method must be a token");
    char *target = sp1 + 1;
    if (target[0] != '/')
        return httphead_refuse(why, whylen, "the request target must be a path starting with '/'");
    for (const unsigned char *p = (const unsigned char *)target; *p; p++)
        if (*p <= 0x20 || *p >= 0x7f)
            return httphead_refuse(why, whylen, "the request target must be printable ASCII");
    const char *version = sp2 + 1;
    if (strcmp(version, "HTTP/1.1") == 0)
        ret->minor = 1;
    else if (strcmp(version, "HTTP/1.0") == 0)
        ret->minor = 0;
    else
        return httphead_refuse(why, whylen, "the protocol must be HTTP/1.0 or HTTP/1.1");
    ret->method = line;
    ret->target = target;
    return 0;
}

/* One "Name: value" line (line[0, n), NUL-terminated), kept in ret when
 * opts say so. */
static int httphead_header_line(char *line, size_t n, const httphead_opts_t *opts, httphead_t *ret, char *why,
                                size_t whylen)
{
    if (line[0] == ' ' || line[0] == '\t')
        return httphead_refuse(why, whylen, "folded header lines are not accepted");
    char *colon = memchr(line, ':', n);
    if (!colon || colon == line)
        return httphead_refuse(why, whylen, "a header line must be Name: value");
    for (const char *p = line; p < colon; p++)
        if (!httphead_tchar(*p))
            return httphead_refuse(why, whylen, "a header name must be a token");
    for (const unsigned char *p = (const unsigned char *)colon + 1; p < (const unsigned char *)line + n; p++)
        if ((*p < 0x20 && *p != '\t') || *p == 0x7f)
            return httphead_refuse(why, whylen, "a header value contains a control character");
    if (!opts->keep_headers)
        return 0;
    if (ret->nh == SBX_HTTP_MAX_HEADERS) {
        if (why && whylen)
            snprintf(why, whylen, "more than %d header lines", SBX_HTTP_MAX_HEADERS);
        return SBX_ETOOBIG;
    }
    *colon = '\0';
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t')
        v++;
    size_t vl = strlen(v);
    while (vl > 0 && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
        v[--vl] = '\0';
    ret->name[ret->nh] = line;
    ret->value[ret->nh] = v;
    ret->nh++;
    return 0;
}

int httphead_parse(char *buf, size_t len, const httphead_opts_t *opts, httphead_t *ret, char *why, size_t whylen)
{
    char *line;
    size_t n, off = 0;
    int r;
    memset(ret, 0, sizeof *ret);
    if (memchr(buf, '\0', len))
        return httphead_refuse(why, whylen, "the request contains a NUL byte");
    if (httphead_next_line(buf, len, &off, opts, &line, &n) < 0)
        return httphead_refuse(why, whylen, "the request line must end in CRLF");
    if ((r = httphead_request_line(line, n, ret, why, whylen)) < 0)
        return r;
    for (;;) {
        if (httphead_next_line(buf, len, &off, opts, &line, &n) < 0)
            return httphead_refuse(why, whylen, "header lines must end in CRLF and the head in a blank line");
        if (n == 0)
            break;
        if ((r = httphead_header_line(line, n, opts, ret, why, whylen)) < 0)
            return r;
    }
    if (off != len)
        return httphead_refuse(why, whylen, "bytes after the head");
    return 0;
}

const char *httphead_get(const httphead_t *h, const char *name)
{
    for (int i = h->nh - 1; i >= 0; i--)
        if (strcasecmp(h->name[i], name) == 0)
            return h->value[i];
    return NULL;
}
