/* libFuzzer harness: the streaming tar reader of file transfers
 * (common/tarstream.h), fed the input in pieces whose sizes the first byte
 * chooses, every entry also put through the listing and the name check;
 * then the gate over the same input, which must hand on a prefix of it. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sbuf.h"
#include "tarstream.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct fuzz_seen {
    size_t content;
    tarstream_list_t list;
    sbuf_t out;
} fuzz_seen_t;

static int fuzz_entry(void *ud, const tarstream_entry_t *e)
{
    fuzz_seen_t *s = ud;
    if (strlen(e->name) > SBX_FILES_PATH_MAX || strlen(e->link) > SBX_FILES_PATH_MAX || e->size < 0 ||
        e->mode > 07777)
        abort();
    if (e->sparse != (e->sparse_kind != NULL))
        abort();
    const char *rest = NULL;
    size_t rl = 0;
    if (tarstream_name_under(e->name, "top", &rest, &rl) == 0 && (rest < e->name || rl > strlen(e->name)))
        abort();
    int r = tarstream_list_add(&s->list, e, &s->out);
    return r < 0 || r == 2 ? -1 : 0;
}

static int fuzz_judge(void *ud, const tarstream_entry_t *e)
{
    (void)ud;
    return e->sparse || e->type == '3' ? -1 : 0;
}

/* The gate over data: what it hands on is a prefix of the input, never
 * more than the reader judged. */
static void fuzz_gate(const uint8_t *data, size_t size, size_t step)
{
    tarstream_gate_t g;
    if (tarstream_gate_init(&g, fuzz_judge, NULL) < 0)
        return;
    size_t out = 0, off = 0;
    int r = 0;
    while (off < size && r == 0) {
        size_t k = size - off < step ? size - off : step, room = tarstream_gate_room(&g);
        if (room == 0)
            abort();
        if (k > room)
            k = room;
        r = tarstream_gate_push(&g, (const char *)data + off, k);
        off += k;
        size_t n = 0;
        const char *p = tarstream_gate_ready(&g, &n);
        if (out + n > off || memcmp(p, data + out, n) != 0)
            abort();
        out += n;
        tarstream_gate_consume(&g, n);
    }
    tarstream_gate_release(&g);
}

static int fuzz_data(void *ud, const char *d, size_t n)
{
    fuzz_seen_t *s = ud;
    (void)d;
    s->content += n;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t step = (size_t)data[0] * 7 % 1031 + 1;
    data++;
    size--;
    fuzz_seen_t s;
    memset(&s, 0, sizeof s);
    sbuf_init(&s.out, 0);
    tarstream_list_init(&s.list, 64);
    tarstream_t t;
    if (tarstream_init(&t, fuzz_entry, fuzz_data, &s) < 0)
        return 0;
    int r = 0;
    for (size_t off = 0; off < size && r == 0; off += step) {
        size_t n = size - off < step ? size - off : step;
        r = tarstream_push(&t, (const char *)data + off, n);
    }
    if (r == 0)
        tarstream_finish(&t);
    /* Content is never more than was offered. */
    if (s.content > size)
        abort();
    tarstream_release(&t);
    sbuf_release(&s.out);
    fuzz_gate(data, size, step);
    return 0;
}
