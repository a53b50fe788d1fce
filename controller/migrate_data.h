/* The migrations embedded at build time (generated migrations_data.c). */
#ifndef SBX_MIGRATE_DATA_H
#define SBX_MIGRATE_DATA_H

#include <stddef.h>

typedef struct migration_file {
    const char *name;   /* "0001_initial.sql" */
    const char *sql;
    size_t len;
} migration_file_t;

extern const migration_file_t migration_files[];
extern const int migration_file_count;

#endif
