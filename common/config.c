/* The settings table and its sources. */
#include "config.h"
#include "errors.h"
#include "imageref.h"
#include "jsonx.h"
#include "limits.h"
#include "spec.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const cfg_setting_t settings[CFG__COUNT] = {
    [CFG_LISTEN] = { "listen", CFGT_STRING, "127.0.0.1:8080", 0, 0, false,
                     "HOST:PORT the controller's HTTP API listens on" },
    [CFG_DATABASE_URL] = { "database_url", CFGT_STRING, "", 0, 0, false,
                           "PostgreSQL connection URL; empty with `all` runs an embedded cluster" },
    [CFG_DATA_DIR] = { "data_dir", CFGT_STRING, "./.sandbox", 0, 0, false,
                       "directory for the embedded PostgreSQL cluster and the bootstrap token" },
    [CFG_CONTROLLER_URL] = { "controller_url", CFGT_STRING, "http://127.0.0.1:8080", 0, 0, false,
                             "URL the worker uses to reach the controller (a comma-separated list fails over in order)" },
    [CFG_DOCKER_SOCKET] = { "docker_socket", CFGT_STRING, "/var/run/docker.sock", 0, 0, false,
                            "Docker Engine API unix socket the worker uses" },
    [CFG_WORKER_NAME] = { "worker_name", CFGT_STRING, "", 0, 0, false,
                          "worker name (default: the host name)" },
    [CFG_WORKER_TOKEN] = { "worker_token", CFGT_STRING, "", 0, 0, false,
                           "token with the worker role the worker authenticates with" },
    [CFG_WORKER_LABELS] = { "worker_labels", CFGT_STRING, "", 0, 0, false,
                            "comma-separated K=V labels the worker advertises" },
    [CFG_WORKER_CPU_MILLIS] = { "worker_cpu_millis", CFGT_INT, "0", 0, 100000000, false,
                                "cpu capacity advertised (0: 4 x host cores x 1000, cpu limits are quotas)" },
    [CFG_WORKER_MEMORY_MIB] = { "worker_memory_mib", CFGT_INT, "0", 0, 1000000000, false,
                                "memory capacity advertised in MiB (0: host memory)" },
    [CFG_WORKER_SLOTS] = { "worker_slots", CFGT_INT, "64", 1, 100000, false,
                           "most sandboxes the worker holds at once" },
    [CFG_WORKER_EXECUTORS] = { "worker_executors", CFGT_INT, "8", 1, SBX_WORKER_EXECUTORS_MAX, false,
                               "runtime calls the worker runs in parallel" },
    [CFG_HTTP_THREADS] = { "http_threads", CFGT_INT, "0", 0, 256, false,
                           "controller event-loop threads (0: one per core)" },
    [CFG_RECONCILE_INTERVAL_MS] = { "reconcile_interval_ms", CFGT_INT, "1000", 10, 600000, true,
                                    "period of the level-triggered reconcile loop" },
    [CFG_LEASE_SECONDS] = { "lease_seconds", CFGT_INT, "30", 2, 3600, true,
                            "lease length; a worker's heartbeat extends its leases" },
    [CFG_HEARTBEAT_SECONDS] = { "heartbeat_seconds", CFGT_INT, "5", 1, 600, true,
                                "how often workers send heartbeats" },
    [CFG_WORKER_TIMEOUT_SECONDS] = { "worker_timeout_seconds", CFGT_INT, "30", 2, 3600, true,
                                     "a worker silent this long is unreachable: nothing new goes there" },
    [CFG_WORKER_LOST_AFTER_SECONDS] = { "worker_lost_after_seconds", CFGT_INT, "300", 2, 86400, true,
                                        "a worker silent this long is lost: its sandboxes are lost and their "
                                        "capacity released (never less than worker_timeout_seconds)" },
    [CFG_MAX_ATTEMPTS] = { "max_attempts", CFGT_INT, "3", 1, 100, true,
                           "leases of one create or delete before it fails with worker_lost" },
    [CFG_OPERATION_DEADLINE_SECONDS] = { "operation_deadline_seconds", CFGT_INT, "900", 5, 86400, true,
                                         "an operation not placed by then fails with timeout" },
    [CFG_MAX_CPU_MILLIS] = { "max_cpu_millis", CFGT_INT, "16000", 10, 1024000, true,
                             "server ceiling of cpu per sandbox" },
    [CFG_MAX_MEMORY_MIB] = { "max_memory_mib", CFGT_INT, "65536", 6, 4194304, true,
                             "server ceiling of memory per sandbox (MiB)" },
    [CFG_DEFAULT_DISK_MIB] = { "default_disk_mib", CFGT_INT, "1024", 16, 16777216, true,
                               "disk quota of a sandbox whose spec names none (MiB; at most the ceilings)" },
    [CFG_MAX_DISK_MIB] = { "max_disk_mib", CFGT_INT, "65536", 16, 16777216, true,
                           "server ceiling of the disk quota per sandbox (MiB)" },
    [CFG_MAX_SNAPSHOTS] = { "max_snapshots", CFGT_INT, "32", 0, 100000, true,
                            "server ceiling of the snapshots one tenant keeps (0: no snapshots)" },
    [CFG_MAX_SNAPSHOT_MIB] = { "max_snapshot_mib", CFGT_INT, "10240", 0, 16777216, true,
                               "server ceiling of the MiB one tenant's snapshots add to their images" },
    [CFG_MAX_VOLUMES] = { "max_volumes", CFGT_INT, "16", 0, 100000, true,
                          "server ceiling of the volumes one tenant keeps (0: volumes are off)" },
    [CFG_MAX_VOLUME_MIB] = { "max_volume_mib", CFGT_INT, "10240", 0, 16777216, true,
                             "server ceiling of the MiB one tenant's volumes add up to" },
    [CFG_WORKER_VOLUME_DIR] = { "worker_volume_dir", CFGT_STRING, "/var/lib/sandbox/volumes", 0, 0, false,
                                "where the worker keeps its volumes' ext4 images and mounts them" },
    [CFG_WORKER_DISK_INTERVAL_MS] = { "worker_disk_interval_ms", CFGT_INT, "2000", 200, 60000, false,
                                      "how often the worker measures each running sandbox's writable layer "
                                      "against its disk quota (when the storage driver cannot enforce it)" },
    [CFG_MAX_TTL_SECONDS] = { "max_ttl_seconds", CFGT_INT, "86400", 10, 2592000, true,
                              "server ceiling of a sandbox's time to live" },
    [CFG_EXEC_OUTPUT_DEFAULT_BYTES] = { "exec_output_default_bytes", CFGT_INT, "65536", 1, 1048576, true,
                                        "exec output kept per stream when the request names no bound" },
    [CFG_EXEC_OUTPUT_MAX_BYTES] = { "exec_output_max_bytes", CFGT_INT, "1048576", 1, 1048576, true,
                                    "largest exec output bound a request may ask for, per stream" },
    [CFG_EXEC_OUTPUT_KEEP_BYTES] = { "exec_output_keep_bytes", CFGT_INT, "16777216", 65536, 1073741824, true,
                                     "live output kept per exec for followers (GET /v1/operations/{id}/output); "
                                     "past it the oldest is dropped" },
    [CFG_EXEC_TIMEOUT_MAX_SECONDS] = { "exec_timeout_max_seconds", CFGT_INT, "86400", 1, 86400, true,
                                       "longest timeout_seconds an exec may ask for (detached commands run "
                                       "up to this)" },
    /* fair shares between tenants (issue 27) */
    [CFG_WORKER_TENANT_EXECUTORS_PERCENT] = { "worker_tenant_executors_percent", CFGT_INT, "75", 1, 100, false,
                                              "the share of worker_executors one tenant's assignments may hold "
                                              "on this worker at once, rounded down, at least 1 (the rest stay "
                                              "leased until one ends; 100: no cap); a tenant policy's "
                                              "max_executors_per_worker tightens it" },
    [CFG_EXEC_OUTPUT_TENANT_KEEP_BYTES] = { "exec_output_tenant_keep_bytes", CFGT_INT, "67108864",
                                            SBX_OUTPUT_TENANT_KEEP_MIN, SBX_OUTPUT_TENANT_KEEP_MAX, false,
                                            "live exec output kept per tenant over all its operations; past it "
                                            "the tenant's oldest chunks go (finished operations' first)" },
    [CFG_MAX_BODY_BYTES] = { "max_body_bytes", CFGT_INT, "1048576", 1024, 8388608, false,
                             "largest client request body; worker reports may use up to 8 MiB" },
    [CFG_ISOLATION_TRUSTED] = { "isolation_trusted", CFGT_STRING, "container", 0, 0, true,
                                "minimum isolation class for trusted work: container, gvisor or microvm" },
    [CFG_ISOLATION_UNTRUSTED] = { "isolation_untrusted", CFGT_STRING, "container", 0, 0, true,
                                  "minimum class for an untrusted repository or generated code (runs hardened)" },
    [CFG_ISOLATION_HOSTILE] = { "isolation_hostile", CFGT_STRING, "microvm", 0, 0, true,
                                "minimum class for work marked hostile" },
    [CFG_ALLOW_UNTRUSTED_OPEN_NETWORK] = { "allow_untrusted_open_network", CFGT_BOOL, "true", 0, 0, true,
                                           "whether a tenant policy may let untrusted work have an open network" },
    [CFG_ROUTE_LISTEN] = { "route_listen", CFGT_STRING, "127.0.0.1:8081", 0, 0, false,
                           "address the controller serves public routes on (a separate origin from the API)" },
    [CFG_ROUTE_PUBLIC_URL] = { "route_public_url", CFGT_STRING, "", 0, 0, true,
                               "URL clients reach the route listener at, for path-based route addresses "
                               "({route_public_url}/r/{route}/; default http://{route_listen})" },
    [CFG_TRUSTED_PROXIES] = { "trusted_proxies", CFGT_STRING, "", 0, 0, false,
                              "comma-separated addresses or CIDRs of reverse proxies whose X-Forwarded-* "
                              "headers the route listener believes (empty: none)" },
    [CFG_ROUTE_MAX_REQUEST_BYTES] = { "route_max_request_bytes", CFGT_INT, "1073741824", 0, INT64_C(1) << 40, false,
                                      "largest request body a route forwards (0: no limit)" },
    [CFG_ROUTE_MAX_RESPONSE_BYTES] = { "route_max_response_bytes", CFGT_INT, "1073741824", 0, INT64_C(1) << 40,
                                       false, "largest response a route forwards, headers included (0: no limit)" },
    [CFG_ROUTE_IDLE_TIMEOUT_SECONDS] = { "route_idle_timeout_seconds", CFGT_INT, "120", 1, 86400, false,
                                         "a routed connection with no traffic either way for this long is closed" },
    [CFG_ROUTE_MAX_DURATION_SECONDS] = { "route_max_duration_seconds", CFGT_INT, "3600", 1, 604800, false,
                                         "longest a routed request (or WebSocket) may last" },
    [CFG_API_MAX_CONNECTIONS] = { "api_max_connections", CFGT_INT, "4096", 1, 1000000, false,
                                  "API connections the controller holds at once (lowered to fit the open files "
                                  "limit): a new one evicts the oldest idle one (between requests, or its head not "
                                  "complete), and is answered 503 when none is idle" },
    [CFG_API_MAX_CONNECTIONS_PER_ADDRESS] = { "api_max_connections_per_address", CFGT_INT, "256", 0, 1000000, false,
                                              "API connections one client address (the TCP peer; an IPv6 /64) "
                                              "holds at once, trusted_proxies exempt (0: no limit)" },
    [CFG_API_HEAD_TIMEOUT_SECONDS] = { "api_head_timeout_seconds", CFGT_INT, "10", 1, 3600, false,
                                       "a request head must be complete this long after a new connection or its "
                                       "first byte (else 408 and the connection is closed)" },
    [CFG_API_IDLE_TIMEOUT_SECONDS] = { "api_idle_timeout_seconds", CFGT_INT, "60", 1, 86400, false,
                                       "a kept-alive API connection with no request for this long is closed" },
    [CFG_API_BODY_MIN_BYTES_PER_SECOND] = { "api_body_min_bytes_per_second", CFGT_INT, "16384", 0, 1000000000,
                                            false,
                                            "a request body slower than this on average (after a few seconds' "
                                            "grace) has its connection closed (0: no minimum)" },
    [CFG_API_BODY_BUDGET_MIB] = { "api_body_budget_mib", CFGT_INT, "64", 1, 65536, false,
                                  "memory all request bodies being received share: a body that does not fit is "
                                  "answered 503 with Retry-After before it is read" },
    [CFG_ROUTE_MAX_CONNECTIONS] = { "route_max_connections", CFGT_INT, "1024", 1, 1000000, false,
                                    "routed connections the controller holds at once: a new one evicts the oldest "
                                    "idle one (no complete request head yet), and gets 503 when none is idle" },
    [CFG_ROUTE_MAX_CONNECTIONS_PER_ADDRESS] = { "route_max_connections_per_address", CFGT_INT, "64", 0, 1000000,
                                                false,
                                                "routed connections one client address (the TCP peer; an IPv6 /64) "
                                                "holds at once, trusted_proxies exempt (0: no limit)" },
    [CFG_ROUTE_DOMAIN] = { "route_domain", CFGT_STRING, "", 0, 0, true,
                           "wildcard domain for host-based route addresses (https://{route}.{route_domain}/)" },
    [CFG_MAX_ROUTE_TTL_SECONDS] = { "max_route_ttl_seconds", CFGT_INT, "86400", 10, 2592000, true,
                                    "longest lifetime a route may ask for" },
    [CFG_POSTGRES_BINDIR] = { "postgres_bindir", CFGT_STRING, "", 0, 0, false,
                              "directory of initdb/pg_ctl for the embedded cluster (default: newest installed)" },
    [CFG_LOG_LEVEL] = { "log_level", CFGT_STRING, "info", 0, 0, true, "debug, info, warn or error" },
    [CFG_WORKER_GVISOR_RUNTIME] = { "worker_gvisor_runtime", CFGT_STRING, "runsc", 0, 0, false,
                                    "dockerd runtime name of gVisor the worker probes for the gvisor class (empty: none)" },
    [CFG_WORKER_RESTRICTED_NETWORK] = { "worker_restricted_network", CFGT_STRING, "sandbox-restricted", 0, 0, false,
                                        "Docker network for network=restricted: internal, no host address, no "
                                        "traffic between sandboxes (created when missing; empty: not offered)" },
    [CFG_WORKER_OPEN_NETWORK] = { "worker_open_network", CFGT_STRING, "sandbox-open", 0, 0, false,
                                  "Docker network for network=open: a bridge with egress, no traffic between "
                                  "sandboxes (created when missing; empty: not offered)" },
    [CFG_WORKER_EGRESS_UPSTREAM] = { "worker_egress_upstream", CFGT_STRING, "", 0, 0, false,
                                     "HOST:PORT of the resolver the egress filter asks about the names a "
                                     "sandbox's egress rules allow (empty: no filter, network filtered not "
                                     "offered; docs/network.md)" },
    [CFG_WORKER_FILTERED_NETWORK] = { "worker_filtered_network", CFGT_STRING, "sandbox-filtered", 0, 0, false,
                                      "Docker network of sandboxes with egress rules by domain: a bridge whose "
                                      "TCP and DNS go to the egress filter, nothing else out (created when "
                                      "missing)" },
    [CFG_WORKER_EGRESS_FILTER] = { "worker_egress_filter", CFGT_STRING, "", 0, 0, false,
                                   "the egress filter program (empty: sandbox-egress beside sandboxd)" },
    [CFG_WORKER_EGRESS_UPSTREAM_CA] = { "worker_egress_upstream_ca", CFGT_STRING, "", 0, 0, false,
                                        "PEM CA file the egress filter verifies the hosts sandboxes' secrets are "
                                        "bound to against (empty: the system's CAs)" },
    [CFG_WORKER_NIC_SUBNET] = { "worker_nic_subnet", CFGT_STRING, "10.213.0.0/16", 0, 0, false,
                                "IPv4 range the point-to-point links of microVMs behind the egress filter take "
                                "their addresses from (a /30 each; empty: no microVM network open)" },
    [CFG_SECRETS_KEY_FILE] = { "secrets_key_file", CFGT_STRING, "", 0, 0, false,
                               "file of the 32-byte key (64 hex digits) secrets are sealed with; the same on "
                               "every controller (empty: no secrets; sandboxd all makes one in its data dir)" },
    [CFG_WORKER_ROUTE_LISTEN] = { "worker_route_listen", CFGT_STRING, "127.0.0.1:0", 0, 0, false,
                                  "address the worker accepts route traffic from the controller on (port 0: any)" },
    [CFG_WORKER_ROUTE_ADVERTISE] = { "worker_route_advertise", CFGT_STRING, "", 0, 0, false,
                                     "host:port the controller reaches the route listener at (default: the "
                                     "bound address; required when listening on 0.0.0.0)" },
    [CFG_WORKER_ROUTE_MAX_CONNECTIONS] = { "worker_route_max_connections", CFGT_INT, "256", 1, 100000, false,
                                           "route connections the worker forwards at once (more are refused)" },
    [CFG_LOG_FORMAT] = { "log_format", CFGT_STRING, "logfmt", 0, 0, false, "log line format: logfmt or json" },
    [CFG_NATS_URL] = { "nats_url", CFGT_STRING, "", 0, 0, false,
                       "NATS server events are published to, e.g. nats://127.0.0.1:4222 (empty: no publishing)" },
    [CFG_NATS_SUBJECT_PREFIX] = { "nats_subject_prefix", CFGT_STRING, "sandbox.events", 0, 0, false,
                                  "subjects are {prefix}.{tenant}.{kind}" },
    [CFG_RETENTION_OPERATIONS_SECONDS] = { "retention_operations_seconds", CFGT_INT, "604800", 60, 315360000, true,
                                           "finished operations (and deleted sandboxes) older than this are pruned" },
    [CFG_RETENTION_EVENTS_SECONDS] = { "retention_events_seconds", CFGT_INT, "604800", 60, 315360000, true,
                                       "events older than this are pruned" },
    [CFG_RETENTION_INTERVAL_SECONDS] = { "retention_interval_seconds", CFGT_INT, "60", 1, 86400, true,
                                         "how often the retention loop prunes" },
    [CFG_WORKER_HEALTH_LISTEN] = { "worker_health_listen", CFGT_STRING, "", 0, 0, false,
                                   "HOST:PORT where a worker serves /healthz, /readyz and /metrics (empty: not served)" },
    [CFG_DEFAULT_IMAGE] = { "default_image", CFGT_STRING, "sandbox/busybox:latest", 0, 0, false,
                            "image of a create request that names none (tools/run.sh builds the default "
                            "from Debian's busybox)" },
    [CFG_IMAGE_REGISTRIES] = { "image_registries", CFGT_STRING, "", 0, 0, false,
                               "comma-separated registries (HOST[:PORT], *.DOMAIN, *) images may be pulled from; "
                               "empty: any but loopback, link-local, private, IP-literal and localhost ones, "
                               "which only an entry naming them exactly allows" },
    [CFG_WORKER_RUNTIME] = { "worker_runtime", CFGT_STRING, "docker", 0, 0, false,
                             "runtime backends the worker runs sandboxes with, a comma-separated list of docker "
                             "(dockerd) and external (worker_driver_command; docs/runtime-drivers.md)" },
    [CFG_RATE_REQUESTS_PER_SECOND] = { "rate_requests_per_second", CFGT_INT, "50", 0, 1000000, false,
                                       "API requests a client token may make a second (more get 429; worker "
                                       "tokens and probes are not limited; per controller process; 0: no limit)" },
    [CFG_RATE_REQUESTS_BURST] = { "rate_requests_burst", CFGT_INT, "100", 1, 1000000, false,
                                  "requests a client token may make at once above its rate" },
    [CFG_RATE_OPERATIONS_PER_SECOND] = { "rate_operations_per_second", CFGT_INT, "20", 0, 1000000, false,
                                         "operations (creates, deletes, execs, shares, unshares) a tenant may "
                                         "start a second (more get 429; per controller process; 0: no limit)" },
    [CFG_RATE_OPERATIONS_BURST] = { "rate_operations_burst", CFGT_INT, "40", 1, 1000000, false,
                                    "operations a tenant may start at once above its rate" },
    [CFG_POOL_REFILL_PER_SECOND] = { "pool_refill_per_second", CFGT_INT, "20", 1, 10000, true,
                                     "warm pool members the reconcile loop adds per second, over all pools" },
    [CFG_API_TLS_CERT] = { "api_tls_cert", CFGT_STRING, "", 0, 0, false,
                           "PEM certificate (chain) the API listener serves TLS with (empty: plain HTTP; "
                           "needs api_tls_key)" },
    [CFG_API_TLS_KEY] = { "api_tls_key", CFGT_STRING, "", 0, 0, false,
                          "PEM private key of api_tls_cert" },
    [CFG_ROUTE_TLS_CERT] = { "route_tls_cert", CFGT_STRING, "", 0, 0, false,
                             "PEM certificate (chain) the route listener serves TLS with (empty: plain HTTP; "
                             "needs route_tls_key)" },
    [CFG_ROUTE_TLS_KEY] = { "route_tls_key", CFGT_STRING, "", 0, 0, false,
                            "PEM private key of route_tls_cert" },
    [CFG_WORKER_CONTROLLER_CA] = { "worker_controller_ca", CFGT_STRING, "", 0, 0, false,
                                   "PEM CA file the worker verifies an https controller_url against "
                                   "(empty: the system's CAs)" },
    [CFG_WORKER_ROUTE_TLS_CERT] = { "worker_route_tls_cert", CFGT_STRING, "", 0, 0, false,
                                    "PEM certificate (chain) the worker's forwarder (worker_route_listen) serves "
                                    "TLS with; it must name the advertised IP address (empty: plain TCP)" },
    [CFG_WORKER_ROUTE_TLS_KEY] = { "worker_route_tls_key", CFGT_STRING, "", 0, 0, false,
                                   "PEM private key of worker_route_tls_cert" },
    [CFG_CONTROLLER_WORKER_CA] = { "controller_worker_ca", CFGT_STRING, "", 0, 0, false,
                                   "PEM CA file the controller verifies the workers' forwarders against; set, every "
                                   "route and logs connection to a worker is TLS (empty: plain TCP)" },
    [CFG_FILES_MAX_BYTES] = { "files_max_bytes", CFGT_INT, "2147483648", SBX_FILES_MAX_BYTES_MIN,
                              SBX_FILES_MAX_BYTES_MAX, true,
                              "the most bytes one file transfer may carry: an upload into a sandbox (PUT "
                              "/v1/sandboxes/{id}/files; more is answered 413) and a download out of it (cut off "
                              "with an error past it, by the controller and by the worker)" },
    [CFG_WORKER_DRIVER_COMMAND] = { "worker_driver_command", CFGT_STRING, "", 0, 0, false,
                                    "the external runtime driver's argv as a JSON array of strings, e.g. "
                                    "[\"/usr/lib/sandbox/sandbox-vmm\"] (used when worker_runtime names external)" },
    [CFG_TENANT_MAX_TRANSFERS] = { "tenant_max_transfers", CFGT_INT, "16", 1, SBX_FILES_STREAMS_MAX, false,
                                   "file transfers and shells one tenant holds open at once on a controller, of "
                                   "its 64 in all (more get 429; a tenant's policy "
                                   "max_transfers may lower it)" },
    [CFG_TENANT_MAX_SHELLS] = { "tenant_max_shells", CFGT_INT, "8", 1, SBX_FILES_STREAMS_MAX, false,
                                "interactive shells one tenant holds open at once on a controller (more get "
                                "429; policy max_shells may lower it)" },
    [CFG_TENANT_MAX_LOG_STREAMS] = { "tenant_max_log_streams", CFGT_INT, "32", 1, 1000000, false,
                                     "log streams (sandbox logs, --follow or not) one tenant holds open at once on "
                                     "a controller (more get 429; policy max_log_streams may lower it)" },
    [CFG_TENANT_MAX_WORKER_CONNECTIONS] = { "tenant_max_worker_connections", CFGT_INT, "64", 1, 1000000, false,
                                            "connections to workers' forwarders (routes, logs, files, shells) one "
                                            "controller holds for one tenant at once (more get 429, a route 503; "
                                            "policy max_worker_connections may lower it)" },
    [CFG_SHELL_IDLE_TIMEOUT_SECONDS] = { "shell_idle_timeout_seconds", CFGT_INT, "900", 10, SBX_SHELL_IDLE_SECONDS,
                                         false,
                                         "an interactive shell with no bytes either way for this long is closed "
                                         "(the worker closes one at 1800 s whatever "
                                         "this says)" },
};

#define R_C CFG_ROLE_CONTROLLER
#define R_W CFG_ROLE_WORKER
#define R_E CFG_ROLE_EMBEDDED
#define R_D CFG_ROLE_DATABASE
/* The commands each setting applies to (sandboxd CMD --help lists these). */
static const unsigned roles[CFG__COUNT] = {
    [CFG_LISTEN] = R_C, [CFG_DATABASE_URL] = R_C | R_E | R_D, [CFG_DATA_DIR] = R_E,
    [CFG_CONTROLLER_URL] = R_W, [CFG_DOCKER_SOCKET] = R_W, [CFG_WORKER_NAME] = R_W, [CFG_WORKER_TOKEN] = R_W,
    [CFG_WORKER_LABELS] = R_W, [CFG_WORKER_CPU_MILLIS] = R_W, [CFG_WORKER_MEMORY_MIB] = R_W,
    [CFG_WORKER_SLOTS] = R_W, [CFG_WORKER_EXECUTORS] = R_W, [CFG_HTTP_THREADS] = R_C,
    [CFG_RECONCILE_INTERVAL_MS] = R_C, [CFG_LEASE_SECONDS] = R_C, [CFG_HEARTBEAT_SECONDS] = R_C,
    [CFG_WORKER_TIMEOUT_SECONDS] = R_C | R_W, [CFG_MAX_ATTEMPTS] = R_C, [CFG_OPERATION_DEADLINE_SECONDS] = R_C,
    [CFG_WORKER_LOST_AFTER_SECONDS] = R_C,
    [CFG_MAX_CPU_MILLIS] = R_C, [CFG_MAX_MEMORY_MIB] = R_C, [CFG_MAX_TTL_SECONDS] = R_C,
    [CFG_DEFAULT_DISK_MIB] = R_C, [CFG_MAX_DISK_MIB] = R_C, [CFG_WORKER_DISK_INTERVAL_MS] = R_W,
    [CFG_MAX_SNAPSHOTS] = R_C, [CFG_MAX_SNAPSHOT_MIB] = R_C, [CFG_MAX_VOLUMES] = R_C, [CFG_MAX_VOLUME_MIB] = R_C,
    [CFG_WORKER_VOLUME_DIR] = R_W,
    [CFG_EXEC_OUTPUT_DEFAULT_BYTES] = R_C, [CFG_EXEC_OUTPUT_MAX_BYTES] = R_C, [CFG_EXEC_OUTPUT_KEEP_BYTES] = R_C, [CFG_EXEC_TIMEOUT_MAX_SECONDS] = R_C,
    [CFG_MAX_BODY_BYTES] = R_C,
    [CFG_WORKER_TENANT_EXECUTORS_PERCENT] = R_W, [CFG_EXEC_OUTPUT_TENANT_KEEP_BYTES] = R_C,
    [CFG_ISOLATION_TRUSTED] = R_C, [CFG_ISOLATION_UNTRUSTED] = R_C, [CFG_ISOLATION_HOSTILE] = R_C,
    [CFG_ALLOW_UNTRUSTED_OPEN_NETWORK] = R_C, [CFG_ROUTE_LISTEN] = R_C, [CFG_ROUTE_PUBLIC_URL] = R_C,
    [CFG_TRUSTED_PROXIES] = R_C, [CFG_ROUTE_MAX_REQUEST_BYTES] = R_C, [CFG_ROUTE_MAX_RESPONSE_BYTES] = R_C,
    [CFG_ROUTE_IDLE_TIMEOUT_SECONDS] = R_C, [CFG_ROUTE_MAX_DURATION_SECONDS] = R_C,
    [CFG_API_MAX_CONNECTIONS] = R_C, [CFG_API_MAX_CONNECTIONS_PER_ADDRESS] = R_C, [CFG_API_HEAD_TIMEOUT_SECONDS] = R_C,
    [CFG_API_IDLE_TIMEOUT_SECONDS] = R_C, [CFG_API_BODY_MIN_BYTES_PER_SECOND] = R_C, [CFG_API_BODY_BUDGET_MIB] = R_C,
    [CFG_ROUTE_MAX_CONNECTIONS] = R_C, [CFG_ROUTE_MAX_CONNECTIONS_PER_ADDRESS] = R_C,
    [CFG_ROUTE_DOMAIN] = R_C, [CFG_MAX_ROUTE_TTL_SECONDS] = R_C,
    [CFG_POSTGRES_BINDIR] = R_E, [CFG_LOG_LEVEL] = R_C | R_W, [CFG_WORKER_GVISOR_RUNTIME] = R_W,
    [CFG_WORKER_RESTRICTED_NETWORK] = R_W, [CFG_WORKER_OPEN_NETWORK] = R_W, [CFG_WORKER_ROUTE_LISTEN] = R_W,
    [CFG_WORKER_EGRESS_UPSTREAM] = R_W, [CFG_WORKER_FILTERED_NETWORK] = R_W, [CFG_WORKER_EGRESS_FILTER] = R_W,
    [CFG_WORKER_EGRESS_UPSTREAM_CA] = R_W, [CFG_SECRETS_KEY_FILE] = R_C, [CFG_WORKER_NIC_SUBNET] = R_W,
    [CFG_WORKER_ROUTE_ADVERTISE] = R_W, [CFG_WORKER_ROUTE_MAX_CONNECTIONS] = R_W, [CFG_LOG_FORMAT] = R_C | R_W,
    [CFG_NATS_URL] = R_C, [CFG_NATS_SUBJECT_PREFIX] = R_C, [CFG_RETENTION_OPERATIONS_SECONDS] = R_C,
    [CFG_RETENTION_EVENTS_SECONDS] = R_C, [CFG_RETENTION_INTERVAL_SECONDS] = R_C,
    [CFG_WORKER_HEALTH_LISTEN] = R_W, [CFG_DEFAULT_IMAGE] = R_C, [CFG_IMAGE_REGISTRIES] = R_C | R_W,
    [CFG_WORKER_RUNTIME] = R_W, [CFG_RATE_REQUESTS_PER_SECOND] = R_C, [CFG_RATE_REQUESTS_BURST] = R_C,
    [CFG_RATE_OPERATIONS_PER_SECOND] = R_C, [CFG_RATE_OPERATIONS_BURST] = R_C, [CFG_POOL_REFILL_PER_SECOND] = R_C,
    [CFG_API_TLS_CERT] = R_C, [CFG_API_TLS_KEY] = R_C, [CFG_ROUTE_TLS_CERT] = R_C, [CFG_ROUTE_TLS_KEY] = R_C,
    [CFG_WORKER_CONTROLLER_CA] = R_W, [CFG_WORKER_ROUTE_TLS_CERT] = R_W, [CFG_WORKER_ROUTE_TLS_KEY] = R_W,
    [CFG_CONTROLLER_WORKER_CA] = R_C, [CFG_FILES_MAX_BYTES] = R_C | R_W, [CFG_WORKER_DRIVER_COMMAND] = R_W,
    [CFG_TENANT_MAX_TRANSFERS] = R_C, [CFG_TENANT_MAX_SHELLS] = R_C, [CFG_TENANT_MAX_LOG_STREAMS] = R_C,
    [CFG_TENANT_MAX_WORKER_CONNECTIONS] = R_C, [CFG_SHELL_IDLE_TIMEOUT_SECONDS] = R_C,
};
#undef R_C
#undef R_W
#undef R_E
#undef R_D

unsigned cfg_setting_roles(cfg_key_t k) { return (unsigned)k < CFG__COUNT ? roles[k] : 0; }

const cfg_setting_t *cfg_settings(void) { return settings; }

static int cfg_find(const char *name)
{
    for (int i = 0; i < CFG__COUNT; i++)
        if (strcmp(settings[i].name, name) == 0)
            return i;
    return -1;
}

int cfg_init(cfg_t *c)
{
    memset(c, 0, sizeof *c);
    for (int i = 0; i < CFG__COUNT; i++) {
        c->values[i] = strdup(settings[i].default_value);
        c->sources[i] = "default";
        if (!c->values[i]) {
            cfg_release(c);
            return SBX_ENOMEM;
        }
    }
    return 0;
}

void cfg_release(cfg_t *c)
{
    for (int i = 0; i < CFG__COUNT; i++) {
        free(c->values[i]);
        c->values[i] = NULL;
    }
}

/* worker_runtime: a comma-separated list of docker and external, each at
 * most once, none empty. */
static int cfg_runtime_list_check(const char *value, char *err, size_t errlen)
{
    static const char *const names[] = { "docker", "external" };
    bool seen[2] = { false, false };
    const char *p = value;
    do {
        size_t len = strcspn(p, ",");
        int k = -1;
        for (int i = 0; i < 2; i++)
            if (strlen(names[i]) == len && strncmp(p, names[i], len) == 0)
                k = i;
        if (k < 0 || seen[k]) {
            snprintf(err, errlen, "worker_runtime must be a comma-separated list of docker, external, each at most "
                     "once (got \"%s\")", value);
            return SBX_EINVAL;
        }
        seen[k] = true;
        p += len;
    } while (*p++ == ',');
    return 0;
}

/* worker_driver_command: empty, or a JSON array of 1..SBX_DRIVER_ARGV_MAX
 * non-empty strings shorter than SBX_DRIVER_ARG_MAX (the external backend
 * checks the rest when it starts the driver). */
static int cfg_driver_command_check(const char *value, char *err, size_t errlen)
{
    json_object *o = NULL;
    api_error_t perr;
    bool ok = false;
    if (!*value)
        return 0;
    if (jsonx_parse(value, strlen(value), &o, &perr) == 0 && json_object_is_type(o, json_type_array)) {
        size_t n = json_object_array_length(o);
        ok = n >= 1 && n <= SBX_DRIVER_ARGV_MAX;
        for (size_t i = 0; ok && i < n; i++) {
            json_object *a = json_object_array_get_idx(o, i);
            size_t l = json_object_is_type(a, json_type_string) ? (size_t)json_object_get_string_len(a) : 0;
            ok = l > 0 && l < SBX_DRIVER_ARG_MAX && strlen(json_object_get_string(a)) == l;
        }
    }
    if (o)
        json_object_put(o);
    if (!ok)
        snprintf(err, errlen, "worker_driver_command must be a JSON array of 1..%d non-empty strings, e.g. "
                 "[\"/usr/lib/sandbox/sandbox-vmm\"]", SBX_DRIVER_ARGV_MAX);
    return ok ? 0 : SBX_EINVAL;
}

static int cfg_validate(const cfg_setting_t *s, const char *value, char *err, size_t errlen)
{
    if (s->type == CFGT_INT) {
        char *end;
        errno = 0;
        long long v = strtoll(value, &end, 10);
        if (errno || end == value || *end) {
            snprintf(err, errlen, "%s must be an integer (got \"%s\")", s->name, value);
            return SBX_EINVAL;
        }
        if (v < s->min || v > s->max) {
            snprintf(err, errlen, "%s must be between %lld and %lld (got %lld)", s->name, (long long)s->min,
                     (long long)s->max, v);
            return SBX_EINVAL;
        }
    } else if (s->type == CFGT_BOOL) {
        if (strcasecmp(value, "true") && strcasecmp(value, "false") && strcmp(value, "1") && strcmp(value, "0")) {
            snprintf(err, errlen, "%s must be true or false (got \"%s\")", s->name, value);
            return SBX_EINVAL;
        }
    } else if (strcmp(s->name, "log_level") == 0) {
        if (strcmp(value, "debug") && strcmp(value, "info") && strcmp(value, "warn") && strcmp(value, "error")) {
            snprintf(err, errlen, "log_level must be debug, info, warn or error (got \"%s\")", value);
            return SBX_EINVAL;
        }
    } else if (strcmp(s->name, "log_format") == 0) {
        if (strcmp(value, "logfmt") && strcmp(value, "json")) {
            snprintf(err, errlen, "log_format must be logfmt or json (got \"%s\")", value);
            return SBX_EINVAL;
        }
    } else if (strcmp(s->name, "worker_driver_command") == 0) {
        if (cfg_driver_command_check(value, err, errlen) < 0)
            return SBX_EINVAL;
    } else if (strcmp(s->name, "worker_runtime") == 0) {
        if (cfg_runtime_list_check(value, err, errlen) < 0)
            return SBX_EINVAL;
    } else if (strcmp(s->name, "default_image") == 0) {
        char why[200];
        if (!spec_image_ref_valid(value, why, sizeof why)) {
            snprintf(err, errlen, "default_image: %s", why);
            return SBX_EINVAL;
        }
    } else if (strcmp(s->name, "image_registries") == 0) {
        char why[200];
        if (!imageref_list_valid(value, why, sizeof why)) {
            snprintf(err, errlen, "image_registries: %s", why);
            return SBX_EINVAL;
        }
    } else if (strcmp(s->name, "listen") == 0) {
        const char *colon = strrchr(value, ':');
        if (!colon || colon == value || !colon[1]) {
            snprintf(err, errlen, "listen must be HOST:PORT (got \"%s\")", value);
            return SBX_EINVAL;
        }
    }
    return 0;
}

int cfg_set(cfg_t *c, const char *name, const char *value, const char *source, char *err, size_t errlen)
{
    int i = cfg_find(name);
    if (i < 0) {
        snprintf(err, errlen, "unknown setting \"%s\"", name);
        return SBX_EINVAL;
    }
    if (cfg_validate(&settings[i], value, err, errlen) < 0)
        return SBX_EINVAL;
    char *v = strdup(value);
    if (!v) {
        snprintf(err, errlen, "out of memory");
        return SBX_ENOMEM;
    }
    free(c->values[i]);
    c->values[i] = v;
    c->sources[i] = source;
    return 0;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

int cfg_load_file(cfg_t *c, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(err, errlen, "cannot open config file %s: %s", path, strerror(errno));
        return SBX_EIO;
    }
    char line[4096];
    int lineno = 0, r = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *s = trim(line);
        if (!*s || *s == '#')
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            snprintf(err, errlen, "%s:%d: expected \"key = value\"", path, lineno);
            r = SBX_EINVAL;
            break;
        }
        *eq = '\0';
        char *key = trim(s), *val = trim(eq + 1);
        size_t vl = strlen(val);
        if (vl >= 2 && val[0] == '"' && val[vl - 1] == '"') {
            val[vl - 1] = '\0';
            val++;
        }
        char why[256];
        if (cfg_set(c, key, val, "file", why, sizeof why) < 0) {
            snprintf(err, errlen, "%s:%d: %s", path, lineno, why);
            r = SBX_EINVAL;
            break;
        }
    }
    fclose(f);
    return r;
}

int cfg_load_env(cfg_t *c, char *err, size_t errlen)
{
    for (int i = 0; i < CFG__COUNT; i++) {
        char name[96] = "SANDBOX_";
        size_t o = strlen(name);
        for (const char *p = settings[i].name; *p && o < sizeof name - 1; p++)
            name[o++] = (char)toupper((unsigned char)*p);
        name[o] = '\0';
        const char *v = getenv(name);
        if (!v)
            continue;
        char why[256];
        if (cfg_set(c, settings[i].name, v, "env", why, sizeof why) < 0) {
            snprintf(err, errlen, "%s: %s", name, why);
            return SBX_EINVAL;
        }
    }
    return 0;
}

int cfg_flag_lookup(const char *flag)
{
    if (strncmp(flag, "--", 2) != 0)
        return -1;
    char name[96];
    size_t o = 0;
    for (const char *p = flag + 2; *p && *p != '=' && o < sizeof name - 1; p++)
        name[o++] = *p == '-' ? '_' : *p;
    name[o] = '\0';
    return cfg_find(name);
}

const char *cfg_str(const cfg_t *c, cfg_key_t k) { return c->values[k]; }

int64_t cfg_int(const cfg_t *c, cfg_key_t k) { return strtoll(c->values[k], NULL, 10); }

bool cfg_bool(const cfg_t *c, cfg_key_t k)
{
    return strcasecmp(c->values[k], "true") == 0 || strcmp(c->values[k], "1") == 0;
}

void cfg_print(const cfg_t *c, FILE *out)
{
    for (int i = 0; i < CFG__COUNT; i++) {
        const char *v = c->values[i];
        bool secret = strstr(settings[i].name, "token") != NULL;
        /* URL userinfo (user:pw@host) or a password= keyword/query parameter. */
        bool url_with_password =
            (strcmp(settings[i].name, "database_url") == 0 || strcmp(settings[i].name, "nats_url") == 0) &&
            (strchr(v, '@') || strcasestr(v, "password"));
        if (secret && *v)
            v = "(set, hidden)";
        else if (url_with_password)
            v = "(set, hidden: contains credentials)";
        fprintf(out, "%-28s = %-40s # %s\n", settings[i].name, v, c->sources[i]);
    }
}
