/* libFuzzer harness: the demultiplexer of Docker's stdout/stderr stream
 * framing, fed the input in pieces whose sizes the first byte chooses. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "docker_stream.h"
#include "sbuf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t step = (size_t)data[0] % 17 + 1;
    data++;
    size--;
    sbuf_t out, err;
    sbuf_init(&out, 4096);
    sbuf_init(&err, 4096);
    docker_stream_t d;
    docker_stream_init(&d, &out, &err);
    for (size_t off = 0; off < size; off += step) {
        size_t n = size - off < step ? size - off : step;
        if (docker_stream_push(&d, data + off, n) < 0)
            break;
    }
    /* Never more than was offered, never more than the limits. */
    if (out.len > 4096 || err.len > 4096 || out.len + err.len > size)
        abort();
    if (out.seen + err.seen + d.ignored > size)
        abort();
    sbuf_release(&out);
    sbuf_release(&err);
    return 0;
}
