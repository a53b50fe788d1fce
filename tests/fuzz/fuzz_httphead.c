/* libFuzzer harness: the HTTP head parser of the route proxy (CRLF only,
 * headers kept) and of the worker's health server (bare LF, checked only). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "httphead.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void one(const uint8_t *data, size_t size, bool bare_lf, bool keep)
{
    size_t end = httphead_end((const char *)data, size, bare_lf);
    if (end == 0)
        return;
    if (end > size)
        abort();
    char *buf = malloc(end + 1);
    if (!buf)
        return;
    memcpy(buf, data, end);
    buf[end] = '\0';
    httphead_opts_t opts = { .bare_lf = bare_lf, .keep_headers = keep };
    httphead_t h;
    char why[160];
    if (httphead_parse(buf, end, &opts, &h, why, sizeof why) == 0) {
        /* What the callers rely on. */
        if (!h.method || !h.target || h.target[0] != '/' || h.minor < 0 || h.minor > 1)
            abort();
        if (h.nh < 0 || h.nh > SBX_HTTP_MAX_HEADERS)
            abort();
        for (int i = 0; i < h.nh; i++)
            if (!h.name[i] || !h.value[i] || !h.name[i][0])
                abort();
        (void)httphead_get(&h, "host");
    } else if (!why[0]) {
        abort();
    }
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    one(data, size, false, true);
    one(data, size, true, false);
    return 0;
}
