/* Client configuration: flags, environment, config file. */
#include "clientcfg.h"
#include "errors.h"
#include "utf8.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CONFIG_MAX_LINES 1000
#define CONFIG_LINE_MAX  4096

static char *strndup_trim(const char *s, size_t n)
{
    while (n > 0 && (*s == ' ' || *s == '\t')) {
        s++;
        n--;
    }
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
        n--;
    if (n >= 2 && ((s[0] == '"' && s[n - 1] == '"') || (s[0] == '\'' && s[n - 1] == '\''))) {
        s++;
        n -= 2;
    }
    return strndup(s, n);
}

static char *config_path_new(void)
{
    const char *xdg = getenv("XDG_CONFIG_HOME");
    const char *home = getenv("HOME");
    const char *base = xdg && *xdg == '/' ? xdg : NULL;
    const char *suffix = "/sandbox/config";
    if (!base) {
        if (!home || !*home)
            return NULL;
        base = home;
        suffix = "/.config/sandbox/config";
    }
    size_t n = strlen(base) + strlen(suffix) + 1;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s%s", base, suffix);
    return p;
}

__attribute__((format(printf, 2, 3))) static void warn(client_config_t *c, const char *fmt, ...)
{
    for (int i = 0; i < 2; i++)
        if (!c->warnings[i][0]) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(c->warnings[i], sizeof c->warnings[i], fmt, ap);
            va_end(ap);
            return;
        }
}

/* One block of the file: the top (name NULL) or a "[context NAME]" section. */
typedef struct cfg_block {
    char *name, *url, *token, *ca_file;
} cfg_block_t;

typedef struct cfg_file {
    cfg_block_t b[CLIENTCFG_CONTEXTS_MAX + 1]; /* b[0]: the top */
    int n;
    char *context;                             /* the top's "context = NAME" */
    bool exists, open_to_others;
} cfg_file_t;

static void cfg_file_free(cfg_file_t *f)
{
    for (int i = 0; i < f->n; i++) {
        free(f->b[i].name);
        free(f->b[i].url);
        free(f->b[i].token);
        free(f->b[i].ca_file);
    }
    free(f->context);
    memset(f, 0, sizeof *f);
}

/* A context's name: letters, digits, '.', '_', '-', 1..64 characters. */
static bool context_name_ok(const char *s, size_t n)
{
    if (n == 0 || n > CLIENTCFG_CONTEXT_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
              s[i] == '.' || s[i] == '_' || s[i] == '-'))
            return false;
    return true;
}

/* Reads the whole file into f (nothing when it does not exist). */
static int cfg_file_read(client_config_t *c, cfg_file_t *f, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    f->n = 1;
    FILE *fp = fopen(c->path, "re");
    if (!fp) {
        if (errno != ENOENT)
            warn(c, "cannot read %s: %s", c->path, strerror(errno));
        return 0;
    }
    f->exists = true;
    char line[CONFIG_LINE_MAX];
    int lineno = 0, rc = 0;
    cfg_block_t *cur = &f->b[0];
    while (fgets(line, sizeof line, fp)) {
        lineno++;
        size_t n = strlen(line);
        if (lineno > CONFIG_MAX_LINES || (n == sizeof line - 1 && line[n - 1] != '\n')) {
            snprintf(err, errlen, "%s:%d: line too long or file too large", c->path, lineno);
            rc = SBX_EINVAL;
            break;
        }
        const char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '#' || *p == ';' || *p == '\n' || *p == '\r' || *p == '\0')
            continue;
        if (*p == '[') {
            /* [context NAME] */
            const char *close = strchr(p, ']');
            char *inner = close ? strndup_trim(p + 1, (size_t)(close - p - 1)) : NULL;
            const char *nm = inner && strncmp(inner, "context", 7) == 0 && (inner[7] == ' ' || inner[7] == '\t')
                                 ? inner + 8 : NULL;
            while (nm && (*nm == ' ' || *nm == '\t'))
                nm++;
            if (!nm || !context_name_ok(nm, strlen(nm))) {
                snprintf(err, errlen, "%s:%d: expected '[context NAME]' (NAME: letters, digits, '.', '_', '-')",
                         c->path, lineno);
                free(inner);
                rc = SBX_EINVAL;
                break;
            }
            for (int i = 1; i < f->n && rc == 0; i++)
                if (strcmp(f->b[i].name, nm) == 0) {
                    snprintf(err, errlen, "%s:%d: context '%s' is defined twice", c->path, lineno, nm);
                    rc = SBX_EINVAL;
                }
            if (rc == 0 && f->n > CLIENTCFG_CONTEXTS_MAX) {
                snprintf(err, errlen, "%s:%d: more than %d contexts", c->path, lineno, CLIENTCFG_CONTEXTS_MAX);
                rc = SBX_EINVAL;
            }
            if (rc == 0) {
                cur = &f->b[f->n++];
                cur->name = strdup(nm);
                if (!cur->name) {
                    snprintf(err, errlen, "out of memory");
                    rc = SBX_ENOMEM;
                }
            }
            free(inner);
            if (rc != 0)
                break;
            continue;
        }
        const char *eq = strchr(p, '=');
        if (!eq) {
            snprintf(err, errlen, "%s:%d: expected 'key = value'", c->path, lineno);
            rc = SBX_EINVAL;
            break;
        }
        char *key = strndup_trim(p, (size_t)(eq - p));
        char *val = strndup_trim(eq + 1, strlen(eq + 1));
        if (!key || !val) {
            free(key);
            free(val);
            snprintf(err, errlen, "out of memory");
            rc = SBX_ENOMEM;
            break;
        }
        char **slot = strcmp(key, "url") == 0 ? &cur->url : strcmp(key, "token") == 0 ? &cur->token
                    : strcmp(key, "ca_file") == 0 ? &cur->ca_file
                    : strcmp(key, "context") == 0 && cur == &f->b[0] ? &f->context : NULL;
        if (slot) {
            free(*slot);
            *slot = val;
            val = NULL;
        } else {
            warn(c, "%s:%d: unknown key '%.64s' ignored", c->path, lineno, key);
        }
        free(key);
        free(val);
    }
    if (rc == 0) {
        struct stat st;
        bool tokens = false;
        for (int i = 0; i < f->n; i++)
            tokens = tokens || f->b[i].token;
        f->open_to_others = tokens && fstat(fileno(fp), &st) == 0 && (st.st_mode & 077);
        if (f->open_to_others)
            warn(c, "%s holds a token and is readable by others (chmod 600 it)", c->path);
    }
    fclose(fp);
    return rc;
}

static const cfg_block_t *cfg_find(const cfg_file_t *f, const char *name)
{
    for (int i = 1; i < f->n; i++)
        if (strcmp(f->b[i].name, name) == 0)
            return &f->b[i];
    return NULL;
}

/* Moves *from into *to when *to is still NULL and *from is not empty. */
static void take(char **to, char **from)
{
    if (!*to && *from && **from) {
        *to = *from;
        *from = NULL;
    }
}

int client_config_contexts(const char *flag_context, client_context_t **ret, int *ret_n, char **ret_current,
                           char **ret_path, char *err, size_t errlen)
{
    client_config_t c;
    memset(&c, 0, sizeof c);
    *ret = NULL;
    *ret_n = 0;
    *ret_current = NULL;
    *ret_path = NULL;
    c.path = config_path_new();
    if (!c.path) {
        snprintf(err, errlen, "no config file: neither XDG_CONFIG_HOME nor HOME is set");
        return SBX_EINVAL;
    }
    cfg_file_t f;
    int rc = cfg_file_read(&c, &f, err, errlen);
    if (rc == 0) {
        const char *ec = getenv("SANDBOX_CONTEXT");
        const char *cur = flag_context ? flag_context : ec && *ec ? ec : f.context;
        *ret = calloc((size_t)(f.n > 1 ? f.n - 1 : 1), sizeof **ret);
        *ret_current = cur ? strdup(cur) : NULL;
        if (!*ret || (cur && !*ret_current)) {
            snprintf(err, errlen, "out of memory");
            rc = SBX_ENOMEM;
        }
        for (int i = 1; rc == 0 && i < f.n; i++) {
            client_context_t *x = &(*ret)[i - 1];
            x->name = f.b[i].name;
            x->url = f.b[i].url;
            x->has_token = f.b[i].token && *f.b[i].token;
            f.b[i].name = f.b[i].url = NULL;
            (*ret_n)++;
        }
    }
    cfg_file_free(&f);
    *ret_path = c.path;
    c.path = NULL;
    client_config_release(&c);
    return rc;
}

void client_contexts_free(client_context_t *v, int n)
{
    for (int i = 0; v && i < n; i++) {
        free(v[i].name);
        free(v[i].url);
    }
    free(v);
}

int client_config_resolve(const char *flag_url, const char *flag_token, const char *flag_context,
                          client_config_t *ret, char *err, size_t errlen)
{
    memset(ret, 0, sizeof *ret);
    const char *eu = getenv("SANDBOX_URL"), *et = getenv("SANDBOX_TOKEN"), *ec = getenv("SANDBOX_CONTEXT");
    const char *eca = getenv("SANDBOX_CA_FILE");
    /* A context named by --context or SANDBOX_CONTEXT is the whole answer
     * (its URL with its own token, never the environment's); --url and
     * --token still win, one by one. */
    const char *named = flag_context ? flag_context : ec && *ec ? ec : NULL;
    ret->url = flag_url ? strdup(flag_url) : NULL;
    ret->token = flag_token ? strdup(flag_token) : NULL;
    if (!named) {
        if (!ret->url && eu && *eu)
            ret->url = strdup(eu);
        if (!ret->token && et && *et)
            ret->token = strdup(et);
        if (eca && *eca)
            ret->ca_file = strdup(eca);
    }
    ret->path = config_path_new();
    if ((flag_url && !ret->url) || (flag_token && !ret->token)) {
        snprintf(err, errlen, "out of memory");
        return SBX_ENOMEM;
    }
    if (named && !context_name_ok(named, strlen(named))) {
        snprintf(err, errlen, "'%.64s' is not a context name (letters, digits, '.', '_', '-')", named);
        return SBX_EINVAL;
    }
    bool need = !ret->url || !ret->token || !ret->ca_file;
    if ((need || named) && ret->path) {
        cfg_file_t f;
        int r = cfg_file_read(ret, &f, err, errlen);
        if (r < 0) {
            cfg_file_free(&f);
            return r;
        }
        /* the file's own default context only when nothing outside the file
         * named a URL or a token: a context's token goes to its own URL */
        const char *want = named ? named : !ret->url && !ret->token ? f.context : NULL;
        cfg_block_t *b = NULL;
        if (want) {
            b = (cfg_block_t *)cfg_find(&f, want);
            if (!b) {
                char names[200] = "";
                for (int i = 1; i < f.n && strlen(names) < sizeof names - 70; i++)
                    snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i > 1 ? ", " : "",
                             f.b[i].name);
                snprintf(err, errlen, "no context '%s' in %s%s%s%s (%s)", want, ret->path,
                         f.n > 1 ? ": it has " : "", names, f.n > 1 ? "" : ": it has none",
                         named ? (flag_context ? "named by --context" : "named by SANDBOX_CONTEXT")
                               : "named by its 'context = ' line");
                cfg_file_free(&f);
                return SBX_EINVAL;
            }
            ret->context = strdup(b->name);
        }
        if (!b)
            b = &f.b[0];
        take(&ret->url, &b->url);
        take(&ret->token, &b->token);
        take(&ret->ca_file, &b->ca_file);
        cfg_file_free(&f);
    } else if (named) {
        snprintf(err, errlen, "no context '%s': there is no config file (neither XDG_CONFIG_HOME nor HOME is set)",
                 named);
        return SBX_EINVAL;
    }
    if (!ret->url && !(ret->url = strdup(CLIENTCFG_DEFAULT_URL))) {
        snprintf(err, errlen, "out of memory");
        return SBX_ENOMEM;
    }
    if (ret->token && (utf8_has_control(ret->token) || strchr(ret->token, ' '))) {
        snprintf(err, errlen, "the API token contains spaces or control characters");
        return SBX_EINVAL;
    }
    if ((strncmp(ret->url, "http://", 7) != 0 && strncmp(ret->url, "https://", 8) != 0) || utf8_has_control(ret->url) ||
        strchr(ret->url, ' ')) {
        snprintf(err, errlen, "'%.200s' is not an http:// or https:// URL", ret->url);
        return SBX_EINVAL;
    }
    return 0;
}

void client_config_release(client_config_t *c)
{
    if (!c)
        return;
    free(c->url);
    free(c->token);
    free(c->ca_file);
    free(c->path);
    free(c->context);
    memset(c, 0, sizeof *c);
}
