/* Every hard limit of Sandbox in one place, each with the reason it exists. */
#ifndef SBX_LIMITS_H
#define SBX_LIMITS_H

/* Largest HTTP request body the controller reads: a sandbox spec or an exec
 * request is a few KiB; a worker report carries at most two bounded exec
 * streams plus JSON escaping overhead. */
#define SBX_MAX_BODY_BYTES            (8u * 1024u * 1024u)
/* Largest response body a client (CLI, worker, MCP) accepts from the API. */
#define SBX_MAX_RESPONSE_BYTES        (16u * 1024u * 1024u)
/* Exec output: bytes kept per stream when the request names no bound, and
 * the server ceiling no request may exceed. */
#define SBX_EXEC_OUTPUT_DEFAULT       (64u * 1024u)
#define SBX_EXEC_OUTPUT_CEILING       (1024u * 1024u)
/* The main process's output kept on a sandbox that stopped by itself (the
 * tail shown by `sandbox logs` once the container is gone, and carried in a
 * heartbeat's inventory entry): enough for the last screenful of an error. */
#define SBX_OUTPUT_TAIL_MAX           (8u * 1024u)
/* A runtime's own error for a container it could not start (Docker's
 * State.Error), kept in a sandbox's failure message. */
#define SBX_OBSERVED_ERROR_MAX        512
/* Stopped containers whose details (inspect and output tail: two Docker
 * calls each) one heartbeat fetches at most, so a beat stays on time; the
 * others come with the next beats. */
#define SBX_INVENTORY_DETAILS_MAX     16
/* Docker's own log file of a sandbox's main process (json-file max-size,
 * one file): a chatty sandbox cannot fill the worker host's disk through
 * it. */
#define SBX_CONTAINER_LOG_MAX_BYTES   (10u * 1024u * 1024u)
/* `sandbox logs --tail N`: the most lines asked from the end of a
 * sandbox's output (Docker counts them; more is "all"). */
#define SBX_LOGS_TAIL_MAX             1000000
/* Log streams (GET /v1/sandboxes/{id}/logs) one controller thread holds at
 * once; beyond it the controller answers 503. Each holds at most about
 * SBX_LOGS_CLIENT_HIGH_WATER plus one frame of memory. */
#define SBX_LOGS_MAX_STREAMS_PER_THREAD 1024
/* A log stream reads from the worker only while the client's unsent output
 * is below this: a slow client slows its own stream and nothing else. */
#define SBX_LOGS_CLIENT_HIGH_WATER    (256u * 1024u)
/* File transfers over the worker's forwarder (docs/worker.md "File
 * transfers"): the JSON request line after the preamble (CRLF included),
 * a path in the container, and the entries a directory listing holds at
 * most (then it says truncated). */
#define SBX_FILES_REQUEST_MAX         8192
#define SBX_FILES_PATH_MAX            4096
#define SBX_FILES_LIST_MAX            10000
/* sandbox cp unpacking a download (client/untar.c): warning lines about
 * skipped devices and FIFOs (then one line with the count); directories
 * whose modes and mtimes are set after their contents, and the bytes of
 * their names kept for it; files remembered as what a hard link may point
 * at. Each bounds the CLI's memory whatever a download holds. */
#define SBX_CP_WARN_MAX               10
#define SBX_CP_DIRS_MAX               (1 << 20)
#define SBX_CP_DIR_NAMES_MAX          (64u * 1024u * 1024u)
#define SBX_CP_LINK_TARGETS_MAX       (1u << 20)
/* A tar stream judged member by member as it passes (common/tarstream.h
 * tarstream_gate: the worker's uploads and downloads): the bytes it takes
 * at once, besides the headers of one member it holds back until it can
 * judge it (TARSTREAM_PREFIX_MAX: 64 KiB of PAX records and two long
 * names); together about 140 KiB per transfer. */
#define SBX_TAR_GATE_PIECE            (64u * 1024u)
/* The files_max_bytes setting's bounds (common/config.c). */
#define SBX_FILES_MAX_BYTES_MIN       (1024LL * 1024LL)
#define SBX_FILES_MAX_BYTES_MAX       (1024LL * 1024LL * 1024LL * 1024LL)
/* Exec argv: count and total size, so one request cannot ask the worker to
 * build an unbounded command line. */
#define SBX_MAX_ARGV                  256
#define SBX_MAX_ARGV_BYTES            (64u * 1024u)
/* Ended processes of E2B clients one POST /v1/workers/{id}/sessions
 * reports (each becomes an exec operation); the worker sends the rest in
 * its next one. */
#define SBX_WORKER_SESSIONS_MAX       64
/* network log records a worker reports at once (POST /v1/workers/{id}/network-log) */
#define SBX_NETLOG_BATCH_MAX          1000
/* Exec stdin carried inline in the request (and kept with the operation's
 * request so a retried lease still has it): its base64 form plus the rest
 * of the request fits the default max_body_bytes (1 MiB). Larger input goes
 * in as a file. */
#define SBX_EXEC_STDIN_INLINE_MAX     (512u * 1024u)
/* A template build the server drives (docs/templates.md): its steps at
 * most, its tenant's unfinished builds at most, and its build sandbox's
 * TTL when the request gives none (what bounds the build). */
#define SBX_BUILD_STEPS_MAX           1000
#define SBX_BUILDS_ACTIVE_MAX         4
#define SBX_BUILD_TTL_SECONDS_DEFAULT 1800
/* A build asked for through E2B's API and never given its steps: failed
 * after this long. */
#define SBX_BUILD_WAITING_SQL         "3600"
#define SBX_BUILD_WAITING_TEXT        "an hour"
/* Files a build copies in (COPY of E2B's Template.build): each at most the
 * exec stdin that carries it into the build sandbox, at most this many kept
 * per tenant, at most this many bytes copied by one build's steps in all
 * (its steps hold them); unused for a day, pruned. */
#define SBX_BUILD_FILE_MAX            SBX_EXEC_STDIN_INLINE_MAX
#define SBX_BUILD_FILES_MAX           64
#define SBX_BUILD_COPY_TOTAL_MAX      (4u * 1024u * 1024u)
/* Env and labels per sandbox or exec. */
#define SBX_MAX_ENV                   128
#define SBX_MAX_LABELS                64
#define SBX_MAX_KEY_BYTES             128
#define SBX_MAX_VALUE_BYTES           4096
/* Strings in a spec. */
#define SBX_MAX_IMAGE_BYTES           512
#define SBX_MAX_NAME_BYTES            128
#define SBX_MAX_PATH_BYTES            1024
/* A registry host[:port] (DNS names are at most 253 bytes) and the
 * image_registries setting, which the worker keeps in a fixed buffer. */
#define SBX_MAX_REGISTRY_BYTES        256
#define SBX_MAX_IMAGE_REGISTRIES_BYTES 2048
/* A tenant policy's egress_allow: at most this many CIDRs (each rule is
 * one iptables rule per open sandbox of the tenant). */
#define SBX_EGRESS_ALLOW_MAX          32
/* Absolute bounds of a sandbox spec; the configured server ceilings
 * (max_cpu_millis, ...) are at most these. */
#define SBX_CPU_MILLIS_MIN            10
#define SBX_CPU_MILLIS_MAX            1024000
#define SBX_MEMORY_MIB_MIN            6
#define SBX_MEMORY_MIB_MAX            (4 * 1024 * 1024)
/* A sandbox's disk quota (disk_mib): below 16 MiB an image's own writes
 * (a package index) fail at once; the top is 16 TiB. */
#define SBX_DISK_MIB_MIN              16
#define SBX_DISK_MIB_MAX              (16 * 1024 * 1024)
/* A volume's size (volumes create --size-mib): an ext4 file system below
 * 8 MiB has no room for its own journal; the top is 16 TiB. */
#define SBX_VOLUME_MIB_MIN            8
#define SBX_VOLUME_MIB_MAX            (16 * 1024 * 1024)
#define SBX_TTL_SECONDS_MIN           10
#define SBX_TTL_SECONDS_MAX           (30 * 24 * 3600)
/* An extend (POST /v1/sandboxes/{id}/extend) may ask for as little as 1 s:
 * it counts from now, to let a sandbox go soon without deleting it now. */
#define SBX_EXTEND_TTL_SECONDS_MIN    1
#define SBX_EXEC_TIMEOUT_MAX          (24 * 3600)
/* Long-poll waits: a client may ask for at most this many seconds. */
#define SBX_MAX_WAIT_SECONDS          60
/* Parked long-polls per controller thread; beyond it the controller answers
 * 503 instead of holding more connections. */
#define SBX_MAX_PARKED_PER_THREAD     20000
/* Worker inventory entries accepted in one heartbeat. */
#define SBX_MAX_INVENTORY             100000
/* A worker's heartbeat sends its full inventory at least this often (and
 * after each register); the beats between send only what changed. */
#define SBX_INVENTORY_FULL_SECONDS    60
/* (token, worker) pairs whose worker-identity refusal the controller
 * remembers, so each is logged and made an event once. */
#define SBX_WORKER_DENIED_SEEN_MAX    512
/* Statements each PostgreSQL connection keeps prepared (controller/db.c):
 * the controller's distinct SQL texts are a few hundred; past this many
 * (text built at run time gone wrong) the rest run unprepared. */
#define SBX_DB_STMT_CACHE_MAX         512
/* Verified tokens each controller remembers (controller/auth.c), and for
 * how long: a revocation reaches every controller at once through NOTIFY;
 * this bounds how long a missed notification leaves a revoked token
 * working. */
#define SBX_AUTH_CACHE_MAX            1024
#define SBX_AUTH_CACHE_TTL_MS         2000
/* Ended operations a wake-up names per HTTP thread between two of its
 * re-checks (controller/server.c); past it, every operation wait is
 * re-checked. */
#define SBX_WAKE_OPS_MAX              64
/* Rows a reconcile pass claims per transaction. */
#define SBX_RECONCILE_BATCH           100
/* The least time between two reconcile rounds that kicks started: under
 * load every create and delete report kicks the loop, and most rounds find
 * nothing (operations are placed on their own requests); kicks that come
 * closer together are served by one round. What waits for the loop (a
 * create waiting for room, a delete behind its create) waits at most this
 * much longer. */
#define SBX_RECONCILE_KICK_GAP_MS     20
/* While warm pools are short of their size, their refill runs this often
 * (pool_refill_per_second spread over the ticks), not once a
 * reconcile_interval_ms with a whole second's worth at once. */
#define SBX_POOL_REFILL_TICK_MS       100
/* Warm pools: the largest pool (members are running containers nobody is
 * charged for until claimed), the pools one tenant may declare, the pools
 * in all, and a pool's name (the CLI and URLs carry it). */
#define SBX_POOL_SIZE_MAX             256
#define SBX_POOLS_PER_TENANT_MAX      8
#define SBX_POOLS_MAX                 64
#define SBX_POOL_NAME_MAX             63
/* List endpoints: default and maximum page size. */
#define SBX_LIST_DEFAULT              100
#define SBX_LIST_MAX                  1000
/* Docker pull progress stream kept for the error message. */
#define SBX_MAX_DOCKER_REPLY_BYTES    (4u * 1024u * 1024u)
/* Ids: prefix + '_' + 26 base32 characters + NUL. */
#define SBX_ID_MAX                    40
/* Tokens: "sbt_" + 26 id chars + '_' + 43 secret chars + NUL. */
#define SBX_TOKEN_MAX                 80
/* X-Request-Id: a client's own id is kept when it is at most this long and
 * only [A-Za-z0-9._:-]; otherwise the controller makes one ("req_…"). */
#define SBX_REQUEST_ID_MAX            64
/* Retention: rows deleted per statement (short locks), and at most this many
 * statements per table per retention pass (the rest waits for the next). */
#define SBX_RETENTION_BATCH           1000
#define SBX_RETENTION_MAX_BATCHES     20

/* The NATS publisher: events read, sent and flushed per round (one round
 * trip to NATS each); after a crash between a flush and the cursor update,
 * at most this many are sent again. */
#define SBX_PUBLISH_BATCH             500
/* The NATS publisher reads only up to the events horizon, below which every
 * missing id is final and passed at once. Should a hole below it stay open
 * all the same, it is passed after this long: the controller's transactions
 * last milliseconds, so an id missing this long belonged to a transaction
 * that rolled back. */
#define SBX_PUBLISH_HOLE_GRACE_MS     5000

/* An HTTP/1.x request head as common/httphead.c parses it (the route proxy,
 * the worker's health server): at most this many header lines are kept
 * (more is "too many headers", a 431), and a method is at most this long
 * (the longest registered one, UPDATEREDIRECTREF, is 17; ours are short). */
#define SBX_HTTP_MAX_HEADERS          100
#define SBX_HTTP_METHOD_MAX           15

/* Rate limiting (controller/ratelimit.c): each limiter keeps at most this
 * many buckets (a set-associative table: the least recently used bucket of
 * a set of SBX_RATELIMIT_WAYS makes room), so distinct keys cannot grow it. */
#define SBX_RATELIMIT_BUCKETS         4096
#define SBX_RATELIMIT_WAYS            8
/* A 429 for a client that came back inside the Retry-After it was given
 * is held at most this long before it is sent (ratelimit_hold), and each
 * HTTP thread holds at most SBX_MAX_HELD_REFUSALS_PER_THREAD at once
 * (past that they are sent at once). */
#define SBX_RATE_HOLD_MAX_US          INT64_C(1000000)
#define SBX_MAX_HELD_REFUSALS_PER_THREAD 1024

/* The route listener under a flood (controller/proxy_caps.c): file
 * descriptors kept for everything else (the API listener, PostgreSQL,
 * workers, logs) when route_max_connections is lowered to fit
 * RLIMIT_NOFILE (a relayed connection holds two); how long accepting
 * pauses after accept() fails (EMFILE, ENFILE, ...). */
#define SBX_ROUTE_FD_RESERVE          128
#define SBX_ROUTE_ACCEPT_BACKOFF_MS   250
/* The API listener under a flood (controller/apiconn.c): a body larger
 * than this is read only once its bearer token checked out; a head at most
 * this long (evhttp's max_headers_size too); a body gets this long before
 * api_body_min_bytes_per_second applies; a refused request's body up to
 * this long is read and dropped so the connection lives on (a longer one
 * closes it) — up to every body the controller reads at all once the
 * token checked out (..._TOKEN_...), so a client that sent its body at once
 * reads its 4xx rather than the reset a close with unread bytes sends;
 * without a valid token 1 MiB: an anonymous client's bytes are not read
 * for it; how often the deadlines are looked at; how long accepting
 * pauses after accept() fails; the file descriptors kept for the rest when
 * api_max_connections is lowered to fit RLIMIT_NOFILE (a third of what is
 * left goes to the API listener); the buckets of each thread's table of
 * connections. */
#define SBX_API_ANON_BODY_BYTES       (64 * 1024)
#define SBX_API_MAX_HEAD_BYTES        (64 * 1024)
#define SBX_API_BODY_GRACE_SECONDS    5
#define SBX_API_DISCARD_MAX_BYTES     (1024 * 1024)
#define SBX_API_DISCARD_TOKEN_MAX_BYTES SBX_MAX_BODY_BYTES
#define SBX_API_SWEEP_MS              1000
#define SBX_API_ACCEPT_BACKOFF_MS     250
#define SBX_API_FD_RESERVE            128
#define SBX_API_CONN_BUCKETS          1024
/* A connection the controller waits on (a head begun, a body due) that
 * sent nothing for SBX_API_STALL_MS is evictable like an idle one until
 * its next byte: stalled connections cannot hold the caps. */
#define SBX_API_STALL_MS              2000
/* Assignments one worker poll takes at most (a worker asks for what its
 * queue has room for: what it cannot run yet stays leased in the
 * database, where tenants take turns). */
#define SBX_CLAIM_MAX                 64
/* A poll's id (the worker makes one per poll: the claim records it) and
 * the ids of polls whose answers never reached the worker that one poll
 * may name (their operations are handed out again). */
/* Images GET /v1/images lists at most (each worker reports up to 512). */
#define SBX_IMAGES_LIST_MAX           4096
#define SBX_POLL_ID_MAX               32
#define SBX_POLL_UNANSWERED_MAX       8
/* The request bytes one poll hands out at most (execs carry stdin inline,
 * up to SBX_EXEC_STDIN_INLINE_MAX as base64 each): well inside the
 * SBX_MAX_RESPONSE_BYTES a worker reads; past it the rest stay leased for
 * the next poll. */
#define SBX_CLAIM_BYTES_MAX           (8u * 1024u * 1024u)
/* Live exec output (GET /v1/operations/{id}/output): chunks one worker
 * request carries at most, the largest byte offset (2^50: far past any
 * output, far from overflow), and what one read answers at most (rows and
 * bytes; a follower reads on from next_offset). */
#define SBX_OUTPUT_CHUNKS_MAX         1024
#define SBX_OUTPUT_OFFSET_MAX         (1LL << 50)
#define SBX_OUTPUT_READ_CHUNKS        256
#define SBX_OUTPUT_READ_MAX_BYTES     (512u * 1024u)
/* Fair shares between tenants (issue 27). A worker runs at most
 * SBX_WORKER_EXECUTORS_MAX executors (worker_executors), which also bounds
 * a tenant policy's max_executors_per_worker. A tenant's stored live output
 * (exec_output_tenant_keep_bytes, and the policy field of that name) is at
 * least SBX_OUTPUT_TENANT_KEEP_MIN as a setting (a few requests' worth of
 * 64 KiB chunks: below it every append would trim) and at most
 * SBX_OUTPUT_TENANT_KEEP_MAX (a tenant's share of a database); an append
 * over the tenant's bound deletes the oldest chunks SBX_OUTPUT_TRIM_BATCH
 * at a time, at most SBX_OUTPUT_TRIM_ROUNDS batches (what is left goes at
 * the next append: a lowered bound is reached over a few appends, not in
 * one long transaction). */
#define SBX_WORKER_EXECUTORS_MAX      256
#define SBX_OUTPUT_TENANT_KEEP_MIN    (1024LL * 1024LL)
#define SBX_OUTPUT_TENANT_KEEP_MAX    (64LL * 1024LL * 1024LL * 1024LL)
#define SBX_OUTPUT_TRIM_BATCH         256
#define SBX_OUTPUT_TRIM_ROUNDS        16
/* Connections one HTTP thread accepts before the rest of its loop runs. */
#define SBX_API_ACCEPTS_PER_TURN      32
/* A streamed request body (PUT /v1/sandboxes/{id}/files, controller/
 * apiconn.c): the API listener stops reading its connection while this
 * much of it waits for the handler, and the handler stops taking it while
 * as much waits to go to the worker, so one transfer holds about twice
 * this; at most SBX_FILES_STREAMS_MAX transfers run in one controller at
 * once (503 past it), and one that moves nothing for
 * SBX_FILES_IDLE_SECONDS either way is cut off. */
#define SBX_FILES_STREAM_HIGH_WATER   (1024u * 1024u)
#define SBX_FILES_STREAMS_MAX         64
#define SBX_FILES_IDLE_SECONDS        60

/* The buckets of a listener's per-address connection counts
 * (controller/conncap.c). */
#define SBX_CONNCAP_ADDR_BUCKETS      4096
/* An interactive shell (sandbox shell) with no bytes either way for this
 * long is closed, by the controller and by the worker. */
#define SBX_SHELL_IDLE_SECONDS        1800

/* External runtime drivers (docs/runtime-drivers.md): a control-channel
 * line is at most this long (a longer one is a protocol error, the driver is
 * restarted); a driver's stderr line is cut at this many bytes before it
 * goes to the worker's log; worker_driver_command holds at most this many
 * arguments; a driver's ref is at most this long ([A-Za-z0-9_.-]); an
 * inventory lists at most this many sandboxes; a driver's messages are cut. */
#define SBX_DRIVER_LINE_MAX           (1024u * 1024u)
#define SBX_DRIVER_STDERR_LINE_MAX    4096
#define SBX_DRIVER_ARGV_MAX           64
#define SBX_DRIVER_ARG_MAX            4096
#define SBX_DRIVER_REF_MAX            64
#define SBX_DRIVER_INVENTORY_MAX      10000
#define SBX_DRIVER_MESSAGE_MAX        400
/* Restart back-off of a driver: from the first to the last, doubling; reset
 * once a driver lived SBX_DRIVER_STABLE_MS. */
#define SBX_DRIVER_BACKOFF_MIN_MS     200
#define SBX_DRIVER_BACKOFF_MAX_MS     10000
#define SBX_DRIVER_STABLE_MS          60000
/* worker_runtime names at most this many backends (one composite runtime). */
#define SBX_RUNTIME_BACKENDS_MAX      4
/* MicroVMs (worker/vmm/): the agent channel's largest frame payload (an
 * OPEN carries argv and env within their own bounds; data frames are
 * cut to VMM_DATA_CHUNK), the bytes of one session's input the guest agent holds for a
 * process that does not read (then it stops reading the port), and how long
 * the host waits for a booted guest's agent to answer (TCG boots in ~10 s). */
#define SBX_VMM_FRAME_MAX             (1024u * 1024u)
#define SBX_VMM_INPUT_PENDING_MAX     (1024u * 1024u)
#define SBX_VMM_BOOT_TIMEOUT_MS       120000
/* A microVM's console.log (its serial port, which the guest writes as fast
 * as it likes): past SBX_VMM_CONSOLE_MAX it is cut to its last
 * SBX_VMM_CONSOLE_KEEP bytes (sandbox-vmm looks every 2 s), so a guest
 * cannot fill the worker's disk through it; what is kept still shows a boot
 * failure or an oops. */
#define SBX_VMM_CONSOLE_MAX           (1024u * 1024u)
#define SBX_VMM_CONSOLE_KEEP          (256u * 1024u)
/* Sessions (exec, shell, dial) one guest agent runs at once. */
#define SBX_VMM_SESSIONS_MAX          64

#endif
