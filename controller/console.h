/* The web console (docs/console.md): static files built into the binary
 * (tools/embed_console.py), served at /console/ with a strict policy. */
#ifndef SBX_CONSOLE_H
#define SBX_CONSOLE_H

#include <stddef.h>

typedef struct console_file {
    const char *name, *content_type, *data;
    size_t len;
} console_file_t;

/* Ends with a row whose name is NULL. */
extern const console_file_t console_files[];

#endif
