/* sandbox-sim: a load tool for a real controller, as kubemark is for
 * Kubernetes: hollow workers through the real worker API and client load
 * through the real client API, in one process (tools/sim/). */
#include "sim.h"

#include <stdio.h>
#include <string.h>

static const char sim_usage[] =
    "usage: sandbox-sim COMMAND [options]   (sandbox-sim COMMAND --help for its options)\n"
    "A load tool for a real controller (plain HTTP on loopback):\n"
    "  workers    run N hollow workers: register, long-poll, report, heartbeat; nothing runs\n"
    "  load       client loops create -> exec -> delete; throughput and latency percentiles\n"
    "  populate   create N live sandboxes quickly (on hollow workers)\n"
    "  probe      latency of GET /v1/sandboxes/{id} and of the list\n"
    "  claim      warm pool claims at a fixed rate: hits, misses, latency, the pool's refills\n"
    "Errors are one line on stderr; exit 2 usage, 1 failure.\n";

typedef struct sim_cmd {
    const char *name;
    int (*main)(int argc, char **argv);
} sim_cmd_t;

static const sim_cmd_t sim_cmds[] = {
    { "workers", sim_workers_main },
    { "load", sim_load_main },
    { "populate", sim_populate_main },
    { "probe", sim_probe_main },
    { "claim", sim_claim_main },
};

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(sim_usage, stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        fputs(sim_usage, stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof sim_cmds / sizeof sim_cmds[0]; i++)
        if (strcmp(argv[1], sim_cmds[i].name) == 0)
            return sim_cmds[i].main(argc - 1, argv + 1);
    sim_errorf("unknown command %.64s (see sandbox-sim --help)", argv[1]);
    return 2;
}
