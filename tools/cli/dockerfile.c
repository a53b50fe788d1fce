/* The Dockerfile of `sandbox templates build` (dockerfile.h): lines joined
 * where they end in a backslash, comments dropped, each instruction checked
 * and turned into what the build does (steps) and what the template keeps
 * (config), with ARG and ENV substituted as Docker does ($VAR, ${VAR},
 * ${VAR:-default}, ${VAR:+alt}, quotes and backslash escapes). */
#include "dockerfile.h"

#include <ctype.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "errors.h"
#include "limits.h"
#include "sbuf.h"

/* What a template version's config takes (common/spec.c). */
#define DF_ARGV_MAX      64     /* CMD, ENTRYPOINT words */
#define DF_ARG_BYTES     4096   /* ... each */
#define DF_EXPOSE_MAX    32
#define DF_USER_MAX      64
#define DF_WORDS_MAX     4096   /* words of one instruction */

/* ---------------------------------------------------------------- small lists */

typedef struct kvlist {
    df_kv_t *v;
    size_t n, cap;
} kvlist_t;

typedef struct strv {
    char **v;
    size_t n, cap;
} strv_t;

static int strv_push(strv_t *s, char *p)
{
    if (!p)
        return SBX_ENOMEM;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        char **v = realloc(s->v, cap * sizeof *v);
        if (!v) {
            free(p);
            return SBX_ENOMEM;
        }
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = p;
    return 0;
}

static void strv_free(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

static df_kv_t *kv_find(const kvlist_t *l, const char *k)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->v[i].key, k) == 0)
            return &l->v[i];
    return NULL;
}

/* Sets k to v (NULL: declared, not set), in place when k is there. */
static int kv_set(kvlist_t *l, const char *k, const char *v)
{
    char *nv = v ? strdup(v) : NULL;
    if (v && !nv)
        return SBX_ENOMEM;
    df_kv_t *e = kv_find(l, k);
    if (e) {
        free(e->value);
        e->value = nv;
        return 0;
    }
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        df_kv_t *nl = realloc(l->v, cap * sizeof *nl);
        if (!nl) {
            free(nv);
            return SBX_ENOMEM;
        }
        l->v = nl;
        l->cap = cap;
    }
    char *nk = strdup(k);
    if (!nk) {
        free(nv);
        return SBX_ENOMEM;
    }
    l->v[l->n++] = (df_kv_t){ nk, nv };
    return 0;
}

static void kv_free(df_kv_t *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) {
        free(v[i].key);
        free(v[i].value);
    }
    free(v);
}

/* ---------------------------------------------------------------- the parse */

typedef struct parse {
    const char *file;
    const df_kv_t *bargs;
    size_t nbargs;
    bool *bargs_used;
    kvlist_t globals;        /* ARGs before FROM: only FROM sees them */
    kvlist_t args, env;      /* after FROM */
    bool in_stage;           /* FROM seen */
    char *workdir;           /* the WORKDIR so far (NULL: none) */
    char *user;              /* the USER so far (NULL: none) */
    int user_line;
    dockerfile_t *df;
    size_t steps_cap;
    strv_t notes;
    int line;                /* the instruction's */
    const char *kw;          /* its keyword, upper case */
    char *err;
    size_t errlen;
} parse_t;

/* "FILE:LINE: " and the message into err; SBX_EINVAL. */
__attribute__((format(printf, 2, 3))) static int fail(parse_t *p, const char *fmt, ...)
{
    int n = p->line > 0 ? snprintf(p->err, p->errlen, "%s:%d: ", p->file, p->line)
                        : snprintf(p->err, p->errlen, "%s: ", p->file);
    if (n < 0 || (size_t)n >= p->errlen)
        return SBX_EINVAL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return SBX_EINVAL;
}

static int oom(parse_t *p)
{
    snprintf(p->err, p->errlen, "out of memory");
    return SBX_ENOMEM;
}

__attribute__((format(printf, 2, 3))) static int note(parse_t *p, const char *fmt, ...)
{
    char buf[512];
    int n = snprintf(buf, sizeof buf, "%s:%d: ", p->file, p->line);
    if (n < 0 || (size_t)n >= sizeof buf)
        n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    va_end(ap);
    return strv_push(&p->notes, strdup(buf)) < 0 ? oom(p) : 0;
}

/* A name the API takes as an environment variable's. */
static bool var_name_ok(const char *k)
{
    if (!*k || strlen(k) > SBX_MAX_KEY_BYTES || !(isalpha((unsigned char)*k) || *k == '_'))
        return false;
    for (; *k; k++)
        if (!(isalnum((unsigned char)*k) || *k == '_'))
            return false;
    return true;
}

static bool has_control(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return true;
    return false;
}

/* A --build-arg's value, marked used; NULL when none was given. */
static const char *barg(parse_t *p, const char *name)
{
    for (size_t i = 0; i < p->nbargs; i++)
        if (strcmp(p->bargs[i].key, name) == 0) {
            p->bargs_used[i] = true;
            return p->bargs[i].value;
        }
    return NULL;
}

/* A variable's value where the instruction is (NULL: not set): before FROM
 * the global ARGs; after it an ENV, else an ARG of the stage. */
static const char *var(const parse_t *p, const char *name)
{
    const df_kv_t *e;
    if (!p->in_stage)
        return (e = kv_find(&p->globals, name)) ? e->value : NULL;
    if ((e = kv_find(&p->env, name)) != NULL)
        return e->value;
    return (e = kv_find(&p->args, name)) ? e->value : NULL;
}

/* ---------------------------------------------------------------- words */

typedef struct cur {
    const char *s;
    size_t i, n;
} cur_t;

static int expand_until(parse_t *p, cur_t *c, char stop, sbuf_t *out);

static int put(parse_t *p, sbuf_t *out, const char *s, size_t n)
{
    int r = sbuf_append(out, s, n);
    if (r == SBX_ETOOBIG)
        return fail(p, "%s: a word is longer than %d bytes", p->kw, SBX_MAX_VALUE_BYTES * 4);
    return r < 0 ? oom(p) : 0;
}

static bool name_char(char ch) { return isalnum((unsigned char)ch) || ch == '_'; }

/* $NAME, ${NAME}, ${NAME:-word}, ${NAME-word}, ${NAME:+word},
 * ${NAME+word}, ${NAME:?word}, ${NAME?word}; c is at the '$'. A '$' before
 * anything else is itself. */
static int dollar(parse_t *p, cur_t *c, sbuf_t *out)
{
    c->i++;
    if (c->i >= c->n || (c->s[c->i] != '{' && !(isalpha((unsigned char)c->s[c->i]) || c->s[c->i] == '_')))
        return put(p, out, "$", 1);
    char name[SBX_MAX_KEY_BYTES + 1];
    size_t nl = 0;
    bool braced = c->s[c->i] == '{';
    if (braced)
        c->i++;
    while (c->i < c->n && name_char(c->s[c->i])) {
        if (nl >= SBX_MAX_KEY_BYTES)
            return fail(p, "%s: a variable name is longer than %d bytes", p->kw, SBX_MAX_KEY_BYTES);
        name[nl++] = c->s[c->i++];
    }
    name[nl] = '\0';
    const char *v = var(p, name);
    if (!braced)
        return v ? put(p, out, v, strlen(v)) : 0;
    if (nl == 0 || c->i >= c->n)
        return fail(p, "%s: bad substitution: '${' needs a name and a '}'", p->kw);
    if (c->s[c->i] == '}') {
        c->i++;
        return v ? put(p, out, v, strlen(v)) : 0;
    }
    bool colon = c->s[c->i] == ':';
    if (colon)
        c->i++;
    char op = c->i < c->n ? c->s[c->i] : '\0';
    if (op != '-' && op != '+' && op != '?')
        return fail(p, "%s: bad substitution ${%s%s...}: known are ${%s}, ${%s:-default}, ${%s:+alternative}", p->kw,
                    name, colon ? ":" : "", name, name, name);
    c->i++;
    sbuf_t word;
    sbuf_init(&word, (size_t)SBX_MAX_VALUE_BYTES * 4);
    int r = expand_until(p, c, '}', &word);
    if (r == 0 && (c->i >= c->n || c->s[c->i] != '}'))
        r = fail(p, "%s: bad substitution: ${%s has no closing '}'", p->kw, name);
    if (r < 0) {
        sbuf_release(&word);
        return r;
    }
    c->i++;
    bool cond = colon ? (v && *v) : v != NULL;
    if (op == '-')
        r = cond ? put(p, out, v, strlen(v)) : put(p, out, word.data ? word.data : "", word.len);
    else if (op == '+')
        r = cond ? put(p, out, word.data ? word.data : "", word.len) : 0;
    else if (!cond)
        r = fail(p, "%s: %s: %s", p->kw, name, word.len ? sbuf_cstr(&word) : "is not set");
    else
        r = put(p, out, v, strlen(v));
    sbuf_release(&word);
    return r;
}

/* Expands from c to its end, or to an unquoted stop ('}' inside ${...};
 * left for the caller): quotes removed, backslash escapes, variables. */
static int expand_until(parse_t *p, cur_t *c, char stop, sbuf_t *out)
{
    int r = 0;
    while (r == 0 && c->i < c->n) {
        char ch = c->s[c->i];
        if (stop && ch == stop)
            return 0;
        if (ch == '\'') {
            size_t end = c->i + 1;
            while (end < c->n && c->s[end] != '\'')
                end++;
            if (end >= c->n)
                return fail(p, "%s: a ' is not closed", p->kw);
            r = put(p, out, c->s + c->i + 1, end - c->i - 1);
            c->i = end + 1;
        } else if (ch == '"') {
            c->i++;
            for (;;) {
                if (c->i >= c->n)
                    return fail(p, "%s: a \" is not closed", p->kw);
                char d = c->s[c->i];
                if (d == '"') {
                    c->i++;
                    break;
                }
                if (d == '\\' && c->i + 1 < c->n && strchr("\"$\\", c->s[c->i + 1])) {
                    r = put(p, out, c->s + c->i + 1, 1);
                    c->i += 2;
                } else if (d == '$') {
                    r = dollar(p, c, out);
                } else {
                    r = put(p, out, &d, 1);
                    c->i++;
                }
                if (r < 0)
                    return r;
            }
        } else if (ch == '\\') {
            if (c->i + 1 < c->n) {
                r = put(p, out, c->s + c->i + 1, 1);
                c->i += 2;
            } else {
                r = put(p, out, "\\", 1);
                c->i++;
            }
        } else if (ch == '$') {
            r = dollar(p, c, out);
        } else {
            r = put(p, out, &ch, 1);
            c->i++;
        }
    }
    return r;
}

/* s[0..n) as one word, expanded; *ret malloc'd. */
static int expand(parse_t *p, const char *s, size_t n, char **ret)
{
    sbuf_t out;
    sbuf_init(&out, (size_t)SBX_MAX_VALUE_BYTES * 4);
    cur_t c = { s, 0, n };
    int r = expand_until(p, &c, '\0', &out);
    if (r < 0) {
        sbuf_release(&out);
        return r;
    }
    *ret = sbuf_detach(&out, NULL);
    return *ret ? 0 : oom(p);
}

/* Splits s at whitespace outside quotes and escapes, each word as written
 * (expanded later). */
static int split_raw(parse_t *p, const char *s, strv_t *out)
{
    size_t i = 0, n = strlen(s);
    for (;;) {
        while (i < n && isspace((unsigned char)s[i]))
            i++;
        if (i >= n)
            return 0;
        size_t start = i;
        char q = '\0';
        while (i < n && (q || !isspace((unsigned char)s[i]))) {
            char ch = s[i];
            if (q == '\'') {
                if (ch == '\'')
                    q = '\0';
            } else if (ch == '\\' && i + 1 < n) {
                i++;
            } else if (q == '"') {
                if (ch == '"')
                    q = '\0';
            } else if (ch == '\'' || ch == '"') {
                q = ch;
            }
            i++;
        }
        if (out->n >= DF_WORDS_MAX)
            return fail(p, "%s: more than %d words", p->kw, DF_WORDS_MAX);
        if (strv_push(out, strndup(s + start, i - start)) < 0)
            return oom(p);
    }
}

/* The exec form: s is a JSON array of strings. false (nothing kept) when it
 * is not one: then it is the shell form, as Docker reads it. */
static bool json_words(const char *s, strv_t *out)
{
    while (isspace((unsigned char)*s))
        s++;
    if (*s != '[')
        return false;
    json_tokener *tok = json_tokener_new();
    if (!tok)
        return false;
    size_t n = strlen(s);
    json_object *o = json_tokener_parse_ex(tok, s, (int)n);
    bool ok = o && json_tokener_get_error(tok) == json_tokener_success && json_object_is_type(o, json_type_array);
    size_t end = ok ? (size_t)json_tokener_get_parse_end(tok) : 0;
    while (ok && end < n && isspace((unsigned char)s[end]))
        end++;
    ok = ok && end == n;
    for (size_t i = 0; ok && i < json_object_array_length(o); i++) {
        json_object *e = json_object_array_get_idx(o, i);
        ok = json_object_is_type(e, json_type_string) &&
             strlen(json_object_get_string(e)) == (size_t)json_object_get_string_len(e);
    }
    for (size_t i = 0; ok && i < json_object_array_length(o); i++)
        ok = strv_push(out, strdup(json_object_get_string(json_object_array_get_idx(o, i)))) == 0;
    if (!ok) {
        strv_free(out->v, out->n);
        *out = (strv_t){ 0 };
    }
    json_object_put(o);
    json_tokener_free(tok);
    return ok;
}

/* ---------------------------------------------------------------- paths */

/* The absolute, clean form of path (relative: to base, "/" when NULL): no
 * "." or "..", no doubled or trailing '/'. malloc'd, or NULL. */
static char *path_abs(const char *base, const char *path)
{
    size_t bl = base && path[0] != '/' ? strlen(base) : 0;
    char *joined = malloc(bl + strlen(path) + 3);
    char *out = malloc(bl + strlen(path) + 3);
    if (!joined || !out) {
        free(joined);
        free(out);
        return NULL;
    }
    sprintf(joined, "%s/%s", bl ? base : "", path);
    size_t o = 0;
    out[o++] = '/';
    char *save = NULL;
    for (char *t = strtok_r(joined, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
        if (strcmp(t, ".") == 0)
            continue;
        if (strcmp(t, "..") == 0) {
            while (o > 1 && out[o - 1] != '/')
                o--;
            if (o > 1)
                o--; /* the '/' before it */
            continue;
        }
        if (o > 1)
            out[o++] = '/';
        size_t tl = strlen(t);
        memcpy(out + o, t, tl);
        o += tl;
    }
    out[o] = '\0';
    free(joined);
    return out;
}

/* A source's clean form relative to the context ("." for the context), or
 * NULL with *escapes when a ".." leaves it. */
static char *path_rel(const char *path, bool *escapes)
{
    char *copy = strdup(path), *out = malloc(strlen(path) + 2);
    *escapes = false;
    if (!copy || !out) {
        free(copy);
        free(out);
        return NULL;
    }
    size_t o = 0;
    char *save = NULL;
    for (char *t = strtok_r(copy, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
        if (strcmp(t, ".") == 0)
            continue;
        if (strcmp(t, "..") == 0) {
            if (o == 0) {
                *escapes = true;
                break;
            }
            while (o > 0 && out[o - 1] != '/')
                o--;
            if (o > 0)
                o--;
            continue;
        }
        if (o > 0)
            out[o++] = '/';
        size_t tl = strlen(t);
        memcpy(out + o, t, tl);
        o += tl;
    }
    free(copy);
    if (*escapes) {
        free(out);
        return NULL;
    }
    if (o == 0)
        out[o++] = '.';
    out[o] = '\0';
    return out;
}

/* ---------------------------------------------------------------- steps */

static df_step_t *step_new(parse_t *p, df_step_kind_t kind, const char *text)
{
    dockerfile_t *df = p->df;
    if (df->nsteps >= DF_STEPS_MAX) {
        fail(p, "%s: more than %d WORKDIR, RUN, COPY and ADD instructions", p->kw, DF_STEPS_MAX);
        return NULL;
    }
    if (df->nsteps == p->steps_cap) {
        size_t cap = p->steps_cap ? p->steps_cap * 2 : 16;
        df_step_t *s = realloc(df->steps, cap * sizeof *s);
        if (!s) {
            oom(p);
            return NULL;
        }
        df->steps = s;
        p->steps_cap = cap;
    }
    df_step_t *s = &df->steps[df->nsteps];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->line = p->line;
    s->instruction = p->kw;
    s->text = strdup(text);
    if (!s->text) {
        oom(p);
        return NULL;
    }
    df->nsteps++;
    return s;
}

static void step_release(df_step_t *s)
{
    free(s->text);
    free(s->dir);
    strv_free(s->argv, s->argc);
    kv_free(s->env, s->nenv);
    free(s->cwd);
    free(s->user);
    strv_free(s->srcs, s->nsrcs);
    free(s->dest);
}

/* ---------------------------------------------------------------- instructions */

/* ARG NAME[=default] ...: before FROM a global (FROM's alone), after it
 * one of the stage (in the environment of RUN, not kept in the template).
 * A --build-arg wins over the default; a stage's ARG without a default
 * takes the global's value. */
static int do_arg(parse_t *p, const char *args)
{
    strv_t w = { 0 };
    int r = split_raw(p, args, &w);
    if (r == 0 && w.n == 0)
        r = fail(p, "ARG needs a NAME (ARG NAME or ARG NAME=default)");
    for (size_t i = 0; r == 0 && i < w.n; i++) {
        char *eq = strchr(w.v[i], '=');
        if (eq)
            *eq = '\0';
        if (!var_name_ok(w.v[i])) {
            r = fail(p, "ARG %.64s: not a variable name (letters, digits and _, not starting with a digit)", w.v[i]);
            break;
        }
        char *def = NULL;
        if (eq && (r = expand(p, eq + 1, strlen(eq + 1), &def)) < 0)
            break;
        const char *v = barg(p, w.v[i]);
        if (!v && eq)
            v = def;
        if (!v && !eq && p->in_stage) {
            const df_kv_t *g = kv_find(&p->globals, w.v[i]);
            v = g ? g->value : NULL;
        }
        r = kv_set(p->in_stage ? &p->args : &p->globals, w.v[i], v) < 0 ? oom(p) : 0;
        free(def);
    }
    strv_free(w.v, w.n);
    return r;
}

static int do_from(parse_t *p, const char *args, const char *text)
{
    if (p->in_stage)
        return fail(p, "FROM: a second FROM: multi-stage builds are not supported (one FROM, its image or "
                       "template the build sandbox's)");
    strv_t w = { 0 };
    int r = split_raw(p, args, &w);
    if (r == 0 && w.n == 0)
        r = fail(p, "FROM needs an image or a template");
    else if (r == 0 && strncmp(w.v[0], "--", 2) == 0)
        r = fail(p, "FROM %.64s is not supported (the build sandbox runs where the server places it)", w.v[0]);
    else if (r == 0 && w.n == 3 && strcasecmp(w.v[1], "AS") == 0)
        r = fail(p, "FROM ... AS %.64s: multi-stage builds are not supported (one FROM, no AS)", w.v[2]);
    else if (r == 0 && w.n != 1)
        r = fail(p, "FROM takes one image or template");
    char *ref = NULL;
    if (r == 0)
        r = expand(p, w.v[0], strlen(w.v[0]), &ref);
    if (r == 0 && (!*ref || strlen(ref) > SBX_MAX_IMAGE_BYTES || has_control(ref)))
        r = fail(p, "FROM '%.64s' is not an image or a template (FROM ${VAR} of an ARG not set?)", ref);
    else if (r == 0 && strcmp(ref, "scratch") == 0)
        r = fail(p, "FROM scratch is not supported: the build runs RUN in a sandbox, which needs an image with a "
                    "shell");
    strv_free(w.v, w.n);
    if (r < 0) {
        free(ref);
        return r;
    }
    p->df->from = ref;
    p->df->from_line = p->line;
    p->df->from_text = strdup(text);
    p->in_stage = true;
    return p->df->from_text ? 0 : oom(p);
}

/* ENV K=V ... (values expanded with the variables before this line), or
 * the legacy ENV K the value. */
static int do_env(parse_t *p, const char *args)
{
    strv_t w = { 0 };
    kvlist_t add = { 0 };
    int r = split_raw(p, args, &w);
    if (r == 0 && w.n == 0)
        r = fail(p, "ENV needs K=V (or K VALUE)");
    if (r == 0 && !strchr(w.v[0], '=')) {
        /* the legacy form: the rest of the line is the value */
        const char *rest = args;
        while (isspace((unsigned char)*rest))
            rest++;
        rest += strlen(w.v[0]);
        while (isspace((unsigned char)*rest))
            rest++;
        size_t rl = strlen(rest);
        while (rl > 0 && isspace((unsigned char)rest[rl - 1]))
            rl--;
        char *v = NULL;
        if (rl == 0)
            r = fail(p, "ENV %.64s has no value (ENV K=V, or ENV K VALUE)", w.v[0]);
        else if ((r = expand(p, rest, rl, &v)) == 0)
            r = kv_set(&add, w.v[0], v) < 0 ? oom(p) : 0;
        free(v);
    } else {
        for (size_t i = 0; r == 0 && i < w.n; i++) {
            char *eq = strchr(w.v[i], '=');
            if (!eq) {
                r = fail(p, "ENV %.64s has no '=': write K=V pairs (or one ENV K VALUE)", w.v[i]);
                break;
            }
            *eq = '\0';
            char *v = NULL;
            if ((r = expand(p, eq + 1, strlen(eq + 1), &v)) == 0)
                r = kv_set(&add, w.v[i], v) < 0 ? oom(p) : 0;
            free(v);
        }
    }
    for (size_t i = 0; r == 0 && i < add.n; i++) {
        if (!var_name_ok(add.v[i].key))
            r = fail(p, "ENV %.64s: not a variable name the API takes (letters, digits and _, not starting with a "
                        "digit)", add.v[i].key);
        else if (strlen(add.v[i].value) > SBX_MAX_VALUE_BYTES)
            r = fail(p, "ENV %.64s: the value is longer than %d bytes", add.v[i].key, SBX_MAX_VALUE_BYTES);
        else if (!kv_find(&p->env, add.v[i].key) && p->env.n >= SBX_MAX_ENV)
            r = fail(p, "ENV: more than %d variables", SBX_MAX_ENV);
        else
            r = kv_set(&p->env, add.v[i].key, add.v[i].value) < 0 ? oom(p) : 0;
    }
    kv_free(add.v, add.n);
    strv_free(w.v, w.n);
    return r;
}

static int do_workdir(parse_t *p, const char *args, const char *text)
{
    char *dir = NULL;
    int r = expand(p, args, strlen(args), &dir);
    if (r < 0)
        return r;
    if (!*dir) {
        free(dir);
        return fail(p, "WORKDIR needs a directory");
    }
    char *abs = path_abs(p->workdir, dir);
    free(dir);
    if (!abs)
        return oom(p);
    if (strlen(abs) > SBX_MAX_PATH_BYTES || has_control(abs)) {
        free(abs);
        return fail(p, "WORKDIR: the directory is longer than %d bytes or holds control characters",
                    SBX_MAX_PATH_BYTES);
    }
    df_step_t *s = step_new(p, DF_STEP_WORKDIR, text);
    if (!s) {
        free(abs);
        return SBX_EINVAL;
    }
    s->dir = strdup(abs);
    free(p->workdir);
    p->workdir = abs;
    return s->dir ? 0 : oom(p);
}

/* root, 0, root:root, 0:0 ...: what RUN runs as anyway. */
static bool user_is_root(const char *u)
{
    size_t n = strcspn(u, ":");
    bool user = (n == 4 && strncmp(u, "root", 4) == 0) || (n == 1 && u[0] == '0');
    const char *g = u[n] == ':' ? u + n + 1 : NULL;
    return user && (!g || strcmp(g, "root") == 0 || strcmp(g, "0") == 0);
}

static int do_user(parse_t *p, const char *args)
{
    char *u = NULL;
    int r = expand(p, args, strlen(args), &u);
    if (r < 0)
        return r;
    size_t n = strlen(u);
    bool ok = n > 0 && n <= DF_USER_MAX && u[0] != '-' && u[0] != ':';
    for (size_t i = 0; ok && i < n; i++)
        ok = isalnum((unsigned char)u[i]) || strchr("_.-:", u[i]);
    if (!ok) {
        r = fail(p, "USER '%.64s': a user name or id (and :group), 1 to %d letters, digits, _, ., - or :", u,
                 DF_USER_MAX);
        free(u);
        return r;
    }
    free(p->user);
    p->user = u;
    p->user_line = p->line;
    return 0;
}

/* The variables of a RUN: the stage's ARGs that are set, then its ENVs
 * (an ENV wins by name). */
static int run_env(parse_t *p, df_step_t *s)
{
    kvlist_t e = { 0 };
    int r = 0;
    for (size_t i = 0; r == 0 && i < p->args.n; i++)
        if (p->args.v[i].value)
            r = kv_set(&e, p->args.v[i].key, p->args.v[i].value);
    for (size_t i = 0; r == 0 && i < p->env.n; i++)
        r = kv_set(&e, p->env.v[i].key, p->env.v[i].value);
    s->env = e.v;
    s->nenv = e.n;
    if (r < 0)
        return oom(p);
    if (e.n > SBX_MAX_ENV)
        return fail(p, "RUN: its ARGs and ENVs are more than the %d variables an exec takes", SBX_MAX_ENV);
    for (size_t i = 0; i < e.n; i++)
        if (strlen(e.v[i].value) > SBX_MAX_VALUE_BYTES)
            return fail(p, "RUN: the value of ARG %.64s is longer than %d bytes", e.v[i].key, SBX_MAX_VALUE_BYTES);
    return 0;
}

static int do_run(parse_t *p, const char *args, const char *text)
{
    if (args[0] == '-' && args[1] == '-' && isalpha((unsigned char)args[2]))
        return fail(p, "RUN --%.*s is not supported (no RUN flags: the build runs each RUN as an exec)",
                    (int)strcspn(args + 2, "= \t"), args + 2);
    strv_t av = { 0 };
    if (!json_words(args, &av)) {
        if (strv_push(&av, strdup("/bin/sh")) < 0 || strv_push(&av, strdup("-c")) < 0 ||
            strv_push(&av, strdup(args)) < 0) {
            strv_free(av.v, av.n);
            return oom(p);
        }
    }
    size_t bytes = 0;
    for (size_t i = 0; i < av.n; i++)
        bytes += strlen(av.v[i]) + 1;
    int r = 0;
    if (av.n == 0)
        r = fail(p, "RUN [] has no command");
    else if (av.n > SBX_MAX_ARGV || bytes > SBX_MAX_ARGV_BYTES)
        r = fail(p, "RUN: the command is over %d words or %u bytes (an exec's bounds)", SBX_MAX_ARGV,
                 SBX_MAX_ARGV_BYTES);
    df_step_t *s = r == 0 ? step_new(p, DF_STEP_RUN, text) : NULL;
    if (!s) {
        strv_free(av.v, av.n);
        return r < 0 ? r : SBX_EINVAL;
    }
    s->argv = av.v;
    s->argc = av.n;
    if (p->workdir && !(s->cwd = strdup(p->workdir)))
        return oom(p);
    /* a RUN after USER runs as that user (an exec's "user") */
    if (p->user && !user_is_root(p->user) && !(s->user = strdup(p->user)))
        return oom(p);
    return run_env(p, s);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcasecmp(s + n - m, suffix) == 0;
}

static bool is_archive(const char *s)
{
    static const char *const ext[] = { ".tar", ".tgz", ".tar.gz", ".tar.xz", ".txz", ".tar.bz2", ".tbz2", ".tbz",
                                       ".tar.zst", ".tzst", ".tar.lz", ".tar.lzma", NULL };
    for (int i = 0; ext[i]; i++)
        if (ends_with(s, ext[i]))
            return true;
    return false;
}

/* COPY and ADD of local paths: SRC... DEST, or the JSON array form. */
static int do_copy(parse_t *p, const char *args, const char *text)
{
    const char *kw = p->kw;
    if (args[0] == '-' && args[1] == '-') {
        size_t fl = strcspn(args + 2, "= \t");
        const char *why = "";
        if (fl == 5 && strncmp(args + 2, "chown", 5) == 0)
            why = ": files are copied as root (change owners with RUN chown, above USER)";
        else if (fl == 5 && strncmp(args + 2, "chmod", 5) == 0)
            why = ": files keep their modes from the build context (change them with RUN chmod)";
        else if (fl == 4 && strncmp(args + 2, "from", 4) == 0)
            why = ": multi-stage builds are not supported";
        return fail(p, "%s --%.*s is not supported%s", kw, (int)fl, args + 2, why);
    }
    strv_t w = { 0 }, raw = { 0 };
    int r = 0;
    if (!json_words(args, &raw))
        r = split_raw(p, args, &raw);
    for (size_t i = 0; r == 0 && i < raw.n; i++) {
        char *x = NULL;
        if ((r = expand(p, raw.v[i], strlen(raw.v[i]), &x)) == 0)
            r = strv_push(&w, x) < 0 ? oom(p) : 0;
    }
    strv_free(raw.v, raw.n);
    if (r == 0 && w.n < 2)
        r = fail(p, "%s needs a source and a destination (%s SRC... DEST)", kw, kw);
    strv_t srcs = { 0 };
    for (size_t i = 0; r == 0 && i + 1 < w.n; i++) {
        const char *src = w.v[i];
        bool escapes = false;
        if (!*src)
            r = fail(p, "%s: an empty source", kw);
        else if (strstr(src, "://") || strncmp(src, "git@", 4) == 0)
            r = fail(p, "%s %.200s: a URL is not supported: fetch it with RUN (curl, wget) in a build with "
                        "--network", kw, src);
        else if (strcmp(kw, "ADD") == 0 && is_archive(src))
            r = fail(p, "ADD %.200s: ADD of an archive (which it would unpack) is not supported: use COPY, and RUN "
                        "tar -x to unpack it", src);
        else if (src[0] == '/')
            r = fail(p, "%s %.200s: an absolute source: sources are paths in the build context", kw, src);
        else if (has_control(src))
            r = fail(p, "%s: a source holds control characters", kw);
        if (r < 0)
            break;
        char *clean = path_rel(src, &escapes);
        if (escapes)
            r = fail(p, "%s %.200s: the source leaves the build context (..)", kw, src);
        else if (!clean)
            r = oom(p);
        else
            r = strv_push(&srcs, clean) < 0 ? oom(p) : 0;
    }
    char *dest = NULL;
    bool dir = false;
    if (r == 0) {
        const char *d = w.v[w.n - 1];
        size_t dl = strlen(d);
        dir = srcs.n > 1 || (dl > 0 && d[dl - 1] == '/') || strcmp(d, ".") == 0 || ends_with(d, "/.");
        if (!*d)
            r = fail(p, "%s: an empty destination", kw);
        else if (has_control(d))
            r = fail(p, "%s: the destination holds control characters", kw);
        else if (!(dest = path_abs(p->workdir, d)))
            r = oom(p);
        else if (strlen(dest) > SBX_FILES_PATH_MAX)
            r = fail(p, "%s: the destination is longer than %d bytes", kw, SBX_FILES_PATH_MAX);
    }
    df_step_t *s = r == 0 ? step_new(p, DF_STEP_COPY, text) : NULL;
    strv_free(w.v, w.n);
    if (!s) {
        strv_free(srcs.v, srcs.n);
        free(dest);
        return r < 0 ? r : SBX_EINVAL;
    }
    s->srcs = srcs.v;
    s->nsrcs = srcs.n;
    s->dest = dest;
    s->dest_dir = dir;
    return 0;
}

/* CMD and ENTRYPOINT: the JSON array, or the shell form as /bin/sh -c. */
static int do_argv(parse_t *p, const char *args, char ***ret, size_t *ret_n, bool *has)
{
    strv_t av = { 0 };
    if (!json_words(args, &av) &&
        (strv_push(&av, strdup("/bin/sh")) < 0 || strv_push(&av, strdup("-c")) < 0 || strv_push(&av, strdup(args)) < 0)) {
        strv_free(av.v, av.n);
        return oom(p);
    }
    int r = 0;
    if (av.n > DF_ARGV_MAX)
        r = fail(p, "%s: more than %d words", p->kw, DF_ARGV_MAX);
    for (size_t i = 0; r == 0 && i < av.n; i++)
        if (strlen(av.v[i]) > DF_ARG_BYTES)
            r = fail(p, "%s: a word is longer than %d bytes", p->kw, DF_ARG_BYTES);
    if (r < 0) {
        strv_free(av.v, av.n);
        return r;
    }
    strv_free(*ret, *ret_n);
    *ret = av.v;
    *ret_n = av.n;
    *has = true;
    return 0;
}

static int add_port(parse_t *p, long port)
{
    dockerfile_t *df = p->df;
    for (size_t i = 0; i < df->nexpose; i++)
        if (df->expose[i] == port)
            return 0;
    if (df->nexpose >= DF_EXPOSE_MAX)
        return fail(p, "EXPOSE: more than %d ports", DF_EXPOSE_MAX);
    int *e = realloc(df->expose, (df->nexpose + 1) * sizeof *e);
    if (!e)
        return oom(p);
    df->expose = e;
    df->expose[df->nexpose++] = (int)port;
    return 0;
}

/* EXPOSE PORT[/tcp] or FIRST-LAST[/tcp] ...; udp is refused. */
static int do_expose(parse_t *p, const char *args)
{
    strv_t w = { 0 };
    int r = split_raw(p, args, &w);
    if (r == 0 && w.n == 0)
        r = fail(p, "EXPOSE needs a port");
    for (size_t i = 0; r == 0 && i < w.n; i++) {
        char *x = NULL;
        if ((r = expand(p, w.v[i], strlen(w.v[i]), &x)) < 0)
            break;
        char *slash = strchr(x, '/');
        if (slash && strcasecmp(slash + 1, "tcp") != 0) {
            r = fail(p, "EXPOSE %.64s: only TCP ports (PORT or PORT/tcp)%s", x,
                     strcasecmp(slash + 1, "udp") == 0 ? ": a sandbox's ports are shared over HTTP" : "");
            free(x);
            break;
        }
        if (slash)
            *slash = '\0';
        char *end = NULL;
        long lo = strtol(x, &end, 10), hi = lo;
        if (end && *end == '-' && end != x)
            hi = strtol(end + 1, &end, 10);
        if (!isdigit((unsigned char)x[0]) || !end || *end || lo < 1 || hi > 65535 || hi < lo)
            r = fail(p, "EXPOSE %.64s: not a port (1 to 65535) or a range FIRST-LAST", x);
        for (long port = lo; r == 0 && port <= hi; port++)
            r = add_port(p, port);
        free(x);
    }
    strv_free(w.v, w.n);
    return r;
}

/* One instruction: keyword and arguments, text as written. */
static int instruction(parse_t *p, char *text)
{
    size_t kl = strcspn(text, " \t");
    char kw[16];
    const char *args = text + kl;
    while (isspace((unsigned char)*args))
        args++;
    if (kl >= sizeof kw)
        return fail(p, "unknown instruction '%.32s'", text);
    for (size_t i = 0; i < kl; i++)
        kw[i] = (char)toupper((unsigned char)text[i]);
    kw[kl] = '\0';
    static const struct {
        const char *kw, *why;
    } refused[] = {
        { "ONBUILD", "is not supported (a template is no base image for a later docker build)" },
        { "HEALTHCHECK", "is not supported (a sandbox's main process is the server's own)" },
        { "SHELL", "is not supported: RUN's shell form is /bin/sh -c (write RUN [\"bash\", \"-c\", \"...\"])" },
        { "VOLUME", "is not supported (a sandbox's files are its root filesystem; no volumes)" },
        { "STOPSIGNAL", "is not supported (a sandbox's main process is the server's own)" },
        { "MAINTAINER", "is not supported (deprecated by Docker: write a comment)" },
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if (strcmp(kw, refused[i].kw) == 0) {
            p->kw = refused[i].kw;
            return fail(p, "%s %s", refused[i].kw, refused[i].why);
        }
    static const char *const known[] = { "FROM", "ARG", "ENV", "WORKDIR", "USER", "RUN", "COPY", "ADD", "CMD",
                                         "ENTRYPOINT", "EXPOSE", "LABEL", NULL };
    int k = 0;
    while (known[k] && strcmp(known[k], kw) != 0)
        k++;
    if (!known[k])
        return fail(p, "unknown instruction '%.32s'", kw);
    p->kw = known[k];
    if (!*args)
        return fail(p, "%s needs arguments", p->kw);
    if (strcmp(p->kw, "ARG") == 0)
        return do_arg(p, args);
    if (strcmp(p->kw, "FROM") == 0)
        return do_from(p, args, text);
    if (!p->in_stage)
        return fail(p, "%s before FROM: only ARG may come before FROM", p->kw);
    switch (k) {
    case 2:
        return do_env(p, args);
    case 3:
        return do_workdir(p, args, text);
    case 4:
        return do_user(p, args);
    case 5:
        return do_run(p, args, text);
    case 6:
    case 7:
        return do_copy(p, args, text);
    case 8:
        return do_argv(p, args, &p->df->cmd, &p->df->ncmd, &p->df->has_cmd);
    case 9:
        return do_argv(p, args, &p->df->entrypoint, &p->df->nentrypoint, &p->df->has_entrypoint);
    case 10:
        return do_expose(p, args);
    default: /* LABEL */
        return note(p, "LABEL is accepted and ignored (a template version has no labels)");
    }
}

/* ---------------------------------------------------------------- lines */

/* The next physical line from *pos: start and length, without "\n" or
 * "\r\n"; false at the end. */
static bool next_line(const char *text, size_t len, size_t *pos, const char **ret, size_t *ret_n)
{
    if (*pos >= len)
        return false;
    const char *s = text + *pos;
    const char *nl = memchr(s, '\n', len - *pos);
    size_t n = nl ? (size_t)(nl - s) : len - *pos;
    *pos += n + (nl ? 1 : 0);
    if (n > 0 && s[n - 1] == '\r')
        n--;
    *ret = s;
    *ret_n = n;
    return true;
}

static bool blank_or_comment(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && isspace((unsigned char)s[i]))
        i++;
    return i == n || s[i] == '#';
}

/* Whether s[0..*n) ends in a continuation backslash (only whitespace after
 * it); if so *n is cut before it. */
static bool continues(const char *s, size_t *n)
{
    size_t e = *n;
    while (e > 0 && (s[e - 1] == ' ' || s[e - 1] == '\t'))
        e--;
    if (e == 0 || s[e - 1] != '\\')
        return false;
    *n = e - 1;
    return true;
}

/* A comment at the top may be a parser directive ("# escape=`"): only the
 * default escape character is known. Returns 0 (*still: it was one, more
 * may follow), or SBX_EINVAL. */
static int directive(parse_t *p, const char *s, size_t n, bool *still)
{
    size_t i = 0;
    while (i < n && (isspace((unsigned char)s[i]) || s[i] == '#'))
        i++;
    size_t k = i;
    while (k < n && isalpha((unsigned char)s[k]))
        k++;
    size_t j = k;
    while (j < n && isspace((unsigned char)s[j]))
        j++;
    *still = k > i && j < n && s[j] == '=';
    if (!*still || k - i != 6 || strncasecmp(s + i, "escape", 6) != 0)
        return 0;
    j++;
    while (j < n && isspace((unsigned char)s[j]))
        j++;
    if (j < n && s[j] != '\\')
        return fail(p, "the parser directive 'escape=%c' is not supported (the escape character is \\)", s[j]);
    return 0;
}

static int parse_text(parse_t *p, const char *text, size_t len)
{
    size_t pos = 0;
    int lineno = 0;
    bool directives = true;
    const char *s;
    size_t n;
    sbuf_t ins;
    sbuf_init(&ins, DF_TEXT_MAX);
    int r = 0;
    while (r == 0 && next_line(text, len, &pos, &s, &n)) {
        lineno++;
        if (blank_or_comment(s, n)) {
            p->line = lineno;
            if (directives && n > 0)
                r = directive(p, s, n, &directives);
            else
                directives = false;
            continue;
        }
        directives = false;
        p->line = lineno;
        sbuf_reset(&ins);
        bool more = continues(s, &n);
        r = sbuf_append(&ins, s, n);
        while (r == 0 && more && next_line(text, len, &pos, &s, &n)) {
            lineno++;
            if (blank_or_comment(s, n))
                continue; /* comments and empty lines inside a continued instruction */
            more = continues(s, &n);
            r = sbuf_append(&ins, s, n);
        }
        if (r < 0) {
            r = oom(p);
            break;
        }
        char *t = (char *)sbuf_cstr(&ins);
        size_t tl = ins.len;
        while (tl > 0 && isspace((unsigned char)t[tl - 1]))
            t[--tl] = '\0';
        while (isspace((unsigned char)*t))
            t++;
        r = instruction(p, t);
    }
    sbuf_release(&ins);
    return r;
}

int dockerfile_parse(const char *file, const char *text, size_t len, const df_kv_t *build_args, size_t nargs,
                     dockerfile_t **ret, char *err, size_t errlen)
{
    parse_t p = { .file = file, .bargs = build_args, .nbargs = nargs, .err = err, .errlen = errlen };
    *ret = NULL;
    if (errlen)
        err[0] = '\0';
    if (len > DF_TEXT_MAX)
        return fail(&p, "longer than %d bytes", DF_TEXT_MAX);
    if (memchr(text, '\0', len))
        return fail(&p, "holds a NUL byte: not a Dockerfile");
    p.df = calloc(1, sizeof *p.df);
    p.bargs_used = calloc(nargs + 1, sizeof *p.bargs_used);
    if (!p.df || !p.bargs_used) {
        free(p.df);
        free(p.bargs_used);
        return oom(&p);
    }
    int r = parse_text(&p, text, len);
    if (r == 0 && !p.df->from) {
        p.line = 0;
        r = fail(&p, "no FROM instruction: a Dockerfile starts from an image or a template (FROM NAME)");
    }
    p.line = 0;
    for (size_t i = 0; r == 0 && i < nargs; i++)
        if (!p.bargs_used[i]) {
            char buf[320];
            snprintf(buf, sizeof buf, "--build-arg %.64s: no ARG %.64s in %.100s; not used", build_args[i].key,
                     build_args[i].key, file);
            r = strv_push(&p.notes, strdup(buf)) < 0 ? oom(&p) : 0;
        }
    dockerfile_t *df = p.df;
    if (r == 0) {
        df->env = p.env.v;
        df->nenv = p.env.n;
        p.env = (kvlist_t){ 0 };
        df->workdir = p.workdir;
        df->user = p.user;
        p.workdir = p.user = NULL;
        df->notes = p.notes.v;
        df->nnotes = p.notes.n;
        p.notes = (strv_t){ 0 };
        *ret = df;
    } else {
        dockerfile_free(df);
    }
    kv_free(p.globals.v, p.globals.n);
    kv_free(p.args.v, p.args.n);
    kv_free(p.env.v, p.env.n);
    strv_free(p.notes.v, p.notes.n);
    free(p.workdir);
    free(p.user);
    free(p.bargs_used);
    return r;
}

void dockerfile_free(dockerfile_t *df)
{
    if (!df)
        return;
    free(df->from);
    free(df->from_text);
    for (size_t i = 0; i < df->nsteps; i++)
        step_release(&df->steps[i]);
    free(df->steps);
    kv_free(df->env, df->nenv);
    free(df->workdir);
    free(df->user);
    strv_free(df->cmd, df->ncmd);
    strv_free(df->entrypoint, df->nentrypoint);
    free(df->expose);
    strv_free(df->notes, df->nnotes);
    free(df);
}
