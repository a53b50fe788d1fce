/* The guest agent's parts (worker/vmm/guest/): boot as PID 1, then serve the
 * agent channel (vmmproto.h). Runs inside the VM only. */
#ifndef SBX_GUEST_H
#define SBX_GUEST_H

#include <stddef.h>

/* The name of the virtio-serial port the host opens for the agent. */
#define GUEST_PORT_NAME "sbx.agent"

/* Mounts /dev, /proc, /sys, loads the initramfs's modules, mounts /dev/vda
 * (ext4) and makes it the root, with busybox at /.sbx/busybox, devpts,
 * cgroup2 and loopback up. Returns 0, or -1 when the root disk cannot be
 * mounted or switched to (said on the console). */
int guest_boot(void);

/* Opens the virtio-serial port named name (/sys/class/virtio-ports/ * /name);
 * returns its fd, or -1. */
int guest_open_port(const char *name);

/* Serves the agent channel on port until the VM stops; never returns. */
void guest_serve(int port);

/* Writes all n bytes (blocking fd); 0, or -1 with errno. */
int guest_write_all(int fd, const void *p, size_t n);

/* One line on the console: "sbx-agent: what[: strerror(err)]". */
void guest_say(const char *what, int err);

#endif
