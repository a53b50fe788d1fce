/* The one declarative table of settings, fed by defaults, a config file,
 * SANDBOX_* environment variables and command-line flags (in that order of
 * precedence, later wins). */
#ifndef SBX_CONFIG_H
#define SBX_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
    CFG_LISTEN = 0,
    CFG_DATABASE_URL,
    CFG_DATA_DIR,
    CFG_CONTROLLER_URL,
    CFG_DOCKER_SOCKET,
    CFG_WORKER_NAME,
    CFG_WORKER_TOKEN,
    CFG_WORKER_LABELS,
    CFG_WORKER_CPU_MILLIS,
    CFG_WORKER_MEMORY_MIB,
    CFG_WORKER_SLOTS,
    CFG_WORKER_EXECUTORS,
    CFG_HTTP_THREADS,
    CFG_RECONCILE_INTERVAL_MS,
    CFG_LEASE_SECONDS,
    CFG_HEARTBEAT_SECONDS,
    CFG_WORKER_TIMEOUT_SECONDS,
    CFG_WORKER_LOST_AFTER_SECONDS,
    CFG_MAX_ATTEMPTS,
    CFG_OPERATION_DEADLINE_SECONDS,
    CFG_MAX_CPU_MILLIS,
    CFG_MAX_MEMORY_MIB,
    CFG_DEFAULT_DISK_MIB,
    CFG_MAX_DISK_MIB,
    CFG_MAX_SNAPSHOTS,
    CFG_MAX_SNAPSHOT_MIB,
    CFG_MAX_VOLUMES,
    CFG_MAX_VOLUME_MIB,
    CFG_WORKER_VOLUME_DIR,
    CFG_WORKER_DISK_INTERVAL_MS,
    CFG_MAX_TTL_SECONDS,
    CFG_EXEC_OUTPUT_DEFAULT_BYTES,
    CFG_EXEC_OUTPUT_MAX_BYTES,
    CFG_EXEC_OUTPUT_KEEP_BYTES,
    CFG_EXEC_TIMEOUT_MAX_SECONDS,
    /* fair shares between tenants (issue 27) */
    CFG_WORKER_TENANT_EXECUTORS_PERCENT,
    CFG_EXEC_OUTPUT_TENANT_KEEP_BYTES,
    CFG_MAX_BODY_BYTES,
    CFG_ISOLATION_TRUSTED,
    CFG_ISOLATION_UNTRUSTED,
    CFG_ISOLATION_HOSTILE,
    CFG_ALLOW_UNTRUSTED_OPEN_NETWORK,
    CFG_ROUTE_LISTEN,
    CFG_ROUTE_PUBLIC_URL,
    CFG_TRUSTED_PROXIES,
    CFG_ROUTE_MAX_REQUEST_BYTES,
    CFG_ROUTE_MAX_RESPONSE_BYTES,
    CFG_ROUTE_IDLE_TIMEOUT_SECONDS,
    CFG_ROUTE_MAX_DURATION_SECONDS,
    CFG_API_MAX_CONNECTIONS,
    CFG_API_MAX_CONNECTIONS_PER_ADDRESS,
    CFG_API_HEAD_TIMEOUT_SECONDS,
    CFG_API_IDLE_TIMEOUT_SECONDS,
    CFG_API_BODY_MIN_BYTES_PER_SECOND,
    CFG_API_BODY_BUDGET_MIB,
    CFG_ROUTE_MAX_CONNECTIONS,
    CFG_ROUTE_MAX_CONNECTIONS_PER_ADDRESS,
    CFG_ROUTE_DOMAIN,
    CFG_MAX_ROUTE_TTL_SECONDS,
    CFG_POSTGRES_BINDIR,
    CFG_LOG_LEVEL,
    CFG_WORKER_GVISOR_RUNTIME,
    CFG_WORKER_RESTRICTED_NETWORK,
    CFG_WORKER_OPEN_NETWORK,
    CFG_WORKER_ROUTE_LISTEN,
    CFG_WORKER_ROUTE_ADVERTISE,
    CFG_WORKER_ROUTE_MAX_CONNECTIONS,
    CFG_LOG_FORMAT,
    CFG_NATS_URL,
    CFG_NATS_SUBJECT_PREFIX,
    CFG_RETENTION_OPERATIONS_SECONDS,
    CFG_RETENTION_EVENTS_SECONDS,
    CFG_RETENTION_INTERVAL_SECONDS,
    CFG_WORKER_HEALTH_LISTEN,
    CFG_DEFAULT_IMAGE,
    CFG_IMAGE_REGISTRIES,
    CFG_WORKER_RUNTIME,
    CFG_RATE_REQUESTS_PER_SECOND,
    CFG_RATE_REQUESTS_BURST,
    CFG_RATE_OPERATIONS_PER_SECOND,
    CFG_RATE_OPERATIONS_BURST,
    CFG_POOL_REFILL_PER_SECOND,
    CFG_API_TLS_CERT,
    CFG_API_TLS_KEY,
    CFG_ROUTE_TLS_CERT,
    CFG_ROUTE_TLS_KEY,
    CFG_WORKER_CONTROLLER_CA,
    CFG_WORKER_ROUTE_TLS_CERT,
    CFG_WORKER_ROUTE_TLS_KEY,
    CFG_CONTROLLER_WORKER_CA,
    CFG_FILES_MAX_BYTES,
    CFG_WORKER_DRIVER_COMMAND,
    CFG_TENANT_MAX_TRANSFERS,
    CFG_TENANT_MAX_SHELLS,
    CFG_TENANT_MAX_LOG_STREAMS,
    CFG_TENANT_MAX_WORKER_CONNECTIONS,
    CFG_SHELL_IDLE_TIMEOUT_SECONDS,
    CFG_WORKER_EGRESS_UPSTREAM,
    CFG_WORKER_FILTERED_NETWORK,
    CFG_WORKER_EGRESS_FILTER,
    CFG_WORKER_EGRESS_UPSTREAM_CA,
    CFG_SECRETS_KEY_FILE,
    CFG_WORKER_NIC_SUBNET,
    CFG__COUNT
} cfg_key_t;

typedef enum { CFGT_STRING, CFGT_INT, CFGT_BOOL } cfg_type_t;

typedef struct cfg_setting {
    const char *name;        /* file key; flag is --name-with-dashes; env SANDBOX_NAME */
    cfg_type_t type;
    const char *default_value;
    int64_t min, max;        /* for CFGT_INT */
    bool reloadable;
    const char *help;
} cfg_setting_t;

typedef struct cfg {
    char *values[CFG__COUNT];       /* owned, never NULL after cfg_init */
    const char *sources[CFG__COUNT]; /* "default", "file", "env", "flag" */
} cfg_t;

/* The table itself, CFG__COUNT entries. */
const cfg_setting_t *cfg_settings(void);

/* Which commands a setting applies to (a bit mask; every setting has one). */
enum {
    CFG_ROLE_CONTROLLER = 1 << 0, /* `controller` (and `all`) */
    CFG_ROLE_WORKER = 1 << 1,     /* `worker` (and `all`) */
    CFG_ROLE_EMBEDDED = 1 << 2,   /* only `all`: the embedded PostgreSQL and the bootstrap tokens */
    CFG_ROLE_DATABASE = 1 << 3,   /* `migrate` and `token create` */
};
unsigned cfg_setting_roles(cfg_key_t k);

/* Fills every value with its default. Returns 0 or SBX_ENOMEM. */
int cfg_init(cfg_t *c);
void cfg_release(cfg_t *c);

/* Sets one value by name after validating it; err gets a one-line reason. */
int cfg_set(cfg_t *c, const char *name, const char *value, const char *source, char *err, size_t errlen);

/* Reads "key = value" lines (# comments, blank lines). Unknown keys and
 * invalid values are errors naming the file and line. */
int cfg_load_file(cfg_t *c, const char *path, char *err, size_t errlen);

/* Applies SANDBOX_<NAME> variables from the environment. */
int cfg_load_env(cfg_t *c, char *err, size_t errlen);

/* Finds the setting a flag names ("--database-url" or "--database-url=V").
 * Returns the key or -1. */
int cfg_flag_lookup(const char *flag);

const char *cfg_str(const cfg_t *c, cfg_key_t k);
int64_t cfg_int(const cfg_t *c, cfg_key_t k);
bool cfg_bool(const cfg_t *c, cfg_key_t k);

/* Writes "name = value  # source" for every setting; secrets are masked. */
void cfg_print(const cfg_t *c, FILE *out);

#endif
