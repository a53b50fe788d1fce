/* What the worker's forwarder (forward.c) shares with its file transfers
 * (forward_files.c), shells (forward_shell.c) and E2B envd calls
 * (envd*.c): the forwarder and connection structs and the helpers that
 * talk to the controller's side. Not for use outside worker/forward*.c
 * and worker/envd*.c. */
#ifndef SBX_FORWARD_INTERNAL_H
#define SBX_FORWARD_INTERNAL_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "forward.h"
#include "tls_openssl.h"

#define FORWARD_COMPONENT        "worker"
/* "host:port" strings: what the controller accepts as a route_address. */
#define FORWARD_ADDRESS_MAX      256
#define FORWARD_LISTEN_BACKLOG   128
/* After an error line the worker reads (and drops) what the controller
 * already sent for this long, at most this much, before it closes: closing
 * with unread bytes resets the connection, and the reset could overtake the
 * line. */
#define FORWARD_LINGER_MS        1000
#define FORWARD_LINGER_BYTES     (64u * 1024u)
/* accept() out of descriptors or memory: the pause before trying again, and
 * how often that is logged at most. */
#define FORWARD_ACCEPT_BACKOFF_MS 100
#define FORWARD_ACCEPT_LOG_MS     60000
#define FORWARD_WORKER_ID_MAX    128

struct forward {
    char advertise[FORWARD_ADDRESS_MAX];   /* configured; "" for the bound address */
    char listen[FORWARD_ADDRESS_MAX];      /* as configured, for messages */
    char address[FORWARD_ADDRESS_MAX];     /* forward_address(); set by forward_start */
    struct sockaddr_storage bind_addr;
    socklen_t bind_len;
    int max_connections;
    int64_t files_max_bytes; /* a download's bound (forward_options_t) */
    char *worker_name;
    runtime_t *rt;
    forward_worker_id_fn worker_id;
    void *worker_id_ud;
    unsigned char key[GRANT_KEY_BYTES];
    SSL_CTX *tls;            /* worker_route_tls_cert; NULL: plain TCP */

    int listen_fd;
    int stop_pipe[2];        /* stop writes a byte to [1]; [0] is never drained, so it
                              * stays readable in every thread's poll */
    pthread_t listener;
    bool listener_started;
    bool started;
    bool stopped;

    pthread_mutex_t mu;
    pthread_cond_t cond;     /* active went down */
    int active;              /* connection threads running */
    struct envd_table *envd; /* the envd processes (envd_process.c); made at the first envd
                              * call under mu, ended by forward_envd_stop */
    forward_session_fn session_done; /* an envd process ended (forward_options_t); NULL: not reported */
    void *session_ud;
};

/* One routed connection, owned by its thread. */
typedef struct forward_conn {
    forward_t *f;
    int client;              /* non-blocking */
    SSL *tls;                /* TLS over client (f->tls set); NULL: plain TCP */
    bool tls_failed;         /* a fatal TLS error: no close_notify may follow */
    int upstream;            /* non-blocking; -1 until connected */
    char peer[INET6_ADDRSTRLEN + 8];
    char sandbox_id[SBX_ID_MAX];   /* "" until the grant is read */
    int port;
    grant_t grant;           /* the checked grant: its purpose says what to do */
    char *up;                /* client -> sandbox, FORWARD_BUFFER_BYTES */
    size_t up_len;           /* bytes in up before the relay: what followed the preamble */
    char *down;              /* sandbox -> client */
    size_t down_len;         /* bytes in down before the relay: the 200 line */
} forward_conn_t;

/* forward_line_push into buf of cap bytes holding *len so far. */
int forward_line_push_buf(char *buf, size_t cap, size_t *len, const char *data, size_t n, size_t *ret_used);

/* True once the forwarder is stopping. */
bool forward_stopping(const forward_t *f);

/* Waits up to timeout_ms for events on fd. Returns its revents (> 0), 0 on
 * timeout, -1 when the forwarder stops first. */
int forward_wait(const forward_t *f, int fd, short events, int64_t timeout_ms);

/* recv() / send() on the controller's side, through TLS when served
 * (-1 with EAGAIN when the socket must be waited for). */
ssize_t forward_client_recv(forward_conn_t *c, void *buf, size_t n);
ssize_t forward_client_send(forward_conn_t *c, const void *buf, size_t n);

/* Plaintext TLS holds already decrypted (poll() does not see it). */
bool forward_client_pending(const forward_conn_t *c);

/* shutdown(SHUT_WR) towards the controller, after a close_notify over TLS. */
void forward_client_shutdown(forward_conn_t *c);

/* After an error line: reads and drops what the controller sent for a
 * while (FORWARD_LINGER_MS, FORWARD_LINGER_BYTES), so the close does not
 * reset the connection before the line is read. */
void forward_linger(forward_conn_t *c);
/* The same with a byte bound of its own: after a shell's EXIT frame, when
 * the controller may still be sending a large stdin (a close with unread
 * bytes would reset the connection and drop the frame unsent). */
void forward_linger_bytes(forward_conn_t *c, size_t max_bytes);

/* Sends all n bytes to the controller, waiting while its socket is full.
 * SBX_EIO when the controller is gone, stalls FORWARD_IDLE_TIMEOUT_MS, or
 * the worker stops. */
int forward_send_all(forward_conn_t *c, const void *p, size_t n);

/* Sends n bytes as frames of type (common/logframe.h), each at most
 * LOGFRAME_PAYLOAD_MAX; SBX_EIO as forward_send_all. */
int forward_send_frames(forward_conn_t *c, int type, const char *data, size_t n);

/* Answers the connection with an error line and logs why (warn; debug when
 * the worker is stopping), then lingers. The caller closes. */
void forward_refuse(forward_conn_t *c, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Answers an error of the runtime as the protocol says (400, 404, 409,
 * 413, 503 or 502); returns the outcome for the metrics: "refused" or "error". */
const char *forward_refuse_runtime(forward_conn_t *c, const api_error_t *err);

/* Reads the request line after the preamble into l (what followed it
 * stays in c->up), within the preamble's time. Refuses and returns < 0
 * when it does not come or is too long (forward_files.c). */
int forward_read_reqline(forward_conn_t *c, forward_reqline_t *l);

/* The request line of a grant bound to one (files, shell) into l, read
 * as forward_read_reqline does, then checked against the grant's digest:
 * 0; SBX_EPERM when it differs (answered 403); another < 0 when it did
 * not come (answered when there was someone to answer). */
int forward_granted_line(forward_conn_t *c, forward_reqline_t *l);

/* Serves a shell grant (GRANT_SHELL) after its preamble: the request line,
 * then the terminal's frames both ways until the command exits
 * (forward_shell.c). */
void forward_shell(forward_conn_t *c);

/* Serves an envd grant (GRANT_ENVD) after its preamble: the request line,
 * the body's frames, then the E2B envd call's answer (worker/envd.c). */
void forward_envd(forward_conn_t *c);

/* Ends every process envd calls started (each thread sees the stop pipe)
 * and waits for their threads; called by forward_stop once the
 * connections are gone (envd_process.c). */
void forward_envd_stop(forward_t *f);

/* Serves a files grant (GRANT_FILES_PUT or GRANT_FILES_GET) after its
 * preamble: the request line, then the upload or the download
 * (forward_files.c). */
void forward_files(forward_conn_t *c);

/* Serves a snapshot grant (GRANT_SNAPSHOT) after its preamble: the request
 * line, then the snapshot as a docker-save tar (forward_snapshot.c). */
void forward_snapshot(forward_conn_t *c);

#endif
