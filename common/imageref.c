/* Image sources: registry of a reference, the address rule, the
 * image_registries allowlist and the fixed pull-failure texts. */
#include "imageref.h"
#include "errors.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Lowercases the n bytes of in into out (outlen > n) and folds Docker
 * Hub's aliases into "docker.io". */
static void registry_norm(const char *in, size_t n, char *out, size_t outlen)
{
    if (n >= outlen)
        n = outlen - 1;
    for (size_t i = 0; i < n; i++)
        out[i] = (char)tolower((unsigned char)in[i]);
    out[n] = '\0';
    if (strcmp(out, "index.docker.io") == 0 || strcmp(out, "registry-1.docker.io") == 0)
        snprintf(out, outlen, "docker.io");
}

int imageref_registry(const char *image, char *ret, size_t retlen)
{
    if (!image || !ret || retlen == 0)
        return SBX_EINVAL;
    const char *slash = strchr(image, '/');
    const char *reg = "docker.io";
    size_t n = 9;
    if (slash) {
        size_t cn = (size_t)(slash - image);
        bool upper = false;
        for (size_t i = 0; i < cn; i++)
            upper = upper || isupper((unsigned char)image[i]);
        if (memchr(image, '.', cn) || memchr(image, ':', cn) || upper ||
            (cn == 9 && strncmp(image, "localhost", 9) == 0)) {
            reg = image;
            n = cn;
        }
    }
    if (n == 0 || n > SBX_MAX_REGISTRY_BYTES || n >= retlen)
        return SBX_EINVAL;
    registry_norm(reg, n, ret, retlen);
    return 0;
}

/* The host of host[:port] or [v6]:port into out, without brackets or a
 * trailing dot; *ret_bracketed says whether it was a bracketed literal. */
static void registry_host(const char *registry, char *out, size_t outlen, bool *ret_bracketed)
{
    const char *h = registry, *end;
    *ret_bracketed = registry[0] == '[';
    if (*ret_bracketed) {
        h++;
        end = strchr(h, ']');
        if (!end)
            end = h + strlen(h);
    } else {
        end = strchr(h, ':');
        if (!end)
            end = h + strlen(h);
    }
    size_t n = (size_t)(end - h);
    while (n > 0 && h[n - 1] == '.')
        n--;
    if (n >= outlen)
        n = outlen - 1;
    memcpy(out, h, n);
    out[n] = '\0';
}

static const char *ipv4_refusal(uint32_t a)
{
    if ((a >> 24) == 127)
        return "a loopback address";
    if ((a >> 24) == 0)
        return "an unspecified (this-network) address";
    if ((a >> 16) == 0xA9FE)
        return "a link-local address";
    if ((a >> 24) == 10 || (a >> 20) == 0xAC1 || (a >> 16) == 0xC0A8)
        return "a private address";
    if ((a >> 22) == (0x6440 >> 6)) /* 100.64.0.0/10 */
        return "a shared (CGNAT) address";
    return "an IP literal";
}

static const char *ipv6_refusal(const unsigned char b[16])
{
    static const unsigned char loop[16] = { [15] = 1 }, any[16] = { 0 };
    static const unsigned char mapped[12] = { [10] = 0xff, [11] = 0xff };
    if (memcmp(b, loop, 16) == 0)
        return "a loopback address";
    if (memcmp(b, any, 16) == 0)
        return "an unspecified address";
    if (memcmp(b, mapped, 12) == 0)
        return ipv4_refusal((uint32_t)b[12] << 24 | (uint32_t)b[13] << 16 | (uint32_t)b[14] << 8 | b[15]);
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80)
        return "a link-local address";
    if ((b[0] & 0xfe) == 0xfc)
        return "a unique-local (private) address";
    return "an IP literal";
}

/* True when name ends with "." suffix or is suffix itself. */
static bool name_under(const char *name, const char *suffix)
{
    size_t n = strlen(name), s = strlen(suffix);
    if (n == s)
        return strcasecmp(name, suffix) == 0;
    return n > s && name[n - s - 1] == '.' && strcasecmp(name + n - s, suffix) == 0;
}

const char *imageref_address_refusal(const char *registry)
{
    char host[SBX_MAX_REGISTRY_BYTES + 1];
    bool bracketed;
    if (!registry)
        return "an empty host name";
    registry_host(registry, host, sizeof host, &bracketed);
    if (!host[0])
        return "an empty host name";
    if (bracketed) {
        unsigned char b[16];
        return inet_pton(AF_INET6, host, b) == 1 ? ipv6_refusal(b) : "an IP literal";
    }
    struct in_addr a4;
    if (inet_aton(host, &a4))
        return ipv4_refusal(ntohl(a4.s_addr));
    if (name_under(host, "localhost"))
        return "localhost";
    static const char *const local_only[] = { "local", "internal", "localdomain", "home.arpa", "lan" };
    for (size_t i = 0; i < sizeof local_only / sizeof local_only[0]; i++)
        if (name_under(host, local_only[i]))
            return "a local-only name";
    const char *dot = strrchr(host, '.');
    if (!dot)
        return "a single-label host name";
    if (strspn(dot + 1, "0123456789") == strlen(dot + 1))
        return "an IP literal";
    return NULL;
}

int imageref_entry_match(const char *entry, const char *registry)
{
    if (!entry || !registry)
        return 0;
    if (strcmp(entry, "*") == 0)
        return 1;
    if (entry[0] == '*' && entry[1] == '.') {
        size_t sl = strlen(entry + 1), rl = strlen(registry);
        if (rl <= sl || strcasecmp(registry + rl - sl, entry + 1) != 0)
            return 0;
        /* the part the star stands for is a plain name, no port nor bracket */
        for (size_t i = 0; i < rl - sl; i++)
            if (registry[i] == ':' || registry[i] == '[' || registry[i] == ']')
                return 0;
        return 1;
    }
    char a[SBX_MAX_REGISTRY_BYTES + 1], b[SBX_MAX_REGISTRY_BYTES + 1];
    registry_norm(entry, strlen(entry), a, sizeof a);
    registry_norm(registry, strlen(registry), b, sizeof b);
    return strcmp(a, b) == 0 ? 2 : 0;
}

static bool entry_fail(char *why, size_t whylen, const char *entry, const char *reason)
{
    if (why && whylen)
        snprintf(why, whylen, "registry entry \"%.80s\" is not valid: %s", entry, reason);
    return false;
}

static bool port_ok(const char *p)
{
    size_t n = strlen(p);
    if (n == 0 || n > 5 || strspn(p, "0123456789") != n)
        return false;
    long v = 0;
    for (size_t i = 0; i < n; i++)
        v = v * 10 + (p[i] - '0');
    return v >= 1 && v <= 65535;
}

bool imageref_entry_valid(const char *entry, char *why, size_t whylen)
{
    const char *fmt = "it is *, *.DOMAIN[:PORT], HOST[:PORT] or [IPV6]:PORT";
    size_t n = entry ? strlen(entry) : 0;
    if (n == 0 || n > SBX_MAX_REGISTRY_BYTES)
        return entry_fail(why, whylen, entry ? entry : "", "it is 1 to 256 bytes");
    if (strcmp(entry, "*") == 0)
        return true;
    const char *h = entry[0] == '*' && entry[1] == '.' ? entry + 2 : entry;
    if (h[0] == '[') {
        const char *close = strchr(h, ']');
        char v6[64];
        unsigned char b[16];
        size_t vn = close ? (size_t)(close - h - 1) : 0;
        if (h != entry || !close || vn == 0 || vn >= sizeof v6 || close[1] != ':' || !port_ok(close + 2))
            return entry_fail(why, whylen, entry, fmt);
        memcpy(v6, h + 1, vn);
        v6[vn] = '\0';
        return inet_pton(AF_INET6, v6, b) == 1 ? true : entry_fail(why, whylen, entry, "not an IPv6 address");
    }
    const char *colon = strchr(h, ':');
    size_t hn = colon ? (size_t)(colon - h) : strlen(h);
    if (hn == 0 || h[0] == '-' || h[0] == '.' || h[hn - 1] == '-' || h[hn - 1] == '.' || (colon && !port_ok(colon + 1)))
        return entry_fail(why, whylen, entry, fmt);
    for (size_t i = 0; i < hn; i++)
        if (!isalnum((unsigned char)h[i]) && h[i] != '.' && h[i] != '-')
            return entry_fail(why, whylen, entry, fmt);
    return true;
}

/* The next comma-separated entry of *p, blanks trimmed, into out; false at
 * the end (*p NULL). An empty entry ("a,,b", "a,") comes back as "". An
 * entry longer than out is cut (and then fails validation). */
static bool list_next(const char **p, char *out, size_t outlen)
{
    const char *s = *p;
    if (!s)
        return false;
    const char *comma = strchr(s, ',');
    const char *end = comma ? comma : s + strlen(s);
    *p = comma ? comma + 1 : NULL;
    while (s < end && isspace((unsigned char)*s))
        s++;
    while (end > s && isspace((unsigned char)end[-1]))
        end--;
    size_t n = (size_t)(end - s);
    if (n >= outlen)
        n = outlen - 1;
    memcpy(out, s, n);
    out[n] = '\0';
    return true;
}

static bool list_empty(const char *list)
{
    if (!list)
        return true;
    while (isspace((unsigned char)*list))
        list++;
    return *list == '\0';
}

bool imageref_list_valid(const char *list, char *why, size_t whylen)
{
    if (list_empty(list))
        return true;
    if (strlen(list) > SBX_MAX_IMAGE_REGISTRIES_BYTES) {
        if (why && whylen)
            snprintf(why, whylen, "image_registries is at most %d bytes", SBX_MAX_IMAGE_REGISTRIES_BYTES);
        return false;
    }
    char e[SBX_MAX_REGISTRY_BYTES + 2];
    const char *p = list;
    while (list_next(&p, e, sizeof e))
        if (!imageref_entry_valid(e, why, whylen))
            return false;
    return true;
}

/* The best match of registry in list (0, 1 or 2 as imageref_entry_match). */
static int list_match(const char *list, const char *registry)
{
    char e[SBX_MAX_REGISTRY_BYTES + 2];
    const char *p = list;
    int best = 0;
    while (list_next(&p, e, sizeof e)) {
        int m = imageref_entry_match(e, registry);
        best = m > best ? m : best;
    }
    return best;
}

/* The server's judgement of one registry: 0 or SBX_EPERM with why. */
static int registry_check(const char *list, const char *registry, const char *tail, char *why, size_t whylen)
{
    int m = list_empty(list) ? 0 : list_match(list, registry);
    if (m == 2)
        return 0;
    if (!list_empty(list) && m == 0) {
        snprintf(why, whylen, "registry %s is not in the server's image_registries%s", registry, tail);
        return SBX_EPERM;
    }
    const char *refusal = imageref_address_refusal(registry);
    if (refusal) {
        snprintf(why, whylen, "registry %s is %s; image_registries lists the allowed ones%s", registry, refusal,
                 tail);
        return SBX_EPERM;
    }
    return 0;
}

int imageref_check(const char *list, const char *image, char *why, size_t whylen)
{
    char reg[SBX_MAX_REGISTRY_BYTES + 1];
    if (imageref_registry(image, reg, sizeof reg) < 0) {
        snprintf(why, whylen, "the registry of image \"%.80s\" cannot be read", image ? image : "");
        return SBX_EINVAL;
    }
    return registry_check(list, reg, "", why, whylen);
}

int imageref_entry_within(const char *list, const char *entry, char *why, size_t whylen)
{
    if (strcmp(entry, "*") == 0 || (entry[0] == '*' && entry[1] == '.')) {
        if (list_empty(list))
            return 0;
        char e[SBX_MAX_REGISTRY_BYTES + 2];
        const char *p = list;
        while (list_next(&p, e, sizeof e)) {
            if (strcmp(e, "*") == 0 || strcasecmp(e, entry) == 0)
                return 0;
            /* "*.a.example.com" is inside "*.example.com" */
            if (e[0] == '*' && e[1] == '.' && entry[0] == '*' && name_under(entry + 2, e + 2))
                return 0;
        }
        snprintf(why, whylen, "registries pattern %s is wider than the server's image_registries", entry);
        return SBX_EPERM;
    }
    char reg[SBX_MAX_REGISTRY_BYTES + 1];
    registry_norm(entry, strlen(entry), reg, sizeof reg);
    return registry_check(list, reg, " (a tenant policy can only narrow the server)", why, whylen);
}

/* ---- pull failures ------------------------------------------------------ */

static bool has_any(const char *s, const char *const *needles)
{
    for (; *needles; needles++)
        if (strcasestr(s, *needles))
            return true;
    return false;
}

imageref_pull_kind_t imageref_pull_kind(const char *engine_message, long status)
{
    static const char *const unreachable[] = { "connection refused", "no such host", "timeout", "timed out",
                                               "no route to host", "network is unreachable", "dial tcp",
                                               "lookup ", "tls:", "x509", "http response to https client",
                                               "connection reset", "host is down", NULL };
    static const char *const not_found[] = { "not found", "manifest unknown", "does not exist", "name unknown",
                                             NULL };
    static const char *const unauthorized[] = { "unauthorized", "authentication required", "denied",
                                                "forbidden", "no basic auth credentials", NULL };
    const char *m = engine_message ? engine_message : "";
    if (has_any(m, unreachable))
        return IMAGEREF_PULL_UNREACHABLE;
    if (has_any(m, not_found))
        return IMAGEREF_PULL_NOT_FOUND;
    if (has_any(m, unauthorized))
        return IMAGEREF_PULL_UNAUTHORIZED;
    if (status == 404)
        return IMAGEREF_PULL_NOT_FOUND;
    if (status == 401 || status == 403)
        return IMAGEREF_PULL_UNAUTHORIZED;
    return IMAGEREF_PULL_OTHER;
}

const char *imageref_pull_kind_name(imageref_pull_kind_t kind)
{
    switch (kind) {
    case IMAGEREF_PULL_NOT_FOUND:
        return "not_found";
    case IMAGEREF_PULL_UNAUTHORIZED:
        return "unauthorized";
    case IMAGEREF_PULL_UNREACHABLE:
        return "unreachable";
    default:
        return "other";
    }
}

void imageref_pull_message(const char *image, imageref_pull_kind_t kind, char *out, size_t outlen)
{
    static const char *const why[] = {
        [IMAGEREF_PULL_NOT_FOUND] = "the registry has no such image or tag",
        [IMAGEREF_PULL_UNAUTHORIZED] = "the registry refused access (credentials missing or not accepted)",
        [IMAGEREF_PULL_UNREACHABLE] = "the registry could not be reached",
        [IMAGEREF_PULL_OTHER] = "the registry's answer was not a usable image (the worker's log has Docker's text)",
    };
    if ((int)kind < 0 || kind > IMAGEREF_PULL_OTHER)
        kind = IMAGEREF_PULL_OTHER;
    snprintf(out, outlen, "cannot pull image %.200s: %s (%s)", image ? image : "", why[kind],
             imageref_pull_kind_name(kind));
}
