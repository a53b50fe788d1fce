/* The worker agent: registers with the controller, long-polls for leased
 * assignments, runs them on a bounded pool of executor threads through the
 * runtime, reports outcomes with their fencing token, and heartbeats
 * capacity and inventory. Keeps no durable state. */
#ifndef SBX_AGENT_H
#define SBX_AGENT_H

#include <json-c/json.h>
#include <stddef.h>

#include "config.h"
#include "runtime.h"

typedef struct agent agent_t;

/* Reads controller_url, worker_* settings (worker_runtime picks the backend,
 * runtime_open) and the backend's own settings from cfg (copied).
 * token overrides worker_token when not NULL. Returns 0, SBX_EINVAL (with a
 * reason in err: also a worker_route_listen on all addresses without
 * worker_route_advertise) or SBX_EUNAVAIL when the runtime cannot be
 * reached. */
int agent_new(const cfg_t *cfg, const char *token, agent_t **ret, char *err, size_t errlen);

/* Room for a worker name as agent_worker_name writes it. */
#define AGENT_NAME_BUF 256

/* The worker's name as cfg gives it: worker_name, else the host name, else
 * "worker". 0, or SBX_EINVAL when it is longer than SBX_MAX_NAME_BYTES. */
int agent_worker_name(const cfg_t *cfg, char ret[AGENT_NAME_BUF]);

/* As agent_new, with the runtime rt instead of the one worker_runtime
 * names (the agent owns rt from the call on, also when it fails): for
 * tests driving the agent against a fake runtime. */
int agent_new_with_runtime(const cfg_t *cfg, const char *token, runtime_t *rt, agent_t **ret, char *err,
                           size_t errlen);

/* Starts the route forwarder (binding worker_route_listen) and the threads;
 * on failure a one-line reason is in err. Registration, which advertises
 * the forwarder's address as route_address, is retried with backoff in the
 * background until the controller answers. */
int agent_start(agent_t *a, char *err, size_t errlen);

/* The worker id from the last registration ("" before the first) into ret.
 * Thread-safe. */
void agent_worker_id(agent_t *a, char *ret, size_t retlen);

/* Closes the route listener and every routed connection, then stops
 * taking new work (the long-poll is aborted at once; queued but not
 * started assignments are left to their lease expiry), waits for in-flight
 * assignments to finish and report, and joins the threads. After a 20 s
 * grace the runtime is cancelled: a running exec is killed and reported
 * failed. Idempotent; safe before agent_start. */
void agent_stop(agent_t *a);

void agent_free(agent_t *a);

/* What the runtime's probe found for class cls (runtime_probe_result: "ok: ...",
 * "not offered: ..." or NULL). Valid from agent_new to agent_free. */
const char *agent_probe_result(const agent_t *a, isolation_t cls);

/* Runs one assignment (a leased operation as the controller hands it out:
 * operation_id, attempt, kind create|delete|exec, sandbox_id, ...) on the
 * runtime and returns the report body for POST /v1/workers/{id}/report (new
 * reference): outcome, error {code, message}, runtime_ref, result (exec),
 * observed (a create whose container stopped). NULL when nothing is to be
 * reported: an assignment without operation_id or attempt (dropped), or
 * one the runtime gave up on at shutdown (API_CANCELLED: left to its lease
 * expiry; an exec is reported failed instead, as it must not run twice). */
json_object *agent_run_assignment(agent_t *a, json_object *job);

/* The exec result object of docs/api.md for r (new reference): stdout and
 * stderr as UTF-8 (invalid bytes replaced), *_bytes the bytes the command
 * wrote. When the serialised object would pass max_json_bytes (escaping can
 * grow text up to six-fold), the kept text is cut further, at character
 * boundaries, and marked truncated. NULL only on allocation failure. */
json_object *agent_exec_result_json(const runtime_exec_result_t *r, size_t max_json_bytes);

#endif
