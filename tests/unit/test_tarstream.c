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
    ));
    return s;
}
