/* libFuzzer harness: the settings file parser (cfg_load_file) over a file
 * holding the input, and cfg_set over NAME=VALUE. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cfg_t c;
    char err[512];
    if (cfg_init(&c) < 0)
        return 0;
    int fd = memfd_create("fuzz-config", 0);
    if (fd >= 0) {
        if (write(fd, data, size) == (ssize_t)size) {
            char path[64];
            snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
            err[0] = '\0';
            if (cfg_load_file(&c, path, err, sizeof err) < 0 && !err[0])
                abort();
        }
        close(fd);
    }
    char *s = malloc(size + 1);
    if (s) {
        memcpy(s, data, size);
        s[size] = '\0';
        char *eq = strchr(s, '=');
        if (eq) {
            *eq = '\0';
            err[0] = '\0';
            if (cfg_set(&c, s, eq + 1, "fuzz", err, sizeof err) < 0 && !err[0])
                abort();
        }
        free(s);
    }
    cfg_release(&c);
    return 0;
}
