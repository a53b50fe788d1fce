/* The client files the controller serves to its one-line installer
 * (docs/client-setup.md): GET /setup.sh, the installer with this
 * controller's URL and the files' SHA-256 sums in it, and GET /client/NAME,
 * the files themselves (the sandbox and sandbox-mcp binaries of the build
 * that made this sandboxd, the agent skill, the MCP configuration helper).
 * No token: they hold no secret. The files are built into sandboxd
 * (tools/embed_client.py); a controller linked without them answers 404. */
#ifndef SBX_CLIENT_FILES_H
#define SBX_CLIENT_FILES_H

typedef struct client_file {
    const char *name;              /* NULL ends the table */
    const unsigned char *start, *end;
    unsigned mode;
} client_file_t;

/* The embedded files, the installer's template named "setup.sh" among them
 * (weak: a program linked without tools/embed_client.py's output has none). */
extern const client_file_t client_files_embedded[] __attribute__((weak));

struct req;
/* GET|HEAD /setup.sh (a row of the route table: server_routes.c) */
void client_setup_route(struct req *rq);
/* GET|HEAD /client/{file} */
void client_file_route(struct req *rq, const char *name);

#endif
