/* A small JSON-over-HTTP client (libcurl) used by the CLI, the worker agent
 * and sandbox-mcp. One httpc_t per thread; it reuses its connection. */
#ifndef SBX_HTTPC_H
#define SBX_HTTPC_H

#include <json-c/json.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct httpc httpc_t;

typedef struct httpc_response {
    long status;          /* HTTP status, 0 when no response arrived */
    char *body;           /* NUL-terminated, owned; at most SBX_MAX_RESPONSE_BYTES */
    size_t body_len;
    json_object *json;    /* parsed body when it is JSON, else NULL; owned */
    char error[256];      /* transport error text when status == 0 */
} httpc_response_t;

/* Creates a client for base_url ("http://host:port", no trailing path) with
 * an optional bearer token (copied). Returns 0 or SBX_ENOMEM/SBX_EINVAL.
 * Requires curl_global_init once per process. */
int httpc_new(const char *base_url, const char *token, httpc_t **ret);
void httpc_free(httpc_t *c);

/* Verifies an https server against the PEM CA file path (copied) instead
 * of the system's CAs; NULL or "" goes back to the system's. Verification
 * of the certificate and host name is never turned off. Returns 0 or
 * SBX_ENOMEM. */
int httpc_set_ca_file(httpc_t *c, const char *path);

/* Points later requests at another base URL (failover between controllers).
 * Returns 0 or SBX_ENOMEM/SBX_EINVAL (the old base stays). */
int httpc_set_base(httpc_t *c, const char *base_url);

/* Sends method path (e.g. "/v1/sandboxes?tenant=a") with an optional JSON
 * body and optional extra header lines ("Idempotency-Key: k", NULL-ended).
 * timeout_ms bounds the whole exchange (0: none).
 * Returns 0 when a response arrived (whatever its status; ret filled),
 * SBX_ETIMEOUT when the deadline passed, SBX_EIO for other transport
 * failures (ret->error says why), SBX_ETOOBIG when the body passed the cap.
 * Always call httpc_response_release on ret afterwards. */
int httpc_request(httpc_t *c, const char *method, const char *path, json_object *body,
                  const char *const *headers, long timeout_ms, httpc_response_t *ret);

void httpc_response_release(httpc_response_t *r);

/* An upgraded request (sandbox shell): connects to the base URL (TLS as
 * for requests, CURLOPT_CONNECT_ONLY) and sends "POST path HTTP/1.1" with
 * Host, the token, Connection: Upgrade and "Upgrade: upgrade", no body.
 * 0 with *ret_curl (curl_easy_send/curl_easy_recv on it; curl_easy_cleanup
 * at the end) and *ret_fd its socket (for poll); SBX_EIO with why in err.
 * The answer's head is the caller's to read. */
int httpc_upgrade_open(httpc_t *c, const char *path, const char *upgrade, void **ret_curl, int *ret_fd, char *err,
                       size_t errlen);

/* Receives one line of a streamed body (without its '\n'; a final line
 * without one is delivered too). Returning < 0 ends the transfer. */
typedef int (*httpc_line_fn)(void *ud, const char *line, size_t len);

/* GET path and stream the answer: for a 2xx status each line of the body
 * goes to on_line as it arrives (never buffered whole; a line longer than
 * max_line bytes ends the transfer with SBX_ETOOBIG); any other status
 * keeps its (bounded) body in ret as httpc_request does, for
 * httpc_api_error. timeout_ms bounds the whole exchange (0: none). Returns
 * 0 when the answer ended (ret->status set), SBX_ECANCELLED when on_line
 * asked to stop or the abort flag was raised, else as httpc_request. Always
 * call httpc_response_release on ret afterwards. */
int httpc_stream_lines(httpc_t *c, const char *path, long timeout_ms, size_t max_line, httpc_line_fn on_line,
                       void *ud, httpc_response_t *ret);

/* A streamed transfer's body source: up to n bytes into buf; returns how
 * many (0: the body ended), or < 0 to abort the transfer. */
typedef long (*httpc_read_fn)(void *ud, char *buf, size_t n);
/* A streamed answer's bytes as they arrive; < 0 aborts the transfer. */
typedef int (*httpc_write_fn)(void *ud, const char *data, size_t n);

/* method path with a streamed body and/or answer, never held whole: with
 * rd the request body comes from it (size >= 0: exactly that many bytes,
 * sent with Content-Length; -1: chunked); with wr a 2xx answer's body
 * goes to it as it arrives (without wr a 2xx body is kept in ret, bounded,
 * as httpc_request keeps it); any other status keeps its bounded body in
 * ret for httpc_api_error. *ret_header, when asked, gets the value of the
 * answer's header header_name (malloc'd; NULL when absent). The return is
 * as httpc_stream_lines' (SBX_ECANCELLED when a callback aborted). Always
 * call httpc_response_release on ret afterwards. */
int httpc_transfer(httpc_t *c, const char *method, const char *path, int64_t size, httpc_read_fn rd,
                   httpc_write_fn wr, void *ud, const char *header_name, char **ret_header, long timeout_ms,
                   httpc_response_t *ret);

/* Makes every later request on c abort (SBX_EIO, error "aborted") soon after
 * *flag becomes non-zero, e.g. to end a worker's long-poll at shutdown. */
void httpc_set_abort_flag(httpc_t *c, const atomic_int *flag);

/* For a non-2xx response: the API's error code and message (pointers into
 * r->json, or generic text when the body is not an API error). */
void httpc_api_error(const httpc_response_t *r, const char **ret_code, const char **ret_message);

/* Percent-encodes s for a URL path or query component into a malloc'd string. */
char *httpc_escape(const char *s);

#endif
