/* The Dockerfile `sandbox templates build` runs (docs/templates.md): a pure
 * parser, the text in and what the build does out, with no I/O of its own.
 * It knows FROM (one, an image or a template), ARG, ENV, WORKDIR, USER,
 * RUN, COPY and ADD of local paths, CMD, ENTRYPOINT, EXPOSE and LABEL
 * (accepted, ignored with a note); anything else, and what the build cannot
 * honour (multi-stage, RUN after USER, ADD of a URL or an archive, COPY
 * --chown ...), is an error naming FILE:LINE and the instruction. */
#ifndef SBX_CLI_DOCKERFILE_H
#define SBX_CLI_DOCKERFILE_H

#include <stdbool.h>
#include <stddef.h>

#define DF_TEXT_MAX  (1024 * 1024)  /* a Dockerfile's bytes at most */
#define DF_STEPS_MAX 1000           /* WORKDIR, RUN, COPY and ADD instructions at most */

/* A name and its value (NULL: declared, not set: an ARG without a default). */
typedef struct df_kv {
    char *key, *value;
} df_kv_t;

/* What the build does, in order. */
typedef enum { DF_STEP_WORKDIR, DF_STEP_RUN, DF_STEP_COPY } df_step_kind_t;

typedef struct df_step {
    df_step_kind_t kind;
    int line;                   /* where its instruction starts */
    const char *instruction;    /* "WORKDIR", "RUN", "COPY" or "ADD" */
    char *text;                 /* the instruction as written, its continued lines joined */
    char *dir;                  /* WORKDIR: the absolute directory, to make */
    char **argv;                /* RUN: shell form ["/bin/sh","-c",text] or the exec form's array */
    size_t argc;
    df_kv_t *env;               /* RUN: the ARGs (set) and ENVs so far, an ENV winning by name */
    size_t nenv;
    char *cwd;                  /* RUN: the WORKDIR so far, or NULL (the image's) */
    char *user;                 /* RUN: the USER so far when not root, or NULL (root) */
    char **srcs;                /* COPY/ADD: paths in the build context, clean and relative ("." is */
    size_t nsrcs;               /* the context itself), variables substituted; may hold * ? [ */
    char *dest;                 /* COPY/ADD: the absolute destination, clean (no trailing /) */
    bool dest_dir;              /* ... a directory: written with a trailing / or several sources */
} df_step_t;

typedef struct dockerfile {
    char *from;                 /* the FROM reference, variables substituted */
    int from_line;
    char *from_text;            /* the FROM instruction as written */
    df_step_t *steps;
    size_t nsteps;
    /* The version's config (docs/templates.md): ENV (not ARG), the last
     * WORKDIR and USER, CMD, ENTRYPOINT (has_*: given), EXPOSE's ports. */
    df_kv_t *env;
    size_t nenv;
    char *workdir, *user;
    char **cmd, **entrypoint;
    size_t ncmd, nentrypoint;
    bool has_cmd, has_entrypoint;
    int *expose;
    size_t nexpose;
    /* Lines for stderr: an instruction accepted and ignored (LABEL), a
     * build argument no ARG declares. */
    char **notes;
    size_t nnotes;
} dockerfile_t;

/* Parses len bytes of text, named file in messages, with the build
 * arguments (--build-arg K=V; values not NULL). Returns 0 with *ret
 * (dockerfile_free), or SBX_EINVAL with err "FILE:LINE: INSTRUCTION ...: why"
 * ("FILE: why" for the file as a whole), or SBX_ENOMEM. */
int dockerfile_parse(const char *file, const char *text, size_t len, const df_kv_t *build_args, size_t nargs,
                     dockerfile_t **ret, char *err, size_t errlen);

void dockerfile_free(dockerfile_t *df);

#endif
