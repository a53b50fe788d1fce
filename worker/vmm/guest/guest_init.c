/* The guest agent's boot as PID 1: mounts, kernel modules, the switch into the
 * root disk (/dev/vda, the sandbox image's filesystem), loopback up, and the
 * agent's port found by name. Static, libc only. */
#include "guest.h"

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

void guest_say(const char *what, int err)
{
    /* the console is the VM's log (console.log on the host) */
    if (err)
        dprintf(2, "sbx-agent: %s: %s\n", what, strerror(err));
    else
        dprintf(2, "sbx-agent: %s\n", what);
}

static void mount_or_say(const char *src, const char *dst, const char *type, unsigned long flags, const char *data)
{
    mkdir(dst, 0755);
    if (mount(src, dst, type, flags, data) != 0 && errno != EBUSY)
        guest_say(dst, errno);
}

/* Loads every module /lib/sbx/modules.order names, in order (dependencies first). */
static void load_modules(void)
{
    FILE *f = fopen("/lib/sbx/modules.order", "re");
    if (f == NULL) {
        guest_say("modules.order", errno);
        return;
    }
    char line[512];
    while (fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0] == '\0')
            continue;
        int fd = open(line, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            guest_say(line, errno);
            continue;
        }
        if (syscall(SYS_finit_module, fd, "", 0) != 0 && errno != EEXIST)
            guest_say(line, errno);
        close(fd);
    }
    fclose(f);
}

static int copy_file(const char *from, const char *to, mode_t mode)
{
    int in = open(from, O_RDONLY | O_CLOEXEC), out = -1, rc = -1;
    if (in < 0)
        goto cleanup;
    out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (out < 0)
        goto cleanup;
    char buf[65536];
    for (;;) {
        ssize_t n = read(in, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            goto cleanup;
        if (n == 0)
            break;
        if (guest_write_all(out, buf, (size_t)n) != 0)
            goto cleanup;
    }
    rc = 0;
cleanup:
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    return rc;
}

static void loopback_up(void)
{
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return;
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    memcpy(ifr.ifr_name, "lo", 3);
    if (ioctl(s, SIOCGIFFLAGS, &ifr) == 0) {
        ifr.ifr_flags |= IFF_UP;
        if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0)
            guest_say("lo up", errno);
    }
    close(s);
}

/* The NIC of a VM behind the egress filter: sbx.net=GUEST/PREFIX,GATEWAY on
 * the kernel's command line (the host's choice) sets eth0, the default
 * route through the gateway and the gateway as the resolver. What the
 * guest does with its interface afterwards changes nothing outside: the
 * host takes from its tap only the address it gave, and only to the
 * filter. */
static void net_up(void)
{
    char line[1024] = "", guest[16], gw[16];
    unsigned prefix = 0;
    FILE *f = fopen("/proc/cmdline", "re");
    if (f == NULL)
        return;
    if (fgets(line, sizeof(line), f) == NULL)
        line[0] = '\0';
    fclose(f);
    const char *p = strstr(line, "sbx.net=");
    if (p == NULL)
        return;
    if (sscanf(p + 8, "%15[0-9.]/%u,%15[0-9.]", guest, &prefix, gw) != 3 || prefix < 8 || prefix > 30) {
        guest_say("sbx.net: malformed", 0);
        return;
    }
    struct sockaddr_in a = {.sin_family = AF_INET}, m = {.sin_family = AF_INET}, g = {.sin_family = AF_INET};
    if (inet_pton(AF_INET, guest, &a.sin_addr) != 1 || inet_pton(AF_INET, gw, &g.sin_addr) != 1) {
        guest_say("sbx.net: malformed", 0);
        return;
    }
    m.sin_addr.s_addr = htonl(0xffffffffu << (32 - prefix));
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return;
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    memcpy(ifr.ifr_name, "eth0", 5);
    /* virtio_net registers eth0 as it loads; wait briefly in case it is late */
    for (int i = 0; i < 100 && ioctl(s, SIOCGIFFLAGS, &ifr) != 0; i++) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    memcpy(&ifr.ifr_addr, &a, sizeof(a));
    if (ioctl(s, SIOCSIFADDR, &ifr) != 0)
        guest_say("eth0 address", errno);
    memcpy(&ifr.ifr_netmask, &m, sizeof(m));
    if (ioctl(s, SIOCSIFNETMASK, &ifr) != 0)
        guest_say("eth0 netmask", errno);
    if (ioctl(s, SIOCGIFFLAGS, &ifr) == 0) {
        ifr.ifr_flags |= IFF_UP;
        if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0)
            guest_say("eth0 up", errno);
    }
    struct rtentry rt;
    memset(&rt, 0, sizeof(rt));
    struct sockaddr_in any = {.sin_family = AF_INET};
    memcpy(&rt.rt_dst, &any, sizeof(any));
    memcpy(&rt.rt_genmask, &any, sizeof(any));
    memcpy(&rt.rt_gateway, &g, sizeof(g));
    rt.rt_flags = RTF_UP | RTF_GATEWAY;
    if (ioctl(s, SIOCADDRT, &rt) != 0 && errno != EEXIST)
        guest_say("default route", errno);
    close(s);
    /* the resolver: the gateway (the host sends its port 53 to the filter) */
    mkdir("/etc", 0755);
    unlink("/etc/resolv.conf");
    int fd = open("/etc/resolv.conf", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd >= 0) {
        char text[64];
        int n = snprintf(text, sizeof(text), "nameserver %s\n", gw);
        if (guest_write_all(fd, text, (size_t)n) != 0)
            guest_say("resolv.conf", errno);
        close(fd);
    }
}

int guest_boot(void)
{
    mount_or_say("dev", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
    mount_or_say("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    mount_or_say("sys", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    load_modules();

    /* virtio_blk registers the disk as it loads; wait briefly in case it is late */
    struct stat st;
    for (int i = 0; i < 100 && stat("/dev/vda", &st) != 0; i++) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    mkdir("/newroot", 0755);
    if (mount("/dev/vda", "/newroot", "ext4", 0, NULL) != 0) {
        guest_say("mount /dev/vda", errno);
        return -1;
    }
    /* busybox for file transfers (tar) in a read-only tmpfs outside the image's tree */
    mount_or_say("sbx", "/newroot/.sbx", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=8m");
    if (copy_file("/bin/busybox", "/newroot/.sbx/busybox", 0755) != 0)
        guest_say("copy busybox", errno);
    mount(NULL, "/newroot/.sbx", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL);
    const char *const moved[] = {"/dev", "/proc", "/sys"};
    for (size_t i = 0; i < 3; i++) {
        char dst[64];
        snprintf(dst, sizeof(dst), "/newroot%s", moved[i]);
        mkdir(dst, 0755);
        if (mount(moved[i], dst, NULL, MS_MOVE, NULL) != 0)
            guest_say(dst, errno);
    }
    if (chdir("/newroot") != 0 || mount(".", "/", NULL, MS_MOVE, NULL) != 0 || chroot(".") != 0 || chdir("/") != 0) {
        guest_say("switch root", errno);
        return -1;
    }
    mount_or_say("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "mode=0620,ptmxmode=0666");
    mount_or_say("cgroup2", "/sys/fs/cgroup", "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    mkdir("/tmp", 01777);
    sethostname("sandbox", 7);
    loopback_up();
    net_up();
    return 0;
}

int guest_open_port(const char *name)
{
    DIR *d = opendir("/sys/class/virtio-ports");
    if (d == NULL)
        return -1;
    int fd = -1;
    struct dirent *e;
    while (fd < 0 && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[300], got[64] = "";
        snprintf(path, sizeof(path), "/sys/class/virtio-ports/%s/name", e->d_name);
        FILE *f = fopen(path, "re");
        if (f == NULL)
            continue;
        if (fgets(got, sizeof(got), f) == NULL)
            got[0] = '\0';
        fclose(f);
        got[strcspn(got, "\n")] = '\0';
        if (strcmp(got, name) != 0)
            continue;
        snprintf(path, sizeof(path), "/dev/%s", e->d_name);
        fd = open(path, O_RDWR | O_CLOEXEC);
    }
    closedir(d);
    return fd;
}

int guest_write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}
