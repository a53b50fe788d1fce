/* The Docker backend of the runtime interface: the Engine API (v1.41) over
 * its unix socket with libcurl, never the docker CLI. What it adds to the
 * promises of worker/runtime.h:
 * - runtime_ping is GET /_ping; its errors name the Docker socket.
 * - runtime_dial and runtime_logs_target are one container inspect (labels,
 *   state, pid), bounded to about 10 s; runtime_dial then makes its socket
 *   in the container's network namespace (setns) and connects it there.
 * - runtime_logs_stream is GET /containers/{ref}/logs, demultiplexed.
 * - runtime_set_cancel_flag abandons pulls and every other Engine request. */
#ifndef SBX_RUNTIME_DOCKER_H
#define SBX_RUNTIME_DOCKER_H

#include "runtime.h"

typedef struct runtime_docker_options {
    const char *socket_path;        /* NULL or "": /var/run/docker.sock */
    const char *gvisor_runtime;     /* dockerd runtime name of runsc; NULL or "": no gvisor class */
    const char *restricted_network; /* network for NET_RESTRICTED; NULL or "": mode not offered */
    const char *open_network;       /* network for NET_OPEN; NULL or "": mode not offered */
    const char *worker_name;        /* labels the probe container (RUNTIME_LABEL_WORKER); may be NULL */
    const char *image_registries;   /* registries pulls may reach (imageref); NULL or "": the address rule */
    const char *volume_dir;         /* where volumes live (docs/volumes.md); NULL or "": none */
    const char *egress_upstream;    /* the egress filter's resolver; NULL or "": no filtered network */
    const char *filtered_network;   /* network of sandboxes with egress rules */
    const char *egress_filter;      /* the filter program; NULL or "": sandbox-egress beside sandboxd */
    const char *egress_upstream_ca; /* the CAs secret-bound hosts verify against; NULL or "": the system's */
    const char *nic_subnet;         /* the range microVMs' taps take /30s from; NULL or "": no NICs */
} runtime_docker_options_t;

/* Connects to the Docker Engine and finds out what it really offers: the
 * container class always; the gvisor class only when dockerd has the
 * configured runtime AND a probe container ran under it; per class the
 * network modes it can provide, creating the worker's networks when
 * missing. Blocks for the probe (bounded, about 30 s at worst). Returns 0
 * (a class or mode that is not offered is not an error: see
 * runtime_probe_result), SBX_EINVAL for a malformed option or SBX_EUNAVAIL
 * when Docker does not answer, with err filled. */
int runtime_docker_open(const runtime_docker_options_t *opt, runtime_t **ret, api_error_t *err);

#endif
