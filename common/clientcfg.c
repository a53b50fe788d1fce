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

/* Fills c->url / c->token / c->ca_file from the file where they are still NULL. */
static int config_load(client_config_t *c, char *err, size_t errlen)
{
    FILE *f = fopen(c->path, "re");
    if (!f) {
        if (errno != ENOENT)
            warn(c, "cannot read %s: %s", c->path, strerror(errno));
        return 0;
    }
    char line[CONFIG_LINE_MAX];
    int lineno = 0, rc = 0;
    char *furl = NULL, *ftoken = NULL, *fca = NULL;
    while (fgets(line, sizeof line, f)) {
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
        if (strcmp(key, "url") == 0) {
            free(furl);
            furl = val;
            val = NULL;
        } else if (strcmp(key, "token") == 0) {
            free(ftoken);
            ftoken = val;
            val = NULL;
        } else if (strcmp(key, "ca_file") == 0) {
            free(fca);
            fca = val;
            val = NULL;
        } else {
            warn(c, "%s:%d: unknown key '%.64s' ignored", c->path, lineno, key);
        }
        free(key);
        free(val);
    }
    if (rc == 0 && ftoken) {
        struct stat st;
        if (fstat(fileno(f), &st) == 0 && (st.st_mode & 077))
            warn(c, "%s holds a token and is readable by others (chmod 600 it)", c->path);
    }
    fclose(f);
    if (rc == 0) {
        if (!c->url && furl && *furl) {
            c->url = furl;
            furl = NULL;
        }
        if (!c->token && ftoken && *ftoken) {
            c->token = ftoken;
            ftoken = NULL;
        }
        if (!c->ca_file && fca && *fca) {
            c->ca_file = fca;
            fca = NULL;
        }
    }
    free(furl);
    free(ftoken);
    free(fca);
    return rc;
}

int client_config_resolve(const char *flag_url, const char *flag_token, client_config_t *ret, char *err,
                          size_t errlen)
{
    memset(ret, 0, sizeof *ret);
    const char *eu = getenv("SANDBOX_URL"), *et = getenv("SANDBOX_TOKEN");
    const char *u = flag_url ? flag_url : (eu && *eu ? eu : NULL);
    const char *t = flag_token ? flag_token : (et && *et ? et : NULL);
    ret->url = u ? strdup(u) : NULL;
    ret->token = t ? strdup(t) : NULL;
    const char *eca = getenv("SANDBOX_CA_FILE");
    ret->ca_file = eca && *eca ? strdup(eca) : NULL;
    ret->path = config_path_new();
    if ((u && !ret->url) || (t && !ret->token) || (eca && *eca && !ret->ca_file)) {
        snprintf(err, errlen, "out of memory");
        return SBX_ENOMEM;
    }
    if ((!ret->url || !ret->token || !ret->ca_file) && ret->path) {
        int r = config_load(ret, err, errlen);
        if (r < 0)
            return r;
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
    memset(c, 0, sizeof *c);
}
