/* sandbox cp's unpacking of a download (client/untar.h) on a real temporary
 * directory, fed hostile archives as a guest could make them: members
 * beside the copy, "..", absolute names, a symlink planted in the folder or
 * made by the archive and then written through, devices and FIFOs, hard
 * links to files the copy did not write, setuid bits, sparse members. */
#include "check_util.h"
#include "tarstream.h"
#include "untar.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The test's folders: dest (where the copy is made) and outside (what a
 * hostile archive aims at), under one temporary directory. */
static char base[256], dest[300], outside[300];
static int dest_fd = -1;

static void setup(void)
{
    snprintf(base, sizeof base, "%s/untar-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(base));
    snprintf(dest, sizeof dest, "%s/dest", base);
    snprintf(outside, sizeof outside, "%s/outside", base);
    ck_assert_int_eq(mkdir(dest, 0755), 0);
    ck_assert_int_eq(mkdir(outside, 0755), 0);
    dest_fd = open(dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ck_assert_int_ge(dest_fd, 0);
}

static void teardown(void)
{
    close(dest_fd);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "chmod -R u+rwx '%s' 2>/dev/null; rm -rf '%s'", base, base);
    ck_assert_int_eq(system(cmd), 0);
}

/* An archive being built. */
typedef struct tarb {
    char buf[1 << 16];
    size_t len;
} tarb_t;

/* Appends a member: type, name, link target, mode, mtime and content. */
static void add(tarb_t *t, const char *name, char type, const char *link, unsigned mode, const char *content)
{
    unsigned char *h = (unsigned char *)t->buf + t->len;
    size_t n = content ? strlen(content) : 0;
    ck_assert_int_eq(tarstream_file_header("x", (int64_t)n, mode, 1000000000, h), TARSTREAM_BLOCK);
    memset(h, 0, 100);
    memcpy(h, name, strlen(name));
    h[156] = (unsigned char)type;
    memcpy(h + 157, link, strlen(link));
    tarstream_checksum(h);
    t->len += TARSTREAM_BLOCK;
    memset(t->buf + t->len, 0, n + tarstream_padding((int64_t)n));
    memcpy(t->buf + t->len, content ? content : "", n);
    t->len += n + tarstream_padding((int64_t)n);
}

static void end(tarb_t *t)
{
    memset(t->buf + t->len, 0, 1024);
    t->len += 1024;
}

/* Unpacks t (from "top" to "copy") in pieces of step; the result of the
 * push or the finish, the error in err, warnings in warn (may be NULL). */
static int unpack(const tarb_t *t, size_t step, char *err, size_t errlen, char *warn, size_t warnlen)
{
    char *wbuf = NULL;
    size_t wlen = 0;
    FILE *w = open_memstream(&wbuf, &wlen);
    untar_opts_t o = { .dir_fd = dest_fd, .from = "top", .to = "copy", .warn = w };
    untar_t *u = NULL;
    ck_assert_int_eq(untar_new(&o, &u), 0);
    int r = 0;
    for (size_t off = 0; off < t->len && r == 0; off += step)
        r = untar_push(u, t->buf + off, t->len - off < step ? t->len - off : step);
    if (r == 0)
        r = untar_finish(u);
    snprintf(err, errlen, "%s", untar_error(u));
    untar_free(u);
    fclose(w);
    if (warn)
        snprintf(warn, warnlen, "%s", wbuf ? wbuf : "");
    free(wbuf);
    return r;
}

static char *path_in(const char *dir, const char *rel)
{
    static char p[4][600];
    static int i;
    i = (i + 1) % 4;
    snprintf(p[i], sizeof p[i], "%s/%s", dir, rel);
    return p[i];
}

static bool exists(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0;
}

static void read_file(const char *p, char *out, size_t n)
{
    FILE *f = fopen(p, "r");
    ck_assert_msg(f != NULL, "cannot open %s", p);
    size_t k = fread(out, 1, n - 1, f);
    out[k] = '\0';
    fclose(f);
}

static void write_file(const char *p, const char *content)
{
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs(content, f);
    fclose(f);
}

/* Names in dir other than "." and "..", in one string. */
static void listing(const char *dir, char *out, size_t n)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    out[0] = '\0';
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            snprintf(out + strlen(out), n - strlen(out), "%.100s ", e->d_name);
    closedir(d);
}

START_TEST(test_a_tree_is_copied_with_modes_mtimes_and_links)
{
    static tarb_t t;
    t.len = 0;
    add(&t, "top/", '5', "", 0750, NULL);
    add(&t, "top/a.txt", '0', "", 0640, "alpha");
    add(&t, "top/ro/", '5', "", 0555, NULL);
    add(&t, "top/ro/inside", '0', "", 0600, "in a 0555 directory");
    add(&t, "top/link", '2', "a.txt", 0777, NULL);
    add(&t, "top/abs", '2', "/etc/passwd", 0777, NULL);   /* a symlink is data: made, never followed */
    add(&t, "top/hard", '1', "top/a.txt", 0640, NULL);
    add(&t, "top/empty", '0', "", 0644, "");
    end(&t);
    const size_t steps[] = { 1, 511, 512, 100000 };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        char err[600], buf[100];
        if (i > 0) {
            teardown();
            setup();
        }
        ck_assert_msg(unpack(&t, steps[i], err, sizeof err, NULL, 0) == 0, "step %zu: %s", steps[i], err);
        struct stat st, st2;
        ck_assert_int_eq(stat(path_in(dest, "copy"), &st), 0);
        ck_assert_uint_eq(st.st_mode & 07777, 0750);
        ck_assert_int_eq(st.st_mtime, 1000000000);
        read_file(path_in(dest, "copy/a.txt"), buf, sizeof buf);
        ck_assert_str_eq(buf, "alpha");
        ck_assert_int_eq(stat(path_in(dest, "copy/a.txt"), &st), 0);
        ck_assert_uint_eq(st.st_mode & 07777, 0640);
        ck_assert_int_eq(st.st_mtime, 1000000000);
        read_file(path_in(dest, "copy/ro/inside"), buf, sizeof buf);
        ck_assert_str_eq(buf, "in a 0555 directory");
        ck_assert_int_eq(stat(path_in(dest, "copy/ro"), &st), 0);
        ck_assert_uint_eq(st.st_mode & 07777, 0555);
        ck_assert_int_eq(readlink(path_in(dest, "copy/link"), buf, sizeof buf), 5);
        ck_assert_int_eq(readlink(path_in(dest, "copy/abs"), buf, sizeof buf), 11);
        ck_assert_int_eq(stat(path_in(dest, "copy/hard"), &st2), 0);
        ck_assert_int_eq(stat(path_in(dest, "copy/a.txt"), &st), 0);
        ck_assert_int_eq(st.st_ino, st2.st_ino);
        ck_assert_int_eq(stat(path_in(dest, "copy/empty"), &st), 0);
        ck_assert_int_eq(st.st_size, 0);
    }
}
END_TEST

/* Owners are never set and setuid, setgid and sticky bits never kept. */
START_TEST(test_setuid_setgid_and_sticky_bits_are_dropped)
{
    static tarb_t t;
    t.len = 0;
    add(&t, "top/", '5', "", 01777, NULL);
    add(&t, "top/suid", '0', "", 04755, "#!/bin/sh\n");
    add(&t, "top/sgid", '0', "", 02755, "#!/bin/sh\n");
    add(&t, "top/sgdir/", '5', "", 02775, NULL);
    end(&t);
    char err[600];
    ck_assert_msg(unpack(&t, 300, err, sizeof err, NULL, 0) == 0, "%s", err);
    struct stat st;
    ck_assert_int_eq(stat(path_in(dest, "copy"), &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0777);
    ck_assert_int_eq(stat(path_in(dest, "copy/suid"), &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0755);
    ck_assert_uint_eq(st.st_uid, getuid());
    ck_assert_int_eq(stat(path_in(dest, "copy/sgid"), &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0755);
    ck_assert_int_eq(stat(path_in(dest, "copy/sgdir"), &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0775);
}
END_TEST

START_TEST(test_members_outside_the_copy_are_refused)
{
    static const struct {
        const char *name, *want;
    } bad[] = {
        { "beside", "refused member beside: it is not the copied path's own name or below it" },
        { "topx/f", "refused member topx/f: it is not the copied path's own name" },
        { "top/../escaped", "refused member top/../escaped: it has a '.' or '..' component" },
        { "../escaped", "refused member ../escaped: it has a '.' or '..' component" },
        { "/tmp/escaped", "refused member /tmp/escaped: it has an absolute name" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        static tarb_t t;
        t.len = 0;
        add(&t, "top/", '5', "", 0755, NULL);
        add(&t, bad[i].name, '0', "", 0644, "evil");
        end(&t);
        char err[600], names[200];
        ck_assert_int_lt(unpack(&t, 700, err, sizeof err, NULL, 0), 0);
        ck_assert_msg(strstr(err, bad[i].want) != NULL, "%s: [%s]", bad[i].name, err);
        listing(dest, names, sizeof names);
        ck_assert_str_eq(names, "copy ");
        ck_assert(!exists(path_in(base, "escaped")));
        ck_assert(!exists(path_in(dest, "beside")));
    }
}
END_TEST

/* A symlink in the user's folder (or one the archive made) is never gone
 * through, and never written through. */
START_TEST(test_symlinks_in_the_folder_are_not_followed)
{
    static tarb_t t;
    char err[600], buf[100];
    /* copy/ exists with a symlink "sub" to outside; the archive writes top/sub/evil */
    ck_assert_int_eq(mkdir(path_in(dest, "copy"), 0755), 0);
    ck_assert_int_eq(symlink(outside, path_in(dest, "copy/sub")), 0);
    t.len = 0;
    add(&t, "top/", '5', "", 0755, NULL);
    add(&t, "top/sub/evil", '0', "", 0644, "evil");
    end(&t);
    ck_assert_int_lt(unpack(&t, 512, err, sizeof err, NULL, 0), 0);
    ck_assert_msg(strstr(err, "refused member top/sub/evil: it would go through the symlink sub") != NULL, "[%s]",
                  err);
    ck_assert(!exists(path_in(outside, "evil")));
    /* ... and where it needs sub to be a directory */
    t.len = 0;
    add(&t, "top/sub/", '5', "", 0755, NULL);
    end(&t);
    ck_assert_int_lt(unpack(&t, 512, err, sizeof err, NULL, 0), 0);
    ck_assert_msg(strstr(err, "a symlink of that name is where the copy needs a directory") != NULL, "[%s]", err);
    /* a symlink the archive made, then a file through it */
    t.len = 0;
    add(&t, "top/", '5', "", 0755, NULL);
    add(&t, "top/made", '2', outside, 0777, NULL);
    add(&t, "top/made/evil2", '0', "", 0644, "evil");
    end(&t);
    ck_assert_int_lt(unpack(&t, 100, err, sizeof err, NULL, 0), 0);
    ck_assert_msg(strstr(err, "would go through the symlink made") != NULL, "[%s]", err);
    ck_assert(!exists(path_in(outside, "evil2")));
    /* the copy's own name is a symlink to a directory: not gone into */
    teardown();
    setup();
    ck_assert_int_eq(symlink(outside, path_in(dest, "copy")), 0);
    t.len = 0;
    add(&t, "top/", '5', "", 0755, NULL);
    add(&t, "top/evil3", '0', "", 0644, "evil");
    end(&t);
    ck_assert_int_lt(unpack(&t, 512, err, sizeof err, NULL, 0), 0);
    ck_assert(!exists(path_in(outside, "evil3")));
    /* a file where a symlink to a file outside is: the symlink is replaced,
     * the file it pointed at is untouched */
    teardown();
    setup();
    write_file(path_in(outside, "target"), "keep");
    ck_assert_int_eq(mkdir(path_in(dest, "copy"), 0755), 0);
    ck_assert_int_eq(symlink(path_in(outside, "target"), path_in(dest, "copy/f")), 0);
    /* and a hard link of a file outside: replaced, not written through */
    write_file(path_in(outside, "target2"), "keep2");
    ck_assert_int_eq(link(path_in(outside, "target2"), path_in(dest, "copy/g")), 0);
    t.len = 0;
    add(&t, "top/", '5', "", 0755, NULL);
    add(&t, "top/f", '0', "", 0644, "new");
    add(&t, "top/g", '0', "", 0644, "new2");
    end(&t);
    ck_assert_msg(unpack(&t, 512, err, sizeof err, NULL, 0) == 0, "%s", err);
    read_file(path_in(outside, "target"), buf, sizeof buf);
    ck_assert_str_eq(buf, "keep");
    read_file(path_in(outside, "target2"), buf, sizeof buf);
    ck_assert_str_eq(buf, "keep2");
    read_file(path_in(dest, "copy/f"), buf, sizeof buf);
    ck_assert_str_eq(buf, "new");
    struct stat st;
    ck_assert_int_eq(lstat(path_in(dest, "copy/f"), &st), 0);
    ck_assert(S_ISREG(st.st_mode));
    read_file(path_in(dest, "copy/g"), buf, sizeof buf);
    ck_assert_str_eq(buf, "new2");
}
END_TEST

START_TEST(test_devices_and_fifos_are_skipped_with_a_warning)
{
    static tarb_t t;
    t.len = 0;
    add(&t, "top/", '5', "", 0755, NULL);
    add(&t, "top/tty", '3', "", 0666, NULL);
    add(&t, "top/sda", '4', "", 0660, NULL);
    for (int i = 0; i < 10; i++) {
        char name[32];
        snprintf(name, sizeof name, "top/fifo%d", i);
        add(&t, name, '6', "", 0644, NULL);
    }
    add(&t, "top/after", '0', "", 0644, "still here");
    end(&t);
    char err[600], warn[4096];
    ck_assert_msg(unpack(&t, 512, err, sizeof err, warn, sizeof warn) == 0, "%s", err);
    ck_assert_ptr_nonnull(strstr(warn, "sandbox: cp: skipped top/tty: a character device (devices and FIFOs are not "
                                       "copied)\n"));
    ck_assert_ptr_nonnull(strstr(warn, "sandbox: cp: skipped top/sda: a block device"));
    ck_assert_ptr_nonnull(strstr(warn, "sandbox: cp: skipped top/fifo7: a FIFO"));
    ck_assert_ptr_null(strstr(warn, "fifo8"));
    ck_assert_ptr_nonnull(strstr(warn, "sandbox: cp: skipped 2 more devices and FIFOs\n"));
    ck_assert(!exists(path_in(dest, "copy/tty")));
    ck_assert(!exists(path_in(dest, "copy/fifo0")));
    ck_assert(exists(path_in(dest, "copy/after")));
}
END_TEST

START_TEST(test_hard_links_only_to_files_this_copy_wrote)
{
    static tarb_t t;
    char err[600];
    /* to a file outside */
    t.len = 0;
    add(&t, "top/", '5', "", 0755, NULL);
    add(&t, "top/h", '1', "/etc/passwd", 0644, NULL);
    end(&t);
    ck_assert_int_lt(unpack(&t, 512, err, sizeof err, NULL, 0), 0);
    ck_assert_msg(strstr(err, "refused member top/h: a hard link to /etc/passwd, outside the copy") != NULL, "[%s]",
                  err);
    t.len = 0;
    add(&t, "top/", '5', "", 0755, NULL);
    add(&t, "top/h", '1', "top/../../outside/x", 0644, NULL);
    end(&t);
    ck_assert_int_lt(unpack(&t, 512, err, sizeof err, NULL, 0), 0);
    ck_assert_ptr_nonnull(strstr(err, "outside the copy"));
    /* to a file that was in the folder before (the user's) */
    write_file(path_in(dest, "copy/users"), "mine");
    t.len = 0;
    add(&t, "top/", '5', "", 0755, NULL);
    add(&t, "top/h", '1', "top/users", 0644, NULL);
    end(&t);
    ck_assert_int_lt(unpack(&t, 512, err, sizeof err, NULL, 0), 0);
    ck_assert_msg(strstr(err, "a hard link to top/users, which is not a file this copy wrote") != NULL, "[%s]", err);
    /* to a symlink the archive made (which points outside) */
    t.len = 0;
    add(&t, "top/", '5', "", 0755, NULL);
    add(&t, "top/s", '2', path_in(outside, "x"), 0777, NULL);
    add(&t, "top/h2", '1', "top/s", 0644, NULL);
    end(&t);
    ck_assert_int_lt(unpack(&t, 512, err, sizeof err, NULL, 0), 0);
    ck_assert_ptr_nonnull(strstr(err, "not a file this copy wrote"));
    ck_assert(!exists(path_in(dest, "copy/h2")));
}
END_TEST

START_TEST(test_sparse_members_are_refused)
{
    char path[512];
    snprintf(path, sizeof path, "%s/sparse-pax10.tar", UNIT_DATA_DIR);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    static tarb_t t;
    t.len = fread(t.buf, 1, sizeof t.buf, f);
    fclose(f);
    untar_opts_t o = { .dir_fd = dest_fd, .from = "big.img", .to = "big.img" };
    untar_t *u = NULL;
    ck_assert_int_eq(untar_new(&o, &u), 0);
    ck_assert_int_lt(untar_push(u, t.buf, t.len), 0);
    ck_assert_str_eq(untar_error(u), "refused member big.img: a sparse file (PAX 1.0, 6442450944 bytes once "
                                     "unpacked)");
    untar_free(u);
    ck_assert(!exists(path_in(dest, "big.img")));
}
END_TEST

START_TEST(test_malformed_and_empty_archives_fail)
{
    static tarb_t t;
    char err[600];
    t.len = 0;
    add(&t, "top", '0', "", 0644, "a file cut short");
    t.len -= 500;
    ck_assert_int_lt(unpack(&t, 512, err, sizeof err, NULL, 0), 0);
    ck_assert_msg(strstr(err, "the archive is malformed") != NULL, "[%s]", err);
    t.len = 0;
    end(&t);
    ck_assert_int_lt(unpack(&t, 512, err, sizeof err, NULL, 0), 0);
    ck_assert_str_eq(err, "the archive holds nothing to copy");
    untar_opts_t o = { .dir_fd = dest_fd, .from = "..", .to = "x" };
    untar_t *u = NULL;
    ck_assert_int_eq(untar_new(&o, &u), SBX_EINVAL);
    o.from = "a/b";
    ck_assert_int_eq(untar_new(&o, &u), SBX_EINVAL);
    o.from = "a";
    o.to = "";
    ck_assert_int_eq(untar_new(&o, &u), SBX_EINVAL);
    /* a single file as the top, copied onto another name */
    t.len = 0;
    add(&t, "top", '0', "", 0700, "single");
    end(&t);
    ck_assert_msg(unpack(&t, 512, err, sizeof err, NULL, 0) == 0, "%s", err);
    char buf[32];
    read_file(path_in(dest, "copy"), buf, sizeof buf);
    ck_assert_str_eq(buf, "single");
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("untar");
    TCase *tc = unit_tcase_add(s, "untar", UNIT_TESTS(
        test_a_tree_is_copied_with_modes_mtimes_and_links,
        test_setuid_setgid_and_sticky_bits_are_dropped,
        test_members_outside_the_copy_are_refused,
        test_symlinks_in_the_folder_are_not_followed,
        test_devices_and_fifos_are_skipped_with_a_warning,
        test_hard_links_only_to_files_this_copy_wrote,
        test_sparse_members_are_refused,
        test_malformed_and_empty_archives_fail,
    ));
    tcase_add_checked_fixture(tc, setup, teardown);
    return s;
}
