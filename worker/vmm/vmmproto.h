/* The agent channel's wire format, shared by the host library (worker/vmm/) and
 * the guest agent (worker/vmm/guest/): framed, multiplexed by channel id over
 * one virtio-serial port. Pure libc so the static guest links it too. */
#ifndef SBX_VMMPROTO_H
#define SBX_VMMPROTO_H

#include <stddef.h>
#include <stdint.h>

/* Version the host sends in HELLO; the guest answers with its own and the
 * host refuses a mismatch. */
#define VMM_PROTO_VERSION 1u

/* Every frame: a 12-byte header (little endian) then len payload bytes.
 *   u16 magic 0x5342 ("SB")   u8 type   u8 reserved (0)
 *   u32 channel               u32 len (<= SBX_VMM_FRAME_MAX)
 * Channel 0 is the control channel (HELLO); a session (exec, shell, dial)
 * lives on a channel the host picks (non-zero, unused) with OPEN and ends with
 * EXIT from the guest. A bad magic, a reserved byte not 0 or a length over the
 * bound is a broken stream: the reader drops the connection. */
#define VMM_FRAME_MAGIC   0x5342u
#define VMM_HELLO_SEED    64u
#define VMM_HELLO_CLOCK   12u
#define VMM_FRAME_HEADER  12u
/* Data (IN, OUT, ERR) travels in frames of at most this many bytes, so one
 * busy session cannot hold the port for long. */
#define VMM_DATA_CHUNK    (64u * 1024u)

typedef enum {
    VMM_F_HELLO    = 1,  /* both ways, channel 0: u32 version; the host adds VMM_HELLO_SEED random
                          * bytes the guest credits to its RNG and reseeds from, then its
                          * clock (u32 seconds low, u32 high, u32 nanoseconds since the epoch)
                          * the guest sets its own to (a restored VM wakes with the time it was
                          * saved at); the guest drops every session of an earlier host (a
                          * restored VM's) and adds its kernel release */
    VMM_F_OPEN     = 2,  /* host: u8 kind + kind's body (below) */
    VMM_F_OPENED   = 3,  /* guest: u32 pid (0 for a dial) */
    VMM_F_ERROR    = 4,  /* guest: i32 errno + message; the channel is gone */
    VMM_F_IN       = 5,  /* host: stdin / dial bytes; len 0 = end of input */
    VMM_F_OUT      = 6,  /* guest: stdout / PTY / dial bytes */
    VMM_F_ERR      = 7,  /* guest: stderr bytes */
    VMM_F_RESIZE   = 8,  /* host: u16 rows, u16 cols (PTY) */
    VMM_F_KILL     = 9,  /* host: u32 signal, sent to the session's whole tree */
    VMM_F_EXIT     = 10, /* guest: u8 how (VMM_EXIT_*), i32 code; the channel is gone */
    VMM_F_CLOSE    = 11, /* host: forget the channel (kills what still runs) */
} vmm_frame_type_t;

typedef enum {
    VMM_OPEN_EXEC = 1,   /* u32 argc, u32 envc, then cwd, argv[], env[] as NUL-ended strings */
    VMM_OPEN_PTY  = 2,   /* u16 rows, u16 cols, then as EXEC */
    VMM_OPEN_DIAL = 3,   /* u16 port (127.0.0.1 inside the guest) */
} vmm_open_kind_t;

typedef enum {
    VMM_EXIT_CODE   = 0, /* exited with code */
    VMM_EXIT_SIGNAL = 1, /* killed by signal code */
} vmm_exit_how_t;

typedef struct {
    uint8_t  type;
    uint32_t channel;
    uint32_t len;
} vmm_frame_t;

/* Writes the 12-byte header of a frame into out (VMM_FRAME_HEADER bytes). */
void vmm_frame_header_put(uint8_t *out, uint8_t type, uint32_t channel, uint32_t len);

/* Parses a header from buf (n bytes available). Returns 0 with *ret_frame set
 * when a whole header is there, 1 when more bytes are needed, -1 when the
 * header is invalid (magic, reserved byte, or len over SBX_VMM_FRAME_MAX). */
int vmm_frame_header_parse(const uint8_t *buf, size_t n, vmm_frame_t *ret_frame);

void     vmm_put_u16(uint8_t *p, uint16_t v);
void     vmm_put_u32(uint8_t *p, uint32_t v);
uint16_t vmm_get_u16(const uint8_t *p);
uint32_t vmm_get_u32(const uint8_t *p);

/* A command's description as it travels in OPEN (EXEC and PTY). */
typedef struct {
    const char *cwd;          /* "" or NULL: the guest's / */
    const char *const *argv;  /* argc strings */
    uint32_t argc;
    const char *const *env;   /* envc "K=V" strings */
    uint32_t envc;
    uint16_t rows, cols;      /* PTY only */
} vmm_cmd_t;

/* Encodes an OPEN payload for kind EXEC or PTY into out (cap bytes).
 * Returns the payload length, or -1 when it does not fit, argc is 0, the
 * counts exceed SBX_MAX_ARGV / SBX_MAX_ENV, or a string is NULL. */
long vmm_open_cmd_encode(uint8_t kind, const vmm_cmd_t *cmd, uint8_t *out, size_t cap);

/* Decodes an OPEN payload of kind EXEC or PTY (payload[0] is the kind). The
 * strings stay in payload, which the caller keeps NUL-safe (each string must
 * end with NUL inside len). argv and env are arrays the caller gives with
 * room for argv_cap / env_cap entries plus a NULL each. Returns 0, or -1 for
 * any malformed or over-bound payload. */
int vmm_open_cmd_decode(const uint8_t *payload, size_t len, vmm_cmd_t *ret_cmd,
                        const char **argv, size_t argv_cap, const char **env, size_t env_cap);

#endif
