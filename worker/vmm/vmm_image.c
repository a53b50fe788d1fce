/* worker/vmm's images: the distribution kernel, the initramfs (busybox, the
 * guest's modules, our agent as /init) and the ext4 base disk per image. */
#include "vmm_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errors.h"

/* The modules the guest needs (with their modules.dep dependencies):
 * microvm's virtio-mmio transport, the root disk, the agent's port, ext4 and
 * the crc32c its metadata checksums ask the crypto API for, and the NIC of a
 * VM behind the egress filter (virtio_net). */
static const char *const guest_modules[] = {
    "virtio_mmio", "virtio_blk", "virtio_console", "crc32c_generic", "ext4", "virtio_net",
};

#define MOD_MAX 64

static int slurp(const char *path, char **ret, size_t *ret_n);

int vmm_kernel_find(const vmm_config_t *cfg, char *ret_path, size_t path_cap, char *ret_release,
                    size_t release_cap, char *ret_why)
{
    char best[VMM_PATH_MAX] = "";
    if (cfg->kernel != NULL) {
        if (vmm__path(best, sizeof(best), "%s", cfg->kernel) != 0)
            return SBX_ETOOBIG;
    } else {
        DIR *d = opendir("/boot");
        struct dirent *e;
        while (d != NULL && (e = readdir(d)) != NULL) {
            /* the newest by version order */
            if (strncmp(e->d_name, "vmlinuz-", 8) == 0 &&
                (best[0] == '\0' || strverscmp(e->d_name, strrchr(best, '/') + 1) > 0))
                vmm__path(best, sizeof(best), "/boot/%s", e->d_name);
        }
        if (d != NULL)
            closedir(d);
    }
    const char *base = strrchr(best, '/');
    base = base ? base + 1 : best;
    if (best[0] == '\0' || strncmp(base, "vmlinuz-", 8) != 0 || access(best, R_OK) != 0) {
        vmm__why(ret_why, "no kernel: %s (apt-get install linux-image-amd64)",
                 best[0] ? best : "no /boot/vmlinuz-*");
        return SBX_ENOTFOUND;
    }
    char mods[VMM_PATH_MAX];
    vmm__path(mods, sizeof(mods), "/lib/modules/%s/modules.dep", base + 8);
    if (access(mods, R_OK) != 0) {
        vmm__why(ret_why, "kernel %s has no %s", best, mods);
        return SBX_ENOTFOUND;
    }
    if (vmm__path(ret_path, path_cap, "%s", best) != 0 || vmm__path(ret_release, release_cap, "%s", base + 8) != 0)
        return SBX_ETOOBIG;
    return 0;
}

/* Where a compressed payload starts in a bzImage, and the program that
 * unpacks it (Debian's kernels are xz). */
static const struct {
    const char *magic;
    size_t n;
    const char *const argv[5];
} payloads[] = {
    {"\xfd" "7zXZ\0", 6, {"xz", "-dc", "--single-stream", NULL}},
    {"\x28\xb5\x2f\xfd", 4, {"zstd", "-dcq", NULL}},
    {"\x1f\x8b\x08", 3, {"gzip", "-dcq", NULL}},
};

int vmm_kernel_boot_image(const vmm_config_t *cfg, const char *kernel, const char *release, char *ret_path,
                          size_t path_cap, char *ret_why)
{
    char cache[VMM_PATH_MAX], path[VMM_PATH_MAX], tmp[VMM_PATH_MAX];
    char *img = NULL;
    size_t n = 0;
    int rc, in = -1, out = -1;
    if ((rc = vmm__cache_dir(cfg, cache, sizeof(cache))) != 0 ||
        (rc = vmm__path(path, sizeof(path), "%s/vmlinux-%s", cache, release)) != 0)
        return rc;
    if (access(path, R_OK) == 0)
        return vmm__path(ret_path, path_cap, "%s", path);
    mkdir(cfg->state_dir, 0711);
    mkdir(cache, 0755);
    if ((rc = slurp(kernel, &img, &n)) != 0) {
        vmm__why(ret_why, "cannot read %s", kernel);
        return rc;
    }
    vmm__path(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    rc = SBX_EUNAVAIL;
    vmm__why(ret_why, "no xz, zstd or gzip payload in %s", kernel);
    for (size_t i = 0; i < sizeof(payloads) / sizeof(payloads[0]) && rc != 0; i++) {
        const char *at = memmem(img, n, payloads[i].magic, payloads[i].n);
        if (at == NULL)
            continue;
        in = open(kernel, O_RDONLY | O_CLOEXEC);
        out = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (in < 0 || out < 0 || lseek(in, at - img, SEEK_SET) < 0) {
            vmm__why(ret_why, "cannot unpack %s: %s", kernel, strerror(errno));
            rc = SBX_EIO;
            break;
        }
        /* gzip and zstd complain about the bzImage's bytes after the payload: the ELF check judges */
        vmm__run(payloads[i].argv, in, out, 120000, NULL);
        char elf[4] = {0};
        struct stat st;
        if (pread(out, elf, 4, 0) == 4 && memcmp(elf, "\x7f" "ELF", 4) == 0 && fstat(out, &st) == 0 &&
            st.st_size > (1 << 20))
            rc = 0;
        close(in);
        close(out);
        in = out = -1;
    }
    if (rc == 0 && rename(tmp, path) != 0)
        rc = SBX_EIO;
    if (rc == 0)
        rc = vmm__path(ret_path, path_cap, "%s", path);
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    unlink(tmp);
    free(img);
    return rc;
}

/* ---- modules.dep ---- */

typedef struct {
    char *dep;          /* modules.dep's text */
    char *order[MOD_MAX];
    size_t n;
} modset_t;

/* The modules.dep line of module name ("kernel/.../name.ko: deps"), or NULL. */
static char *dep_line(char *dep, const char *name, size_t *ret_len)
{
    size_t nl = strlen(name);
    for (char *line = dep; *line; ) {
        char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char *colon = memchr(line, ':', len);
        if (colon != NULL) {
            char *slash = colon;
            while (slash > line && slash[-1] != '/')
                slash--;
            /* name.ko, with '-' and '_' the same as modprobe takes them */
            size_t bl = (size_t)(colon - slash);
            if (bl == nl + 3 && memcmp(slash + nl, ".ko", 3) == 0) {
                size_t i = 0;
                for (; i < nl; i++) {
                    char a = slash[i] == '-' ? '_' : slash[i], b = name[i] == '-' ? '_' : name[i];
                    if (a != b)
                        break;
                }
                if (i == nl) {
                    *ret_len = len;
                    return line;
                }
            }
        }
        if (end == NULL)
            break;
        line = end + 1;
    }
    return NULL;
}

static int mod_add(modset_t *m, const char *path, size_t len, int depth, char *why);

/* Adds the module at path (relative, len bytes) after its dependencies. */
static int mod_resolve_path(modset_t *m, const char *rel, size_t rlen, int depth, char *why)
{
    char name[256];
    const char *slash = memrchr(rel, '/', rlen);
    slash = slash ? slash + 1 : rel;
    size_t nl = (size_t)(rel + rlen - slash);
    if (nl < 4 || nl - 3 >= sizeof(name) || memcmp(slash + nl - 3, ".ko", 3) != 0) {
        vmm__why(why, "module %.*s is compressed or unknown (the guest loads plain .ko only)", (int)rlen, rel);
        return SBX_EUNAVAIL;
    }
    memcpy(name, slash, nl - 3);
    name[nl - 3] = '\0';
    size_t len;
    char *line = dep_line(m->dep, name, &len);
    if (line == NULL) {
        vmm__why(why, "module %s is not in modules.dep", name);
        return SBX_ENOTFOUND;
    }
    return mod_add(m, line, len, depth, why);
}

static int mod_add(modset_t *m, const char *line, size_t len, int depth, char *why)
{
    if (depth > 16) {
        vmm__why(why, "modules.dep: dependency loop");
        return SBX_EINVAL;
    }
    const char *colon = memchr(line, ':', len);
    size_t plen = (size_t)(colon - line);
    /* dependencies, each after its own; modules.dep lists them users-first */
    const char *p = colon + 1, *end = line + len;
    const char *deps[MOD_MAX];
    size_t dl[MOD_MAX], nd = 0;
    while (p < end) {
        while (p < end && *p == ' ')
            p++;
        const char *q = p;
        while (q < end && *q != ' ')
            q++;
        if (q > p && nd < MOD_MAX) {
            deps[nd] = p;
            dl[nd++] = (size_t)(q - p);
        }
        p = q;
    }
    for (size_t i = nd; i-- > 0; ) {
        int rc = mod_resolve_path(m, deps[i], dl[i], depth + 1, why);
        if (rc != 0)
            return rc;
    }
    for (size_t i = 0; i < m->n; i++)
        if (strlen(m->order[i]) == plen && memcmp(m->order[i], line, plen) == 0)
            return 0;
    if (m->n == MOD_MAX) {
        vmm__why(why, "too many modules");
        return SBX_ETOOBIG;
    }
    m->order[m->n] = strndup(line, plen);
    if (m->order[m->n] == NULL)
        return SBX_ENOMEM;
    m->n++;
    return 0;
}

/* ---- cpio newc ---- */

typedef struct {
    FILE *f;
    unsigned ino;
} cpio_t;

static int cpio_entry(cpio_t *c, const char *name, unsigned mode, unsigned rmaj, unsigned rmin,
                      const void *data, size_t n)
{
    size_t nl = strlen(name) + 1;
    static const char zeros[4] = {0};
    if (fprintf(c->f, "070701%08X%08X%08X%08X%08X%08X%08zX%08X%08X%08X%08X%08zX%08X",
                ++c->ino, mode, 0u, 0u, 1u, 0u, n, 0u, 0u, rmaj, rmin, nl, 0u) < 0)
        return SBX_EIO;
    if (fwrite(name, 1, nl, c->f) != nl || fwrite(zeros, 1, (4 - ((110 + nl) & 3)) & 3, c->f) != ((4 - ((110 + nl) & 3)) & 3))
        return SBX_EIO;
    if (n > 0 && (fwrite(data, 1, n, c->f) != n || fwrite(zeros, 1, (4 - (n & 3)) & 3, c->f) != ((4 - (n & 3)) & 3)))
        return SBX_EIO;
    return 0;
}

/* Reads a whole file into *ret (malloc'd). */
static int slurp(const char *path, char **ret, size_t *ret_n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0)
            close(fd);
        return SBX_ENOTFOUND;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    size_t n = 0;
    while (buf != NULL && n < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + n, (size_t)st.st_size - n);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    if (buf == NULL)
        return SBX_ENOMEM;
    buf[n] = '\0';
    *ret = buf;
    *ret_n = n;
    return 0;
}

static int cpio_file(cpio_t *c, const char *name, const char *src, unsigned mode, char *why)
{
    char *data = NULL;
    size_t n = 0;
    int rc = slurp(src, &data, &n);
    if (rc != 0) {
        vmm__why(why, "cannot read %s", src);
        return rc;
    }
    rc = cpio_entry(c, name, mode, 0, 0, data, n);
    free(data);
    return rc;
}

/* Writes the initramfs's entries (directories, /dev/console, /init,
 * busybox, the modules and their order) and the trailer into c. */
static int initramfs_write(cpio_t *c, const char *agent, size_t nagent, const char *busybox, const modset_t *m,
                           const char *release, char *why)
{
    char *order = NULL;
    int rc;
    const char *const dirs[] = {"bin", "dev", "proc", "sys", "lib", "lib/sbx", "lib/sbx/modules", "newroot"};
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
        if ((rc = cpio_entry(c, dirs[i], 040755, 0, 0, NULL, 0)) != 0)
            goto out;
    /* the kernel opens /dev/console for init before devtmpfs is there */
    if ((rc = cpio_entry(c, "dev/console", 020600, 5, 1, NULL, 0)) != 0 ||
        (rc = cpio_entry(c, "init", 0100755, 0, 0, agent, nagent)) != 0 ||
        (rc = cpio_file(c, "bin/busybox", busybox, 0100755, why)) != 0)
        goto out;
    size_t olen = 0;
    order = calloc(m->n + 1, VMM_PATH_MAX);
    if (order == NULL) {
        rc = SBX_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < m->n; i++) {
        char src[VMM_PATH_MAX], dst[VMM_PATH_MAX];
        const char *b = strrchr(m->order[i], '/');
        b = b ? b + 1 : m->order[i];
        vmm__path(src, sizeof(src), "/lib/modules/%s/%s", release, m->order[i]);
        vmm__path(dst, sizeof(dst), "lib/sbx/modules/%s", b);
        if ((rc = cpio_file(c, dst, src, 0100644, why)) != 0)
            goto out;
        olen += (size_t)snprintf(order + olen, VMM_PATH_MAX * (m->n + 1) - olen, "/%s\n", dst);
    }
    if ((rc = cpio_entry(c, "lib/sbx/modules.order", 0100644, 0, 0, order, olen)) == 0)
        rc = cpio_entry(c, "TRAILER!!!", 0, 0, 0, NULL, 0);
out:
    free(order);
    return rc;
}

int vmm_initramfs_ensure(const vmm_config_t *cfg, char *ret_path, size_t path_cap, char *ret_why)
{
    char kernel[VMM_PATH_MAX], release[128], cache[VMM_PATH_MAX], path[VMM_PATH_MAX], tmp[VMM_PATH_MAX];
    const char *busybox = cfg->busybox ? cfg->busybox : "/bin/busybox";
    modset_t m = {0};
    char *agent = NULL;
    size_t nagent = 0, ndep = 0;
    cpio_t c = {0};
    int rc = vmm_kernel_find(cfg, kernel, sizeof(kernel), release, sizeof(release), ret_why);
    if (rc != 0)
        return rc;
    if (cfg->agent == NULL || slurp(cfg->agent, &agent, &nagent) != 0) {
        vmm__why(ret_why, "cannot read the guest agent %s", cfg->agent ? cfg->agent : "(none given)");
        return SBX_ENOTFOUND;
    }
    struct stat bst;
    if (stat(busybox, &bst) != 0) {
        vmm__why(ret_why, "no %s (apt-get install busybox-static)", busybox);
        rc = SBX_ENOTFOUND;
        goto cleanup;
    }
    /* keyed by kernel release, agent build and busybox */
    uint64_t h = vmm__fnv1a(VMM_FNV_START, agent, nagent);
    h = vmm__fnv1a(h, &bst.st_size, sizeof(bst.st_size));
    h = vmm__fnv1a(h, &bst.st_mtime, sizeof(bst.st_mtime));
    if ((rc = vmm__cache_dir(cfg, cache, sizeof(cache))) != 0 ||
        (rc = vmm__path(path, sizeof(path), "%s/initramfs-%s-%016llx.cpio", cache, release, (unsigned long long)h)) != 0)
        goto cleanup;
    if (access(path, R_OK) == 0)
        goto done;
    mkdir(cfg->state_dir, 0711);
    mkdir(cache, 0755);
    char depf[VMM_PATH_MAX];
    vmm__path(depf, sizeof(depf), "/lib/modules/%s/modules.dep", release);
    if ((rc = slurp(depf, &m.dep, &ndep)) != 0) {
        vmm__why(ret_why, "cannot read %s", depf);
        goto cleanup;
    }
    for (size_t i = 0; i < sizeof(guest_modules) / sizeof(guest_modules[0]); i++) {
        size_t len;
        char *line = dep_line(m.dep, guest_modules[i], &len);
        if (line == NULL) {
            /* built into the kernel is as good */
            continue;
        }
        if ((rc = mod_add(&m, line, len, 0, ret_why)) != 0)
            goto cleanup;
    }
    vmm__path(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    c.f = fopen(tmp, "we");
    if (c.f == NULL) {
        vmm__why(ret_why, "cannot write %s: %s", tmp, strerror(errno));
        rc = SBX_EIO;
        goto cleanup;
    }
    if ((rc = initramfs_write(&c, agent, nagent, busybox, &m, release, ret_why)) != 0)
        goto cleanup;
    if (fclose(c.f) != 0) {
        c.f = NULL;
        rc = SBX_EIO;
        goto cleanup;
    }
    c.f = NULL;
    chmod(tmp, 0644);
    if (rename(tmp, path) != 0) {
        rc = SBX_EIO;
        goto cleanup;
    }
done:
    rc = vmm__path(ret_path, path_cap, "%s", path);
cleanup:
    if (c.f != NULL) {
        fclose(c.f);
        unlink(tmp);
    }
    for (size_t i = 0; i < m.n; i++)
        free(m.order[i]);
    free(m.dep);
    free(agent);
    return rc;
}

/* ---- base disks ---- */

static int image_key_ok(const char *k)
{
    size_t n = k ? strlen(k) : 0;
    if (n == 0 || n > 100)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = k[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == ':' ||
              c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return k[0] != '.';
}

/* Unpacks the tar read from tar_fd into a scratch directory beside path and
 * makes path an ext4 disk of disk_bytes holding it (mode, through a
 * temporary file and rename; owner uid/gid unless uid is -1). */
static int image_build(const char *path, int tar_fd, uint64_t disk_bytes, mode_t mode, uid_t uid, gid_t gid,
                       char *ret_why)
{
    char tmpdir[VMM_PATH_MAX], tmpimg[VMM_PATH_MAX];
    int rc;
    if ((rc = vmm__path(tmpdir, sizeof(tmpdir), "%s.unpack.%d", path, (int)getpid())) != 0 ||
        (rc = vmm__path(tmpimg, sizeof(tmpimg), "%s.tmp.%d", path, (int)getpid())) != 0)
        return rc;
    vmm__rm_tree(tmpdir);
    if (mkdir(tmpdir, 0700) != 0) {
        vmm__why(ret_why, "mkdir %s: %s", tmpdir, strerror(errno));
        return SBX_EIO;
    }
    /* owners, modes and device nodes as the image has them: we run as root */
    const char *tar_argv[] = {"tar", "-x", "-p", "--numeric-owner", "-C", tmpdir, "-f", "-", NULL};
    if ((rc = vmm__run(tar_argv, tar_fd, -1, 600000, ret_why)) != 0)
        goto cleanup;
    int fd = open(tmpimg, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)disk_bytes) != 0) {
        vmm__why(ret_why, "create %s: %s", tmpimg, strerror(errno));
        if (fd >= 0)
            close(fd);
        rc = SBX_EIO;
        goto cleanup;
    }
    close(fd);
    /* -m 0: the sandbox's quota is all its own; lazy init keeps the file sparse */
    const char *mkfs_argv[] = {"mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1",
                               "-d", tmpdir, tmpimg, NULL};
    if ((rc = vmm__run(mkfs_argv, -1, -1, 600000, ret_why)) != 0)
        goto cleanup;
    if ((uid != (uid_t)-1 && chown(tmpimg, uid, gid) != 0) || chmod(tmpimg, mode) != 0 ||
        rename(tmpimg, path) != 0) {
        vmm__why(ret_why, "%s: %s", path, strerror(errno));
        rc = SBX_EIO;
    }
cleanup:
    vmm__rm_tree(tmpdir);
    unlink(tmpimg);
    return rc;
}

int vmm_image_prepare_private(const vmm_config_t *cfg, int tar_fd, uint64_t disk_bytes, const char *path,
                              char *ret_why)
{
    uid_t uid;
    gid_t gid;
    if (disk_bytes < (64ull << 20) || disk_bytes > (1ull << 40)) {
        vmm__why(ret_why, "disk size %llu outside 64 MiB..1 TiB", (unsigned long long)disk_bytes);
        return SBX_EINVAL;
    }
    int rc = vmm__run_as(cfg, &uid, &gid, ret_why);
    return rc != 0 ? rc : image_build(path, tar_fd, disk_bytes, 0600, uid, gid, ret_why);
}

int vmm_image_prepare(const vmm_config_t *cfg, const char *image_key, int tar_fd, uint64_t disk_bytes,
                      char *ret_path, size_t path_cap, char *ret_why)
{
    char cache[VMM_PATH_MAX], path[VMM_PATH_MAX], key[128];
    int rc;
    if (!image_key_ok(image_key)) {
        vmm__why(ret_why, "bad image key");
        return SBX_EINVAL;
    }
    if (disk_bytes < (64ull << 20) || disk_bytes > (1ull << 40)) {
        vmm__why(ret_why, "disk size %llu outside 64 MiB..1 TiB", (unsigned long long)disk_bytes);
        return SBX_EINVAL;
    }
    vmm__path(key, sizeof(key), "%s", image_key);
    for (char *p = key; *p; p++)
        if (*p == ':')
            *p = '_';
    if ((rc = vmm__cache_dir(cfg, cache, sizeof(cache))) != 0 ||
        (rc = vmm__path(path, sizeof(path), "%s/base-%s-%llu.ext4", cache, key, (unsigned long long)disk_bytes)) != 0)
        return rc;
    if (access(path, R_OK) == 0)
        return vmm__path(ret_path, path_cap, "%s", path);
    if (tar_fd < 0) {
        vmm__why(ret_why, "no base disk for %s yet", image_key);
        return SBX_ENOTFOUND;
    }
    mkdir(cfg->state_dir, 0711);
    mkdir(cache, 0755);
    if ((rc = image_build(path, tar_fd, disk_bytes, 0644, (uid_t)-1, 0, ret_why)) != 0)
        return rc;
    return vmm__path(ret_path, path_cap, "%s", path);
}
