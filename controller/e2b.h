/* E2B's API, spoken under /e2b so that the official E2B SDKs drive
 * Sandbox with nothing changed but their environment (docs/e2b.md):
 * E2B_API_URL=URL/e2b is the control API (controller/e2b.c: sandboxes
 * created, listed, read, killed, their timeout set, connected to), and
 * E2B_SANDBOX_URL=URL/e2b/envd is envd, the SDK's in-sandbox daemon, which
 * Sandbox serves on the worker that runs the sandbox (worker/envd.h): the
 * controller authenticates each envd call and relays it there
 * (api_envd_relay, controller/api_files.c). The key is a Sandbox token
 * (X-API-Key; envd calls carry it as X-Access-Token, the create answer's
 * envdAccessToken): tenancy, quotas, rate limits, policy and trust
 * classification apply exactly as for /v1. */
#ifndef SBX_E2B_H
#define SBX_E2B_H

#include "errors.h"
#include "server.h"

/* The envd version the control API reports: the SDK turns on what envd
 * offers from each version on; 0.5.6 has closing stdin (0.5.2) and no user
 * by default (0.4.0), and keeps uploads multipart (octet-stream and gzip
 * uploads come at 0.5.7, file metadata at 0.6.2: the SDK refuses those
 * itself, with a clear TemplateError). */
#define E2B_ENVD_VERSION "0.5.6"

/* An error in E2B's REST shape, {"code":STATUS,"message":msg}, with code's
 * status (what the SDK's error classes are chosen by). */
void e2b_reply_error(req_t *rq, api_code_t code, const char *msg);
/* The same with a status of its own, whatever the request's dialect (502
 * for a sandbox envd does not know, 501 for what Sandbox does not do). */
void e2b_reply_status(req_t *rq, int status, const char *msg);
/* An error of a Connect call (envd's process and filesystem services):
 * {"code":"not_found","message":msg} with the Connect code's status, or,
 * for a streaming call (application/connect+json), a 200 stream holding
 * only its end message with that error. */
void e2b_reply_connect_error(req_t *rq, api_code_t code, const char *msg);
/* The Connect code ("not_found", "unavailable", …) an API error code
 * becomes, and that code's HTTP status. */
const char *e2b_connect_code(api_code_t code, int *ret_status);

/* E2B's template builds (controller/e2b_build.c): requestBuild,
 * triggerBuild, getBuildStatus and getFileUploadLink. */
void e2b_template_request(req_t *rq);
void e2b_template_build_start(req_t *rq, const char *tmpl, const char *build_id);
void e2b_template_build_status(req_t *rq, const char *tmpl, const char *build_id);
void e2b_template_files(req_t *rq, const char *tmpl, const char *hash);
void e2b_template_file_upload(req_t *rq, const char *tmpl, const char *hash);

/* Relays one envd call for sandbox_id to the worker that runs it (a grant
 * of purpose GRANT_ENVD, docs/worker.md "E2B envd"): path is what follows
 * /e2b/envd ("/health", "/files", "/process.Process/Start"); the request's
 * body (streamed by controller/apiconn.c) goes up as frames and the
 * worker's answer comes back as it is produced. The request is owned
 * from here (answered in every case). */
void api_envd_relay(req_t *rq, const char *sandbox_id, const char *path);

#endif
