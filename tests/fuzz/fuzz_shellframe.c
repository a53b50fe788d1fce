/* libFuzzer harness: the frames of an interactive shell (shellframe_next),
 * as the controller and the worker read them from a client or a worker,
 * in both directions and in pieces of the input's own choosing. */
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdlib.h>

#include "shellframe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static shellframe_dec_t dec;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    /* The first byte: the direction and the piece size. */
    shellframe_dec_init(&dec, (data[0] & 1) ? SHELLFRAME_TO_CLIENT : SHELLFRAME_TO_WORKER);
    size_t piece = (size_t)(data[0] >> 1) + 1;
    size_t off = 1;
    while (off < size) {
        size_t n = size - off < piece ? size - off : piece;
        size_t used = 0;
        shellframe_t f;
        int r = shellframe_next(&dec, data + off, n, &used, &f);
        if (r < 0)
            break;
        if (used > n || (r == 0 && used != n))
            abort();
        if (r == 1) {
            if ((f.type == SHELLFRAME_DATA || f.type == SHELLFRAME_STDERR) &&
                (f.len < 1 || f.len > SHELLFRAME_PAYLOAD_MAX))
                abort();
            if (f.type == SHELLFRAME_RESIZE && (f.cols < 1 || f.rows < 1 || f.cols > SHELLFRAME_SIZE_MAX ||
                                               f.rows > SHELLFRAME_SIZE_MAX))
                abort();
            /* Towards the client (data[0] odd): DATA, STDERR, EXIT; towards
             * the worker: DATA, RESIZE, EOF. */
            bool to_client = data[0] & 1;
            bool client_only = f.type == SHELLFRAME_EXIT || f.type == SHELLFRAME_STDERR;
            bool worker_only = f.type == SHELLFRAME_RESIZE || f.type == SHELLFRAME_EOF;
            if ((client_only && !to_client) || (worker_only && to_client))
                abort();
        }
        off += used;
    }
    return 0;
}
