/* sandbox-mcp's tool table: each tool's name, texts, schemas (as data) and
 * handler in one row, turned into what tools/list shows once at start; the
 * argument checks and readers the handlers share; running a call's tool. */
#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "httpc.h"
#include "jsonx.h"
#include "mcp.h"
#include "mcp_int.h"

/* The schemas are written with ' for " (no apostrophes in the texts) and
 * turned into JSON once at start. */
#define STR "{'type':'string'}"
#define KV  "{'type':'object','additionalProperties':{'type':'string'}}"
/* An input property of those types with its description. */
#define DSTR(d) "{'type':'string','description':'" d "'}"
#define DKV(d)  "{'type':'object','additionalProperties':{'type':'string'},'description':'" d "'}"
#define SBX_ID  DSTR("the sandbox id (sbx_...) or its name")
#define OP_ID   DSTR("the operation id (op_...)")
#define IDEM    DSTR("retrying with the same key returns the same answer")
/* The objects the API shows (docs/api.md), typed as far as a client needs
 * to rely on them; every other field is there as the API has it. Kept
 * short: each is in several tools' outputSchema, and tools/list is read
 * into an agent's context. */
#define OP_SCHEMA                                                                                  \
    "{'type':'object','properties':{'id':" STR ",'kind':" STR ",'state':{'type':'string','enum':"  \
    "['pending','admitted','leased','running','succeeded','failed','cancelled']}},"                 \
    "'required':['id','kind','state']}"
#define SBX_SCHEMA                                                                                 \
    "{'type':'object','properties':{'id':" STR ",'name':" STR ",'phase':" STR "},'required':['id','phase']}"
#define EVENT_SCHEMA                                                                               \
    "{'type':'object','properties':{'id':{'type':'integer'},'ts':" STR ",'kind':" STR ",'data':"   \
    "{'type':'object'}},'required':['id','ts','kind','data']}"
#define SNP_SCHEMA                                                                                 \
    "{'type':'object','properties':{'id':" STR ",'name':" STR ",'state':{'type':'string','enum':"       \
    "['pending','ready','failed','deleted']}},'required':['id','state']}"
#define VOL_SCHEMA                                                                                 \
    "{'type':'object','properties':{'id':" STR ",'name':" STR ",'state':{'type':'string','enum':"       \
    "['unplaced','ready','deleted']},'size_mib':{'type':'integer'}},'required':['id','state']}"
#define ROUTE_SCHEMA                                                                               \
    "{'type':'object','properties':{'id':" STR ",'port':{'type':'integer'},'auth':{'type':'string'," \
    "'enum':['token','public']},'url':" STR "},'required':['id','port','auth','url']}"
/* wait and timeout_seconds of a tool that starts an operation; d is the
 * default of wait. */
#define WAIT_PROPS_DEFAULT(d)                                                                              \
    "'wait':{'type':'boolean','description':'wait for the operation to finish (default " d ")'},"        \
    "'timeout_seconds':{'type':'integer','minimum':1,'maximum':3600,'description':'how long to wait "     \
    "(default 300); the operation goes on after it'}"
#define WAIT_PROPS WAIT_PROPS_DEFAULT("false")

const mcp_tool_t tool_table[] = {
    { .run = tool_create, .def = { "sandbox_create", "Create a sandbox",
      "Creates a disposable sandbox (a container with bounded cpu, memory and lifetime). Describe the work "
      "honestly: untrusted_repo, generated_code and hostile decide the isolation; the server refuses rather "
      "than run it weaker. Network is none unless asked. Leave image out to get the server's default image "
      "(a small local busybox image unless the operator set another). Returns the sandbox and its create "
      "operation; with wait=true, once that operation finished.",
      "{'type':'object','properties':{'name':{'type':'string','description':'a name for the sandbox, usable "
      "as its sandbox_id in every other tool; unique in the tenant until it is deleted'},"
      "'image':{'type':'string','description':'container image; when absent "
      "the server uses its default_image (sandbox/busybox:latest unless the operator changed it). Name one "
      "only when the task needs tools the default lacks and the tenant policy allows it'},'tenant':"
      DSTR("the tenant to create it in (default: the tenant of the token)") ",'from':" DSTR("a ready snapshot "
      "(id or name) to start from: its files and image, on its worker (a microvm snapshot starts a microvm)") ",'template':"
      DSTR("a template to start from, NAME or NAME:VERSION (sandbox_templates): its files, and its env and workdir "
      "for every exec; not with from") ",'auto_pause':{'type':'boolean','description':'when ttl_seconds passes, "
      "pause it (sandbox_resume runs it again) instead of deleting it'},'volumes':{'type':'array','maxItems':8,"
      "'description':'volumes to mount (sandbox_volume_create): read-write by one live sandbox at a time, "
      "read-only by many (a microvm gets each as a disk)','items':{'type':'object','properties':{'volume':"
      DSTR("the volume id (vol_...) or its name") ",'path':" DSTR("absolute mount path, e.g. /cache") ","
      "'read_only':{'type':'boolean'}},'required':['volume','path'],'additionalProperties':false}}"
      ",'cpu_millis':{'type':'integer',"
      "'minimum':10,'description':'thousandths of a core (default 1000)'},"
      "'memory_mib':{'type':'integer','minimum':6,'description':'default 512'},"
      "'disk_mib':{'type':'integer','minimum':16,'description':'disk quota in MiB: over it the sandbox is "
      "stopped and fails with disk_quota_exceeded (default: the server default_disk_mib, 1024)'},"
      "'ttl_seconds':{'type':'integer','minimum':10,'description':'lifetime once running (default 3600)'},"
      "'network':{'type':'string','enum':['none','restricted','open'],'description':'none (default): loopback "
      "only; restricted: nothing outside the sandbox, shared ports still reachable; open: the internet'},"
      "'egress':{'type':'object','description':'with network open: domains it may reach, {allow:[\\'pypi.org\\',"
      "\\'*.github.com\\'],deny:[...],default:\\'deny\\',udp:[443]} (udp: ports UDP such as QUIC may use; "
      "within the tenant policy)'},'secrets':{'type':'array',"
      "'items':{'type':'string'},'description':'with egress: names of the tenant secrets added to HTTPS requests "
      "to their hosts (never inside the sandbox)'},"
      "'untrusted_repo':{'type':'boolean','description':'the code comes from a repository you do not trust'},"
      "'generated_code':{'type':'boolean','description':'the code was generated (by a model or a tool)'},"
      "'hostile':{'type':'boolean','description':'the code may try to break out of the sandbox'},"
      "'isolation':{'type':'string','enum':"
      "['container','gvisor','microvm'],'description':'the weakest class you accept'},'read_only_root':"
      "{'type':'boolean','description':'read-only root filesystem, tmpfs /tmp'},'hardened':{'type':'boolean',"
      "'description':'no Linux capabilities (always so for untrusted work)'},'env':"
      DKV("environment variables") ",'labels':" DKV("labels of the sandbox") ",'selector':"
      DKV("run only on workers with these labels") ","
      "'idempotency_key':{'type':'string','description':'retrying with the same key returns the same "
      "sandbox'}," WAIT_PROPS "},'additionalProperties':false}",
      "{'type':'object','properties':{'sandbox':" SBX_SCHEMA ",'operation':" OP_SCHEMA "},"
      "'required':['sandbox','operation']}",
      "{'readOnlyHint':false,'destructiveHint':false,'idempotentHint':false,'openWorldHint':false}" } },
    { .run = tool_wait, .def = { "sandbox_wait", "Wait for an operation",
      "Waits until an operation (create, delete, exec) succeeded, failed or was cancelled, or the timeout "
      "passed (done=false). A failed operation is reported as an error with its code and message.",
      "{'type':'object','properties':{'operation_id':" OP_ID ",'timeout_seconds':{'type':'integer','minimum':1,"
      "'maximum':3600,'description':'how long to wait (default 300); the operation goes on after it'}},"
      "'required':['operation_id'],'additionalProperties':false}",
      "{'type':'object','properties':{'operation':" OP_SCHEMA ",'done':{'type':'boolean'}},"
      "'required':['operation','done']}",
      "{'readOnlyHint':true,'openWorldHint':false}" } },
    { .run = tool_exec, .def = { "sandbox_exec", "Run a command in a sandbox",
      "Runs argv (an array, no shell) in a running sandbox and waits for it, with stdin (text) or stdin_b64 "
      "(bytes) as its input when given. Output is bounded: check the truncation flags. A non-zero exit code "
      "is a result, not an error. With detach it returns the operation_id at once instead.",
      "{'type':'object','properties':{'sandbox_id':" SBX_ID ",'argv':{'type':'array','items':{'type':'string'},"
      "'minItems':1,'description':'the command and its arguments, run without a shell'},'timeout_seconds':"
      "{'type':'integer','minimum':1,'description':'kill the command after this (default 600)'},"
      "'env':" DKV("environment variables of the command") ",'cwd':"
      DSTR("the working directory of the command") ",'user':" DSTR("run as this user, name[:group] or ids (default: "
      "the USER of the image); container and gvisor") ",'max_output_bytes':{'type':'integer','minimum':1,"
      "'description':'bound per stream'},'stdin':" DSTR("text written to the stdin of the command, which is then "
      "closed (EOF); at most 524288 bytes; without stdin and stdin_b64 the stdin of the command is empty") ","
      "'stdin_b64':" DSTR("the stdin of the command as standard padded base64, for bytes that are not text; at most "
      "524288 bytes decoded; not together with stdin") ",'detach':{'type':'boolean','description':'start the "
      "command and return its operation_id at once (default false): read its output with sandbox_exec_output, "
      "stop it with sandbox_cancel; use it for servers, watchers and anything longer than a few minutes, with "
      "timeout_seconds up to 86400'}},'required':['sandbox_id','argv'],"
      "'additionalProperties':false}",
      "{'type':'object','properties':{'operation_id':" STR ",'exit_code':{'type':'integer'},'signal':"
      "{'type':'integer'},'timed_out':{'type':'boolean'},'duration_ms':{'type':'integer'},'stdout':" STR ","
      "'stderr':" STR ",'stdout_truncated':{'type':'boolean'},'stderr_truncated':{'type':'boolean'},"
      "'stdout_bytes':{'type':'integer'},'stderr_bytes':{'type':'integer'},'state':" STR ",'detached':"
      "{'type':'boolean'},'stdout_b64':" DSTR("the exact "
      "stdout bytes as base64, present only when they are not UTF-8 text (stdout then has U+FFFD for them)")
      ",'stderr_b64':" DSTR("as stdout_b64, for stderr") "},'required':['operation_id']}",
      "{'readOnlyHint':false,'destructiveHint':false,'idempotentHint':false,'openWorldHint':false}" } },
    { .run = tool_get, .def = { "sandbox_get", "Show a sandbox",
      "Shows a sandbox and its newest operations in short (kind, state, error, where it was placed, an exec's "
      "exit code); operation_get shows one whole.",
      "{'type':'object','properties':{'sandbox_id':" SBX_ID "},'required':['sandbox_id'],"
      "'additionalProperties':false}",
      "{'type':'object','properties':{'sandbox':" SBX_SCHEMA ",'operations':{'type':'array','items':" OP_SCHEMA
      "}},'required':['sandbox','operations']}",
      "{'readOnlyHint':true,'openWorldHint':false}" } },
    { .run = tool_list, .def = { "sandbox_list", "List sandboxes",
      "Lists the sandboxes this token may see, newest first; deleted ones only with all=true. When more "
      "follow, next is a cursor: pass it as after for the next page.",
      "{'type':'object','properties':{'tenant':" DSTR("only this tenant (an admin token sees every tenant)")
      ",'all':{'type':'boolean','description':'include deleted sandboxes'},'limit':{'type':'integer',"
      "'minimum':1,'maximum':1000,'description':'at most this many (default 100)'},'after':"
      DSTR("the next cursor of a previous answer: the page after it") ",'labels':" DKV("only sandboxes with all "
      "these labels") ",'phase':" DSTR("only sandboxes in these phases, comma-separated (running,failed); deleted "
      "ones too when deleted is named") "},'additionalProperties':false}",
      "{'type':'object','properties':{'sandboxes':{'type':'array','items':" SBX_SCHEMA "},"
      "'next':{'type':['string','null']}},'required':['sandboxes']}",
      "{'readOnlyHint':true,'openWorldHint':false}" } },
    { .run = tool_images, .def = { "sandbox_list_images", "List the images sandboxes can use",
      "Lists the images the workers have that this token's tenant may use (name, isolation classes, workers, "
      "size in bytes, created), "
      "and default_image, what a create without image gets. Call it before naming an image in sandbox_create; "
      "not_allowed counts the workers' images the tenant policy refuses, allowed lists its patterns.",
      "{'type':'object','properties':{'tenant':" DSTR("(admin token) only what this tenant may use") "},"
      "'additionalProperties':false}",
      "{'type':'object','properties':{'images':{'type':'array','items':{'type':'object','properties':{'name':" STR
      ",'workers':{'type':'array','items':" STR "},'isolation':{'type':'array','items':" STR "},"
      "'size':{'type':['integer','null']},'created':{'type':['string','null']}}}},"
      "'default_image':" STR ",'tenant':" STR ",'allowed':{'type':'array','items':" STR "},"
      "'not_allowed':{'type':'integer'}},'required':['images']}",
      "{'readOnlyHint':true,'openWorldHint':false}" } },
    { .run = tool_delete, .def = { "sandbox_delete", "Delete a sandbox",
      "Deletes a sandbox and everything it holds. Do this when the task ends, also after a failure.",
      "{'type':'object','properties':{'sandbox_id':" SBX_ID ",'idempotency_key':" IDEM "," WAIT_PROPS "},"
      "'required':['sandbox_id'],'additionalProperties':false}",
      "{'type':'object','properties':{'operation':" OP_SCHEMA "},'required':['operation']}",
      "{'readOnlyHint':false,'destructiveHint':true,'idempotentHint':true,'openWorldHint':false}" } },
    { .run = tool_extend, .def = { "sandbox_extend", "Set when a sandbox expires",
      "Sets a sandbox to expire ttl_seconds from now (not from its old expiry): use it before a long task when "
      "expires_at (sandbox_get) is near, or to let a sandbox go soon. Bounded by the tenant policy and the server "
      "(policy_denied names the limit: ask for less). A sandbox not running yet gets ttl_seconds as its TTL, "
      "counted from when it starts (expires_at null). A sandbox that is being deleted, deleted, failed or lost "
      "cannot be extended (conflict): create a new one. Finished when it returns; returns the new expires_at.",
      "{'type':'object','properties':{'sandbox_id':" SBX_ID ",'ttl_seconds':{'type':'integer','minimum':1,"
      "'maximum':2592000,'description':'the sandbox expires this many seconds from now; at most the tenant "
      "policy max_ttl_seconds and the server ceiling (86400 unless the operator changed it)'},"
      "'idempotency_key':" DSTR("retrying with the same key returns the same operation and moves the expiry "
      "only once") "},'required':['sandbox_id','ttl_seconds'],'additionalProperties':false}",
      "{'type':'object','properties':{'operation':" OP_SCHEMA ",'expires_at':{'type':['string','null'],"
      "'description':'when the sandbox now expires (UTC); null when it is not running yet'},"
      "'previous_expires_at':{'type':['string','null']}},'required':['operation','expires_at']}",
      "{'readOnlyHint':false,'destructiveHint':false,'idempotentHint':false,'openWorldHint':false}" } },
    { .run = tool_pause, .def = { "sandbox_pause", "Pause a sandbox",
      "Pauses a running sandbox: its processes stop; its files, routes and place on its worker are kept and its "
      "TTL clock stops. Until sandbox_resume, exec and files are refused and routes answer 503. On container and "
      "gvisor memory is not kept (memory false): the main process starts again on resume. Not for microvm.",
      "{'type':'object','properties':{'sandbox_id':" SBX_ID ",'wait':{'type':'boolean','description':'wait until "
      "it is paused (default true)'}},'required':['sandbox_id'],'additionalProperties':false}",
      "{'type':'object','properties':{'operation':" OP_SCHEMA ",'memory':{'type':'boolean','description':"
      "'whether its memory was kept'}},'required':['operation']}",
      "{'readOnlyHint':false,'destructiveHint':true,'idempotentHint':false,'openWorldHint':false}" } },
    { .run = tool_network, .def = { "sandbox_network", "Change a sandbox's egress rules",
      "Replaces the egress rules of a running sandbox created with egress; they apply at once. List every domain "
      "it still needs. Current rules: sandbox_get's egress.",
      "{'type':'object','properties':{'sandbox_id':" SBX_ID ",'egress':{'type':'object','description':'{allow:["
      "\\'pypi.org\\',\\'*.github.com\\'],deny:[...],default:\\'deny\\',udp:[443]}'},'wait':{'type':'boolean',"
      "'description':'wait until it applies (default true)'}},'required':['sandbox_id','egress'],"
      "'additionalProperties':false}",
      "{'type':'object','properties':{'operation':" OP_SCHEMA "},'required':['operation']}",
      "{'readOnlyHint':false,'destructiveHint':false,'idempotentHint':true,'openWorldHint':false}" } },
    { .run = tool_resume, .def = { "sandbox_resume", "Resume a paused sandbox",
      "Runs a paused sandbox again with the same id, files and routes; its TTL goes on from what it had left.",
      "{'type':'object','properties':{'sandbox_id':" SBX_ID ",'wait':{'type':'boolean','description':'wait until "
      "it runs (default true)'}},'required':['sandbox_id'],'additionalProperties':false}",
      "{'type':'object','properties':{'operation':" OP_SCHEMA "},'required':['operation']}",
      "{'readOnlyHint':false,'destructiveHint':false,'idempotentHint':false,'openWorldHint':false}" } },
    { .run = tool_operation, .def = { "operation_get", "Show an operation",
      "Shows an operation: kind, state, error, placement and, for exec, the result.",
      "{'type':'object','properties':{'operation_id':" OP_ID "},'required':['operation_id'],"
      "'additionalProperties':false}",
      "{'type':'object','properties':{'operation':" OP_SCHEMA "},'required':['operation']}",
      "{'readOnlyHint':true,'openWorldHint':false}" } },
    { .run = tool_exec_output, .def = { "sandbox_exec_output", "Read the output of an exec",
      "Reads the live output of an exec operation (a running or finished command) from a byte offset over both "
      "streams: chunks of stdout and stderr in the order they were written. Read on with offset = next_offset "
      "until done is true; the exit code is then in operation_get. With wait_seconds it waits for new output.",
      "{'type':'object','properties':{'operation_id':" OP_ID ",'offset':{'type':'integer','minimum':0,"
      "'description':'the byte offset to read from: 0 at first, then the next_offset of the previous call'},"
      "'wait_seconds':{'type':'integer','minimum':0,'maximum':20,'description':'wait up to this long for output "
      "past offset when there is none yet (default 0: answer at once)'}},'required':['operation_id'],"
      "'additionalProperties':false}",
      "{'type':'object','properties':{'chunks':{'type':'array','items':{'type':'object','properties':{'stream':"
      STR ",'offset':{'type':'integer'},'data':" DSTR("the chunk as UTF-8 text") ",'data_b64':"
      DSTR("the exact bytes as base64, present only when data is not exactly them") "}}},'next_offset':"
      "{'type':'integer'},'end_offset':{'type':'integer'},'skipped_bytes':{'type':'integer','description':"
      "'output before the oldest kept byte that could not be read any more'},'done':{'type':'boolean'},"
      "'state':" STR "},'required':['chunks','next_offset','done']}",
      "{'readOnlyHint':true,'openWorldHint':false}" } },
    { .run = tool_cancel, .def = { "sandbox_cancel", "Cancel an exec",
      "Cancels an exec operation: one not yet running ends cancelled at once; a running one has its process "
      "tree killed by its worker within a few seconds and then ends cancelled (its output so far stays readable "
      "with sandbox_exec_output). Use it to stop a detached command. Other kinds, or an exec that already "
      "ended, are a conflict.",
      "{'type':'object','properties':{'operation_id':" OP_ID "},'required':['operation_id'],"
      "'additionalProperties':false}",
      "{'type':'object','properties':{'operation':" OP_SCHEMA "},'required':['operation']}",
      "{'readOnlyHint':false,'destructiveHint':true,'idempotentHint':true,'openWorldHint':false}" } },
    { .run = tool_share, .def = { "sandbox_share", "Share a port of a sandbox",
      "Gives a port of a running sandbox a public address (a route), to show a web app or an API to a person "
      "or a program outside. Returns route.url and, with auth token (the default), access_token: callers send "
      "it as Authorization: Bearer TOKEN. The access token is shown only in this result and never again: keep "
      "it (a retry with the same idempotency_key returns the route without it). Share only what the task needs, "
      "with a ttl_seconds; the route goes away with sandbox_unshare, its TTL, or the sandbox.",
      "{'type':'object','properties':{'sandbox_id':" SBX_ID ",'port':{'type':'integer','minimum':1,'maximum':"
      "65535,'description':'the port the app listens on inside the sandbox'},'ttl_seconds':{'type':'integer',"
      "'minimum':10,'description':'remove the route after this (default: when the sandbox goes)'},'auth':"
      "{'type':'string','enum':['token','public'],'description':'token (default): callers need the access "
      "token; public: anyone with the URL'},'idempotency_key':"
      DSTR("retrying with the same key returns the same route, without its access token") ","
      WAIT_PROPS_DEFAULT("true") "},"
      "'required':['sandbox_id','port'],'additionalProperties':false}",
      "{'type':'object','properties':{'route':" ROUTE_SCHEMA ",'operation':" OP_SCHEMA ",'access_token':"
      "{'type':'string','description':'shown only now'}},'required':['route','operation']}",
      "{'readOnlyHint':false,'destructiveHint':false,'idempotentHint':false,'openWorldHint':false}" } },
    { .run = tool_routes, .def = { "sandbox_routes", "List the routes of a sandbox",
      "Lists the public routes of a sandbox (active ones; removed ones too with all=true), with their URLs. "
      "Access tokens are never shown again.",
      "{'type':'object','properties':{'sandbox_id':" SBX_ID ",'all':{'type':'boolean','description':'include "
      "removed routes'}},'required':['sandbox_id'],'additionalProperties':false}",
      "{'type':'object','properties':{'routes':{'type':'array','items':" ROUTE_SCHEMA "}},'required':['routes']}",
      "{'readOnlyHint':true,'openWorldHint':false}" } },
    { .run = tool_unshare, .def = { "sandbox_unshare", "Remove a route",
      "Removes a public route of a sandbox: its URL stops answering. Do this as soon as nobody needs the "
      "address any more; deleting the sandbox removes its routes as well.",
      "{'type':'object','properties':{'sandbox_id':" SBX_ID ",'route_id':" DSTR("the route id (rt_...)") ","
      WAIT_PROPS_DEFAULT("true") "},"
      "'required':['sandbox_id','route_id'],'additionalProperties':false}",
      "{'type':'object','properties':{'operation':" OP_SCHEMA "},'required':['operation']}",
      "{'readOnlyHint':false,'destructiveHint':true,'idempotentHint':true,'openWorldHint':false}" } },
    { .run = tool_pools, .def = { "sandbox_pools", "List warm pools",
      "Lists the warm pools this token may take sandboxes from (its tenant's and the shared ones): each "
      "keeps size sandboxes of one spec running ahead of demand. A sandbox_create with the same image, "
      "cpu_millis, memory_mib, disk_mib, network and isolation class, and no env or selector, takes a ready "
      "one and is running at once (its sandbox then names the pool); otherwise it is an ordinary create. "
      "Operators declare pools with the sandbox CLI (sandbox pools create).",
      "{'type':'object','properties':{},'additionalProperties':false}",
      "{'type':'object','properties':{'pools':{'type':'array','items':{'type':'object','properties':{"
      "'name':{'type':'string'},'tenant':{'type':['string','null'],'description':'null: every tenant may "
      "claim'},'image':{'type':'string'},'cpu_millis':{'type':'integer'},'memory_mib':{'type':'integer'},"
      "'disk_mib':{'type':'integer'},'network':{'type':'string'},'isolation':{'type':'string'},'size':"
      "{'type':'integer'},'ready':{'type':'integer'},'creating':{'type':'integer'},'hits':{'type':'integer'},"
      "'misses':{'type':'integer'},'ttl_seconds':{'type':'integer','description':'how long an unclaimed "
      "member lives; a claim gives the sandbox its own ttl_seconds'}},'required':['name','image','size','ready']}}},"
      "'required':['pools']}",
      "{'readOnlyHint':true,'openWorldHint':false}" } },
    { .run = tool_snapshot, .def = { "sandbox_snapshot", "Snapshot a sandbox",
      "Saves the files of a running or paused sandbox (a microvm: its disk; with memory, its processes too) as "
      "a snapshot. sandbox_create with from = its id or name starts sandboxes with them, on the same worker.",
      "{'type':'object','properties':{'sandbox_id':" SBX_ID ",'name':" DSTR("a name for the snapshot, usable "
      "as its id") ",'memory':{'type':'boolean','description':'microvm: keep memory'},'wait':{'type':'boolean','description':'wait until it is ready (default true)'}},"
      "'required':['sandbox_id'],'additionalProperties':false}",
      "{'type':'object','properties':{'snapshot':" SNP_SCHEMA ",'operation':" OP_SCHEMA "},"
      "'required':['snapshot','operation']}",
      "{'readOnlyHint':false,'destructiveHint':false,'idempotentHint':false,'openWorldHint':false}" } },
    { .run = tool_snapshots, .def = { "sandbox_snapshots", "List snapshots",
      "Lists the snapshots not deleted, newest first, with their state, sandbox_id, image, worker and "
      "size_bytes.",
      "{'type':'object','properties':{'sandbox_id':" DSTR("only snapshots of this sandbox") "},"
      "'additionalProperties':false}",
      "{'type':'object','properties':{'snapshots':{'type':'array','items':" SNP_SCHEMA "}},"
      "'required':['snapshots']}",
      "{'readOnlyHint':true,'openWorldHint':false}" } },
    { .run = tool_snapshot_delete, .def = { "sandbox_snapshot_delete", "Delete a snapshot",
      "Deletes a snapshot at once: no sandbox can start from it any more; those made from it run on.",
      "{'type':'object','properties':{'snapshot_id':" DSTR("the snapshot id (snp_...) or its name") "},"
      "'required':['snapshot_id'],'additionalProperties':false}",
      "{'type':'object','properties':{'snapshot':" SNP_SCHEMA "},'required':['snapshot']}",
      "{'readOnlyHint':false,'destructiveHint':true,'idempotentHint':true,'openWorldHint':false}" } },
    { .run = tool_snapshot_copy, .def = { "sandbox_snapshot_copy", "Copy a snapshot to a worker",
      "Copies a snapshot to another worker (an operation), so creates from it can run there.",
      "{'type':'object','properties':{'snapshot_id':" DSTR("the snapshot id (snp_...) or its name") ",'worker':"
      DSTR("the worker name") "," WAIT_PROPS_DEFAULT("true") "},"
      "'required':['snapshot_id','worker'],'additionalProperties':false}",
      "{'type':'object','properties':{'operation':" OP_SCHEMA "},'required':['operation']}",
      "{'readOnlyHint':false,'destructiveHint':false,'idempotentHint':false,'openWorldHint':false}" } },
    { .run = tool_templates, .def = { "sandbox_templates", "List templates",
      "Lists the templates of the tenant: name, versions and latest, the newest ready version (a snapshot with "
      "its version and config: env, workdir, user, cmd, expose). Start a sandbox from one with sandbox_create "
      "template. Build one with sandbox_template_build, or from a Dockerfile with the sandbox CLI.",
      "{'type':'object','properties':{},'additionalProperties':false}",
      "{'type':'object','properties':{'templates':{'type':'array','items':{'type':'object','properties':{'name':"
      STR ",'versions':{'type':'integer'},'latest':{'type':['object','null']}},'required':['name','versions']}}},"
      "'required':['templates']}",
      "{'readOnlyHint':true,'openWorldHint':false}" } },
    { .run = tool_template_build, .def = { "sandbox_template_build", "Build a template version",
      "Builds the next version of a template on the server: a build sandbox (sandbox: as sandbox_create takes "
      "it, image or template and limits), each step run in it in order as an exec (a non-zero exit fails the "
      "build), then a snapshot as the new version with config as its defaults, and the sandbox deleted. Waits "
      "for the end (a failed build is an error) unless wait is false; build_id reads that build, cancel "
      "cancels it.",
      "{'type':'object','properties':{'template':" DSTR("the template name") ",'steps':{'type':'array','items':"
      "{'type':'object','properties':{'argv':{'type':'array','items':" STR "},'env':" KV ",'cwd':" STR ",'user':"
      STR "},'required':['argv']},'description':'exec steps, in order'},'sandbox':{'type':'object','description':"
      "'as sandbox_create'},'config':{'type':'object','description':'env, workdir, user, cmd of the version'},'build_id':" DSTR("read this build (bld_...) instead") ",'cancel':{'type':'boolean','description':'cancel build_id'},"
      WAIT_PROPS_DEFAULT("true") "},'required':['template'],'additionalProperties':false}",
      "{'type':'object','properties':{'build':{'type':'object','properties':{'id':" STR ",'state':" STR
      ",'version':{'type':'integer'}},'required':['id','state']}},'required':['build']}",
      "{'readOnlyHint':false,'destructiveHint':false,'idempotentHint':false,'openWorldHint':false}" } },
    { .run = tool_fork, .def = { "sandbox_fork", "Fork a sandbox",
      "Starts count sandboxes with the files of a running sandbox as they are now and its "
      "spec (cpu, memory, disk, ttl, network, isolation, trust, labels; not env; memory and processes on "
      "microvm only): to try variants side by side. Made of other calls: a snapshot, count creates from it, the snapshot deleted once "
      "they started (the call waits for that). A fork that failed makes the call an error unless wait is false.",
      "{'type':'object','properties':{'sandbox_id':" SBX_ID ",'count':{'type':'integer','minimum':1,'maximum':32,"
      "'description':'how many (default 1)'},'wait':{'type':'boolean','description':'false: a fork that failed "
      "is listed, not an error (default true)'}},'required':['sandbox_id'],'additionalProperties':false}",
      "{'type':'object','properties':{'snapshot_id':" STR ",'snapshot_deleted':{'type':'boolean'},'sandboxes':"
      "{'type':'array','items':{'type':'object','properties':{'sandbox_id':" STR ",'operation_id':" STR ","
      "'state':" STR "}}}},'required':['snapshot_id','sandboxes']}",
      "{'readOnlyHint':false,'destructiveHint':false,'idempotentHint':false,'openWorldHint':false}" } },
    { .run = tool_volume_create, .def = { "sandbox_volume_create", "Create a volume",
      "Creates a volume: a file system of size_mib that outlives sandboxes (a cache, work kept between "
      "sessions). Mount it with sandbox_create volumes; it lives on the worker of the first sandbox that mounts "
      "it. Over the tenant quota it is quota_exceeded.",
      "{'type':'object','properties':{'name':" DSTR("1 to 63 letters, digits, _, . or -, unique in the tenant, "
      "usable as its id") ",'size_mib':{'type':'integer','minimum':8,'maximum':16777216,'description':'its size; "
      "a write past it fails'}},'required':['name','size_mib'],'additionalProperties':false}",
      "{'type':'object','properties':{'volume':" VOL_SCHEMA "},'required':['volume']}",
      "{'readOnlyHint':false,'destructiveHint':false,'idempotentHint':false,'openWorldHint':false}" } },
    { .run = tool_volumes, .def = { "sandbox_volumes", "List volumes",
      "Lists the volumes not deleted, newest first, with state, size_mib, worker and mounted_by (the live "
      "sandboxes that mount each, with path and read_only).",
      "{'type':'object','properties':{},'additionalProperties':false}",
      "{'type':'object','properties':{'volumes':{'type':'array','items':" VOL_SCHEMA "}},'required':['volumes']}",
      "{'readOnlyHint':true,'openWorldHint':false}" } },
    { .run = tool_volume_delete, .def = { "sandbox_volume_delete", "Delete a volume",
      "Deletes a volume and its files at once; conflict while a live sandbox mounts it (delete that first).",
      "{'type':'object','properties':{'volume':" DSTR("the volume id (vol_...) or its name") "},"
      "'required':['volume'],'additionalProperties':false}",
      "{'type':'object','properties':{'volume':" VOL_SCHEMA "},'required':['volume']}",
      "{'readOnlyHint':false,'destructiveHint':true,'idempotentHint':true,'openWorldHint':false}" } },
    { .run = tool_events, .def = { "sandbox_events", "List events",
      "Lists what happened, oldest first: sandbox phases (sandbox.pending ... sandbox.running, sandbox.deleted, "
      "failed, lost), operation states (operation.admitted ... operation.succeeded or failed, with error codes "
      "and exec exit codes), routes and workers. A cursor: pass after = the next_after of the previous call "
      "to get only newer events, none missed and none twice (after 0, the default, starts at the oldest kept). "
      "With wait (seconds, at most 30) the call waits for a new event when there is none yet and returns an "
      "empty list when none came. Filter by sandbox_id, operation_id or kind (exact, or a prefix such as "
      "operation.*). Event data never holds secrets.",
      "{'type':'object','properties':{'sandbox_id':" DSTR("only events of this sandbox") ",'operation_id':"
      DSTR("only events of this operation") ",'kind':{'type':'string',"
      "'description':'e.g. sandbox.running, or operation.* for every operation state'},'after':{'type':"
      "'integer','minimum':0,'description':'the next_after of the previous call (default 0: from the "
      "oldest)'},'wait':{'type':'integer','minimum':0,'maximum':30,'description':'seconds to wait for a new "
      "event when there is none (default 0)'},'limit':{'type':'integer','minimum':1,'maximum':1000,"
      "'description':'at most this many (default 100)'}},'additionalProperties':false}",
      "{'type':'object','properties':{'events':{'type':'array','items':" EVENT_SCHEMA "},'next_after':{'type':"
      "'integer','description':'pass as after next time'}},'required':['events','next_after']}",
      "{'readOnlyHint':true,'openWorldHint':false}" } },
    { .run = tool_logs, .def = { "sandbox_logs", "Read a sandbox's output",
      "Returns what the sandbox's main process wrote to stdout and stderr: the last tail lines (default 200), "
      "at most 64 KiB (truncated=true when cut). text has both streams in the order written; once the "
      "container is gone it is the tail the controller kept, stdout and stderr merged. Output of commands run "
      "with sandbox_exec is in that call's result, not here.",
      "{'type':'object','properties':{'sandbox_id':" SBX_ID ",'tail':{'type':'integer','minimum':0,'maximum':"
      "1000000,'description':'lines from the end (default 200)'}},'required':['sandbox_id'],"
      "'additionalProperties':false}",
      "{'type':'object','properties':{'text':" STR ",'stdout':" STR ",'stderr':" STR ",'truncated':{'type':"
      "'boolean'}},'required':['text','stdout','stderr','truncated']}",
      "{'readOnlyHint':true,'openWorldHint':false}" } },
    { .run = tool_network_log, .def = { "sandbox_network_log", "Read a sandbox's network log",
      "What its egress rules decided for its DNS queries and connections, oldest first: why a download failed "
      "(verdict refused). Read on with after = next_after.",
      "{'type':'object','properties':{'sandbox_id':" SBX_ID ",'verdict':{'type':'string','enum':['allowed',"
      "'refused'],'description':'only these'},'after':{'type':'integer','minimum':0,'description':'entries after "
      "this id'},'limit':{'type':'integer','minimum':1,'maximum':1000,'description':'default 100'}},"
      "'required':['sandbox_id'],'additionalProperties':false}",
      "{'type':'object','properties':{'entries':{'type':'array'},'next_after':{'type':'integer'}},"
      "'required':['entries','next_after']}",
      "{'readOnlyHint':true,'openWorldHint':false}" } },
    { .run = tool_write_file, .def = { "sandbox_write_file", "Write a file in a sandbox",
      "Writes one file in a running sandbox (PUT /v1/sandboxes/ID/files, raw form), replacing it if it exists. "
      "Give content (UTF-8 text) or content_base64 (any bytes), at most 2 MiB; missing directories are made "
      "first unless make_dirs is false. For whole directories or larger files use sandbox cp from a shell.",
      "{'type':'object','properties':{'sandbox_id':" SBX_ID ",'path':" DSTR("the absolute path of the file "
      "in the sandbox, e.g. /work/main.py") ",'content':" DSTR("the file as UTF-8 text") ",'content_base64':"
      DSTR("the file as base64 bytes (instead of content)") ",'mode':" DSTR("octal permission bits, "
      "default 644 (755 for a script to run)") ",'make_dirs':{'type':'boolean','description':'make missing "
      "directories of path first (default true)'}},'required':['sandbox_id','path'],'additionalProperties':false}",
      "{'type':'object','properties':{'path':" STR ",'bytes':{'type':'integer'}},'required':['path','bytes']}",
      "{'readOnlyHint':false,'destructiveHint':true,'idempotentHint':true,'openWorldHint':false}" } },
    { .run = tool_read_file, .def = { "sandbox_read_file", "Read a file from a sandbox",
      "Reads one regular file of a running sandbox (GET /v1/sandboxes/ID/files, raw form): at most max_bytes "
      "(default 262144, at most 2 MiB; truncated=true when the file is longer). encoding is utf-8 when content "
      "is the text itself, base64 when the bytes are not valid UTF-8 text.",
      "{'type':'object','properties':{'sandbox_id':" SBX_ID ",'path':" DSTR("the absolute path of the file "
      "in the sandbox") ",'max_bytes':{'type':'integer','minimum':1,'maximum':2097152,'description':'read at "
      "most this many bytes (default 262144)'}},'required':['sandbox_id','path'],'additionalProperties':false}",
      "{'type':'object','properties':{'path':" STR ",'encoding':{'type':'string','enum':['utf-8','base64']},"
      "'content':" STR ",'bytes':{'type':'integer'},'truncated':{'type':'boolean'}},'required':['path',"
      "'encoding','content','bytes','truncated']}",
      "{'readOnlyHint':true,'openWorldHint':false}" } },
    { .run = tool_list_files, .def = { "sandbox_list_files", "List a directory in a sandbox",
      "Lists the direct children of a directory in a running sandbox (GET /v1/sandboxes/ID/files, list form): "
      "name, type (file, dir, symlink, other), size, mode, mtime and link_target of each, at most 10000 "
      "(truncated=true past that).",
      "{'type':'object','properties':{'sandbox_id':" SBX_ID ",'path':" DSTR("the absolute path of the "
      "directory, e.g. /work") "},'required':['sandbox_id','path'],'additionalProperties':false}",
      "{'type':'object','properties':{'path':" STR ",'entries':{'type':'array','items':{'type':'object'}},"
      "'truncated':{'type':'boolean'}},'required':['path','entries','truncated']}",
      "{'readOnlyHint':true,'openWorldHint':false}" } },
};

const size_t tool_count = sizeof tool_table / sizeof tool_table[0];
#define NTOOLS (sizeof tool_table / sizeof tool_table[0])

static mcp_tool_def_t tool_defs[NTOOLS];      /* the table's texts as JSON, for tools/list */
static char *tool_texts[NTOOLS][3];           /* what tool_defs points at */
static json_object *tool_inputs[NTOOLS];      /* each tool's inputSchema, parsed once */

static char *dequote(const char *s)
{
    char *d = strdup(s);
    for (char *p = d; p && *p; p++)
        if (*p == '\'')
            *p = '"';
    return d;
}

int tools_init(void)
{
    for (size_t i = 0; i < NTOOLS; i++) {
        const mcp_tool_def_t *row = &tool_table[i].def;
        tool_defs[i] = *row;
        tool_texts[i][0] = dequote(row->input_schema);
        tool_texts[i][1] = dequote(row->output_schema);
        tool_texts[i][2] = dequote(row->annotations);
        if (!tool_texts[i][0] || !tool_texts[i][1] || !tool_texts[i][2])
            return SBX_ENOMEM;
        tool_defs[i].input_schema = tool_texts[i][0];
        tool_defs[i].output_schema = tool_texts[i][1];
        tool_defs[i].annotations = tool_texts[i][2];
        if (jsonx_parse(tool_defs[i].input_schema, strlen(tool_defs[i].input_schema), &tool_inputs[i], NULL) < 0)
            return SBX_EINVAL;
    }
    return 0;
}

void tools_release(void)
{
    for (size_t i = 0; i < NTOOLS; i++) {
        for (int j = 0; j < 3; j++) {
            free(tool_texts[i][j]);
            tool_texts[i][j] = NULL;
        }
        if (tool_inputs[i])
            json_object_put(tool_inputs[i]);
        tool_inputs[i] = NULL;
    }
}

const mcp_tool_def_t *tools_defs(void) { return tool_defs; }

const mcp_tool_t *tools_row(const mcp_tool_def_t *def)
{
    if (def < tool_defs || def >= tool_defs + NTOOLS)
        return NULL;
    return &tool_table[def - tool_defs];
}

json_object *tools_input_schema(const mcp_tool_t *row) { return tool_inputs[row - tool_table]; }

/* ---------------------------------------------------------------- arguments */

json_object *tool_args_check(const mcp_tool_t *row, json_object *args)
{
    const char *name = row->def.name;
    json_object *schema = tools_input_schema(row), *props = NULL, *req = NULL;
    json_object_object_get_ex(schema, "properties", &props);
    json_object_object_get_ex(schema, "required", &req);
    json_object *bad = NULL;
    char msg[300];
    json_object_object_foreach(args, k, v) {
        (void)v;
        if (!props || !json_object_object_get_ex(props, k, NULL)) {
            snprintf(msg, sizeof msg, "unknown argument \"%.64s\" for %s", k, name);
            bad = mcp_tool_error("invalid_argument", msg);
            break;
        }
    }
    for (size_t i = 0; !bad && req && i < json_object_array_length(req); i++) {
        const char *k = json_object_get_string(json_object_array_get_idx(req, i));
        json_object *v = NULL;
        if (!json_object_object_get_ex(args, k, &v) || !v) {
            snprintf(msg, sizeof msg, "%s needs the argument \"%s\"", name, k);
            bad = mcp_tool_error("invalid_argument", msg);
        }
    }
    return bad;
}

bool tool_arg_int(json_object *args, const char *k, int64_t min, int64_t max, int64_t def, int64_t *ret,
                  json_object **bad)
{
    json_object *v = NULL;
    *ret = def;
    if (!json_object_object_get_ex(args, k, &v) || !v)
        return true;
    if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < min || json_object_get_int64(v) > max) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s must be an integer from %lld to %lld", k, (long long)min, (long long)max);
        *bad = mcp_tool_error("invalid_argument", msg);
        return false;
    }
    *ret = json_object_get_int64(v);
    return true;
}

bool tool_arg_bool(json_object *args, const char *k, bool def, bool *ret, json_object **bad)
{
    json_object *v = NULL;
    *ret = def;
    if (!json_object_object_get_ex(args, k, &v) || !v)
        return true;
    if (!json_object_is_type(v, json_type_boolean)) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s must be true or false", k);
        *bad = mcp_tool_error("invalid_argument", msg);
        return false;
    }
    *ret = json_object_get_boolean(v);
    return true;
}

bool tool_arg_wait(json_object *args, bool def_wait, bool *ret_wait, int64_t *ret_timeout_s, json_object **bad)
{
    return tool_arg_bool(args, "wait", def_wait, ret_wait, bad) &&
           tool_arg_int(args, "timeout_seconds", 1, MCP_WAIT_MAX_S, MCP_WAIT_DEFAULT_S, ret_timeout_s, bad);
}

bool tool_arg_str(json_object *args, const char *k, const char **ret, json_object **bad)
{
    json_object *v = NULL;
    *ret = NULL;
    if (!json_object_object_get_ex(args, k, &v) || !v)
        return true;
    if (!json_object_is_type(v, json_type_string) || json_object_get_string_len(v) == 0 ||
        json_object_get_string_len(v) > 256) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s must be a string of 1 to 256 bytes", k);
        *bad = mcp_tool_error("invalid_argument", msg);
        return false;
    }
    *ret = json_object_get_string(v);
    return true;
}

void tool_arg_copy(json_object *body, json_object *args, const char *k)
{
    json_object *v = NULL;
    if (json_object_object_get_ex(args, k, &v) && v)
        jsonx_add(body, k, json_object_get(v));
}

bool tool_id_path(char *out, size_t n, const char *prefix, const char *id, const char *suffix, json_object **bad)
{
    if (client_path(out, n, prefix, id, suffix) < 0) {
        *bad = mcp_tool_error("internal", "cannot build the request path");
        return false;
    }
    return true;
}

/* ---------------------------------------------------------------- running a call */

json_object *tool_op_result(call_t *c, const char *method, const char *path, const char *idem, const char *what,
                            bool wait, int64_t timeout_s)
{
    json_object *resp = NULL;
    bool done = false;
    json_object *failed = op_request(c, method, path, NULL, idem, what, wait, timeout_s, &resp, &done);
    return failed ? failed : mcp_tool_ok(resp);
}

json_object *tool_run(call_t *c)
{
    server_t *s = c->srv;
    json_object *bad = tool_args_check(c->tool, c->args);
    if (bad)
        return bad;
    if (s->config_error[0])
        return mcp_tool_error("invalid_configuration", s->config_error);
    if (!s->token)
        return mcp_tool_error("unauthenticated",
                              "sandbox-mcp has no API token: set SANDBOX_TOKEN in the MCP client's configuration "
                              "for this server (or put 'token = ...' in ~/.config/sandbox/config) and restart it");
    if (httpc_new(s->url, s->token, &c->http) < 0 || httpc_set_ca_file(c->http, s->ca_file) < 0)
        return mcp_tool_error("internal", "cannot set up the HTTP client");
    httpc_set_abort_flag(c->http, &c->cancel);
    return c->tool->run(c, c->args);
}
