/* The OpenAPI document of the /v1 API (docs/openapi.json), embedded at
 * build time and served at GET /v1/openapi.json. */
#ifndef SBX_OPENAPI_H
#define SBX_OPENAPI_H

#include <stddef.h>

extern const char openapi_json[];   /* NUL-terminated */
extern const size_t openapi_json_len;

#endif
