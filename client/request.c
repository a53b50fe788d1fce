/* The request bodies both clients send (client.h): create, exec, share. */
#include "client.h"

#include "errors.h"
#include "jsonx.h"

static void add_flag(json_object *o, const char *key, client_flag_t f)
{
    if (f != CLIENT_FLAG_UNSET)
        jsonx_add_bool(o, key, f == CLIENT_FLAG_TRUE);
}

static void add_int(json_object *o, const char *key, client_opt_int_t v)
{
    if (v.set)
        jsonx_add_int(o, key, v.v);
}

static void add_str(json_object *o, const char *key, const char *s)
{
    if (s)
        jsonx_add_str(o, key, s);
}

static void add_ref(json_object *o, const char *key, json_object *v)
{
    if (v)
        jsonx_add(o, key, json_object_get(v));
}

int client_create_body(const client_create_spec_t *s, json_object **ret)
{
    json_object *body = json_object_new_object();
    json_object *trust = json_object_new_object();
    if (!body || !trust) {
        json_object_put(body);
        json_object_put(trust);
        return SBX_ENOMEM;
    }
    add_str(body, "tenant", s->tenant);
    add_str(body, "image", s->image); /* none: the server's default_image */
    add_int(body, "cpu_millis", s->cpu_millis);
    add_int(body, "memory_mib", s->memory_mib);
    add_int(body, "ttl_seconds", s->ttl_seconds);
    add_str(body, "network", s->network);
    add_flag(trust, "untrusted_repo", s->untrusted_repo);
    add_flag(trust, "generated_code", s->generated_code);
    add_flag(trust, "hostile", s->hostile);
    jsonx_add(body, "trust", trust);
    add_ref(body, "env", s->env);
    add_ref(body, "labels", s->labels);
    add_ref(body, "selector", s->selector);
    add_str(body, "isolation", s->isolation);
    add_flag(body, "read_only_root", s->read_only_root);
    add_flag(body, "hardened", s->hardened);
    *ret = body;
    return 0;
}

int client_exec_body(const client_exec_spec_t *s, json_object **ret)
{
    json_object *body = json_object_new_object();
    json_object *av = s->argv_json ? json_object_get(s->argv_json) : json_object_new_array();
    if (!body || !av) {
        json_object_put(body);
        json_object_put(av);
        return SBX_ENOMEM;
    }
    for (int i = 0; !s->argv_json && i < s->argc; i++)
        json_object_array_add(av, json_object_new_string(s->argv[i]));
    jsonx_add(body, "argv", av);
    add_ref(body, "env", s->env);
    add_str(body, "cwd", s->cwd);
    add_int(body, "timeout_seconds", s->timeout_seconds);
    add_int(body, "max_output_bytes", s->max_output_bytes);
    *ret = body;
    return 0;
}

int client_share_body(const client_share_spec_t *s, json_object **ret)
{
    json_object *body = json_object_new_object();
    if (!body)
        return SBX_ENOMEM;
    jsonx_add_int(body, "port", s->port);
    add_int(body, "ttl_seconds", s->ttl_seconds);
    add_str(body, "auth", s->auth);
    *ret = body;
    return 0;
}
