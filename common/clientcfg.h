/* Where a client (the CLI, sandbox-mcp) finds the controller and its token:
 * a flag, else SANDBOX_URL / SANDBOX_TOKEN, else the config file
 * ($XDG_CONFIG_HOME/sandbox/config or ~/.config/sandbox/config, lines
 * "url = …", "token = …" and "ca_file = …"), else the default URL. The file
 * may hold named contexts, "[context NAME]" sections of the same keys, one
 * per controller: one named by --context or SANDBOX_CONTEXT is the whole
 * answer (over SANDBOX_URL/SANDBOX_TOKEN, under --url/--token); else, when
 * no flag or variable gave a URL or a token, the top's "context = NAME"
 * picks one, else the top's own lines fill in. One implementation
 * so that agents and scripts see the same configuration. */
#ifndef SBX_CLIENTCFG_H
#define SBX_CLIENTCFG_H

#include <stdbool.h>
#include <stddef.h>

#define CLIENTCFG_DEFAULT_URL "http://127.0.0.1:8080"
#define CLIENTCFG_CONTEXTS_MAX 64
#define CLIENTCFG_CONTEXT_NAME_MAX 64

typedef struct client_config {
    char *url;            /* always set on success */
    char *token;          /* NULL when no source has one */
    char *ca_file;        /* PEM CA an https URL is verified against (SANDBOX_CA_FILE,
                             'ca_file' in the file); NULL: the system's CAs */
    char *path;           /* the config file consulted (may not exist); NULL without HOME */
    char *context;        /* the context in use; NULL: none (the file's top, or no file) */
    char warnings[2][256]; /* non-fatal remarks for the caller to print ("" when none) */
} client_config_t;

/* Resolves the configuration. flag_url / flag_token may be NULL. Returns 0,
 * or SBX_EINVAL with a one-line reason in err (a malformed config file, a
 * URL that is not http(s), a token with spaces or control characters), or
 * SBX_ENOMEM. Release with client_config_release either way. */
int client_config_resolve(const char *flag_url, const char *flag_token, const char *flag_context,
                          client_config_t *ret, char *err, size_t errlen);
void client_config_release(client_config_t *c);

/* The file's contexts (never their tokens), the one in use (flag, else
 * SANDBOX_CONTEXT, else the file's "context = "; NULL: none) and the file's
 * path. 0 or SBX_EINVAL/SBX_ENOMEM with err; free with client_contexts_free
 * and free(). */
typedef struct client_context {
    char *name, *url;
    bool has_token;
} client_context_t;
int client_config_contexts(const char *flag_context, client_context_t **ret, int *ret_n, char **ret_current,
                           char **ret_path, char *err, size_t errlen);
void client_contexts_free(client_context_t *v, int n);

#endif
