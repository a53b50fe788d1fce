/* The request bodies both clients send (client.h): create, exec, share, extend, each
 * a table of its fields in the order they go out. */
#include "client.h"

#include <stddef.h>
#include <string.h>

#include "errors.h"
#include "jsonx.h"

typedef enum {
    BF_STR,    /* const char *: left out when NULL */
    BF_INT,    /* client_opt_int_t: left out when unset */
    BF_I64,    /* int64_t: always sent */
    BF_FLAG,   /* client_flag_t: left out when unset */
    BF_REF,    /* json_object *: a new reference, left out when NULL */
    BF_ARGV,   /* client_exec_spec_t's argv_json, or argv and argc */
    BF_OBJ,    /* a nested object of the fields in sub, always sent */
} body_kind_t;

typedef struct body_field {
    const char *key;
    body_kind_t kind;
    size_t off;                        /* of the field in the spec */
    const struct body_field *sub;      /* BF_OBJ */
} body_field_t;

static int add_fields(json_object *body, const char *spec, const body_field_t *f);

/* Adds one field of spec to body; SBX_ENOMEM when a nested value cannot be made. */
static int add_field(json_object *body, const char *spec, const body_field_t *f)
{
    const void *p = spec + f->off;
    switch (f->kind) {
    case BF_STR:
        if (*(const char *const *)p)
            jsonx_add_str(body, f->key, *(const char *const *)p);
        return 0;
    case BF_INT:
        if (((const client_opt_int_t *)p)->set)
            jsonx_add_int(body, f->key, ((const client_opt_int_t *)p)->v);
        return 0;
    case BF_I64:
        jsonx_add_int(body, f->key, *(const int64_t *)p);
        return 0;
    case BF_FLAG:
        if (*(const client_flag_t *)p != CLIENT_FLAG_UNSET)
            jsonx_add_bool(body, f->key, *(const client_flag_t *)p == CLIENT_FLAG_TRUE);
        return 0;
    case BF_REF:
        if (*(json_object *const *)p)
            jsonx_add(body, f->key, json_object_get(*(json_object *const *)p));
        return 0;
    case BF_ARGV: {
        const client_exec_spec_t *x = (const client_exec_spec_t *)(const void *)spec;
        json_object *av = x->argv_json ? json_object_get(x->argv_json) : json_object_new_array();
        for (int i = 0; av && !x->argv_json && i < x->argc; i++)
            json_object_array_add(av, json_object_new_string(x->argv[i]));
        jsonx_add(body, f->key, av);
        return av ? 0 : SBX_ENOMEM;
    }
    case BF_OBJ: {
        json_object *o = json_object_new_object();
        if (!o)
            return SBX_ENOMEM;
        jsonx_add(body, f->key, o);
        return add_fields(o, spec, f->sub);
    }
    }
    return 0;
}

static int add_fields(json_object *body, const char *spec, const body_field_t *f)
{
    int r = 0;
    for (; r == 0 && f->key; f++)
        r = add_field(body, spec, f);
    return r;
}

static int add_args(json_object *body, json_object *args, const body_field_t *f);

/* A new object holding spec's fields, or (spec NULL) those args holds. */
static int build(const void *spec, json_object *args, const body_field_t *fields, json_object **ret)
{
    json_object *body = json_object_new_object();
    if (!body)
        return SBX_ENOMEM;
    int r = spec ? add_fields(body, spec, fields) : add_args(body, args, fields);
    if (r < 0) {
        json_object_put(body);
        return r;
    }
    *ret = body;
    return 0;
}

#define CF(k, kind) { #k, kind, offsetof(client_create_spec_t, k), NULL }
#define XF(k, kind) { #k, kind, offsetof(client_exec_spec_t, k), NULL }
#define SF(k, kind) { #k, kind, offsetof(client_share_spec_t, k), NULL }
#define EF(k, kind) { #k, kind, offsetof(client_extend_spec_t, k), NULL }
#define FIELDS_END  { NULL, BF_STR, 0, NULL }

static const body_field_t trust_fields[] = {
    CF(untrusted_repo, BF_FLAG), CF(generated_code, BF_FLAG), CF(hostile, BF_FLAG), FIELDS_END,
};
/* image left out: the server's default_image (with from or template: the snapshot's). */
static const body_field_t create_fields[] = {
    CF(name, BF_STR), CF(tenant, BF_STR), CF(image, BF_STR), CF(from, BF_STR), CF(template, BF_STR),
    CF(cpu_millis, BF_INT), CF(memory_mib, BF_INT), CF(disk_mib, BF_INT), CF(ttl_seconds, BF_INT),
    CF(auto_pause, BF_FLAG),
    CF(network, BF_STR), { "trust", BF_OBJ, 0, trust_fields }, CF(env, BF_REF), CF(labels, BF_REF),
    CF(selector, BF_REF), CF(isolation, BF_STR), CF(read_only_root, BF_FLAG), CF(hardened, BF_FLAG),
    CF(volumes, BF_REF), CF(egress, BF_REF), CF(secrets, BF_REF), FIELDS_END,
};
static const body_field_t exec_fields[] = {
    { "argv", BF_ARGV, 0, NULL }, XF(env, BF_REF), XF(cwd, BF_STR), XF(user, BF_STR), XF(timeout_seconds, BF_INT),
    XF(max_output_bytes, BF_INT), { "stdin", BF_STR, offsetof(client_exec_spec_t, stdin_text), NULL },
    XF(stdin_b64, BF_STR), FIELDS_END,
};
static const body_field_t share_fields[] = {
    SF(port, BF_I64), SF(ttl_seconds, BF_INT), SF(auth, BF_STR), FIELDS_END,
};
static const body_field_t extend_fields[] = { EF(ttl_seconds, BF_I64), FIELDS_END };

/* Adds to body every field of f that args holds (and is not null), as given; a
 * nested object is always made, of the fields args holds. */
static int add_args(json_object *body, json_object *args, const body_field_t *f)
{
    for (; f->key; f++) {
        json_object *v = NULL;
        if (f->kind == BF_OBJ) {
            json_object *o = json_object_new_object();
            if (!o)
                return SBX_ENOMEM;
            jsonx_add(body, f->key, o);
            int r = add_args(o, args, f->sub);
            if (r < 0)
                return r;
        } else if (json_object_object_get_ex(args, f->key, &v) && v) {
            jsonx_add(body, f->key, json_object_get(v));
        }
    }
    return 0;
}

int client_create_body(const client_create_spec_t *s, json_object **ret) { return build(s, NULL, create_fields, ret); }

int client_fork_snapshot_body(json_object *parent, bool no_memory, json_object **ret)
{
    json_object *body = json_object_new_object(), *vols = NULL;
    if (!body)
        return SBX_ENOMEM;
    const char *iso = jsonx_get_str(parent, "isolation");
    json_object_object_get_ex(parent, "volumes", &vols);
    if (!no_memory && iso && strcmp(iso, "microvm") == 0 &&
        !(vols && json_object_is_type(vols, json_type_array) && json_object_array_length(vols) > 0))
        jsonx_add_bool(body, "memory", true);
    *ret = body;
    return 0;
}
int client_create_body_args(json_object *args, json_object **ret) { return build(NULL, args, create_fields, ret); }
int client_exec_body_args(json_object *args, json_object **ret) { return build(NULL, args, exec_fields, ret); }
int client_exec_body(const client_exec_spec_t *s, json_object **ret) { return build(s, NULL, exec_fields, ret); }
int client_share_body(const client_share_spec_t *s, json_object **ret) { return build(s, NULL, share_fields, ret); }
int client_extend_body(const client_extend_spec_t *s, json_object **ret) { return build(s, NULL, extend_fields, ret); }
