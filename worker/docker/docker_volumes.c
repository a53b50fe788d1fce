/* Volumes on a Docker worker (docs/volumes.md): each is an ext4 file
 * system in a sparse image file <dir>/<id>.img of its size (so its size is
 * enforced by the file system), made on its first mount, with its tenant's
 * name in <dir>/<id>.tenant. A sandbox that mounts it gets a mount of its
 * own through a loop device (auto-cleared on unmount) at
 * <dir>/mnt/<sandbox>/<id>.rw or .ro, bound into its container. A sandbox
 * of a backend that takes disks (microvm) gets the image itself instead,
 * claimed by a plain file of the same name. Read-write is exclusive on this
 * worker and read-only shared, across both kinds, checked here under a lock
 * whatever the controller said. */
#include "docker_internal.h"
#include "ids.h"
#include "jsonx.h"
#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#define VOL_COMPONENT "worker"
/* Paths under worker_volume_dir (at most 170 bytes, with ids and suffixes
 * far below the rest); the mount paths a caller keeps are shorter. */
#define VOL_PATH_MAX 1024
/* A sandbox's mount directory younger than this is never swept: its
 * container may be being made right now. */
#define DOCKER_VOLUME_SWEEP_AGE_S 120

static pthread_mutex_t volumes_mu = PTHREAD_MUTEX_INITIALIZER;

/* mkdir -p path (mode for the ones it makes). */
static int mkdir_p(const char *path, mode_t mode)
{
    char p[VOL_PATH_MAX];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            char c = *s;
            *s = '\0';
            if (mkdir(p, mode) < 0 && errno != EEXIST)
                return -1;
            *s = c;
            if (!c)
                break;
        }
    }
    return 0;
}

void docker_volumes_probe(docker_runtime_t *rt, const char *dir)
{
    rt->volumes_ok = false;
    const char *why = NULL;
    if (!dir || !*dir || dir[0] != '/' || strlen(dir) >= sizeof rt->volume_dir - 80)
        why = "worker_volume_dir is not an absolute path of at most 170 bytes";
    else if (geteuid() != 0)
        why = "the worker does not run as root (loop devices and mounts need it)";
    else if (access("/dev/loop-control", R_OK | W_OK) != 0)
        why = "/dev/loop-control is not there (no loop device support)";
    else if (!docker_tool_find("mkfs.ext4", rt->mkfs_ext4))
        why = "mkfs.ext4 is not installed (Debian's e2fsprogs)";
    /* made on the first mount, not before: a worker that never holds a
     * volume leaves no directory behind */
    if (!why)
        snprintf(rt->volume_dir, sizeof rt->volume_dir, "%s", dir);
    if (why) {
        snprintf(rt->volumes_why, sizeof rt->volumes_why, "%s", why);
        log_info(VOL_COMPONENT, "volumes are not offered: %s", why);
        return;
    }
    rt->volumes_ok = true;
}

bool docker_rt_volume_support(runtime_t *base, char *why, size_t whylen)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    if (!rt->volumes_ok)
        snprintf(why, whylen, "%s", rt->volumes_why);
    return rt->volumes_ok;
}

/* True when path is a mount point (another device than its parent). */
static bool is_mount_point(const char *path)
{
    struct stat a, b;
    char parent[VOL_PATH_MAX];
    snprintf(parent, sizeof parent, "%s/..", path);
    return stat(path, &a) == 0 && stat(parent, &b) == 0 && a.st_dev != b.st_dev;
}

/* True when path is a disk claim (a regular file, not followed). */
static bool is_disk_claim(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Counts the mounts (and disk claims) of volume id on this worker:
 * read-write and read-only ones, other than sandbox except_sbx's. */
static void volume_mounts(docker_runtime_t *rt, const char *id, const char *except_sbx, int *ret_rw, int *ret_ro)
{
    *ret_rw = *ret_ro = 0;
    char path[VOL_PATH_MAX];
    snprintf(path, sizeof path, "%s/mnt", rt->volume_dir);
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!ids_valid("sbx", e->d_name) || (except_sbx && strcmp(e->d_name, except_sbx) == 0))
            continue;
        for (int ro = 0; ro < 2; ro++) {
            snprintf(path, sizeof path, "%s/mnt/%s/%s.%s", rt->volume_dir, e->d_name, id, ro ? "ro" : "rw");
            if (is_mount_point(path) || is_disk_claim(path))
                (*(ro ? ret_ro : ret_rw))++;
        }
    }
    closedir(d);
}

/* Makes the volume's image when it is not there (its tenant's name beside
 * it), or checks that the one there is this tenant's. */
static int volume_image(docker_runtime_t *rt, const spec_volume_t *v, const char *tenant, api_error_t *err)
{
    char img[VOL_PATH_MAX], meta[VOL_PATH_MAX], tmp[VOL_PATH_MAX], have[80] = "";
    snprintf(img, sizeof img, "%s/%s.img", rt->volume_dir, v->volume);
    snprintf(meta, sizeof meta, "%s/%s.tenant", rt->volume_dir, v->volume);
    FILE *f = fopen(meta, "re");
    if (f) {
        if (!fgets(have, sizeof have, f))
            have[0] = '\0';
        fclose(f);
        have[strcspn(have, "\n")] = '\0';
        if (strcmp(have, tenant) != 0)
            return api_error_set(err, API_POLICY_DENIED, "volume %s on this worker is not tenant %s's", v->volume,
                                 tenant);
        if (access(img, F_OK) == 0)
            return 0;
    }
    /* A new one: the image first, the tenant file last (its presence says
     * the image is whole). */
    int fd = open(img, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return api_error_set(err, API_RUNTIME_ERROR, "cannot make volume %s's image: %s", v->volume, strerror(errno));
    int r = ftruncate(fd, (off_t)v->size_mib * 1024 * 1024);
    int e = errno;
    close(fd);
    if (r < 0) {
        unlink(img);
        return api_error_set(err, API_RUNTIME_ERROR, "cannot size volume %s's image: %s", v->volume, strerror(e));
    }
    const char *argv[] = { rt->mkfs_ext4, "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1",
                           "-L", "sandbox-volume", img, NULL };
    char out[256];
    int st = docker_tool_run(rt->mkfs_ext4, argv, out, sizeof out, false);
    if (st != 0) {
        unlink(img);
        return api_error_set(err, API_RUNTIME_ERROR, "cannot make volume %s's file system (mkfs.ext4: %s)", v->volume,
                             out[0] ? out : "failed");
    }
    snprintf(tmp, sizeof tmp, "%s/%s.tenant.tmp", rt->volume_dir, v->volume);
    f = fopen(tmp, "we");
    if (!f || fprintf(f, "%s\n", tenant) < 0 || fclose(f) != 0 || rename(tmp, meta) < 0) {
        e = errno;
        unlink(tmp);
        unlink(img);
        return api_error_set(err, API_RUNTIME_ERROR, "cannot record volume %s's tenant: %s", v->volume, strerror(e));
    }
    log_info(VOL_COMPONENT, "made volume %s (%lld MiB) for tenant %s", v->volume, (long long)v->size_mib, tenant);
    return 0;
}

/* Binds image img to a free loop device (auto-cleared once unmounted):
 * the device's fd (the caller closes it once mounted) and its path. */
static int loop_attach(const char *img, bool ro, char dev[32], api_error_t *err)
{
    int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (ctl < 0)
        return api_error_set(err, API_RUNTIME_ERROR, "cannot open /dev/loop-control: %s", strerror(errno));
    int ffd = open(img, (ro ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NOFOLLOW);
    if (ffd < 0) {
        int e = errno;
        close(ctl);
        return api_error_set(err, API_RUNTIME_ERROR, "cannot open %s: %s", img, strerror(e));
    }
    int lfd = -1, e = 0;
    for (int tries = 0; tries < 16 && lfd < 0; tries++) {
        int n = ioctl(ctl, LOOP_CTL_GET_FREE);
        if (n < 0) {
            e = errno;
            break;
        }
        snprintf(dev, 32, "/dev/loop%d", n);
        int fd = open(dev, (ro ? O_RDONLY : O_RDWR) | O_CLOEXEC);
        /* a /dev that is not devtmpfs has no node for a new device */
        if (fd < 0 && errno == ENOENT && mknod(dev, S_IFBLK | 0600, makedev(7, (unsigned)n)) == 0)
            fd = open(dev, (ro ? O_RDONLY : O_RDWR) | O_CLOEXEC);
        if (fd < 0) {
            e = errno;
            break;
        }
        struct loop_config cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.fd = (unsigned)ffd;
        cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR | (ro ? LO_FLAGS_READ_ONLY : 0);
        size_t il = strlen(img);
        if (il >= sizeof cfg.info.lo_file_name)
            il = sizeof cfg.info.lo_file_name - 1;
        memcpy(cfg.info.lo_file_name, img, il);
        if (ioctl(fd, LOOP_CONFIGURE, &cfg) == 0) {
            lfd = fd;
            break;
        }
        e = errno;
        close(fd);
        if (e != EBUSY) /* EBUSY: another process took it first */
            break;
    }
    close(ffd);
    close(ctl);
    if (lfd < 0)
        return api_error_set(err, API_RUNTIME_ERROR, "cannot set up a loop device for %s: %s", img, strerror(e));
    return lfd;
}

/* Mounts volume v for sandbox sbx at its mount directory: its path into
 * ret_path. disk: claims it as a disk instead (ret_path: the image). */
static int volume_mount(docker_runtime_t *rt, const char *sbx, const spec_volume_t *v, bool disk, char *ret_path,
                        size_t pathlen, api_error_t *err)
{
    char img[VOL_PATH_MAX], dir[VOL_PATH_MAX / 2], dev[32];
    snprintf(img, sizeof img, "%s/%s.img", rt->volume_dir, v->volume);
    snprintf(dir, sizeof dir, "%s/mnt/%s", rt->volume_dir, sbx);
    snprintf(ret_path, pathlen, "%s/%s.%s", dir, v->volume, v->read_only ? "ro" : "rw");
    if (disk ? is_disk_claim(ret_path) : is_mount_point(ret_path)) {
        if (disk)
            snprintf(ret_path, pathlen, "%s", img);
        return 0; /* a retried create: mounted (claimed) already */
    }
    int rw, ro;
    volume_mounts(rt, v->volume, sbx, &rw, &ro);
    if (rw > 0 || (!v->read_only && ro > 0))
        return api_error_set(err, API_CONFLICT,
                             "volume %s is mounted by %d other sandbox%s here (%s): %s", v->volume, rw + ro,
                             rw + ro == 1 ? "" : "es", rw > 0 ? "read-write" : "read-only",
                             v->read_only ? "a read-only mount waits for the writer to go"
                                          : "a read-write mount is one sandbox's");
    if (disk) {
        int fd = -1;
        if ((mkdir(dir, 0700) < 0 && errno != EEXIST) ||
            (fd = open(ret_path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)) < 0)
            return api_error_set(err, API_RUNTIME_ERROR, "cannot claim volume %s: %s", v->volume, strerror(errno));
        close(fd);
        snprintf(ret_path, pathlen, "%s", img);
        return 0;
    }
    if ((mkdir(dir, 0700) < 0 && errno != EEXIST) || (mkdir(ret_path, 0700) < 0 && errno != EEXIST))
        return api_error_set(err, API_RUNTIME_ERROR, "cannot make %s: %s", ret_path, strerror(errno));
    int lfd = loop_attach(img, v->read_only, dev, err);
    if (lfd < 0)
        return lfd;
    unsigned long flags = MS_NOSUID | MS_NODEV | (v->read_only ? MS_RDONLY : 0);
    int r = mount(dev, ret_path, "ext4", flags, v->read_only ? "noload" : "");
    int e = errno;
    close(lfd); /* auto-clear: the device goes with the last unmount */
    if (r < 0)
        return api_error_set(err, API_RUNTIME_ERROR, "cannot mount volume %s: %s", v->volume, strerror(e));
    return 0;
}

/* Mounts (disk: claims) every volume of req for its sandbox, under the
 * lock, each made at first use: paths[i] (nvolumes of them) gets the mount
 * directory (disk: the image). On an error nothing of the sandbox's stays. */
static int volumes_take(docker_runtime_t *rt, const runtime_create_req_t *req, bool disk,
                        char (*paths)[VOL_PATH_MAX], api_error_t *err)
{
    const sandbox_spec_t *s = req->spec;
    const char *tenant = req->tenant ? req->tenant : s->tenant;
    if (!rt->volumes_ok)
        return api_error_set(err, API_ISOLATION_UNAVAILABLE, "this worker cannot mount volumes: %s",
                             rt->volumes_why);
    if (!tenant || !*tenant)
        return api_error_set(err, API_INVALID_ARGUMENT, "a create with volumes names no tenant");
    if (!req->sandbox_id || !ids_valid("sbx", req->sandbox_id))
        return api_error_set(err, API_INVALID_ARGUMENT, "malformed sandbox id");
    int r = 0;
    char mnt[VOL_PATH_MAX / 2];
    snprintf(mnt, sizeof mnt, "%s/mnt", rt->volume_dir);
    pthread_mutex_lock(&volumes_mu);
    if (mkdir_p(mnt, 0700) < 0)
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot make %s: %s", mnt, strerror(errno));
    for (size_t i = 0; i < s->nvolumes && r == 0; i++) {
        const spec_volume_t *v = &s->volumes[i];
        char why[96];
        if (!v->volume || !ids_valid("vol", v->volume) || v->size_mib < SBX_VOLUME_MIB_MIN ||
            v->size_mib > SBX_VOLUME_MIB_MAX || !v->path || !spec_volume_path_ok(v->path, why, sizeof why)) {
            r = api_error_set(err, API_INVALID_ARGUMENT, "malformed volume %zu in the create", i);
            break;
        }
        if ((r = volume_image(rt, v, tenant, err)) < 0 ||
            (r = volume_mount(rt, req->sandbox_id, v, disk, paths[i], VOL_PATH_MAX, err)) < 0)
            break;
    }
    pthread_mutex_unlock(&volumes_mu);
    if (r < 0)
        docker_volumes_release(rt, req->sandbox_id);
    return r;
}

int docker_volumes_attach(docker_runtime_t *rt, const runtime_create_req_t *req, json_object **ret_mounts,
                          api_error_t *err)
{
    const sandbox_spec_t *s = req->spec;
    *ret_mounts = NULL;
    char (*paths)[VOL_PATH_MAX] = calloc(s->nvolumes ? s->nvolumes : 1, sizeof *paths);
    if (!paths)
        return api_error_set(err, API_INTERNAL, "out of memory");
    int r = volumes_take(rt, req, false, paths, err);
    if (r < 0) {
        free(paths);
        return r;
    }
    json_object *mounts = json_object_new_array();
    for (size_t i = 0; i < s->nvolumes; i++) {
        json_object *m = json_object_new_object();
        jsonx_add_str(m, "Type", "bind");
        jsonx_add_str(m, "Source", paths[i]);
        jsonx_add_str(m, "Target", s->volumes[i].path);
        jsonx_add_bool(m, "ReadOnly", s->volumes[i].read_only);
        json_object *bo = json_object_new_object();
        jsonx_add_str(bo, "Propagation", "rprivate");
        jsonx_add(m, "BindOptions", bo);
        json_object_array_add(mounts, m);
    }
    free(paths);
    *ret_mounts = mounts;
    return 0;
}

void docker_volumes_release(docker_runtime_t *rt, const char *sandbox_id)
{
    if (!rt->volumes_ok || !sandbox_id || !ids_valid("sbx", sandbox_id))
        return;
    char dir[VOL_PATH_MAX / 2], path[VOL_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/mnt/%s", rt->volume_dir, sandbox_id);
    pthread_mutex_lock(&volumes_mu);
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            /* the container is gone; a lazy unmount when something still
             * holds it open (the device goes once it lets go) */
            if (is_mount_point(path) && umount2(path, UMOUNT_NOFOLLOW) < 0 &&
                umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW) < 0)
                log_warn(VOL_COMPONENT, "cannot unmount %s: %s", path, strerror(errno));
            if (rmdir(path) < 0 && errno != ENOENT && (errno != ENOTDIR || unlink(path) < 0))
                log_warn(VOL_COMPONENT, "cannot remove %s: %s", path, strerror(errno));
        }
        closedir(d);
        if (rmdir(dir) < 0 && errno != ENOENT)
            log_warn(VOL_COMPONENT, "cannot remove %s: %s", dir, strerror(errno));
    }
    pthread_mutex_unlock(&volumes_mu);
}

/* True when the sandbox mount directory dir holds a disk claim. */
static bool has_disk_claims(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return false;
    bool any = false;
    struct dirent *e;
    char path[VOL_PATH_MAX];
    while (!any && (e = readdir(d))) {
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        any = e->d_name[0] != '.' && is_disk_claim(path);
    }
    closedir(d);
    return any;
}

/* Releases the mounts of sandboxes no container of which is left here
 * (removed while the worker was down, say); skips young ones. */
static void volumes_sweep(docker_runtime_t *rt)
{
    char path[VOL_PATH_MAX];
    snprintf(path, sizeof path, "%s/mnt", rt->volume_dir);
    DIR *d = opendir(path);
    if (!d)
        return;
    char label[64];
    snprintf(label, sizeof label, "%s=%s", RUNTIME_LABEL_MANAGED, RUNTIME_MANAGED_SANDBOX);
    json_object *list = NULL;
    api_error_t err;
    struct dirent *e;
    time_t now = time(NULL);
    while ((e = readdir(d))) {
        struct stat st;
        snprintf(path, sizeof path, "%s/mnt/%s", rt->volume_dir, e->d_name);
        if (!ids_valid("sbx", e->d_name) || stat(path, &st) < 0 || now - st.st_mtime < DOCKER_VOLUME_SWEEP_AGE_S ||
            has_disk_claims(path))
            continue; /* young, or a disk sandbox's (runtime_volume_sweep_disks) */
        if (!list && docker_container_list(rt, label, &list, &err) < 0)
            break; /* Docker does not answer: another time */
        bool live = false;
        size_t n = json_object_array_length(list);
        for (size_t i = 0; i < n && !live; i++) {
            const char *owner =
                jsonx_get_str(jsonx_get_obj(json_object_array_get_idx(list, i), "Labels"), RUNTIME_LABEL_SANDBOX);
            live = owner && strcmp(owner, e->d_name) == 0;
        }
        if (!live) {
            log_info(VOL_COMPONENT, "releasing the volume mounts of sandbox %s (no container of it is left)",
                     e->d_name);
            docker_volumes_release(rt, e->d_name);
        }
    }
    closedir(d);
    if (list)
        json_object_put(list);
}

int docker_rt_volume_list(runtime_t *base, runtime_volume_t **ret, size_t *ret_n, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    *ret = NULL;
    *ret_n = 0;
    if (!rt->volumes_ok)
        return 0;
    volumes_sweep(rt);
    DIR *d = opendir(rt->volume_dir);
    if (!d && errno == ENOENT)
        return 0; /* none made yet */
    if (!d)
        return api_error_set(err, API_RUNTIME_ERROR, "cannot read %s: %s", rt->volume_dir, strerror(errno));
    runtime_volume_t *all = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < SBX_MAX_INVENTORY) {
        size_t l = strlen(e->d_name);
        char id[SBX_ID_MAX];
        if (l < 5 || strcmp(e->d_name + l - 4, ".img") != 0 || l - 4 >= sizeof id)
            continue;
        snprintf(id, sizeof id, "%.*s", (int)(l - 4), e->d_name);
        if (!ids_valid("vol", id))
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            runtime_volume_t *g = realloc(all, nc * sizeof *g);
            if (!g) {
                free(all);
                closedir(d);
                return api_error_set(err, API_INTERNAL, "out of memory");
            }
            all = g;
            cap = nc;
        }
        runtime_volume_t *v = &all[n++];
        memset(v, 0, sizeof *v);
        snprintf(v->id, sizeof v->id, "%s", id);
        char p[VOL_PATH_MAX];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", rt->volume_dir, e->d_name);
        v->size_mib = stat(p, &st) == 0 ? (int64_t)(st.st_size / (1024 * 1024)) : -1;
        snprintf(p, sizeof p, "%s/%s.tenant", rt->volume_dir, id);
        FILE *f = fopen(p, "re");
        if (f) {
            if (!fgets(v->tenant, sizeof v->tenant, f))
                v->tenant[0] = '\0';
            v->tenant[strcspn(v->tenant, "\n")] = '\0';
            fclose(f);
        }
        int rw, ro;
        volume_mounts(rt, id, NULL, &rw, &ro);
        v->mounted = rw + ro > 0;
    }
    closedir(d);
    *ret = all;
    *ret_n = n;
    return 0;
}

int docker_rt_volume_remove(runtime_t *base, const char *volume_id, api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    if (!rt->volumes_ok)
        return 0;
    if (!ids_valid("vol", volume_id))
        return api_error_set(err, API_INVALID_ARGUMENT, "malformed volume id");
    pthread_mutex_lock(&volumes_mu);
    int rw, ro, r = 0;
    volume_mounts(rt, volume_id, NULL, &rw, &ro);
    if (rw + ro > 0) {
        r = api_error_set(err, API_CONFLICT, "volume %s is still mounted by a sandbox here", volume_id);
    } else {
        char p[VOL_PATH_MAX];
        snprintf(p, sizeof p, "%s/%s.tenant", rt->volume_dir, volume_id);
        unlink(p); /* first: an image without it is not whole */
        snprintf(p, sizeof p, "%s/%s.img", rt->volume_dir, volume_id);
        if (unlink(p) < 0 && errno != ENOENT)
            r = api_error_set(err, API_RUNTIME_ERROR, "cannot remove %s: %s", p, strerror(errno));
    }
    pthread_mutex_unlock(&volumes_mu);
    return r;
}

int docker_rt_volume_disks(runtime_t *base, const runtime_create_req_t *req, runtime_disk_t **ret, size_t *ret_n,
                           api_error_t *err)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    const sandbox_spec_t *s = req->spec;
    *ret = NULL;
    *ret_n = 0;
    size_t n = s->nvolumes ? s->nvolumes : 1;
    char (*paths)[VOL_PATH_MAX] = calloc(n, sizeof *paths);
    runtime_disk_t *disks = calloc(n, sizeof *disks);
    int r = paths && disks ? volumes_take(rt, req, true, paths, err)
                           : api_error_set(err, API_INTERNAL, "out of memory");
    for (size_t i = 0; r == 0 && i < s->nvolumes; i++) {
        snprintf(disks[i].path, sizeof disks[i].path, "%s", paths[i]);
        disks[i].target = s->volumes[i].path;
        disks[i].read_only = s->volumes[i].read_only;
    }
    free(paths);
    if (r < 0) {
        free(disks);
        return r;
    }
    *ret = disks;
    *ret_n = s->nvolumes;
    return 0;
}

void docker_rt_volume_release(runtime_t *base, const char *sandbox_id)
{
    docker_volumes_release((docker_runtime_t *)base, sandbox_id);
}

void docker_rt_volume_sweep_disks(runtime_t *base, const char *const *live, size_t n)
{
    docker_runtime_t *rt = (docker_runtime_t *)base;
    if (!rt->volumes_ok)
        return;
    char path[VOL_PATH_MAX];
    snprintf(path, sizeof path, "%s/mnt", rt->volume_dir);
    DIR *d = opendir(path);
    if (!d)
        return;
    time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(d))) {
        struct stat st;
        snprintf(path, sizeof path, "%s/mnt/%s", rt->volume_dir, e->d_name);
        if (!ids_valid("sbx", e->d_name) || stat(path, &st) < 0 || now - st.st_mtime < DOCKER_VOLUME_SWEEP_AGE_S ||
            !has_disk_claims(path))
            continue;
        bool held = false;
        for (size_t i = 0; i < n && !held; i++)
            held = live[i] && strcmp(live[i], e->d_name) == 0;
        if (!held) {
            log_info(VOL_COMPONENT, "releasing the volume disks of sandbox %s (no VM of it is left)", e->d_name);
            docker_volumes_release(rt, e->d_name);
        }
    }
    closedir(d);
}
