/* A one-directory ustar archive (see tarball.h). */
#include "tarball.h"
#include "tarstream.h"
#include "errors.h"

#include <string.h>

/* ustar header fields: offset and size (POSIX.1-1988). */
#define TAR_NAME_OFF     0
#define TAR_NAME_LEN     100
#define TAR_MODE_OFF     100
#define TAR_UID_OFF      108
#define TAR_GID_OFF      116
#define TAR_SIZE_OFF     124
#define TAR_MTIME_OFF    136
#define TAR_TYPE_OFF     156
#define TAR_MAGIC_OFF    257
#define TAR_VERSION_OFF  263
#define TAR_UNAME_OFF    265
#define TAR_GNAME_OFF    297

static void tar_field(unsigned char *blk, size_t off, const char *text)
{
    memcpy(blk + off, text, strlen(text));
}

int tarball_dir(const char *name, unsigned char out[TARBALL_DIR_BYTES])
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > TAR_NAME_LEN - 2 || name[0] == '/')
        return SBX_EINVAL;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("._-/", c)))
            return SBX_EINVAL;
    }
    memset(out, 0, TARBALL_DIR_BYTES);
    unsigned char *h = out;
    memcpy(h + TAR_NAME_OFF, name, n);
    if (name[n - 1] != '/')
        h[TAR_NAME_OFF + n] = '/';
    tar_field(h, TAR_MODE_OFF, "0000755");
    tar_field(h, TAR_UID_OFF, "0000000");
    tar_field(h, TAR_GID_OFF, "0000000");
    tar_field(h, TAR_SIZE_OFF, "00000000000");
    tar_field(h, TAR_MTIME_OFF, "00000000000");
    h[TAR_TYPE_OFF] = '5'; /* directory */
    memcpy(h + TAR_MAGIC_OFF, "ustar", 6); /* with its NUL */
    memcpy(h + TAR_VERSION_OFF, "00", 2);
    tar_field(h, TAR_UNAME_OFF, "root");
    tar_field(h, TAR_GNAME_OFF, "root");
    tarstream_checksum(h);
    return 0;
}
