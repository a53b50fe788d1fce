/* The pure tar parts of the worker's file transfers (common/tarstream.h):
 * the raw upload's header, the streaming reader (in pieces of any size, PAX
 * and GNU long names, bad input refused), the listing and path cleaning. */
#include "check_util.h"
#include "tarstream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a reader saw. */
typedef struct seen {
    int entries;
    tarstream_entry_t first, last;
    char data[8192];
    size_t data_len;
} seen_t;

static int on_entry(void *ud, const tarstream_entry_t *e)
{
    seen_t *s = ud;
    if (s->entries++ == 0)
        s->first = *e;
    s->last = *e;
    return 0;
}

static int on_data(void *ud, const char *d, size_t n)
{
    seen_t *s = ud;
    ck_assert_uint_le(s->data_len + n, sizeof s->data);
    memcpy(s->data + s->data_len, d, n);
    s->data_len += n;
    return 0;
}

/* An archive of one file: header, content, padding, two zero blocks. */
static size_t one_file(const char *name, const char *content, size_t n, unsigned mode, unsigned char *out)
{
    int h = tarstream_file_header(name, (int64_t)n, mode, 1000000000, out);
    ck_assert_int_gt(h, 0);
    size_t len = (size_t)h;
    memcpy(out + len, content, n);
    len += n;
    size_t pad = tarstream_padding((int64_t)n);
    memset(out + len, 0, pad + TARSTREAM_TRAILER);
    return len + pad + TARSTREAM_TRAILER;
}

/* Feeds buf in pieces of step bytes. */
static int feed(tarstream_t *t, const unsigned char *buf, size_t n, size_t step)
{
    for (size_t off = 0; off < n; off += step) {
        size_t k = n - off < step ? n - off : step;
        int r = tarstream_push(t, (const char *)buf + off, k);
        if (r < 0)
            return r;
    }
    return tarstream_finish(t);
}

START_TEST(test_file_header_round_trips_in_any_piece_size)
{
    static unsigned char buf[16384];
    const char content[] = "bin\0ary\xff data";
    size_t n = one_file("report.xml", content, sizeof content, 0750, buf);
    const size_t steps[] = { 1, 7, 511, 512, 513, sizeof buf };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        seen_t s = { 0 };
        tarstream_t t;
        ck_assert_int_eq(tarstream_init(&t, on_entry, on_data, &s), 0);
        ck_assert_int_eq(feed(&t, buf, n, steps[i]), 0);
        ck_assert_int_eq(s.entries, 1);
        ck_assert_str_eq(s.first.name, "report.xml");
        ck_assert_int_eq(s.first.type, '0');
        ck_assert_int_eq(s.first.size, (int64_t)sizeof content);
        ck_assert_uint_eq(s.first.mode, 0750);
        ck_assert_int_eq(s.first.mtime, 1000000000);
        ck_assert_uint_eq(s.data_len, sizeof content);
        ck_assert_mem_eq(s.data, content, sizeof content);
        ck_assert_int_eq(t.state, TARSTREAM_END);
        tarstream_release(&t);
    }
}
END_TEST

/* A name over 100 bytes goes into a PAX header the reader applies. */
START_TEST(test_long_name_uses_pax_and_reads_back)
{
    static unsigned char buf[16384];
    char *name = unit_repeat('n', 200);
    size_t n = one_file(name, "x", 1, 0644, buf);
    seen_t s = { 0 };
    tarstream_t t;
    ck_assert_int_eq(tarstream_init(&t, on_entry, on_data, &s), 0);
    ck_assert_int_eq(feed(&t, buf, n, 3), 0);
    ck_assert_int_eq(s.entries, 1);
    ck_assert_str_eq(s.first.name, name);
    ck_assert_uint_eq(s.data_len, 1);
    tarstream_release(&t);
    free(name);
    char *too_long = unit_repeat('n', TARSTREAM_NAME_MAX + 1);
    ck_assert_int_eq(tarstream_file_header(too_long, 1, 0644, 0, buf), SBX_EINVAL);
    free(too_long);
}
END_TEST

START_TEST(test_file_header_refuses_bad_names_and_modes)
{
    unsigned char h[TARSTREAM_HEADER_MAX];
    const char *bad[] = { "", ".", "..", "a/b", "/a", "a\nb", "a\x7f" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_int_eq(tarstream_file_header(bad[i], 1, 0644, 0, h), SBX_EINVAL);
    ck_assert_int_eq(tarstream_file_header("a", 1, 010000, 0, h), SBX_EINVAL);
    ck_assert_int_eq(tarstream_file_header("a", -1, 0644, 0, h), SBX_EINVAL);
    ck_assert_int_eq(tarstream_file_header("..a", 1, 07777, 0, h), TARSTREAM_BLOCK);
    /* a relative path: components, never absolute, empty, "." or ".." */
    const char *bad_rel[] = { "", "/a", "a/", "a//b", "a/./b", "a/../b", "../a", "a/..", "a/b\n" };
    for (size_t i = 0; i < sizeof bad_rel / sizeof bad_rel[0]; i++)
        ck_assert_msg(tarstream_file_header_rel(bad_rel[i], 1, 0644, 0, h) == SBX_EINVAL, "accepted \"%s\"",
                      bad_rel[i]);
    ck_assert_int_eq(tarstream_file_header_rel("agent/notes.txt", 1, 0644, 0, h), TARSTREAM_BLOCK);
    ck_assert_int_eq(tarstream_file_header_rel("..a/.b/c", 1, 0644, 0, h), TARSTREAM_BLOCK);
}
END_TEST

/* Sizes past 11 octal digits are written base-256 and read back. */
START_TEST(test_large_size_is_base256)
{
    unsigned char h[TARSTREAM_HEADER_MAX];
    int64_t big = 100LL * 1024 * 1024 * 1024;
    ck_assert_int_eq(tarstream_file_header("big", big, 0644, 0, h), TARSTREAM_BLOCK);
    ck_assert_uint_eq(h[124], 0x80);
    seen_t s = { 0 };
    tarstream_t t;
    ck_assert_int_eq(tarstream_init(&t, on_entry, NULL, &s), 0);
    ck_assert_int_eq(tarstream_push(&t, (const char *)h, TARSTREAM_BLOCK), 0);
    ck_assert_int_eq(s.first.size, big);
    ck_assert_int_eq(t.remaining, big);
    ck_assert_int_eq(tarstream_finish(&t), SBX_EINVAL);  /* ends inside the entry */
    tarstream_release(&t);
}
END_TEST

/* Rewrites a block's checksum after a test changed it. */
static void rechecksum(unsigned char *h)
{
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h[i];
    char c[8];
    snprintf(c, sizeof c, "%06o", sum & 0777777u);
    memcpy(h + 148, c, 6);
    h[154] = '\0';
}

/* A GNU 'L' entry names the entry after it; a leading "./" is dropped. */
START_TEST(test_gnu_long_name_and_dot_slash)
{
    static unsigned char buf[16384];
    char *longname = unit_repeat('g', 300);
    size_t off = 0;
    int h = tarstream_file_header("././LongLink", 301, 0644, 0, buf);
    ck_assert_int_eq(h, SBX_EINVAL);   /* the writer takes one component only */
    tarstream_file_header("LongLink", 301, 0644, 0, buf);
    buf[156] = 'L';
    rechecksum(buf);
    off = 512;
    memcpy(buf + off, longname, 300);
    buf[off + 300] = '\0';
    off += 512;
    tarstream_file_header("short", 2, 0600, 0, buf + off);
    off += 512;
    memcpy(buf + off, "hi", 2);
    off += 512;
    tarstream_file_header("x", 0, 0755, 0, buf + off);
    memcpy(buf + off, "./dir/", 6);
    buf[off + 156] = '5';
    rechecksum(buf + off);
    off += 512;
    memset(buf + off, 0, 1024);
    off += 1024;
    seen_t s = { 0 };
    tarstream_t t;
    ck_assert_int_eq(tarstream_init(&t, on_entry, on_data, &s), 0);
    ck_assert_int_eq(feed(&t, buf, off, 100), 0);
    ck_assert_int_eq(s.entries, 2);
    ck_assert_str_eq(s.first.name, longname);
    ck_assert_str_eq(s.last.name, "dir/");
    ck_assert_int_eq(s.last.type, '5');
    ck_assert_uint_eq(s.data_len, 2);
    tarstream_release(&t);
    free(longname);
}
END_TEST

START_TEST(test_reader_refuses_bad_checksum_numbers_and_truncation)
{
    static unsigned char buf[4096];
    size_t n = one_file("f", "abc", 3, 0644, buf);
    tarstream_t t;
    seen_t s = { 0 };
    buf[10] ^= 1;  /* checksum now wrong */
    ck_assert_int_eq(tarstream_init(&t, on_entry, on_data, &s), 0);
    ck_assert_int_eq(feed(&t, buf, n, n), SBX_EINVAL);
    ck_assert_ptr_nonnull(strstr(t.error, "checksum"));
    tarstream_release(&t);

    n = one_file("f", "abc", 3, 0644, buf);
    memcpy(buf + 124, "0000000009x", 11);  /* not octal */
    rechecksum(buf);
    ck_assert_int_eq(tarstream_init(&t, on_entry, on_data, &s), 0);
    ck_assert_int_eq(feed(&t, buf, n, n), SBX_EINVAL);
    tarstream_release(&t);

    n = one_file("f", "abc", 3, 0644, buf);
    ck_assert_int_eq(tarstream_init(&t, on_entry, on_data, &s), 0);
    ck_assert_int_eq(feed(&t, buf, 512 + 2, 512 + 2), SBX_EINVAL);   /* inside the content */
    tarstream_release(&t);
    /* Ending between entries without the zero blocks is accepted. */
    ck_assert_int_eq(tarstream_init(&t, on_entry, on_data, &s), 0);
    ck_assert_int_eq(feed(&t, buf, 1024, 1024), 0);
    tarstream_release(&t);

    /* An oversized PAX header. */
    tarstream_file_header("PaxHeader", 0, 0644, 0, buf);
    buf[156] = 'x';
    buf[124] = 0x80;
    memset(buf + 125, 0, 11);
    buf[133] = 0x10;  /* 1 TiB and more */
    rechecksum(buf);
    ck_assert_int_eq(tarstream_init(&t, on_entry, on_data, &s), 0);
    ck_assert_int_eq(tarstream_push(&t, (const char *)buf, 512), SBX_EINVAL);
    tarstream_release(&t);
}
END_TEST

/* A callback's negative value stops the reader and comes back. */
static int stop_entry(void *ud, const tarstream_entry_t *e)
{
    (void)ud, (void)e;
    return -42;
}

START_TEST(test_callback_stops_the_reader)
{
    static unsigned char buf[4096];
    size_t n = one_file("f", "abc", 3, 0644, buf);
    tarstream_t t;
    ck_assert_int_eq(tarstream_init(&t, stop_entry, NULL, NULL), 0);
    ck_assert_int_eq(tarstream_push(&t, (const char *)buf, n), -42);
    tarstream_release(&t);
}
END_TEST

static tarstream_entry_t entry(const char *name, char type)
{
    tarstream_entry_t e;
    memset(&e, 0, sizeof e);
    snprintf(e.name, sizeof e.name, "%s", name);
    e.type = type;
    e.size = type == '0' ? 5 : 0;
    e.mode = 0644;
    if (type == '2')
        snprintf(e.link, sizeof e.link, "target");
    return e;
}

START_TEST(test_list_keeps_direct_children_only)
{
    tarstream_list_t l;
    sbuf_t out;
    sbuf_init(&out, 0);
    tarstream_list_init(&l, 10);
    sbuf_append(&out, TARSTREAM_LIST_HEAD, strlen(TARSTREAM_LIST_HEAD));
    const struct { const char *name; char type; int want; } es[] = {
        { "work/", '5', 0 }, { "work/a.txt", '0', 1 }, { "work/sub/", '5', 1 }, { "work/sub/deep", '0', 0 },
        { "work/link", '2', 1 }, { "workx/other", '0', 0 }, { "other", '0', 0 },
    };
    for (size_t i = 0; i < sizeof es / sizeof es[0]; i++) {
        tarstream_entry_t e = entry(es[i].name, es[i].type);
        ck_assert_int_eq(tarstream_list_add(&l, &e, &out), es[i].want);
    }
    ck_assert_int_eq(tarstream_list_tail(&l, &out), 0);
    json_object *o = unit_json(out.data);
    json_object *arr = jsonx_get_arr(o, "entries");
    ck_assert_uint_eq(json_object_array_length(arr), 3);
    ck_assert_str_eq(jsonx_get_str(json_object_array_get_idx(arr, 0), "name"), "a.txt");
    ck_assert_str_eq(jsonx_get_str(json_object_array_get_idx(arr, 0), "type"), "file");
    ck_assert_str_eq(jsonx_get_str(json_object_array_get_idx(arr, 1), "name"), "sub");
    ck_assert_str_eq(jsonx_get_str(json_object_array_get_idx(arr, 1), "type"), "dir");
    ck_assert_str_eq(jsonx_get_str(json_object_array_get_idx(arr, 2), "link_target"), "target");
    ck_assert_str_eq(jsonx_get_str(json_object_array_get_idx(arr, 2), "mtime"), "1970-01-01T00:00:00Z");
    bool tr = true;
    ck_assert(jsonx_get_bool(o, "truncated", &tr) && !tr);
    json_object_put(o);
    sbuf_release(&out);
}
END_TEST

START_TEST(test_list_truncates_and_lists_a_file_itself)
{
    tarstream_list_t l;
    sbuf_t out;
    sbuf_init(&out, 0);
    tarstream_list_init(&l, 2);
    tarstream_entry_t root = entry("d", '5');
    ck_assert_int_eq(tarstream_list_add(&l, &root, &out), 0);
    for (int i = 0; i < 2; i++) {
        char n[16];
        snprintf(n, sizeof n, "d/f%d", i);
        tarstream_entry_t e = entry(n, '0');
        ck_assert_int_eq(tarstream_list_add(&l, &e, &out), 1);
    }
    tarstream_entry_t e = entry("d/f9", '0');
    ck_assert_int_eq(tarstream_list_add(&l, &e, &out), 2);
    ck_assert(l.truncated);
    sbuf_reset(&out);
    tarstream_list_init(&l, 2);
    tarstream_entry_t f = entry("report.xml", '0');
    ck_assert_int_eq(tarstream_list_add(&l, &f, &out), 1);
    ck_assert_ptr_nonnull(strstr(out.data, "\"name\":\"report.xml\""));
    /* A name that is not UTF-8 is repaired, so the document stays JSON. */
    sbuf_reset(&out);
    tarstream_list_init(&l, 2);
    tarstream_entry_t bad = entry("na\xffme", '0');
    ck_assert_int_eq(tarstream_list_add(&l, &bad, &out), 1);
    json_object *o = unit_json(out.data);
    json_object_put(o);
    sbuf_release(&out);
}
END_TEST

START_TEST(test_path_clean_stays_inside_the_root)
{
    char out[SBX_FILES_PATH_MAX + 1];
    const struct { const char *in, *want; } ok[] = {
        { "/", "/" }, { "/work", "/work" }, { "/work/", "/work" }, { "//work//a/./b", "/work/a/b" },
        { "/../../etc/x", "/etc/x" }, { "/a/../../..", "/" }, { "/a/b/../c", "/a/c" }, { "/..a/b..", "/..a/b.." },
        { "/.", "/" },
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        ck_assert_int_eq(tarstream_path_clean(ok[i].in, out), 0);
        ck_assert_str_eq(out, ok[i].want);
    }
    const char *bad[] = { "", "work", "../x", "/a\nb", "/a\tb" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_int_eq(tarstream_path_clean(bad[i], out), SBX_EINVAL);
    char *lng = unit_repeat('a', SBX_FILES_PATH_MAX + 1);
    lng[0] = '/';
    ck_assert_int_eq(tarstream_path_clean(lng, out), SBX_EINVAL);
    lng[SBX_FILES_PATH_MAX] = '\0';
    ck_assert_int_eq(tarstream_path_clean(lng, out), 0);
    free(lng);
}
END_TEST


/* ---- sparse members, headers readers disagree on, judged bytes, the gate */

/* The bytes of tests/unit/data/NAME (made by make-sparse-tars.sh); the
 * caller frees them. */
static unsigned char *fixture(const char *name, size_t *ret_n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", UNIT_DATA_DIR, name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    unsigned char *b = unit_xmalloc(1 << 20);
    size_t n = fread(b, 1, 1 << 20, f);
    fclose(f);
    *ret_n = n;
    return b;
}

/* A ustar block of type with name (< 100 bytes) and size at out. */
static void block(unsigned char *out, const char *name, char type, int64_t size)
{
    ck_assert_int_eq(tarstream_file_header("x", size, 0644, 0, out), TARSTREAM_BLOCK);
    memset(out, 0, 100);
    memcpy(out, name, strlen(name));
    out[156] = (unsigned char)type;
    rechecksum(out);
}

/* A meta entry (type 'x', 'g', 'L' or 'K') with content at out: its length. */
static size_t meta(unsigned char *out, char type, const char *content)
{
    size_t n = strlen(content) + (type == 'L' || type == 'K');
    block(out, type == 'x' ? "PaxHeaders/x" : type == 'g' ? "pax_global_header" : "././@LongLink", type,
          (int64_t)n);
    memset(out + 512, 0, 512 + tarstream_padding((int64_t)n));
    memcpy(out + 512, content, strlen(content));
    return 512 + n + tarstream_padding((int64_t)n);
}

/* One PAX record "<len> key=value\n" appended to out. */
static void record(char *out, size_t cap, const char *key, const char *value)
{
    size_t body = strlen(key) + strlen(value) + 3, len = body + 1;
    while (len < body + (size_t)snprintf(NULL, 0, "%zu", len))
        len++;
    size_t l = strlen(out);
    snprintf(out + l, cap - l, "%zu %s=%s\n", len, key, value);
}

/* Reads all of buf in pieces of step: the reader's result, and what it saw. */
static int read_all_of(const unsigned char *buf, size_t n, size_t step, seen_t *s, tarstream_t *t)
{
    memset(s, 0, sizeof *s);
    ck_assert_int_eq(tarstream_init(t, on_entry, NULL, s), 0);
    return feed(t, buf, n, step);
}

START_TEST(test_sparse_members_of_every_gnu_tar_dialect_are_seen)
{
    static const struct {
        const char *file, *name, *kind;
        int64_t size;
    } cases[] = {
        { "sparse-gnu.tar", "big.img", TARSTREAM_SPARSE_GNU, 4096 },
        { "sparse-gnu-ext.tar", "ext.img", TARSTREAM_SPARSE_GNU, 7 * 4096 },
        { "sparse-pax00.tar", "big.img", TARSTREAM_SPARSE_PAX00, 4096 },
        { "sparse-pax01.tar", "big.img", TARSTREAM_SPARSE_PAX01, 4096 },
        { "sparse-pax10.tar", "big.img", TARSTREAM_SPARSE_PAX10, 4096 + 512 },
    };
    const size_t steps[] = { 1, 100, 512, 1 << 20 };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = 0;
        unsigned char *b = fixture(cases[i].file, &n);
        for (size_t j = 0; j < sizeof steps / sizeof steps[0]; j++) {
            seen_t s;
            tarstream_t t;
            ck_assert_msg(read_all_of(b, n, steps[j], &s, &t) == 0, "%s: %s", cases[i].file, t.error);
            ck_assert_int_eq(s.entries, 1);
            ck_assert_msg(s.first.sparse, "%s is not seen sparse", cases[i].file);
            ck_assert_str_eq(s.first.sparse_kind, cases[i].kind);
            ck_assert_str_eq(s.first.name, cases[i].name);
            ck_assert_int_eq(s.first.type, strcmp(cases[i].kind, TARSTREAM_SPARSE_GNU) == 0 ? 'S' : '0');
            ck_assert_int_eq(s.first.size, cases[i].size);
            ck_assert_int_eq(s.first.realsize, 6442450944LL);
            ck_assert_int_eq(t.state, TARSTREAM_END);
            tarstream_release(&t);
        }
        free(b);
    }
    /* A PAX record of any other GNU.sparse key is a sparse member too. */
    static unsigned char buf[8192];
    char rec[256] = "";
    record(rec, sizeof rec, "GNU.sparse.future", "1");
    size_t off = meta(buf, 'x', rec);
    block(buf + off, "f", '0', 0);
    off += 512;
    seen_t s;
    tarstream_t t;
    ck_assert_int_eq(read_all_of(buf, off, off, &s, &t), 0);
    ck_assert(s.first.sparse);
    ck_assert_str_eq(s.first.sparse_kind, TARSTREAM_SPARSE_PAX);
    tarstream_release(&t);
}
END_TEST

/* Go's archive/tar (Docker) reads no content for link, symlink, device,
 * directory and FIFO entries whatever their size says; a reader that did
 * would take the next headers for content. Such entries are refused. */
START_TEST(test_header_only_entries_with_content_are_refused)
{
    static unsigned char buf[8192];
    const char types[] = { '1', '2', '3', '4', '5', '6' };
    for (size_t i = 0; i < sizeof types; i++) {
        block(buf, "m", types[i], 1024);
        memset(buf + 512, 0, 2048);
        seen_t s;
        tarstream_t t;
        ck_assert_int_eq(read_all_of(buf, 2560, 2560, &s, &t), SBX_EINVAL);
        ck_assert_msg(strstr(t.error, "content bytes") != NULL, "type %c: %s", types[i], t.error);
        tarstream_release(&t);
    }
    /* An old '\0' entry named with a trailing '/' is a directory (Go, GNU tar). */
    block(buf, "d/", '\0', 0);
    memset(buf + 512, 0, 1024);
    seen_t s;
    tarstream_t t;
    ck_assert_int_eq(read_all_of(buf, 1536, 7, &s, &t), 0);
    ck_assert_int_eq(s.first.type, '5');
    tarstream_release(&t);
    block(buf, "d/", '\0', 512);
    ck_assert_int_eq(read_all_of(buf, 2048, 2048, &s, &t), SBX_EINVAL);
    tarstream_release(&t);
    /* A PAX size on a symlink is content too. */
    char rec[128] = "";
    record(rec, sizeof rec, "size", "512");
    size_t off = meta(buf, 'x', rec);
    block(buf + off, "l", '2', 0);
    off += 512;
    ck_assert_int_eq(read_all_of(buf, off, off, &s, &t), SBX_EINVAL);
    tarstream_release(&t);
}
END_TEST

/* Streams where Go's archive/tar and GNU tar would see other entries than
 * this reader are refused, so what it judges is what they unpack. */
START_TEST(test_headers_readers_disagree_on_are_refused)
{
    static unsigned char buf[16384];
    char path[128] = "", other[128] = "";
    record(path, sizeof path, "path", "top/a");
    record(other, sizeof other, "size", "0");
    struct {
        const char *what;
        char first, second;
        const char *c1, *c2;
        const char *want;
    } cases[] = {
        { "two PAX headers", 'x', 'x', path, other, "two PAX headers" },
        { "two long names", 'L', 'L', "top/a", "top/b", "two GNU long-name headers" },
        { "a long name and a PAX path", 'L', 'x', "top/b", path, "both a GNU long name and a PAX path" },
        { "a global header between", 'x', 'g', path, other, "global header between" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t off = meta(buf, cases[i].first, cases[i].c1);
        off += meta(buf + off, cases[i].second, cases[i].c2);
        block(buf + off, "top/c", '0', 0);
        off += 512;
        memset(buf + off, 0, 1024);
        off += 1024;
        seen_t s;
        tarstream_t t;
        ck_assert_int_eq(read_all_of(buf, off, 3, &s, &t), SBX_EINVAL);
        ck_assert_msg(strstr(t.error, cases[i].want) != NULL, "%s: %s", cases[i].what, t.error);
        ck_assert_int_eq(s.entries, 0);
        tarstream_release(&t);
    }
    /* A global header first (git archive writes one), then entries: fine. */
    size_t off = meta(buf, 'g', "52 comment=0123456789012345678901234567890123456789\n");
    block(buf + off, "top/c", '0', 0);
    off += 512;
    memset(buf + off, 0, 1024);
    seen_t s;
    tarstream_t t;
    ck_assert_int_eq(read_all_of(buf, off + 1024, 5, &s, &t), 0);
    ck_assert_str_eq(s.first.name, "top/c");
    tarstream_release(&t);
    /* A lone zero block, then another entry (GNU tar stops at it, Go fails). */
    block(buf, "a", '0', 0);
    memset(buf + 512, 0, 512);
    block(buf + 1024, "b", '0', 0);
    ck_assert_int_eq(read_all_of(buf, 1536, 1536, &s, &t), SBX_EINVAL);
    ck_assert_ptr_nonnull(strstr(t.error, "zero block"));
    tarstream_release(&t);
    /* A member's own headers, then the end. */
    off = meta(buf, 'x', path);
    memset(buf + off, 0, 1024);
    ck_assert_int_eq(read_all_of(buf, off + 1024, 512, &s, &t), SBX_EINVAL);
    tarstream_release(&t);
    ck_assert_int_eq(read_all_of(buf, off, 512, &s, &t), SBX_EINVAL);
    ck_assert_ptr_nonnull(strstr(t.error, "own headers"));
    tarstream_release(&t);
}
END_TEST

/* judged stops before a PAX header and the header block it describes, and
 * moves over an entry's content as it is read. */
START_TEST(test_judged_bytes_cover_accepted_entries_only)
{
    static unsigned char buf[8192];
    char rec[128] = "";
    record(rec, sizeof rec, "path", "top/named-by-pax");
    size_t px = meta(buf, 'x', rec);
    block(buf + px, "top/x", '0', 1000);
    memset(buf + px + 512, 'c', 1024);
    size_t end = px + 512 + 1024;
    memset(buf + end, 0, 1024);
    seen_t s;
    tarstream_t t;
    memset(&s, 0, sizeof s);
    ck_assert_int_eq(tarstream_init(&t, on_entry, NULL, &s), 0);
    ck_assert_int_eq(tarstream_push(&t, (const char *)buf, px + 511), 0);
    ck_assert_uint_eq(t.judged, 0);
    ck_assert_int_eq(tarstream_push(&t, (const char *)buf + px + 511, 1), 0);
    ck_assert_uint_eq(t.judged, px + 512);
    ck_assert_str_eq(s.first.name, "top/named-by-pax");
    ck_assert_int_eq(tarstream_push(&t, (const char *)buf + px + 512, 100), 0);
    ck_assert_uint_eq(t.judged, px + 612);
    ck_assert_int_eq(tarstream_push(&t, (const char *)buf + px + 612, end + 1024 - px - 612), 0);
    ck_assert_uint_eq(t.judged, end + 1024);
    ck_assert_int_eq(tarstream_push(&t, "trailing", 8), 0);
    ck_assert_uint_eq(t.judged, end + 1024);
    tarstream_release(&t);
}
END_TEST

/* A judge for the gate: refuses sparse members. */
static int no_sparse(void *ud, const tarstream_entry_t *e)
{
    int *seen = ud;
    (*seen)++;
    return e->sparse ? -77 : 0;
}

/* Puts n bytes of in through a gate in pieces of step; what came out. */
static int through_gate(const unsigned char *in, size_t n, size_t step, unsigned char *out, size_t *ret_out,
                        int *entries)
{
    tarstream_gate_t g;
    ck_assert_int_eq(tarstream_gate_init(&g, no_sparse, entries), 0);
    size_t o = 0, off = 0;
    int r = 0;
    while (off < n && r == 0) {
        size_t k = n - off < step ? n - off : step;
        size_t room = tarstream_gate_room(&g);
        ck_assert_uint_gt(room, 0);
        if (k > room)
            k = room;
        r = tarstream_gate_push(&g, (const char *)in + off, k);
        off += k;
        size_t ready = 0;
        const char *p = tarstream_gate_ready(&g, &ready);
        memcpy(out + o, p, ready);
        o += ready;
        tarstream_gate_consume(&g, ready);
    }
    if (r == 0) {
        r = tarstream_gate_finish(&g);
        size_t ready = 0;
        const char *p = tarstream_gate_ready(&g, &ready);
        memcpy(out + o, p, ready);
        o += ready;
    }
    tarstream_gate_release(&g);
    *ret_out = o;
    return r;
}

START_TEST(test_gate_hands_on_accepted_entries_and_nothing_of_a_refused_one)
{
    size_t sn = 0;
    unsigned char *sparse = fixture("sparse-pax10.tar", &sn);
    static unsigned char in[1 << 16], out[1 << 16];
    size_t first = one_file("ok.txt", "fine", 4, 0644, in) - TARSTREAM_TRAILER;
    memcpy(in + first, sparse, sn);
    const size_t steps[] = { 1, 13, 512, 4096, sizeof in };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        size_t o = 0;
        int entries = 0;
        ck_assert_int_eq(through_gate(in, first + sn, steps[i], out, &o, &entries), -77);
        ck_assert_int_eq(entries, 2);
        ck_assert_uint_eq(o, first);   /* the first file whole, not a byte of the sparse one's headers */
        ck_assert_mem_eq(out, in, first);
    }
    /* Everything accepted: out is in up to its end blocks, what follows is dropped. */
    size_t all = one_file("ok.txt", "fine", 4, 0644, in);
    memcpy(in + all, "garbage after the end", 21);
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        size_t o = 0;
        int entries = 0;
        ck_assert_int_eq(through_gate(in, all + 21, steps[i], out, &o, &entries), 0);
        ck_assert_uint_eq(o, all);
        ck_assert_mem_eq(out, in, all);
    }
    /* A stream cut inside a header holds it back; one cut inside an
     * accepted entry's content has handed that on. finish refuses both. */
    size_t o = 0;
    int entries = 0;
    ck_assert_int_eq(through_gate(in, 300, 100, out, &o, &entries), SBX_EINVAL);
    ck_assert_uint_eq(o, 0);
    ck_assert_int_eq(through_gate(in, 700, 100, out, &o, &entries), SBX_EINVAL);
    ck_assert_uint_eq(o, 700);
    free(sparse);
}
END_TEST

START_TEST(test_name_under_keeps_members_below_the_top)
{
    const char *rest = NULL;
    size_t rl = 99;
    ck_assert_int_eq(tarstream_name_under("work", "work", &rest, &rl), 0);
    ck_assert_uint_eq(rl, 0);
    ck_assert_int_eq(tarstream_name_under("work/", "work", &rest, &rl), 0);
    ck_assert_uint_eq(rl, 0);
    ck_assert_int_eq(tarstream_name_under("work/a/b/", "work", &rest, &rl), 0);
    ck_assert_uint_eq(rl, 3);
    ck_assert_int_eq(strncmp(rest, "a/b", rl), 0);
    ck_assert_int_eq(tarstream_name_under("work/..a", "work", &rest, &rl), 0);
    const char *bad[] = { "", "workx", "wor", "other/work", "/work", "work/../x", "work/..", "work/./x",
                          "work//x", "work/a/../../x", "../work", "./work" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(tarstream_name_under(bad[i], "work", &rest, &rl) == SBX_EINVAL, "took %s", bad[i]);
    /* The archive of "/": Docker's names start with '/'. */
    ck_assert_int_eq(tarstream_name_under("/", "", &rest, &rl), 0);
    ck_assert_uint_eq(rl, 0);
    ck_assert_int_eq(tarstream_name_under("/etc/passwd", "", &rest, &rl), 0);
    ck_assert_int_eq(strncmp(rest, "etc/passwd", rl), 0);
    ck_assert_int_eq(tarstream_name_under("/etc/../x", "", &rest, &rl), SBX_EINVAL);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("tarstream");
    unit_tcase_add(s, "tarstream", UNIT_TESTS(
        test_file_header_round_trips_in_any_piece_size,
        test_long_name_uses_pax_and_reads_back,
        test_file_header_refuses_bad_names_and_modes,
        test_large_size_is_base256,
        test_gnu_long_name_and_dot_slash,
        test_reader_refuses_bad_checksum_numbers_and_truncation,
        test_callback_stops_the_reader,
        test_list_keeps_direct_children_only,
        test_list_truncates_and_lists_a_file_itself,
        test_path_clean_stays_inside_the_root,
        test_sparse_members_of_every_gnu_tar_dialect_are_seen,
        test_header_only_entries_with_content_are_refused,
        test_headers_readers_disagree_on_are_refused,
        test_judged_bytes_cover_accepted_entries_only,
        test_gate_hands_on_accepted_entries_and_nothing_of_a_refused_one,
        test_name_under_keeps_members_below_the_top,
    ));
    return s;
}
