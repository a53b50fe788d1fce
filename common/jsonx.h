/* json-c helpers: bounded strict parsing and typed field access. */
#ifndef SBX_JSONX_H
#define SBX_JSONX_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errors.h"

/* Parses exactly one JSON value from n bytes (strict mode, depth-limited,
 * nothing but whitespace after it). On success *ret is a new reference.
 * On failure fills err with API_INVALID_JSON and returns SBX_EINVAL; a key
 * or string that is not valid UTF-8 is API_INVALID_ARGUMENT naming the field
 * ("invalid UTF-8 in \"labels.team\""). A NUL ("\u0000") is admitted here. */
int jsonx_parse(const char *s, size_t n, json_object **ret, api_error_t *err);
/* Parses text that was checked on its way in and comes back from our own
 * store (PostgreSQL's jsonb output): no strictness checks, and one
 * tokener per thread reused rather than one made per call. A new object,
 * or NULL when s is not JSON (or is null). */
json_object *jsonx_parse_stored(const char *s);

/* For text bound for the store (PostgreSQL refuses NUL in text and jsonb):
 * returns 0 when no key or string under o holds a NUL, else fills err with
 * API_INVALID_ARGUMENT naming the field and returns SBX_EINVAL. */
int jsonx_refuse_nul(json_object *o, api_error_t *err);

/* Field lookups on an object; NULL when absent or of another type. */
const char *jsonx_get_str(json_object *o, const char *key);
json_object *jsonx_get_obj(json_object *o, const char *key);
json_object *jsonx_get_arr(json_object *o, const char *key);
/* Returns true and sets *ret when key holds an integer. */
bool jsonx_get_int(json_object *o, const char *key, int64_t *ret);
bool jsonx_get_bool(json_object *o, const char *key, bool *ret);

/* Adds key -> value to obj; value may be NULL (adds JSON null). Takes the
 * reference to value. */
void jsonx_add(json_object *obj, const char *key, json_object *value);
/* Adds a string, or null when s is NULL. */
void jsonx_add_str(json_object *obj, const char *key, const char *s);
void jsonx_add_int(json_object *obj, const char *key, int64_t v);
void jsonx_add_bool(json_object *obj, const char *key, bool v);

/* Serialises compactly into a malloc'd string (caller frees). */
char *jsonx_dump(json_object *o);

/* {"error":{"code":...,"message":...}} as a new object. */
json_object *jsonx_error_body(const char *code, const char *message);

#endif
