/* Logs frames and their NDJSON form (see logframe.h). */
#include "logframe.h"
#include "errors.h"
#include "utf8.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

void logframe_header(unsigned char ret[LOGFRAME_HEADER_BYTES], int type, uint32_t len)
{
    ret[0] = (unsigned char)type;
    ret[1] = (unsigned char)(len >> 24);
    ret[2] = (unsigned char)(len >> 16);
    ret[3] = (unsigned char)(len >> 8);
    ret[4] = (unsigned char)len;
}

int logframe_parse(const unsigned char *buf, size_t n, logframe_t *ret)
{
    if (n < LOGFRAME_HEADER_BYTES)
        return 0;
    int type = buf[0];
    uint32_t len = (uint32_t)buf[1] << 24 | (uint32_t)buf[2] << 16 | (uint32_t)buf[3] << 8 | (uint32_t)buf[4];
    if (type != LOGFRAME_STDOUT && type != LOGFRAME_STDERR && type != LOGFRAME_END)
        return SBX_EINVAL;
    if (len > LOGFRAME_PAYLOAD_MAX)
        return SBX_EINVAL;
    if (n - LOGFRAME_HEADER_BYTES < len)
        return 0;
    ret->type = type;
    ret->data = buf + LOGFRAME_HEADER_BYTES;
    ret->len = len;
    ret->size = LOGFRAME_HEADER_BYTES + (size_t)len;
    return 1;
}

size_t logframe_utf8_prefix(const char *s, size_t n)
{
    /* Look back at most 3 bytes for the lead byte of the last sequence. */
    size_t back = n < 3 ? n : 3;
    for (size_t k = 1; k <= back; k++) {
        unsigned char c = (unsigned char)s[n - k];
        if ((c & 0xC0) == 0x80)
            continue;            /* a continuation byte: keep looking */
        size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
        /* An unfinished sequence is held back; anything else (complete,
         * ASCII, or invalid, which more bytes cannot mend) goes now. */
        return need > k ? n - k : n;
    }
    return n;
}

int logframe_ndjson_chunk(sbuf_t *b, const char *stream, const char *data, size_t n)
{
    char *text = utf8_sanitize(data, n);
    if (!text)
        return SBX_ENOMEM;
    json_object *o = json_object_new_object();
    json_object *ts = json_object_new_string(stream);
    json_object *td = json_object_new_string(text);
    free(text);
    if (!o || !ts || !td) {
        json_object_put(o);
        json_object_put(ts);
        json_object_put(td);
        return SBX_ENOMEM;
    }
    json_object_object_add(o, "stream", ts);
    json_object_object_add(o, "data", td);
    const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    int r = s ? sbuf_append(b, s, strlen(s)) : SBX_ENOMEM;
    if (r == 0)
        r = sbuf_append(b, "\n", 1);
    json_object_put(o);
    return r;
}
