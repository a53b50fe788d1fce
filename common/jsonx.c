/* json-c helpers. */
#include "jsonx.h"

#include "utf8.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSONX_MAX_DEPTH 32
#define JSONX_MAX_PATH 256 /* a field path in an error message, truncated beyond */

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

/* Appends ".key" (or "key" at the top) or "[i]" to the path in buf[len]. */
static size_t jsonx_path_push(char *buf, size_t cap, size_t len, const char *key, size_t idx)
{
    int w;
    if (key)
        w = snprintf(buf + len, cap - len, "%s%s", len ? "." : "", key);
    else
        w = snprintf(buf + len, cap - len, "[%zu]", idx);
    if (w < 0 || (size_t)w >= cap - len)
        return cap - 1; /* truncated: the path still names the outer fields */
    return len + (size_t)w;
}

/* Why the n bytes at s cannot be text, or NULL: invalid UTF-8 always, a NUL
 * only when nul (PostgreSQL refuses both in text and jsonb). */
static const char *jsonx_text_fault(const char *s, size_t n, bool nul)
{
    if (!utf8_valid(s, n))
        return "invalid UTF-8";
    if (nul && memchr(s, '\0', n))
        return "a NUL character";
    return NULL;
}

/* Checks every key and string value under o; on a fault, fills err naming
 * the field's path ("labels.team", "argv[2]"). depth is bounded by the
 * tokener's JSONX_MAX_DEPTH. */
static int jsonx_check_text(json_object *o, bool nul, char *path, size_t cap, size_t len, api_error_t *err)
{
    const char *why;
    switch (json_object_get_type(o)) {
    case json_type_string:
        why = jsonx_text_fault(json_object_get_string(o), (size_t)json_object_get_string_len(o), nul);
        if (why)
            return api_error_set(err, API_INVALID_ARGUMENT, "%s in \"%s\"", why, len ? path : "(top level)");
        return 0;
    case json_type_object: {
        json_object_object_foreach(o, key, val) {
            size_t l = jsonx_path_push(path, cap, len, key, 0);
            why = jsonx_text_fault(key, strlen(key), nul);
            if (why) {
                /* the key itself cannot be shown: name its parent */
                path[len] = '\0';
                return api_error_set(err, API_INVALID_ARGUMENT, "%s in a key of \"%s\"", why,
                                     len ? path : "(top level)");
            }
            if (val && jsonx_check_text(val, nul, path, cap, l, err) < 0)
                return SBX_EINVAL;
            path[len] = '\0';
        }
        return 0;
    }
    case json_type_array: {
        size_t n = json_object_array_length(o);
        for (size_t i = 0; i < n; i++) {
            json_object *v = json_object_array_get_idx(o, i);
            size_t l = jsonx_path_push(path, cap, len, NULL, i);
            if (v && jsonx_check_text(v, nul, path, cap, l, err) < 0)
                return SBX_EINVAL;
            path[len] = '\0';
        }
        return 0;
    }
    default:
        return 0;
    }
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
    char path[JSONX_MAX_PATH] = "";
    if (jsonx_check_text(o, false, path, sizeof path, 0, err) < 0) {
        json_object_put(o);
        return SBX_EINVAL;
    }
    *ret = o;
    return 0;
}

static pthread_key_t jsonx_tok_key;
static pthread_once_t jsonx_tok_once = PTHREAD_ONCE_INIT;

static void jsonx_tok_free(void *p) { json_tokener_free(p); }
static void jsonx_tok_init(void) { pthread_key_create(&jsonx_tok_key, jsonx_tok_free); }

json_object *jsonx_parse_stored(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (!s || n >= (size_t)INT32_MAX)
        return NULL;
    pthread_once(&jsonx_tok_once, jsonx_tok_init);
    json_tokener *tok = pthread_getspecific(jsonx_tok_key);
    if (!tok) {
        tok = json_tokener_new_ex(JSONX_MAX_DEPTH);
        if (!tok || pthread_setspecific(jsonx_tok_key, tok) != 0) {
            json_tokener_free(tok);
            return NULL;
        }
    }
    json_tokener_reset(tok);
    /* with its NUL, so that a bare number or literal ends */
    json_object *o = json_tokener_parse_ex(tok, s, (int)n + 1);
    bool ok = o && json_tokener_get_error(tok) == json_tokener_success;
    for (size_t i = ok ? (size_t)json_tokener_get_parse_end(tok) : n; ok && i < n; i++)
        ok = s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n';
    if (o && !ok) {
        json_object_put(o);
        o = NULL;
    }
    return o;
}

int jsonx_refuse_nul(json_object *o, api_error_t *err)
{
    char path[JSONX_MAX_PATH] = "";
    return o ? jsonx_check_text(o, true, path, sizeof path, 0, err) : 0;
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
