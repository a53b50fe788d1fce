/* The integration tests' small helpers, in one process that starts in a
 * millisecond: they ran as `python3 -c` thousands of times a run (70 ms of
 * CPU each on a busy host). tests/integration/run.sh compiles it once per
 * run, without sanitizers, into the run's folder; lib.sh falls back to
 * python3 when it is not there. Test code, not the product's.
 *
 *   itest-helper json JSON PATH [PATH...]
 *       the value at the first dotted PATH that exists (a.b.0.c): a string
 *       raw, anything else as Python's json.dumps writes it (", " and ": ",
 *       non-ASCII as \uXXXX); exit 1 when no path exists or JSON is invalid
 *   itest-helper json-find JSON ARRAY_PATH KEY VALUE FIELD
 *       FIELD of the first object in the array at ARRAY_PATH whose KEY is
 *       the string VALUE; exit 1 when there is none
 *   itest-helper free-port
 *       a TCP port free on 127.0.0.1 now
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <json-c/json.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void put_str(const char *s, size_t n)
{
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            putchar('\\');
            putchar(c);
        } else if (c == '\n') {
            fputs("\\n", stdout);
        } else if (c == '\r') {
            fputs("\\r", stdout);
        } else if (c == '\t') {
            fputs("\\t", stdout);
        } else if (c == '\b') {
            fputs("\\b", stdout);
        } else if (c == '\f') {
            fputs("\\f", stdout);
        } else if (c < 0x20) {
            printf("\\u%04x", c);
        } else if (c < 0x80) {
            putchar(c);
        } else {
            /* UTF-8 (json-c checked it) to \uXXXX, surrogate pairs above the BMP */
            unsigned cp;
            int more = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : 1;
            cp = c & (more == 3 ? 0x07 : more == 2 ? 0x0f : 0x1f);
            for (int k = 0; k < more && i + 1 < n; k++)
                cp = (cp << 6) | ((unsigned char)s[++i] & 0x3f);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                printf("\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
            } else {
                printf("\\u%04x", cp);
            }
        }
    }
    putchar('"');
}

/* A double as Python's repr: the shortest text that reads back the same,
 * in exponent form below 1e-4 and from 1e16, with ".0" when integral. */
static void put_double(double d)
{
    if (isnan(d)) {
        fputs("NaN", stdout);
        return;
    }
    if (isinf(d)) {
        fputs(d < 0 ? "-Infinity" : "Infinity", stdout);
        return;
    }
    char buf[64];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, d);
        if (strtod(buf, NULL) == d)
            break;
    }
    int exp10 = atoi(strchr(buf, 'e') + 1);
    if (exp10 < -4 || exp10 >= 16) {
        /* d.ddde+XX as Python: mantissa without trailing zeros, exponent at least two digits */
        char *e = strchr(buf, 'e');
        *e = '\0';
        printf("%se%c%02d", buf, exp10 < 0 ? '-' : '+', abs(exp10));
        return;
    }
    snprintf(buf, sizeof buf, "%.*f", p - 1 - exp10 > 0 ? p - 1 - exp10 : 0, d);
    fputs(buf, stdout);
    if (!strchr(buf, '.'))
        fputs(".0", stdout);
}

static void put_json(json_object *o)
{
    switch (json_object_get_type(o)) {
    case json_type_null:
        fputs("null", stdout);
        break;
    case json_type_boolean:
        fputs(json_object_get_boolean(o) ? "true" : "false", stdout);
        break;
    case json_type_int:
        printf("%lld", (long long)json_object_get_int64(o));
        break;
    case json_type_double:
        put_double(json_object_get_double(o));
        break;
    case json_type_string:
        put_str(json_object_get_string(o), (size_t)json_object_get_string_len(o));
        break;
    case json_type_array: {
        putchar('[');
        size_t n = json_object_array_length(o);
        for (size_t i = 0; i < n; i++) {
            if (i)
                fputs(", ", stdout);
            put_json(json_object_array_get_idx(o, i));
        }
        putchar(']');
        break;
    }
    case json_type_object: {
        putchar('{');
        int i = 0;
        json_object_object_foreach(o, k, v) {
            if (i++)
                fputs(", ", stdout);
            put_str(k, strlen(k));
            fputs(": ", stdout);
            put_json(v);
        }
        putchar('}');
        break;
    }
    }
}

static json_object *parse(const char *text)
{
    json_tokener *t = json_tokener_new();
    json_tokener_set_flags(t, JSON_TOKENER_STRICT);
    size_t len = strlen(text);
    json_object *o = json_tokener_parse_ex(t, text, (int)len);
    enum json_tokener_error err = json_tokener_get_error(t);
    size_t used = json_tokener_get_parse_end(t);
    json_tokener_free(t);
    while (o && used < len && isspace((unsigned char)text[used]))
        used++;
    if (!o || err != json_tokener_success || used != len) {
        fprintf(stderr, "itest_json: invalid JSON: %s: '%.300s'\n",
                err != json_tokener_success ? json_tokener_error_desc(err) : "extra data", text);
        json_object_put(o);
        return NULL;
    }
    return o;
}

/* The value at a dotted path, or NULL (found: *ok, for a JSON null). */
static json_object *walk(json_object *cur, const char *path, int *ok)
{
    *ok = 1;
    if (!*path)
        return cur;
    char *copy = strdup(path);
    /* split(".") keeps empty parts: "a..b" looks for the key "" */
    char *part = copy;
    for (;;) {
        char *dot = strchr(part, '.');
        if (dot)
            *dot = '\0';
        json_object *next = NULL;
        if (json_object_is_type(cur, json_type_object) && json_object_object_get_ex(cur, part, &next)) {
            cur = next;
        } else if (json_object_is_type(cur, json_type_array) && *part &&
                   strspn(part, "0123456789") == strlen(part) &&
                   strtoull(part, NULL, 10) < json_object_array_length(cur)) {
            cur = json_object_array_get_idx(cur, (size_t)strtoull(part, NULL, 10));
        } else {
            *ok = 0;
            cur = NULL;
            break;
        }
        if (!dot)
            break;
        part = dot + 1;
    }
    free(copy);
    return cur;
}

static int put_value(json_object *v)
{
    if (json_object_is_type(v, json_type_string))
        fputs(json_object_get_string(v), stdout);
    else
        put_json(v);
    putchar('\n');
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "json") == 0) {
        json_object *doc = parse(argv[2]);
        if (!doc)
            return 1;
        for (int i = 3; i < argc; i++) {
            int ok;
            json_object *v = walk(doc, argv[i], &ok);
            if (ok) {
                put_value(v);
                json_object_put(doc);
                return 0;
            }
        }
        json_object_put(doc);
        return 1;
    }
    if (argc == 7 && strcmp(argv[1], "json-find") == 0) {
        json_object *doc = parse(argv[2]);
        int ok;
        json_object *arr = doc ? walk(doc, argv[3], &ok) : NULL;
        int rc = 1;
        for (size_t i = 0; json_object_is_type(arr, json_type_array) && i < json_object_array_length(arr); i++) {
            json_object *e = json_object_array_get_idx(arr, i), *k = NULL, *v;
            if (json_object_object_get_ex(e, argv[4], &k) && json_object_is_type(k, json_type_string) &&
                strcmp(json_object_get_string(k), argv[5]) == 0) {
                v = walk(e, argv[6], &ok);
                if (ok)
                    rc = put_value(v);
                break;
            }
        }
        json_object_put(doc);
        return rc;
    }
    if (argc == 2 && strcmp(argv[1], "free-port") == 0) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t len = sizeof a;
        if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
            perror("itest-helper free-port");
            return 1;
        }
        printf("%d\n", ntohs(a.sin_port));
        close(fd);
        return 0;
    }
    fprintf(stderr, "usage: itest-helper json JSON PATH... | json-find JSON ARRAY_PATH KEY VALUE FIELD | free-port\n");
    return 2;
}
