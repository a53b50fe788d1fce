/* libFuzzer harness: what the route listener reads from anyone before it
 * forwards a byte: where a chunked request body ends (proxy_chunked_scan, fed
 * in pieces whose sizes the first byte chooses) and which route a Host and a
 * target name (proxy_route_for), with and without a route domain. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void chunked(const uint8_t *data, size_t size, size_t step)
{
    proxy_chunked_t c;
    memset(&c, 0, sizeof c);
    for (size_t off = 0; off < size; off += step) {
        size_t n = size - off < step ? size - off : step, used = (size_t)-1;
        int r = proxy_chunked_scan(&c, (const char *)data + off, n, &used);
        if (r == 1 && used > n)
            abort();    /* the body cannot end past what was given */
        if (r != 0)
            return;
    }
}

static void route(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return;
    memcpy(s, data, size);
    s[size] = '\0';
    char *nl = memchr(s, '\n', size);
    const char *host = s, *target = "/";
    if (nl) {
        *nl = '\0';
        target = nl + 1;
    }
    char name[PROXY_NAME_LEN + 1];
    const char *rest = NULL;
    for (int d = 0; d < 2; d++) {
        memset(name, 0, sizeof name);
        rest = NULL;
        proxy_route_kind_t k = proxy_route_for(host, target, d ? "routes.example.test" : NULL, name, &rest);
        if (k != PROXY_ROUTE_NONE && strlen(name) != PROXY_NAME_LEN)
            abort();    /* a route is always named by a whole name */
        if (k == PROXY_ROUTE_PATH && (!rest || rest < target || rest > target + strlen(target) || rest[0] != '/'))
            abort();    /* the rest is the target's tail, from a '/' */
    }
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t step = (size_t)data[0] % 13 + 1;
    chunked(data + 1, size - 1, step);
    chunked(data + 1, size - 1, size);
    route(data + 1, size - 1);
    return 0;
}
