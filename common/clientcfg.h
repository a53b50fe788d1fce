/* Where a client (the CLI, sandbox-mcp) finds the controller and its token:
 * a flag, else SANDBOX_URL / SANDBOX_TOKEN, else the config file
 * ($XDG_CONFIG_HOME/sandbox/config or ~/.config/sandbox/config, lines
 * "url = …", "token = …" and "ca_file = …"), else the default URL. One implementation so
 * that agents and scripts see the same configuration. */
#ifndef SBX_CLIENTCFG_H
#define SBX_CLIENTCFG_H

#include <stddef.h>

#define CLIENTCFG_DEFAULT_URL "http://127.0.0.1:8080"

typedef struct client_config {
    char *url;            /* always set on success */
    char *token;          /* NULL when no source has one */
    char *ca_file;        /* PEM CA an https URL is verified against (SANDBOX_CA_FILE,
                             'ca_file' in the file); NULL: the system's CAs */
    char *path;           /* the config file consulted (may not exist); NULL without HOME */
    char warnings[2][256]; /* non-fatal remarks for the caller to print ("" when none) */
} client_config_t;

/* Resolves the configuration. flag_url / flag_token may be NULL. Returns 0,
 * or SBX_EINVAL with a one-line reason in err (a malformed config file, a
 * URL that is not http(s), a token with spaces or control characters), or
 * SBX_ENOMEM. Release with client_config_release either way. */
int client_config_resolve(const char *flag_url, const char *flag_token, client_config_t *ret, char *err,
                          size_t errlen);
void client_config_release(client_config_t *c);

#endif
