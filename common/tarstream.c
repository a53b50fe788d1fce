/* Tar streams piece by piece (see tarstream.h). */
#include "tarstream.h"
#include "errors.h"
#include "utf8.h"

#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ustar header fields: offset and length (POSIX.1-1988). */
#define TS_NAME_OFF     0
#define TS_NAME_LEN     100
#define TS_MODE_OFF     100
#define TS_UID_OFF      108
#define TS_GID_OFF      116
#define TS_SIZE_OFF     124
#define TS_SIZE_LEN     12
#define TS_MTIME_OFF    136
#define TS_MTIME_LEN    12
#define TS_CHKSUM_OFF   148
#define TS_CHKSUM_LEN   8
#define TS_TYPE_OFF     156
#define TS_LINK_OFF     157
#define TS_LINK_LEN     100
#define TS_MAGIC_OFF    257
#define TS_VERSION_OFF  263
#define TS_UNAME_OFF    265
#define TS_GNAME_OFF    297
#define TS_PREFIX_OFF   345
#define TS_PREFIX_LEN   155
/* The largest value 11 octal digits hold; beyond it base-256 (GNU). */
#define TS_OCTAL11_MAX  077777777777LL

/* ---- writing ----------------------------------------------------------- */

static void ts_octal(unsigned char *f, size_t len, int64_t v)
{
    char tmp[24];
    snprintf(tmp, sizeof tmp, "%0*llo", (int)(len - 1), (unsigned long long)v);
    memcpy(f, tmp, len - 1);
    f[len - 1] = '\0';
}

/* A size field: octal when it fits, else base-256 (the high bit set). */
static void ts_size_field(unsigned char *f, int64_t v)
{
    if (v <= TS_OCTAL11_MAX) {
        ts_octal(f, TS_SIZE_LEN, v);
        return;
    }
    memset(f, 0, TS_SIZE_LEN);
    for (int i = TS_SIZE_LEN - 1; i > 0 && v > 0; i--, v >>= 8)
        f[i] = (unsigned char)(v & 0xff);
    f[0] = 0x80;
}

void tarstream_checksum(unsigned char h[TARSTREAM_BLOCK])
{
    memset(h + TS_CHKSUM_OFF, ' ', TS_CHKSUM_LEN);
    unsigned sum = 0;
    for (size_t i = 0; i < TARSTREAM_BLOCK; i++)
        sum += h[i];
    char chk[TS_CHKSUM_LEN + 1];
    snprintf(chk, sizeof chk, "%06o", sum & 0777777u);
    memcpy(h + TS_CHKSUM_OFF, chk, 6);
    h[TS_CHKSUM_OFF + 6] = '\0';
    h[TS_CHKSUM_OFF + 7] = ' ';
}

/* A ustar block of type with name (at most 100 bytes) and size. */
static void ts_block(unsigned char *h, const char *name, size_t nlen, char type, int64_t size, unsigned mode,
                     int64_t mtime)
{
    memset(h, 0, TARSTREAM_BLOCK);
    memcpy(h + TS_NAME_OFF, name, nlen);
    ts_octal(h + TS_MODE_OFF, 8, mode & 07777u);
    ts_octal(h + TS_UID_OFF, 8, 0);
    ts_octal(h + TS_GID_OFF, 8, 0);
    ts_size_field(h + TS_SIZE_OFF, size);
    ts_octal(h + TS_MTIME_OFF, TS_MTIME_LEN, mtime < 0 ? 0 : mtime);
    h[TS_TYPE_OFF] = type;
    memcpy(h + TS_MAGIC_OFF, "ustar", 6);
    memcpy(h + TS_VERSION_OFF, "00", 2);
    memcpy(h + TS_UNAME_OFF, "root", 4);
    memcpy(h + TS_GNAME_OFF, "root", 4);
    tarstream_checksum(h);
}

/* Components of 1.. bytes separated by single '/', none "." or "..", no
 * control bytes; at most one component unless several is set. */
static bool ts_rel_name_ok(const char *name, size_t n, bool several)
{
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && ((unsigned char)name[i] < 0x20 || name[i] == 0x7f))
            return false;
        if (i < n && name[i] != '/')
            continue;
        size_t cl = i - start;
        if (cl == 0 || (cl == 1 && name[start] == '.') || (cl == 2 && name[start] == '.' && name[start + 1] == '.'))
            return false;
        if (i < n && !several)
            return false;
        start = i + 1;
    }
    return true;
}

static int ts_file_header(const char *name, bool several, int64_t size, unsigned mode, int64_t mtime,
                          unsigned char out[TARSTREAM_HEADER_MAX])
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > TARSTREAM_NAME_MAX || !ts_rel_name_ok(name, n, several) || size < 0 || mode > 07777u ||
        mtime > TS_OCTAL11_MAX)
        return SBX_EINVAL;
    if (n <= TS_NAME_LEN) {
        ts_block(out, name, n, '0', size, mode, mtime);
        return TARSTREAM_BLOCK;
    }
    /* A PAX record "<len> path=<name>\n", its length counting itself. */
    char rec[TARSTREAM_BLOCK];
    size_t body = strlen(" path=") + n + 1, len = body + 1;
    while (len < body + (size_t)snprintf(NULL, 0, "%zu", len))
        len++;
    int w = snprintf(rec, sizeof rec, "%zu path=%s\n", len, name);
    if (w < 0 || (size_t)w != len)
        return SBX_EINVAL;
    ts_block(out, "PaxHeader", 9, 'x', (int64_t)len, 0644, mtime);
    memset(out + TARSTREAM_BLOCK, 0, TARSTREAM_BLOCK);
    memcpy(out + TARSTREAM_BLOCK, rec, len);
    ts_block(out + 2 * TARSTREAM_BLOCK, name, TS_NAME_LEN, '0', size, mode, mtime);
    return 3 * TARSTREAM_BLOCK;
}

int tarstream_file_header(const char *name, int64_t size, unsigned mode, int64_t mtime,
                          unsigned char out[TARSTREAM_HEADER_MAX])
{
    return ts_file_header(name, false, size, mode, mtime, out);
}

int tarstream_file_header_rel(const char *name, int64_t size, unsigned mode, int64_t mtime,
                              unsigned char out[TARSTREAM_HEADER_MAX])
{
    return ts_file_header(name, true, size, mode, mtime, out);
}

size_t tarstream_padding(int64_t size)
{
    size_t r = (size_t)(size % TARSTREAM_BLOCK);
    return r ? TARSTREAM_BLOCK - r : 0;
}

/* ---- reading ----------------------------------------------------------- */

/* GNU ('ustar  ') header fields of an 'S' entry, and the flag of an
 * extension block that says another one follows. */
#define TS_GNU_ISEXT_OFF     482
#define TS_GNU_REALSIZE_OFF  483
#define TS_GNU_EXT_ISEXT_OFF 504
/* star's ustar variant: a 131-byte prefix and "tar\0" at the end. */
#define TS_STAR_PREFIX_LEN   131
#define TS_STAR_TRAILER_OFF  508

const char *tarstream_kind(char type)
{
    switch (type) {
    case '0': case '\0': case '7': return "file";
    case '5': return "dir";
    case '2': return "symlink";
    default: return "other";
    }
}

/* Types whose entries carry no content, whatever their size field says
 * (Go's archive/tar skips none for them). */
static bool ts_header_only(char type)
{
    return type == '1' || type == '2' || type == '3' || type == '4' || type == '5' || type == '6';
}

int tarstream_init(tarstream_t *t, tarstream_entry_fn on_entry, tarstream_data_fn on_data, void *ud)
{
    memset(t, 0, sizeof *t);
    t->meta = malloc(TARSTREAM_META_MAX);
    t->pending_name = malloc(SBX_FILES_PATH_MAX + 1);
    t->pending_link = malloc(SBX_FILES_PATH_MAX + 1);
    t->on_entry = on_entry;
    t->on_data = on_data;
    t->ud = ud;
    if (!t->meta || !t->pending_name || !t->pending_link) {
        tarstream_release(t);
        return SBX_ENOMEM;
    }
    return 0;
}

void tarstream_release(tarstream_t *t)
{
    free(t->meta);
    free(t->pending_name);
    free(t->pending_link);
    t->meta = t->pending_name = t->pending_link = NULL;
}

static int ts_fail(tarstream_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int ts_fail(tarstream_t *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->error, sizeof t->error, fmt, ap);
    va_end(ap);
    return SBX_EINVAL;
}

/* A numeric field: octal digits with leading spaces and a NUL/space end, or
 * base-256 with the high bit set (non-negative only). */
static int ts_number(const unsigned char *f, size_t len, int64_t *ret)
{
    int64_t v = 0;
    if (f[0] & 0x80) {
        if (f[0] != 0x80)
            return SBX_EINVAL;  /* negative, or too large for 63 bits */
        for (size_t i = 1; i < len; i++) {
            if (v > (INT64_MAX >> 8))
                return SBX_EINVAL;
            v = (v << 8) | f[i];
        }
        *ret = v;
        return 0;
    }
    size_t i = 0;
    while (i < len && f[i] == ' ')
        i++;
    bool digits = false;
    for (; i < len && f[i] >= '0' && f[i] <= '7'; i++) {
        if (v > (INT64_MAX >> 3))
            return SBX_EINVAL;
        v = v * 8 + (f[i] - '0');
        digits = true;
    }
    for (; i < len; i++)
        if (f[i] != ' ' && f[i] != '\0')
            return SBX_EINVAL;
    *ret = digits ? v : 0;
    return 0;
}

static bool ts_checksum_ok(const unsigned char *h)
{
    int64_t want = 0;
    if (ts_number(h + TS_CHKSUM_OFF, TS_CHKSUM_LEN, &want) < 0)
        return false;
    unsigned long u = 0;
    long s = 0;
    for (size_t i = 0; i < TARSTREAM_BLOCK; i++) {
        unsigned char c = i >= TS_CHKSUM_OFF && i < TS_CHKSUM_OFF + TS_CHKSUM_LEN ? ' ' : h[i];
        u += c;
        s += (signed char)c;
    }
    return (int64_t)u == want || (int64_t)s == want;
}

/* Copies a NUL-padded field into out (SBX_FILES_PATH_MAX + 1). */
static void ts_str(const unsigned char *f, size_t len, char *out)
{
    size_t n = 0;
    while (n < len && f[n])
        n++;
    memcpy(out, f, n);
    out[n] = '\0';
}

/* A PAX decimal of vlen bytes (a fraction after '.' when frac). */
static bool ts_decimal(const char *v, size_t vlen, bool frac, int64_t *ret)
{
    int64_t n = 0;
    size_t j = 0;
    for (; j < vlen && v[j] >= '0' && v[j] <= '9'; j++) {
        if (n > INT64_MAX / 10 - 10)
            return false;
        n = n * 10 + (v[j] - '0');
    }
    if (j == 0 || (j < vlen && !(frac && v[j] == '.')))
        return false;
    *ret = n;
    return true;
}

static bool ts_key(const char *k, size_t klen, const char *want)
{
    return klen == strlen(want) && memcmp(k, want, klen) == 0;
}

/* The records of a PAX 'x' header (t->meta): path, linkpath, size and mtime
 * are kept for the next entry, and any GNU.sparse.* record makes it a
 * sparse one (GNU.sparse.name its name, GNU.sparse.size or .realsize its
 * size once unpacked); the rest is ignored. */
static int ts_pax(tarstream_t *t)
{
    size_t off = 0;
    bool sparse = false, major1 = false, map = false, blocks = false;
    while (off < t->meta_len) {
        size_t len = 0, i = off;
        while (i < t->meta_len && t->meta[i] >= '0' && t->meta[i] <= '9' && len < TARSTREAM_META_MAX)
            len = len * 10 + (size_t)(t->meta[i++] - '0');
        if (i == off || i >= t->meta_len || t->meta[i] != ' ' || len <= i - off + 1 || len > t->meta_len - off ||
            t->meta[off + len - 1] != '\n')
            return ts_fail(t, "malformed PAX header record");
        const char *kv = t->meta + i + 1;
        size_t kvlen = off + len - 1 - (i + 1);
        const char *eq = memchr(kv, '=', kvlen);
        if (!eq)
            return ts_fail(t, "malformed PAX header record");
        size_t klen = (size_t)(eq - kv), vlen = kvlen - klen - 1;
        const char *v = eq + 1;
        bool is_sname = ts_key(kv, klen, "GNU.sparse.name");
        if (ts_key(kv, klen, "path") || ts_key(kv, klen, "linkpath") || is_sname) {
            bool is_link = ts_key(kv, klen, "linkpath");
            if (vlen > SBX_FILES_PATH_MAX || memchr(v, '\0', vlen))
                return ts_fail(t, "a member name in the archive is too long");
            if (!is_link && t->sparse_name && !is_sname) {
                off += len;       /* GNU.sparse.name stands over path */
                continue;
            }
            char *dst = is_link ? t->pending_link : t->pending_name;
            memcpy(dst, v, vlen);
            dst[vlen] = '\0';
            if (is_link) {
                t->next_link = t->pax_linkpath = true;
            } else {
                t->next_name = t->pax_path = true;
                t->sparse_name |= is_sname;
            }
        } else if (ts_key(kv, klen, "size") || ts_key(kv, klen, "mtime")) {
            bool is_size = klen == 4;
            int64_t n = 0;
            if (!ts_decimal(v, vlen, !is_size, &n))
                return ts_fail(t, "malformed PAX number");
            if (is_size) {
                t->pending_size = n;
                t->next_size = true;
            } else {
                t->pending_mtime = n;
                t->next_mtime = true;
            }
        } else if (ts_key(kv, klen, "GNU.sparse.size") || ts_key(kv, klen, "GNU.sparse.realsize")) {
            int64_t n = 0;
            if (!ts_decimal(v, vlen, false, &n))
                return ts_fail(t, "malformed PAX number");
            t->pending_realsize = n;
            t->next_realsize = true;
        }
        if (klen >= 11 && memcmp(kv, "GNU.sparse.", 11) == 0) {
            sparse = true;
            major1 |= ts_key(kv, klen, "GNU.sparse.major") && vlen == 1 && v[0] == '1';
            map |= ts_key(kv, klen, "GNU.sparse.map");
            blocks |= ts_key(kv, klen, "GNU.sparse.offset") || ts_key(kv, klen, "GNU.sparse.numbytes");
        }
        off += len;
    }
    if (sparse)
        t->next_sparse = major1 ? TARSTREAM_SPARSE_PAX10 : map ? TARSTREAM_SPARSE_PAX01
                                                             : blocks ? TARSTREAM_SPARSE_PAX00 : TARSTREAM_SPARSE_PAX;
    return 0;
}

/* A meta entry's content is complete. */
static int ts_meta_done(tarstream_t *t)
{
    if (t->meta_type == 'x')
        return ts_pax(t);
    if (t->meta_type == 'L' || t->meta_type == 'K') {
        size_t n = t->meta_len;
        while (n > 0 && t->meta[n - 1] == '\0')
            n--;
        if (n > SBX_FILES_PATH_MAX || memchr(t->meta, '\0', n))
            return ts_fail(t, "a member name in the archive is too long or holds a NUL");
        char *dst = t->meta_type == 'L' ? t->pending_name : t->pending_link;
        memcpy(dst, t->meta, n);
        dst[n] = '\0';
        if (t->meta_type == 'L')
            t->next_name = true;
        else
            t->next_link = true;
    }
    return 0;  /* 'g': global records, ignored (as Docker's untar does) */
}

static bool ts_zero_block(const unsigned char *b)
{
    for (size_t i = 0; i < TARSTREAM_BLOCK; i++)
        if (b[i])
            return false;
    return true;
}

/* After an entry's content (or a meta entry's): its padding, or the next
 * header. A complete PAX 'g' header, or an accepted entry's content, is
 * judged once its padding is. */
static void ts_after_content(tarstream_t *t)
{
    t->state = t->pad > 0 ? TARSTREAM_PAD : TARSTREAM_HEADER;
    t->block_len = 0;
    if (t->pad == 0 && t->meta_type == 'g') {
        t->prefix = 0;
        t->meta_type = 0;
    }
    if (t->pad == 0 && t->prefix == 0)
        t->judged = t->offset;
}

/* The next entry's name: a GNU long name or PAX path, else the header's
 * (the ustar prefix only in POSIX ustar headers, as Go and GNU tar read
 * them), a leading "./" removed. */
static void ts_entry_name(tarstream_t *t, const unsigned char *h, char *out)
{
    char name[SBX_FILES_PATH_MAX + 1];
    if (t->next_name) {
        snprintf(name, sizeof name, "%s", t->pending_name);
    } else {
        char base[TS_NAME_LEN + 1], prefix[TS_PREFIX_LEN + 1] = "";
        ts_str(h + TS_NAME_OFF, TS_NAME_LEN, base);
        if (memcmp(h + TS_MAGIC_OFF, "ustar\0" "00", 8) == 0) {
            bool star = memcmp(h + TS_STAR_TRAILER_OFF, "tar\0", 4) == 0;
            ts_str(h + TS_PREFIX_OFF, star ? TS_STAR_PREFIX_LEN : TS_PREFIX_LEN, prefix);
        }
        snprintf(name, sizeof name, "%s%s%s", prefix, *prefix ? "/" : "", base);
    }
    const char *nm = name;
    while (nm[0] == '.' && nm[1] == '/')
        nm += 2;
    snprintf(out, SBX_FILES_PATH_MAX + 1, "%s", nm);
}

/* A meta header (PAX 'x' or 'g', GNU 'L' or 'K') of size content bytes. */
static int ts_meta_header(tarstream_t *t, char type, int64_t size)
{
    if (type == 'g' && t->prefix > 0)
        return ts_fail(t, "a PAX global header between the headers of one member");
    if ((type == 'x' && t->have_x) || (type == 'L' && t->have_l) || (type == 'K' && t->have_k))
        return ts_fail(t, "two %s headers for one member", type == 'x' ? "PAX" : "GNU long-name");
    if ((type == 'L' || type == 'K') && size > SBX_FILES_PATH_MAX + 1)
        return ts_fail(t, "a member name in the archive is too long");
    if (size > (int64_t)TARSTREAM_META_MAX)
        return ts_fail(t, "a PAX or long-name header in the archive is too large");
    t->have_x |= type == 'x';
    t->have_l |= type == 'L';
    t->have_k |= type == 'K';
    t->prefix += TARSTREAM_BLOCK + (uint64_t)size + tarstream_padding(size);
    if (t->prefix > TARSTREAM_PREFIX_MAX)
        return ts_fail(t, "the headers of one member in the archive are too large");
    t->meta_type = type;
    t->meta_len = 0;
    t->remaining = size;
    t->pad = tarstream_padding(size);
    t->state = TARSTREAM_META;
    if (size > 0)
        return 0;
    int r = ts_meta_done(t);
    ts_after_content(t);
    return r;
}

/* A complete header block. */
static int ts_header(tarstream_t *t)
{
    const unsigned char *h = t->block;
    if (ts_zero_block(h)) {
        if (t->prefix > 0)
            return ts_fail(t, "the archive ends after a member's own headers");
        if (++t->zero_blocks == 2)
            t->state = TARSTREAM_END;
        t->judged = t->offset;
        return 0;
    }
    if (t->zero_blocks)
        return ts_fail(t, "a zero block inside the archive (its end) is followed by more members");
    if (!ts_checksum_ok(h))
        return ts_fail(t, "a tar header's checksum is wrong");
    int64_t size = 0, mtime = 0, mode = 0;
    if (ts_number(h + TS_SIZE_OFF, TS_SIZE_LEN, &size) < 0 || ts_number(h + TS_MTIME_OFF, TS_MTIME_LEN, &mtime) < 0 ||
        ts_number(h + TS_MODE_OFF, 8, &mode) < 0)
        return ts_fail(t, "a tar header has a malformed number");
    char type = (char)h[TS_TYPE_OFF];
    if (type == 'x' || type == 'g' || type == 'L' || type == 'K')
        return ts_meta_header(t, type, size);
    if (t->have_l && t->pax_path)
        return ts_fail(t, "a member has both a GNU long name and a PAX path");
    if (t->have_k && t->pax_linkpath)
        return ts_fail(t, "a member has both a GNU long link name and a PAX linkpath");
    tarstream_entry_t *e = &t->entry;
    memset(e, 0, sizeof *e);
    ts_entry_name(t, h, e->name);
    if (t->next_link)
        snprintf(e->link, sizeof e->link, "%s", t->pending_link);
    else
        ts_str(h + TS_LINK_OFF, TS_LINK_LEN, e->link);
    size_t nl = strlen(e->name);
    e->type = type == '\0' && nl > 0 && e->name[nl - 1] == '/' ? '5' : type;
    e->size = t->next_size ? t->pending_size : size;
    e->mtime = t->next_mtime ? t->pending_mtime : mtime;
    e->mode = (unsigned)(mode & 07777);
    e->realsize = e->size;
    bool extended = false;
    if (type == 'S') {
        int64_t real = 0;
        if (ts_number(h + TS_GNU_REALSIZE_OFF, 12, &real) < 0)
            return ts_fail(t, "a tar header has a malformed number");
        e->sparse = true;
        e->sparse_kind = TARSTREAM_SPARSE_GNU;
        e->realsize = real;
        extended = h[TS_GNU_ISEXT_OFF] != 0;
    } else if (t->next_sparse) {
        e->sparse = true;
        e->sparse_kind = t->next_sparse;
        if (t->next_realsize)
            e->realsize = t->pending_realsize;
    }
    t->have_x = t->have_l = t->have_k = false;
    t->next_name = t->next_link = t->next_size = t->next_mtime = false;
    t->pax_path = t->pax_linkpath = t->sparse_name = t->next_realsize = false;
    t->next_sparse = NULL;
    if (e->size < 0)
        return ts_fail(t, "a tar header has a negative size");
    if (ts_header_only(e->type) && e->size != 0)
        return ts_fail(t, "member %.80s (type '%c') says it has %lld content bytes, which tar readers disagree on",
                       e->name, e->type, (long long)e->size);
    if (t->on_entry) {
        int r = t->on_entry(t->ud, e);
        if (r < 0)
            return r;
    }
    t->prefix = 0;
    t->meta_type = 0;
    t->judged = t->offset;
    t->remaining = e->size;
    t->pad = tarstream_padding(e->size);
    t->state = extended ? TARSTREAM_SPARSE_EXT : TARSTREAM_CONTENT;
    return 0;
}

int tarstream_push(tarstream_t *t, const char *data, size_t n)
{
    size_t off = 0;
    while (off < n) {
        size_t left = n - off;
        switch (t->state) {
        case TARSTREAM_END:
            t->offset += left;
            return 0;
        case TARSTREAM_HEADER:
        case TARSTREAM_SPARSE_EXT: {
            size_t k = TARSTREAM_BLOCK - t->block_len;
            if (k > left)
                k = left;
            memcpy(t->block + t->block_len, data + off, k);
            t->block_len += k;
            off += k;
            t->offset += k;
            if (t->block_len < TARSTREAM_BLOCK)
                break;
            t->block_len = 0;
            if (t->state == TARSTREAM_SPARSE_EXT) {
                if (t->block[TS_GNU_EXT_ISEXT_OFF] == 0)
                    t->state = TARSTREAM_CONTENT;
            } else {
                int r = ts_header(t);
                if (r < 0)
                    return r;
            }
            if (t->state == TARSTREAM_CONTENT && t->remaining == 0)
                ts_after_content(t);
            break;
        }
        case TARSTREAM_CONTENT:
        case TARSTREAM_META: {
            size_t k = t->remaining < (int64_t)left ? (size_t)t->remaining : left;
            if (t->state == TARSTREAM_META) {
                memcpy(t->meta + t->meta_len, data + off, k);
                t->meta_len += k;
            } else if (t->on_data && k > 0) {
                int r = t->on_data(t->ud, data + off, k);
                if (r < 0)
                    return r;
            }
            off += k;
            t->offset += k;
            t->remaining -= (int64_t)k;
            if (t->state == TARSTREAM_CONTENT)
                t->judged = t->offset;
            if (t->remaining == 0) {
                if (t->state == TARSTREAM_META) {
                    int r = ts_meta_done(t);
                    if (r < 0)
                        return r;
                }
                ts_after_content(t);
            }
            break;
        }
        case TARSTREAM_PAD: {
            size_t k = t->pad < left ? t->pad : left;
            off += k;
            t->offset += k;
            t->pad -= k;
            if (t->pad == 0) {
                t->state = TARSTREAM_HEADER;
                if (t->meta_type == 'g') {
                    t->prefix = 0;
                    t->meta_type = 0;
                }
            }
            if (t->prefix == 0)
                t->judged = t->offset;
            break;
        }
        }
    }
    return 0;
}

int tarstream_finish(tarstream_t *t)
{
    if (t->state == TARSTREAM_END || (t->state == TARSTREAM_HEADER && t->block_len == 0 && t->prefix == 0))
        return 0;
    if (t->state == TARSTREAM_HEADER && t->block_len == 0)
        return ts_fail(t, "the archive ends after a member's own headers");
    return ts_fail(t, "the archive ends inside an entry");
}

int tarstream_name_under(const char *name, const char *top, const char **ret_rest, size_t *ret_len)
{
    size_t n = strlen(name), tl = strlen(top);
    while (n > 0 && name[n - 1] == '/')
        n--;
    const char *rest = name;
    if (tl == 0) {
        while (rest < name + n && *rest == '/')
            rest++;
    } else {
        if (n < tl || memcmp(name, top, tl) != 0 || (n > tl && name[tl] != '/'))
            return SBX_EINVAL;
        rest = name + (n > tl ? tl + 1 : tl);
    }
    size_t rl = n - (size_t)(rest - name);
    for (size_t i = 0; i < rl;) {
        size_t j = i;
        while (j < rl && rest[j] != '/')
            j++;
        size_t cl = j - i;
        if (cl == 0 || (cl == 1 && rest[i] == '.') || (cl == 2 && rest[i] == '.' && rest[i + 1] == '.'))
            return SBX_EINVAL;
        i = j + 1;
    }
    *ret_rest = rest;
    *ret_len = rl;
    return 0;
}

/* ---- the gate ---------------------------------------------------------- */

int tarstream_gate_init(tarstream_gate_t *g, tarstream_entry_fn judge, void *ud)
{
    memset(g, 0, sizeof *g);
    g->buf = malloc(TARSTREAM_GATE_CAP);
    if (!g->buf || tarstream_init(&g->tar, judge, NULL, ud) < 0) {
        free(g->buf);
        g->buf = NULL;
        return SBX_ENOMEM;
    }
    return 0;
}

void tarstream_gate_release(tarstream_gate_t *g)
{
    tarstream_release(&g->tar);
    free(g->buf);
    g->buf = NULL;
}

size_t tarstream_gate_room(const tarstream_gate_t *g)
{
    return TARSTREAM_GATE_CAP - g->len;
}

int tarstream_gate_push(tarstream_gate_t *g, const char *data, size_t n)
{
    if (n > tarstream_gate_room(g))
        return ts_fail(&g->tar, "the tar gate was given more than it can hold");
    if (g->start + g->len + n > TARSTREAM_GATE_CAP) {
        memmove(g->buf, g->buf + g->start, g->len);
        g->start = 0;
    }
    memcpy(g->buf + g->start + g->len, data, n);
    g->len += n;
    int r = tarstream_push(&g->tar, data, n);
    if (r == 0 && g->tar.state == TARSTREAM_END)
        g->len = (size_t)(g->tar.judged - g->taken);  /* what follows the end blocks is dropped */
    return r;
}

const char *tarstream_gate_ready(const tarstream_gate_t *g, size_t *ret_n)
{
    uint64_t ready = g->tar.judged > g->taken ? g->tar.judged - g->taken : 0;
    *ret_n = ready < g->len ? (size_t)ready : g->len;
    return (const char *)g->buf + g->start;
}

void tarstream_gate_consume(tarstream_gate_t *g, size_t n)
{
    g->start += n;
    g->len -= n;
    g->taken += n;
    if (g->len == 0)
        g->start = 0;
}

int tarstream_gate_finish(tarstream_gate_t *g)
{
    return tarstream_finish(&g->tar);
}

/* ---- listing ----------------------------------------------------------- */

void tarstream_list_init(tarstream_list_t *l, size_t max)
{
    memset(l, 0, sizeof *l);
    l->max = max;
}

void tarstream_time_rfc3339(int64_t t, char *out, size_t outlen)
{
    time_t tt = (time_t)t;
    struct tm tm;
    if (!gmtime_r(&tt, &tm) || strftime(out, outlen, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(out, outlen, "1970-01-01T00:00:00Z");
}

/* Adds a JSON string of the n bytes (invalid UTF-8 repaired) to o as key. */
static int ts_json_str(json_object *o, const char *key, const char *s, size_t n)
{
    char *fixed = utf8_sanitize(s, n);
    if (!fixed)
        return SBX_ENOMEM;
    json_object_object_add(o, key, json_object_new_string(fixed));
    free(fixed);
    return 0;
}

int tarstream_list_add(tarstream_list_t *l, const tarstream_entry_t *e, sbuf_t *out)
{
    size_t n = strlen(e->name);
    while (n > 0 && e->name[n - 1] == '/')
        n--;
    const char *child = NULL;
    size_t clen = 0;
    if (!l->have_root) {
        memcpy(l->root, e->name, n);
        l->root[n] = '\0';
        l->have_root = true;
        l->root_is_dir = e->type == '5';
        if (l->root_is_dir)
            return 0;
        const char *slash = memrchr(l->root, '/', n);
        child = slash ? slash + 1 : l->root;
        clen = n - (size_t)(child - l->root);
    } else {
        size_t rl = strlen(l->root);
        if (!l->root_is_dir || n <= rl + 1 || memcmp(e->name, l->root, rl) != 0 || e->name[rl] != '/')
            return 0;
        child = e->name + rl + 1;
        clen = n - rl - 1;
        if (memchr(child, '/', clen))
            return 0;
    }
    if (l->count >= l->max) {
        l->truncated = true;
        return 2;
    }
    json_object *o = json_object_new_object();
    char mtime[40];
    tarstream_time_rfc3339(e->mtime, mtime, sizeof mtime);
    int r = !o ? SBX_ENOMEM : ts_json_str(o, "name", child, clen);
    if (r == 0) {
        json_object_object_add(o, "type", json_object_new_string(tarstream_kind(e->type)));
        json_object_object_add(o, "size", json_object_new_int64(e->size));
        json_object_object_add(o, "mode", json_object_new_int((int)e->mode));
        json_object_object_add(o, "mtime", json_object_new_string(mtime));
        r = ts_json_str(o, "link_target", e->link, e->type == '2' ? strlen(e->link) : 0);
    }
    if (r == 0 && l->count > 0)
        r = sbuf_append(out, ",", 1);
    if (r == 0) {
        const char *js = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
        r = sbuf_append(out, js, strlen(js));
    }
    json_object_put(o);
    if (r < 0)
        return SBX_ENOMEM;
    l->count++;
    return 1;
}

int tarstream_list_tail(const tarstream_list_t *l, sbuf_t *out)
{
    return sbuf_printf(out, "],\"truncated\":%s}", l->truncated ? "true" : "false") < 0 ? SBX_ENOMEM : 0;
}

/* ---- paths ------------------------------------------------------------- */

int tarstream_path_clean(const char *path, char *out)
{
    size_t n = path ? strlen(path) : 0;
    if (n == 0 || n > SBX_FILES_PATH_MAX || path[0] != '/')
        return SBX_EINVAL;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)path[i] < 0x20 || path[i] == 0x7f)
            return SBX_EINVAL;
    size_t len = 0;                 /* out holds "" for the root */
    const char *p = path;
    while (*p) {
        while (*p == '/')
            p++;
        const char *end = strchr(p, '/');
        size_t cl = end ? (size_t)(end - p) : strlen(p);
        if (cl == 0)
            break;
        if (cl == 1 && p[0] == '.') {
            /* nothing */
        } else if (cl == 2 && p[0] == '.' && p[1] == '.') {
            while (len > 0 && out[len - 1] != '/')
                len--;
            if (len > 0)
                len--;              /* the '/' before it */
        } else {
            out[len++] = '/';
            memcpy(out + len, p, cl);
            len += cl;
        }
        p += cl;
    }
    if (len == 0)
        out[len++] = '/';
    out[len] = '\0';
    return 0;
}
