/* The route proxy's pure parts: request heads (common/httphead.c), route
 * addresses, trusted proxy networks and the route settings. */
#include "proxy_internal.h"
#include "errors.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- pure parts ---- */

int proxy_parse_head(char *buf, size_t len, proxy_head_t *ret)
{
    static const httphead_opts_t opts = { .bare_lf = false, .keep_headers = true };
    return httphead_parse(buf, len, &opts, ret, NULL, 0);
}

const char *proxy_head_get(const proxy_head_t *h, const char *name) { return httphead_get(h, name); }

enum { CK_SIZE, CK_EXT, CK_SIZE_LF, CK_DATA, CK_DATA_CR, CK_DATA_LF, CK_LAST_CR, CK_LAST_LF };

int proxy_chunked_scan(proxy_chunked_t *c, const char *p, size_t n, size_t *ret_used)
{
    size_t i = 0;
    while (i < n) {
        unsigned char ch = (unsigned char)p[i];
        switch (c->state) {
        case CK_SIZE:
            if (isxdigit(ch)) {
                if (++c->digits > 15)
                    return SBX_EINVAL;
                c->left = c->left * 16 + (uint64_t)(isdigit(ch) ? ch - '0' : (tolower(ch) - 'a' + 10));
            } else if (c->digits > 0 && (ch == ';' || ch == ' ' || ch == '\t')) {
                c->state = CK_EXT;
            } else if (c->digits > 0 && ch == '\r') {
                c->state = CK_SIZE_LF;
            } else {
                return SBX_EINVAL;
            }
            i++;
            break;
        case CK_EXT: /* chunk extensions: up to the CR, no bare LF */
            if (ch == '\n')
                return SBX_EINVAL;
            if (ch == '\r')
                c->state = CK_SIZE_LF;
            i++;
            break;
        case CK_SIZE_LF:
            if (ch != '\n')
                return SBX_EINVAL;
            i++;
            c->digits = 0;
            c->state = c->left ? CK_DATA : CK_LAST_CR;
            break;
        case CK_DATA: {
            size_t take = n - i < c->left ? n - i : (size_t)c->left;
            c->left -= take;
            i += take;
            if (!c->left)
                c->state = CK_DATA_CR;
            break;
        }
        case CK_DATA_CR:
        case CK_LAST_CR:
            if (ch != '\r')
                return SBX_EINVAL; /* after the last chunk: a trailer field */
            c->state = c->state == CK_DATA_CR ? CK_DATA_LF : CK_LAST_LF;
            i++;
            break;
        case CK_DATA_LF:
            if (ch != '\n')
                return SBX_EINVAL;
            c->state = CK_SIZE;
            i++;
            break;
        case CK_LAST_LF:
            if (ch != '\n')
                return SBX_EINVAL;
            *ret_used = i + 1;
            return 1;
        default:
            return SBX_EINVAL;
        }
    }
    *ret_used = n;
    return 0;
}

int proxy_chunked_decode(proxy_chunked_t *c, char *p, size_t n, size_t *ret_used, size_t *ret_out)
{
    size_t i = 0, out = 0;
    int rc = 0;
    while (i < n && rc == 0) {
        if (c->state == CK_DATA) {
            /* Chunk data: the body's bytes, moved up over the framing. */
            size_t k = (uint64_t)(n - i) < c->left ? n - i : (size_t)c->left;
            memmove(p + out, p + i, k);
            out += k;
            i += k;
            c->left -= k;
            if (!c->left)
                c->state = CK_DATA_CR;
            continue;
        }
        size_t used = 1;
        rc = proxy_chunked_scan(c, p + i, 1, &used);
        i++;
    }
    *ret_used = i;
    *ret_out = out;
    return rc;
}

static bool name_ok(const char *s, size_t n)
{
    if (n != PROXY_NAME_LEN)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '2' && s[i] <= '7')))
            return false;
    return true;
}

proxy_route_kind_t proxy_route_for(const char *host, const char *target, const char *route_domain,
                                   char ret_name[PROXY_NAME_LEN + 1], const char **ret_rest)
{
    ret_name[0] = '\0';
    *ret_rest = target;
    if (host && route_domain && *route_domain && host[0] != '[') {
        size_t hl = strcspn(host, ":");
        size_t dl = strlen(route_domain);
        if (hl > dl + 1 && host[hl - dl - 1] == '.' && strncasecmp(host + hl - dl, route_domain, dl) == 0) {
            size_t nl = hl - dl - 1;
            char label[PROXY_NAME_LEN + 1];
            if (nl == PROXY_NAME_LEN) {
                for (size_t i = 0; i < nl; i++)
                    label[i] = (char)tolower((unsigned char)host[i]);
                label[nl] = '\0';
                if (name_ok(label, nl)) {
                    memcpy(ret_name, label, nl + 1);
                    return PROXY_ROUTE_HOST;
                }
            }
        }
    }
    if (strncmp(target, "/r/", 3) != 0)
        return PROXY_ROUTE_NONE;
    const char *n = target + 3;
    size_t nl = strcspn(n, "/?");
    if (!name_ok(n, nl))
        return PROXY_ROUTE_NONE;
    memcpy(ret_name, n, nl);
    ret_name[nl] = '\0';
    *ret_rest = n + nl;
    return n[nl] == '/' ? PROXY_ROUTE_PATH : PROXY_ROUTE_REDIRECT;
}

bool proxy_port_host(const char *host, const char *route_domain, char ret_sandbox[SBX_ID_MAX], int *ret_port)
{
    ret_sandbox[0] = '\0';
    *ret_port = 0;
    if (!host || !route_domain || !*route_domain || host[0] == '[')
        return false;
    /* route_domain may carry the listener's port (E2B's SDK puts whatever
     * domain it is given after the label): compare with it, else without. */
    size_t hl = strlen(host), dl = strlen(route_domain);
    if (!strchr(route_domain, ':'))
        hl = strcspn(host, ":");
    if (hl <= dl + 1 || host[hl - dl - 1] != '.' || strncasecmp(host + hl - dl, route_domain, dl) != 0)
        return false;
    size_t ll = hl - dl - 1;
    /* {port}-sbx_{26 base32} */
    size_t pl = 0;
    while (pl < ll && pl < 6 && host[pl] >= '0' && host[pl] <= '9')
        pl++;
    if (pl == 0 || pl > 5 || host[0] == '0' || pl >= ll || host[pl] != '-')
        return false;
    long port = strtol(host, NULL, 10);
    size_t il = ll - pl - 1;
    const char *id = host + pl + 1;
    if (port < 1 || port > 65535 || il != 4 + PROXY_NAME_LEN || strncasecmp(id, "sbx_", 4) != 0)
        return false;
    char low[SBX_ID_MAX];
    for (size_t i = 0; i < il; i++)
        low[i] = (char)tolower((unsigned char)id[i]);
    low[il] = '\0';
    if (!name_ok(low + 4, PROXY_NAME_LEN))
        return false;
    memcpy(ret_sandbox, low, il + 1);
    *ret_port = (int)port;
    return true;
}

int proxy_nets_parse(const char *text, struct proxy_net **ret, int *ret_n, char *err, size_t errlen)
{
    *ret = NULL;
    *ret_n = 0;
    if (!text || !*text)
        return 0;
    char *copy = strdup(text);
    struct proxy_net *nets = calloc(strlen(text) / 2 + 1, sizeof *nets);
    if (!copy || !nets) {
        free(copy);
        free(nets);
        snprintf(err, errlen, "out of memory");
        return SBX_ENOMEM;
    }
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(copy, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
        struct proxy_net *e = &nets[n];
        char *slash = strchr(t, '/');
        if (slash)
            *slash = '\0';
        char *a = t;
        size_t al = strlen(a);
        if (a[0] == '[' && al > 2 && a[al - 1] == ']') {
            a[al - 1] = '\0';
            a++;
        }
        if (inet_pton(AF_INET, a, e->addr) == 1) {
            e->family = AF_INET;
            e->bits = 32;
        } else if (inet_pton(AF_INET6, a, e->addr) == 1) {
            e->family = AF_INET6;
            e->bits = 128;
        } else {
            snprintf(err, errlen, "trusted_proxies: \"%.64s\" is not an IP address or CIDR", t);
            goto fail;
        }
        if (slash) {
            char *end = NULL;
            long b = strtol(slash + 1, &end, 10);
            if (!slash[1] || *end || b < 0 || b > e->bits) {
                snprintf(err, errlen, "trusted_proxies: bad prefix length in \"%.64s/%.8s\"", t, slash + 1);
                goto fail;
            }
            e->bits = (int)b;
        }
        n++;
    }
    free(copy);
    *ret = nets;
    *ret_n = n;
    return 0;
fail:
    free(copy);
    free(nets);
    return SBX_EINVAL;
}

static bool prefix_match(const unsigned char *a, const unsigned char *b, int bits)
{
    int whole = bits / 8, rest = bits % 8;
    if (memcmp(a, b, (size_t)whole) != 0)
        return false;
    if (!rest)
        return true;
    unsigned char mask = (unsigned char)(0xff << (8 - rest));
    return (a[whole] & mask) == (b[whole] & mask);
}

bool proxy_nets_contain(const struct proxy_net *nets, int n, const struct sockaddr *sa)
{
    unsigned char a4[4], a6[16];
    bool has4 = false, has6 = false;
    if (sa->sa_family == AF_INET) {
        memcpy(a4, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        has4 = true;
    } else if (sa->sa_family == AF_INET6) {
        const struct in6_addr *x = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        memcpy(a6, x, 16);
        has6 = true;
        if (IN6_IS_ADDR_V4MAPPED(x)) {
            memcpy(a4, a6 + 12, 4);
            has4 = true;
        }
    }
    for (int i = 0; i < n; i++) {
        if (nets[i].family == AF_INET && has4 && prefix_match(nets[i].addr, a4, nets[i].bits))
            return true;
        if (nets[i].family == AF_INET6 && has6 && prefix_match(nets[i].addr, a6, nets[i].bits))
            return true;
    }
    return false;
}

int proxy_config(controller_t *ctl, const cfg_t *cfg, char *err, size_t errlen)
{
    int rc = proxy_nets_parse(cfg_str(cfg, CFG_TRUSTED_PROXIES), &ctl->trusted_proxies, &ctl->ntrusted_proxies, err,
                              errlen);
    if (rc < 0)
        return rc;
    ctl->route_max_request = cfg_int(cfg, CFG_ROUTE_MAX_REQUEST_BYTES);
    ctl->route_max_response = cfg_int(cfg, CFG_ROUTE_MAX_RESPONSE_BYTES);
    ctl->route_idle_seconds = (int)cfg_int(cfg, CFG_ROUTE_IDLE_TIMEOUT_SECONDS);
    ctl->route_max_seconds = (int)cfg_int(cfg, CFG_ROUTE_MAX_DURATION_SECONDS);
    ctl->route_max_conns = (int)cfg_int(cfg, CFG_ROUTE_MAX_CONNECTIONS);
    ctl->route_max_conns_per_addr = (int)cfg_int(cfg, CFG_ROUTE_MAX_CONNECTIONS_PER_ADDRESS);
    if (proxy_caps_init(ctl) < 0) {
        snprintf(err, errlen, "out of memory");
        return SBX_ENOMEM;
    }
    return 0;
}
