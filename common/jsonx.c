/* json-c helpers. */
#include "jsonx.h"

#include <stdlib.h>
#include <string.h>

#define JSONX_MAX_DEPTH 32

/* json-c's strict mode still admits single-quoted strings and the literals
 * NaN, Infinity and -Infinity. Outside double-quoted strings, JSON uses only
 * whitespace, structural characters, number characters and the letters of
 * true/false/null; returns the offset of the first other byte, or n. */
static size_t jsonx_non_json_byte(const char *s, size_t n)
{
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = false;
        } else {
            switch (c) {
            case '"':
                in_str = true;
                break;
            case ' ': case '\t': case '\r': case '\n': case '{': case '}': case '[': case ']': case ':':
            case ',': case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': case '8':
            case '9': case '+': case '-': case '.': case 'e': case 'E': case 't': case 'r': case 'u': case 'f':
            case 'a': case 'l': case 's': case 'n':
                break;
            default:
                return i;
            }
        }
    }
    return n;
}

int jsonx_parse(const char *s, size_t n, json_object **ret, api_error_t *err)
{
    if (n > (size_t)INT32_MAX)
        return api_error_set(err, API_PAYLOAD_TOO_LARGE, "body too large");
    json_tokener *tok = json_tokener_new_ex(JSONX_MAX_DEPTH);
    if (!tok)
        return api_error_set(err, API_INTERNAL, "out of memory");
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    json_object *o = json_tokener_parse_ex(tok, s, (int)n);
    enum json_tokener_error je = json_tokener_get_error(tok);
    size_t used = (size_t)json_tokener_get_parse_end(tok);
    if (!o && je == json_tokener_continue && used == n) {
        /* A bare number or literal at the very end ("123", "true") is only
         * complete once the tokener sees a terminator: feed it the NUL. */
        o = json_tokener_parse_ex(tok, "", 1);
        je = json_tokener_get_error(tok);
        if (!o && je != json_tokener_success)
            je = json_tokener_continue;
        used = n;
    }
    if (!o && je == json_tokener_success) {
        /* json-c represents null as no object; callers need an object. */
        json_tokener_free(tok);
        return api_error_set(err, API_INVALID_JSON, "a top-level null is not accepted");
    }
    if (!o || je != json_tokener_success) {
        if (o)
            json_object_put(o);
        const char *why = je == json_tokener_continue ? "unexpected end of input" : json_tokener_error_desc(je);
        api_error_set(err, API_INVALID_JSON, "malformed JSON at byte %zu: %s", used, why);
        json_tokener_free(tok);
        return SBX_EINVAL;
    }
    json_tokener_free(tok);
    for (size_t i = used; i < n; i++) {
        char c = s[i];
        if (c != ' ' && c != '\t' && c != '\r' && c != '\n') {
            json_object_put(o);
            return api_error_set(err, API_INVALID_JSON, "trailing data after JSON value at byte %zu", i);
        }
    }
    size_t bad = jsonx_non_json_byte(s, used);
    if (bad < used) {
        json_object_put(o);
        return api_error_set(err, API_INVALID_JSON,
                             "malformed JSON at byte %zu: not JSON (single quotes, NaN or Infinity)", bad);
    }
    *ret = o;
    return 0;
}

static json_object *jsonx_get_typed(json_object *o, const char *key, json_type t)
{
    json_object *v;
    if (!o || !json_object_is_type(o, json_type_object))
        return NULL;
    if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, t))
        return NULL;
    return v;
}

const char *jsonx_get_str(json_object *o, const char *key)
{
    json_object *v = jsonx_get_typed(o, key, json_type_string);
    return v ? json_object_get_string(v) : NULL;
}

json_object *jsonx_get_obj(json_object *o, const char *key) { return jsonx_get_typed(o, key, json_type_object); }
json_object *jsonx_get_arr(json_object *o, const char *key) { return jsonx_get_typed(o, key, json_type_array); }

bool jsonx_get_int(json_object *o, const char *key, int64_t *ret)
{
    json_object *v = jsonx_get_typed(o, key, json_type_int);
    if (!v)
        return false;
    *ret = json_object_get_int64(v);
    return true;
}

bool jsonx_get_bool(json_object *o, const char *key, bool *ret)
{
    json_object *v = jsonx_get_typed(o, key, json_type_boolean);
    if (!v)
        return false;
    *ret = json_object_get_boolean(v);
    return true;
}

void jsonx_add(json_object *obj, const char *key, json_object *value)
{
    json_object_object_add(obj, key, value);
}

void jsonx_add_str(json_object *obj, const char *key, const char *s)
{
    json_object_object_add(obj, key, s ? json_object_new_string(s) : NULL);
}

void jsonx_add_int(json_object *obj, const char *key, int64_t v)
{
    json_object_object_add(obj, key, json_object_new_int64(v));
}

void jsonx_add_bool(json_object *obj, const char *key, bool v)
{
    json_object_object_add(obj, key, json_object_new_boolean(v));
}

char *jsonx_dump(json_object *o)
{
    const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    return strdup(s ? s : "null");
}

json_object *jsonx_error_body(const char *code, const char *message)
{
    json_object *e = json_object_new_object();
    jsonx_add_str(e, "code", code);
    jsonx_add_str(e, "message", message);
    json_object *root = json_object_new_object();
    jsonx_add(root, "error", e);
    return root;
}
