/* The host side of a microVM's NIC (vmm.h vmm_tap_open): a tap of its own,
 * addressed as the guest's gateway, for the egress filter's rules to take
 * (docs/network.md). Nothing of the guest's reaches another VM's tap: each
 * tap is a point-to-point link of its own with strict reverse-path checks,
 * and no IPv6 (the host's rules are IPv4). */
#include "vmm_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "errors.h"

/* Writes value to /proc/sys/net/<family>/conf/<ifname>/<key>. */
static int put_sysctl(const char *family, const char *ifname, const char *key, const char *value)
{
    char path[160];
    snprintf(path, sizeof(path), "/proc/sys/net/%s/conf/%s/%s", family, ifname, key);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, value, strlen(value));
    close(fd);
    return n == (ssize_t)strlen(value) ? 0 : -1;
}

int vmm_tap_name_ok(const char *name)
{
    size_t n = name != NULL ? strlen(name) : 0;
    return n > 0 && n < IFNAMSIZ && strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789") == n;
}

int vmm_tap_open(const char *name, const char *host, unsigned prefix, int *ret_fd, char *ret_why)
{
    *ret_fd = -1;
    struct sockaddr_in a = {.sin_family = AF_INET}, m = {.sin_family = AF_INET};
    if (!vmm_tap_name_ok(name) || host == NULL || inet_pton(AF_INET, host, &a.sin_addr) != 1 || prefix < 8 ||
        prefix > 30) {
        vmm__why(ret_why, "bad tap (a name of [a-z0-9], at most %d bytes; an IPv4 address; prefix 8..30)",
                 IFNAMSIZ - 1);
        return SBX_EINVAL;
    }
    m.sin_addr.s_addr = htonl(0xffffffffu << (32 - prefix));
    int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        vmm__why(ret_why, "/dev/net/tun: %s", strerror(errno));
        return SBX_EUNAVAIL;
    }
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
    memcpy(ifr.ifr_name, name, strlen(name) + 1);
    /* TUNSETIFF on a name in use by a tap of someone else's fails (EBUSY);
     * a non-persistent tap is ours alone and goes with its last fd */
    if (ioctl(fd, TUNSETIFF, &ifr) != 0) {
        vmm__why(ret_why, "tap %s: %s", name, strerror(errno));
        close(fd);
        return errno == EBUSY ? SBX_ECONFLICT : SBX_EIO;
    }
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), rc = 0;
    const char *step = "socket";
    /* no IPv6 on it (a link-local address would reach the host's services
     * past the IPv4 rules); strict reverse path (an address it was not
     * given is dropped); then its address and up */
    if (s < 0 || (step = "disable_ipv6", put_sysctl("ipv6", name, "disable_ipv6", "1")) != 0 ||
        (step = "rp_filter", put_sysctl("ipv4", name, "rp_filter", "1")) != 0)
        rc = -1;
    if (rc == 0) {
        memset(&ifr, 0, sizeof(ifr));
        memcpy(ifr.ifr_name, name, strlen(name) + 1);
        memcpy(&ifr.ifr_addr, &a, sizeof(a));
        if ((step = "address", ioctl(s, SIOCSIFADDR, &ifr)) != 0)
            rc = -1;
    }
    if (rc == 0) {
        memcpy(&ifr.ifr_netmask, &m, sizeof(m));
        if ((step = "netmask", ioctl(s, SIOCSIFNETMASK, &ifr)) != 0 ||
            (step = "flags", ioctl(s, SIOCGIFFLAGS, &ifr)) != 0)
            rc = -1;
    }
    if (rc == 0) {
        ifr.ifr_flags |= IFF_UP;
        if ((step = "up", ioctl(s, SIOCSIFFLAGS, &ifr)) != 0)
            rc = -1;
    }
    if (rc != 0) {
        vmm__why(ret_why, "tap %s: %s: %s", name, step, strerror(errno));
        if (s >= 0)
            close(s);
        close(fd);
        return SBX_EIO;
    }
    close(s);
    *ret_fd = fd;
    return 0;
}
