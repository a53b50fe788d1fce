/* Live exec output of one running exec, sent on to the controller in
 * chunks at byte offsets over both streams, and whether a client cancelled
 * it (worker/agent_output.c). */
#ifndef SBX_AGENT_OUTPUT_H
#define SBX_AGENT_OUTPUT_H

#include <stdbool.h>
#include <stdint.h>

#include "agent.h"
#include "httpc.h"
#include "runtime.h"
#include "sbuf.h"

/* Sent at least this often while output is pending, and at once when this
 * many bytes are. */
#define AGENT_OUTPUT_FLUSH_MS        250
#define AGENT_OUTPUT_CHUNK_MAX       (64u * 1024u)
/* Stream switches pending at most (a flush is forced past it). */
#define AGENT_OUTPUT_PIECES_MAX      256
/* A send that waits on a slow controller holds the exec's reading. */
#define AGENT_OUTPUT_HTTP_TIMEOUT_MS 2000L
#define AGENT_OUTPUT_RETRY_MS        1000
/* Pending bytes kept while the controller cannot be reached; older ones
 * are dropped (followers see a gap; the result keeps its own bound). */
#define AGENT_OUTPUT_BUFFER_MAX      (1024u * 1024u)

typedef struct agent_output_piece {
    int stream;        /* 1 stdout, 2 stderr */
    int64_t offset;    /* of its first byte, over both streams */
    size_t len;
} agent_output_piece_t;

typedef struct agent_output {
    runtime_output_sink_t sink;  /* give this to runtime_exec */
    agent_t *a;
    httpc_t *c;                  /* borrowed; NULL: nothing is sent */
    const char *op_id;           /* borrowed */
    int64_t attempt;
    sbuf_t buf;                  /* pending bytes, the pieces' in order */
    agent_output_piece_t pieces[AGENT_OUTPUT_PIECES_MAX];
    size_t npieces;
    int64_t next_offset;
    int64_t last_flush_ms, retry_at_ms;
    int failures;
    bool stopped;                /* the controller refused it: send no more */
    bool cancel_seen;            /* a client cancelled the exec (sticky) */
    uint64_t dropped;            /* bytes never sent */
} agent_output_t;

/* Starts the live output of op_id (attempt) sent through c (NULL: none). */
void agent_output_init(agent_output_t *ao, agent_t *a, httpc_t *c, const char *op_id, int64_t attempt);
/* Sends what is pending: final sends even inside the retry pause (once). */
void agent_output_flush(agent_output_t *ao, bool final);
/* Forgets what is pending (it is not the command's output). */
void agent_output_discard(agent_output_t *ao);
/* Frees it (logs once when bytes were dropped). */
void agent_output_release(agent_output_t *ao);

#endif
