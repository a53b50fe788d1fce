/* Host-side helpers for gVisor's runsc. A process inside a gVisor sandbox
 * has no host pid: the exec pid Docker reports is a host `runsc-exec`
 * process, and killing it leaves the command running in the sandbox. These
 * helpers recognise runsc processes by their command line and drive
 * `runsc ps` / `runsc kill --pid` so an exec's process tree can be killed
 * inside the sandbox. */
#ifndef SBX_RUNSC_H
#define SBX_RUNSC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define RUNSC_PATH_MAX   512
/* Processes of one sandbox `runsc ps` output is read for, at most. */
#define RUNSC_MAX_PROCS  4096
/* Processes of one exec tree the timeout kill signals, at most (each is a
 * runsc invocation). */
#define RUNSC_KILL_MAX   64
/* One runsc ps or kill invocation. */
#define RUNSC_CALL_TIMEOUT_MS 5000

/* How to reach one sandbox's runsc state: the binary and its --root. */
typedef struct runsc_host {
    char exe[RUNSC_PATH_MAX];
    char root[RUNSC_PATH_MAX];
} runsc_host_t;

/* One process as `runsc ps` lists it (pids of the sandbox's root pid
 * namespace). */
typedef struct runsc_proc {
    int pid;
    int ppid;
} runsc_proc_t;

/* Checks a /proc cmdline (len bytes of NUL-separated arguments) of a runsc
 * process working for container_id: argv[0]'s base name starts with
 * "runsc" and one argument is exactly container_id. With exec_id not NULL it
 * must also be the `exec` subcommand, and when it names a --pid-file that
 * file's base name must be "<exec_id>.pid" (containerd names it so). Writes
 * the --root value (either "--root X" or "--root=X") into ret_root.
 * Returns 0, or SBX_EINVAL when it does not match or names no root. */
int runsc_cmdline_match(const char *cmdline, size_t len, const char *container_id, const char *exec_id,
                        char ret_root[RUNSC_PATH_MAX]);

/* Resolves the runsc host state of host process pid (Docker's State.Pid of
 * a gVisor container, or an exec's Pid): reads /proc/<pid>/cmdline, matches
 * it as runsc_cmdline_match does, and requires /proc/<pid>/exe to be the
 * same file as trusted_exe (the runtime path dockerd was configured with),
 * so nothing but that binary is ever run. Returns 0, SBX_ENOTFOUND (no such
 * process) or SBX_EINVAL (not a matching runsc process). */
int runsc_host_from_pid(pid_t pid, const char *container_id, const char *exec_id, const char *trusted_exe,
                        runsc_host_t *ret);

/* True when /proc/<pid> still matches (see runsc_host_from_pid), so a pid
 * read a moment ago can be signalled without hitting a recycled pid. */
bool runsc_pid_matches(pid_t pid, const char *container_id, const char *exec_id, const char *trusted_exe);

/* Parses the table `runsc ps` prints (a header line starting "UID PID PPID",
 * then one process a line). Returns 0 with *ret_n entries (at most max), or
 * SBX_EINVAL when the header is missing. */
int runsc_ps_parse(const char *text, runsc_proc_t *ret, size_t max, size_t *ret_n);

/* The largest pid in p, 0 when empty. gVisor hands out pids in increasing
 * order, so the processes an exec starts later all have larger pids. */
int runsc_max_pid(const runsc_proc_t *p, size_t n);

/* The root of the one exec started after pid after_pid: exec'd processes
 * have parent 0, the container's init is pid 1. Returns 0, SBX_ENOTFOUND
 * when there is none (it has exited), or SBX_ECONFLICT when several execs
 * started since then are still running (which one is ours is unknown). */
int runsc_exec_root(const runsc_proc_t *p, size_t n, int after_pid, int *ret_pid);

/* Adds to set (n entries, room for max) every descendant in p of a member
 * of set, in no particular order. Returns the new count. */
size_t runsc_descendants(const runsc_proc_t *p, size_t np, int *set, size_t n, size_t max);

/* Runs `runsc --root ROOT ps CONTAINER` and parses it: *ret (malloc'd,
 * free()) with *ret_n entries. Returns 0, SBX_ETIMEOUT or SBX_ERUNTIME. */
int runsc_ps(const runsc_host_t *h, const char *container_id, runsc_proc_t **ret, size_t *ret_n);

/* Runs `runsc --root ROOT kill --pid PID CONTAINER SIGNAL` (signal name
 * without SIG, e.g. "KILL"). Returns 0 or SBX_ERUNTIME (e.g. the process is
 * gone) or SBX_ETIMEOUT. */
int runsc_kill_pid(const runsc_host_t *h, const char *container_id, int pid, const char *signal);

/* Kills the process tree of the exec that started after after_pid, inside
 * the sandbox: stops the tree with SIGSTOP while walking it (so a forking
 * process cannot slip out), then SIGKILLs every member. *ret_killed gets the
 * number of processes signalled. Returns 0, SBX_ENOTFOUND (no exec root: it
 * already exited), SBX_ECONFLICT (several candidate execs: nothing killed)
 * or the error of runsc ps. */
int runsc_kill_exec_tree(const runsc_host_t *h, const char *container_id, int after_pid, size_t *ret_killed);

#endif
