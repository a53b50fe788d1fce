/* libFuzzer harness: what crosses from a worker to the controller and on to
 * a client in a logs stream: logs frames (logframe_parse), the NDJSON lines
 * they become (client_logs_line_decode), and a grant's text (grant_verify). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "client.h"
#include "grant.h"
#include "logframe.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return sodium_init() < 0 ? 1 : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;
    while (off < size) {
        logframe_t f;
        int r = logframe_parse(data + off, size - off, &f);
        if (r != 1)
            break;
        if (f.size == 0 || f.size > size - off || f.len > f.size)
            abort();
        off += f.size;
    }
    client_logs_line_t l;
    if (client_logs_line_decode((const char *)data, size, &l) == 0) {
        if (l.stream && !l.data && l.len)
            abort();
        if (l.is_error && (!l.code || !l.message))
            abort();
        client_logs_line_release(&l);
    }
    char *text = malloc(size + 1);
    if (text) {
        memcpy(text, data, size);
        text[size] = '\0';
        unsigned char key[GRANT_KEY_BYTES] = { 0 };
        grant_t g;
        if (grant_verify(key, text, 1700000000, &g) == 0 && (g.port < 0 || g.port > 65535))
            abort();
        free(text);
    }
    return 0;
}
