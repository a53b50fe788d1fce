/* templates build's Dockerfile parser (tools/cli/dockerfile.h): comments
 * and continued lines, each supported instruction's forms, ARG and ENV
 * substitution and scope, the paths of WORKDIR and COPY, and each refusal
 * naming FILE:LINE and the instruction. */
#include "check_util.h"
#include "dockerfile.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char err[1024];

/* Parses text (with build args "K=V" ..., NULL-ended); fails the test
 * when it is refused. */
static dockerfile_t *parse_args(const char *text, const char *const *args)
{
    df_kv_t kv[8];
    char buf[8][128];
    size_t n = 0;
    for (; args && args[n]; n++) {
        snprintf(buf[n], sizeof buf[n], "%s", args[n]);
        char *eq = strchr(buf[n], '=');
        ck_assert_ptr_nonnull(eq);
        *eq = '\0';
        kv[n] = (df_kv_t){ buf[n], eq + 1 };
    }
    dockerfile_t *df = NULL;
    int r = dockerfile_parse("Dockerfile", text, strlen(text), kv, n, &df, err, sizeof err);
    ck_assert_msg(r == 0, "refused: %s", err);
    ck_assert_ptr_nonnull(df);
    return df;
}

static dockerfile_t *parse(const char *text) { return parse_args(text, NULL); }

/* text is refused with a message holding each of the NULL-ended wants. */
static void refused(const char *text, ...)
{
    dockerfile_t *df = NULL;
    int r = dockerfile_parse("Dockerfile", text, strlen(text), NULL, 0, &df, err, sizeof err);
    ck_assert_msg(r == SBX_EINVAL, "accepted (%d): %s", r, text);
    ck_assert_ptr_null(df);
    va_list ap;
    va_start(ap, text);
    for (const char *w = va_arg(ap, const char *); w; w = va_arg(ap, const char *))
        ck_assert_msg(strstr(err, w) != NULL, "[%s] lacks [%s] (for %s)", err, w, text);
    va_end(ap);
}

static const char *env_of(const df_kv_t *v, size_t n, const char *k)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i].key, k) == 0)
            return v[i].value;
    return NULL;
}

START_TEST(test_the_integration_tests_dockerfile)
{
    const char *text =
        "# a comment, then an ARG with a default\n"
        "ARG BASE=sandbox/busybox:latest\n"
        "FROM ${BASE}\n"
        "ARG FLAVOUR=plain\n"
        "ENV APP_HOME=/app \\\n"
        "    GREETING=\"hello 42\"\n"
        "WORKDIR /app\n"
        "COPY src/ ./\n"
        "RUN sh ./setup.sh && \\\n"
        "    echo \"$FLAVOUR\" > /app/flavour\n"
        "RUN pwd > /app/where\n"
        "EXPOSE 8000\n"
        "CMD [\"sh\", \"-c\", \"echo run\"]\n";
    const char *args[] = { "FLAVOUR=spicy", NULL };
    dockerfile_t *df = parse_args(text, args);
    ck_assert_str_eq(df->from, "sandbox/busybox:latest");
    ck_assert_int_eq(df->from_line, 3);
    ck_assert_uint_eq(df->nsteps, 4);
    /* WORKDIR /app */
    ck_assert_int_eq(df->steps[0].kind, DF_STEP_WORKDIR);
    ck_assert_int_eq(df->steps[0].line, 7);
    ck_assert_str_eq(df->steps[0].dir, "/app");
    /* COPY src/ ./ : the contents of src into /app */
    ck_assert_int_eq(df->steps[1].kind, DF_STEP_COPY);
    ck_assert_str_eq(df->steps[1].instruction, "COPY");
    ck_assert_uint_eq(df->steps[1].nsrcs, 1);
    ck_assert_str_eq(df->steps[1].srcs[0], "src");
    ck_assert_str_eq(df->steps[1].dest, "/app");
    ck_assert(df->steps[1].dest_dir);
    /* the continued RUN keeps its first line, the shell expands $FLAVOUR */
    const df_step_t *run = &df->steps[2];
    ck_assert_int_eq(run->kind, DF_STEP_RUN);
    ck_assert_int_eq(run->line, 9);
    ck_assert_uint_eq(run->argc, 3);
    ck_assert_str_eq(run->argv[0], "/bin/sh");
    ck_assert_str_eq(run->argv[1], "-c");
    ck_assert_str_eq(run->argv[2], "sh ./setup.sh &&     echo \"$FLAVOUR\" > /app/flavour");
    ck_assert_str_eq(run->cwd, "/app");
    ck_assert_str_eq(env_of(run->env, run->nenv, "FLAVOUR"), "spicy");
    ck_assert_str_eq(env_of(run->env, run->nenv, "GREETING"), "hello 42");
    ck_assert_str_eq(env_of(run->env, run->nenv, "APP_HOME"), "/app");
    ck_assert_ptr_null(env_of(run->env, run->nenv, "BASE")); /* a global ARG is FROM's alone */
    ck_assert_int_eq(df->steps[3].line, 11);
    /* the config: ENV (not ARG), WORKDIR, CMD, EXPOSE */
    ck_assert_uint_eq(df->nenv, 2);
    ck_assert_str_eq(env_of(df->env, df->nenv, "GREETING"), "hello 42");
    ck_assert_ptr_null(env_of(df->env, df->nenv, "FLAVOUR"));
    ck_assert_str_eq(df->workdir, "/app");
    ck_assert_ptr_null(df->user);
    ck_assert(df->has_cmd && !df->has_entrypoint);
    ck_assert_uint_eq(df->ncmd, 3);
    ck_assert_str_eq(df->cmd[2], "echo run");
    ck_assert_uint_eq(df->nexpose, 1);
    ck_assert_int_eq(df->expose[0], 8000);
    ck_assert_uint_eq(df->nnotes, 0);
    dockerfile_free(df);
    /* without the build argument, the default */
    df = parse(text);
    ck_assert_str_eq(env_of(df->steps[2].env, df->steps[2].nenv, "FLAVOUR"), "plain");
    dockerfile_free(df);
}
END_TEST

START_TEST(test_comments_blank_lines_and_continuations)
{
    dockerfile_t *df = parse("# syntax=docker/dockerfile:1\n"
                             "\r\n"
                             "from busybox\r\n"
                             "  # indented comment\n"
                             "run echo a \\\n"
                             "  # a comment inside is dropped\n"
                             "\n"
                             "  b \\   \n"
                             "  c\n"
                             "Run echo d\\\n");
    ck_assert_str_eq(df->from, "busybox");
    ck_assert_uint_eq(df->nsteps, 2);
    ck_assert_int_eq(df->steps[0].line, 5);
    ck_assert_str_eq(df->steps[0].argv[2], "echo a   b   c");
    ck_assert_str_eq(df->steps[0].text, "run echo a   b   c");
    ck_assert_int_eq(df->steps[1].line, 10);
    ck_assert_str_eq(df->steps[1].argv[2], "echo d");
    dockerfile_free(df);
}
END_TEST

START_TEST(test_env_forms_quotes_and_substitution)
{
    dockerfile_t *df = parse("FROM x\n"
                             "ENV A=1 B=\"two words\" C='$A single' D=\\$A E=a\\ b\n"
                             "ENV F $A and ${B}\n"
                             "ENV A=10 G=$A\n"
                             "ENV H=${NOPE:-dflt} I=${A:+set} J=${NOPE:+x}k K=\"q\\\"uote\"\n"
                             "ENV P=/bin PATH2=$P:/usr/bin\n");
    ck_assert_str_eq(env_of(df->env, df->nenv, "A"), "10");
    ck_assert_str_eq(env_of(df->env, df->nenv, "B"), "two words");
    ck_assert_str_eq(env_of(df->env, df->nenv, "C"), "$A single");
    ck_assert_str_eq(env_of(df->env, df->nenv, "D"), "$A");
    ck_assert_str_eq(env_of(df->env, df->nenv, "E"), "a b");
    ck_assert_str_eq(env_of(df->env, df->nenv, "F"), "1 and two words");
    /* an ENV's values see the variables before its line, as Docker's */
    ck_assert_str_eq(env_of(df->env, df->nenv, "G"), "1");
    ck_assert_str_eq(env_of(df->env, df->nenv, "H"), "dflt");
    ck_assert_str_eq(env_of(df->env, df->nenv, "I"), "set");
    ck_assert_str_eq(env_of(df->env, df->nenv, "J"), "k");
    ck_assert_str_eq(env_of(df->env, df->nenv, "K"), "q\"uote");
    /* P is set on the same line: not yet, for PATH2 */
    ck_assert_str_eq(env_of(df->env, df->nenv, "PATH2"), ":/usr/bin");
    dockerfile_free(df);
}
END_TEST

START_TEST(test_arg_scope_and_build_args)
{
    const char *args[] = { "V=3.1", "UNUSED=x", NULL };
    dockerfile_t *df = parse_args("ARG V=1\n"
                                  "ARG REG\n"
                                  "FROM img:${V}${REG:+-reg}\n"
                                  "RUN echo no-v-here\n"
                                  "ARG V\n"
                                  "ARG W=$V-w\n"
                                  "ENV W=env-wins\n"
                                  "RUN echo\n", args);
    ck_assert_str_eq(df->from, "img:3.1");
    /* before its ARG in the stage, V is not set */
    ck_assert_ptr_null(env_of(df->steps[0].env, df->steps[0].nenv, "V"));
    /* ARG V in the stage takes the global's value; ENV wins over ARG */
    ck_assert_str_eq(env_of(df->steps[1].env, df->steps[1].nenv, "V"), "3.1");
    ck_assert_str_eq(env_of(df->steps[1].env, df->steps[1].nenv, "W"), "env-wins");
    ck_assert_ptr_null(env_of(df->steps[1].env, df->steps[1].nenv, "REG"));
    /* ARGs are not kept in the template */
    ck_assert_uint_eq(df->nenv, 1);
    /* a build argument no ARG declares: a note */
    ck_assert_uint_eq(df->nnotes, 1);
    ck_assert_ptr_nonnull(strstr(df->notes[0], "UNUSED"));
    dockerfile_free(df);
}
END_TEST

START_TEST(test_workdir_user_cmd_entrypoint_expose)
{
    dockerfile_t *df = parse("FROM x\n"
                             "ENV BASE=/srv\n"
                             "WORKDIR $BASE/app/\n"
                             "WORKDIR sub/../lib\n"
                             "RUN make\n"
                             "USER root\n"
                             "RUN echo still root\n"
                             "USER app:app\n"
                             "ENTRYPOINT python -m web\n"
                             "CMD [\"--port\", \"8000\"]\n"
                             "CMD [\"--port\", \"9000\"]\n"
                             "EXPOSE 8000/tcp 9000-9002 8000\n"
                             "LABEL a=b\n");
    ck_assert_str_eq(df->steps[0].dir, "/srv/app");
    ck_assert_str_eq(df->steps[1].dir, "/srv/app/lib");
    ck_assert_str_eq(df->steps[2].cwd, "/srv/app/lib");
    ck_assert_ptr_null(df->steps[2].user);
    ck_assert_ptr_null(df->steps[3].user); /* after USER root */
    ck_assert_str_eq(df->workdir, "/srv/app/lib");
    ck_assert_str_eq(df->user, "app:app");
    ck_assert_uint_eq(df->nentrypoint, 3);
    ck_assert_str_eq(df->entrypoint[0], "/bin/sh");
    ck_assert_str_eq(df->entrypoint[2], "python -m web");
    ck_assert_uint_eq(df->ncmd, 2);
    ck_assert_str_eq(df->cmd[1], "9000");
    ck_assert_uint_eq(df->nexpose, 4);
    ck_assert_int_eq(df->expose[0], 8000);
    ck_assert_int_eq(df->expose[3], 9002);
    ck_assert_uint_eq(df->nnotes, 1);
    ck_assert_ptr_nonnull(strstr(df->notes[0], "Dockerfile:13: LABEL"));
    dockerfile_free(df);
    /* a RUN after USER runs as that user; USER root again: as root */
    df = parse("FROM x\nUSER app:staff\nRUN id\nUSER 0\nRUN id\n");
    ck_assert_str_eq(df->steps[0].user, "app:staff");
    ck_assert_ptr_null(df->steps[1].user);
    dockerfile_free(df);
    /* the exec form of RUN, and a [ that is not JSON is the shell form */
    df = parse("FROM x\nRUN [\"echo\", \"a b\"]\nRUN [ -f /etc/passwd ] && echo yes\n");
    ck_assert_uint_eq(df->steps[0].argc, 2);
    ck_assert_str_eq(df->steps[0].argv[1], "a b");
    ck_assert_ptr_null(df->steps[0].cwd);
    ck_assert_str_eq(df->steps[1].argv[0], "/bin/sh");
    ck_assert_str_eq(df->steps[1].argv[2], "[ -f /etc/passwd ] && echo yes");
    dockerfile_free(df);
}
END_TEST

START_TEST(test_copy_sources_and_destinations)
{
    dockerfile_t *df = parse("FROM x\n"
                             "ARG D=/opt\n"
                             "COPY a.txt /etc/conf.txt\n"
                             "COPY ./a.txt b/ $D/dir\n"
                             "COPY . /\n"
                             "WORKDIR /w\n"
                             "ADD [\"with space.txt\", \"rel/\"]\n"
                             "COPY x/../y/./z *.py ./\n"
                             "COPY f .\n");
    const df_step_t *s = df->steps;
    ck_assert_str_eq(s[0].srcs[0], "a.txt");
    ck_assert_str_eq(s[0].dest, "/etc/conf.txt");
    ck_assert(!s[0].dest_dir);
    ck_assert_uint_eq(s[1].nsrcs, 2);
    ck_assert_str_eq(s[1].srcs[0], "a.txt");
    ck_assert_str_eq(s[1].srcs[1], "b");
    ck_assert_str_eq(s[1].dest, "/opt/dir");
    ck_assert(s[1].dest_dir); /* several sources */
    ck_assert_str_eq(s[2].srcs[0], ".");
    ck_assert_str_eq(s[2].dest, "/");
    ck_assert(s[2].dest_dir);
    ck_assert_str_eq(s[4].instruction, "ADD");
    ck_assert_str_eq(s[4].srcs[0], "with space.txt");
    ck_assert_str_eq(s[4].dest, "/w/rel");
    ck_assert(s[4].dest_dir);
    ck_assert_str_eq(s[5].srcs[0], "y/z");
    ck_assert_str_eq(s[5].srcs[1], "*.py");
    ck_assert_str_eq(s[5].dest, "/w");
    ck_assert_str_eq(s[6].dest, "/w");
    ck_assert(s[6].dest_dir);
    dockerfile_free(df);
}
END_TEST

START_TEST(test_refusals_name_file_line_and_instruction)
{
    refused("FROM x\nRUN true\nHEALTHCHECK CMD true\n", "Dockerfile:3:", "HEALTHCHECK", NULL);
    refused("FROM x\nonbuild RUN x\n", "Dockerfile:2:", "ONBUILD", NULL);
    refused("FROM x\nSHELL [\"bash\", \"-c\"]\n", ":2:", "SHELL", NULL);
    refused("FROM x\nVOLUME /data\n", ":2:", "VOLUME", NULL);
    refused("FROM x\nSTOPSIGNAL SIGTERM\n", ":2:", "STOPSIGNAL", NULL);
    refused("FROM x\nMAINTAINER me\n", ":2:", "MAINTAINER", NULL);
    refused("FROM x\nFROBNICATE y\n", ":2:", "unknown instruction 'FROBNICATE'", NULL);
    refused("FROM x AS build\n", ":1:", "FROM", "multi-stage", NULL);
    refused("FROM x\nRUN a\nFROM y\n", ":3:", "FROM", "multi-stage", NULL);
    refused("FROM --platform=linux/arm64 x\n", ":1:", "FROM --platform", NULL);
    refused("FROM scratch\n", "FROM scratch", NULL);
    refused("ENV A=1\nFROM x\n", ":1:", "ENV before FROM", NULL);
    refused("RUN true\n", ":1:", "RUN before FROM", NULL);
    refused("# only a comment\n", "Dockerfile: no FROM", NULL);
    refused("ARG BASE\nFROM ${BASE}\n", ":2:", "FROM", NULL);
    refused("FROM x\nRUN --mount=type=cache,target=/c make\n", ":2:", "RUN --mount", NULL);
    refused("FROM x\nCOPY --chown=app a /b\n", ":2:", "COPY --chown", NULL);
    refused("FROM x\nCOPY --chmod=755 a /b\n", ":2:", "COPY --chmod", NULL);
    refused("FROM x\nCOPY --from=build /a /b\n", ":2:", "COPY --from", NULL);
    refused("FROM x\nADD https://example.com/a.tgz /a\n", ":2:", "ADD", "URL", NULL);
    refused("FROM x\nADD site.tar.gz /srv/\n", ":2:", "ADD", "archive", "use COPY", NULL);
    refused("FROM x\nADD a.tar /srv/\n", ":2:", "use COPY", NULL);
    refused("FROM x\nCOPY ../secret /a\n", ":2:", "COPY", "leaves the build context", NULL);
    refused("FROM x\nCOPY a/../../b /a\n", ":2:", "leaves the build context", NULL);
    refused("FROM x\nCOPY /etc/passwd /a\n", ":2:", "COPY", "absolute", NULL);
    refused("FROM x\nCOPY onlyone\n", ":2:", "COPY needs a source and a destination", NULL);
    refused("FROM x\nEXPOSE 53/udp\n", ":2:", "EXPOSE", "udp", NULL);
    refused("FROM x\nEXPOSE http\n", ":2:", "EXPOSE", "not a port", NULL);
    refused("FROM x\nENV 1BAD=x\n", ":2:", "ENV 1BAD", NULL);
    refused("FROM x\nENV A=1 B\n", ":2:", "ENV B has no '='", NULL);
    refused("FROM x\nENV A\n", ":2:", "ENV A has no value", NULL);
    refused("FROM x\nUSER 'a b'\n", ":2:", "USER", NULL);
    refused("FROM x\nENV A=\"open\n", ":2:", "not closed", NULL);
    refused("FROM x\nENV A=${B\n", ":2:", "ENV", "substitution", NULL);
    refused("FROM x\nENV A=${B:?required}\n", ":2:", "B: required", NULL);
    refused("FROM x\nENV A=${B?}\n", ":2:", "B: is not set", NULL);
    refused("FROM x\nRUN\n", ":2:", "RUN needs arguments", NULL);
    refused("# escape=`\nFROM x\n", ":1:", "escape", NULL);
    /* the line an instruction starts on, also when continued */
    refused("FROM x\nRUN a \\\n  b\nCOPY \\\n  --chown=1 a b\n", ":4:", "COPY --chown", NULL);
    dockerfile_t *df = NULL;
    ck_assert_int_eq(dockerfile_parse("F", "FROM x\n\0", 8, NULL, 0, &df, err, sizeof err), SBX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "NUL"));
}
END_TEST

START_TEST(test_bounds)
{
    /* an exec's 128 variables at most */
    size_t cap = 200 * 16 + 64;
    char *text = unit_xmalloc(cap);
    size_t n = (size_t)snprintf(text, cap, "FROM x\n");
    for (int i = 0; i < 129; i++)
        n += (size_t)snprintf(text + n, cap - n, "ENV V%d=%d\n", i, i);
    refused(text, ":130:", "ENV", "128", NULL);
    free(text);
    /* CMD's 64 words at most */
    text = unit_xmalloc(1024);
    n = (size_t)snprintf(text, 1024, "FROM x\nCMD [");
    for (int i = 0; i < 65; i++)
        n += (size_t)snprintf(text + n, 1024 - n, "%s\"w\"", i ? "," : "");
    snprintf(text + n, 1024 - n, "]\n");
    refused(text, ":2:", "CMD", "64", NULL);
    free(text);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("dockerfile");
    unit_tcase_add(s, "dockerfile", UNIT_TESTS(
        test_the_integration_tests_dockerfile,
        test_comments_blank_lines_and_continuations,
        test_env_forms_quotes_and_substitution,
        test_arg_scope_and_build_args,
        test_workdir_user_cmd_entrypoint_expose,
        test_copy_sources_and_destinations,
        test_refusals_name_file_line_and_instruction,
        test_bounds,
    ));
    return s;
}
