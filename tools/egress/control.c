/* sandbox-egress: the worker's control socket (egressd.h). One JSON object
 * per line each way:
 *   {"op":"set","addr":IP,"sandbox":ID,"tenant":T,"rules":{…},"cidrs":[…]}
 *       a sandbox's source address and rules (again: new rules, at once;
 *       its live connections the new rules refuse are closed)
 *   {"op":"drop","addr":IP}          forget it, close its connections (or by "sandbox":ID)
 *   {"op":"stats"}                   counters per sandbox
 *   {"op":"drain","max":N}           verdict records, oldest first, removed
 * Answers {"ok":true,…} or {"ok":false,"error":MESSAGE}. The socket is the
 * worker's alone (mode 0600, root). */
#include "egressd.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "jsonx.h"
#include "netaddr.h"

#define CONTROL_LINE_MAX (256 * 1024)

static json_object *fail(const char *fmt, const char *arg)
{
    char m[700];
    snprintf(m, sizeof m, fmt, arg ? arg : "");
    json_object *o = json_object_new_object();
    jsonx_add_bool(o, "ok", false);
    jsonx_add_str(o, "error", m);
    return o;
}

static json_object *ok(void)
{
    json_object *o = json_object_new_object();
    jsonx_add_bool(o, "ok", true);
    return o;
}

static bool cidr_parse(const char *s, egd_cidr_t *ret)
{
    char canon[NETADDR_CIDR_MAX], why[120];
    bool v6;
    if (netaddr_cidr_parse(s, canon, &v6, why, sizeof why) != 0)
        return false;
    char *slash = strchr(canon, '/');
    if (!slash)
        return false;
    *slash = '\0';
    ret->prefix = (unsigned)atoi(slash + 1);
    return egd_addr_parse(canon, &ret->net);
}

static json_object *op_set(egd_t *d, json_object *req)
{
    const char *addr = jsonx_get_str(req, "addr"), *id = jsonx_get_str(req, "sandbox");
    const char *tenant = jsonx_get_str(req, "tenant");
    egd_addr_t a;
    if (!addr || !egd_addr_parse(addr, &a))
        return fail("addr: an IP address", NULL);
    if (!id || !*id || strlen(id) >= 64 || (tenant && strlen(tenant) >= 64))
        return fail("sandbox: an id (and tenant: a name) under 64 bytes", NULL);
    json_object *rj = NULL;
    json_object_object_get_ex(req, "rules", &rj);
    egress_rules_t rules;
    api_error_t err;
    if (!rj || egress_rules_from_json(rj, "rules", &rules, &err) < 0)
        return fail("%s", rj ? err.message : "rules: an object {allow, deny, default}");
    egd_cidr_t cidrs[EGD_CIDRS_MAX];
    size_t nc = 0;
    json_object *ca = jsonx_get_arr(req, "cidrs");
    for (size_t i = 0; ca && i < json_object_array_length(ca); i++) {
        const char *c = json_object_get_string(json_object_array_get_idx(ca, i));
        if (nc == EGD_CIDRS_MAX || !c || !cidr_parse(c, &cidrs[nc])) {
            egress_rules_release(&rules);
            return fail("cidrs: at most 32 CIDRs (%s)", c);
        }
        nc++;
    }
    struct egd_tls *tls = NULL;
    char why[200];
    json_object *caj = NULL, *secj = NULL;
    json_object_object_get_ex(req, "ca", &caj);
    json_object_object_get_ex(req, "secrets", &secj);
    if (egd_tls_parse(caj, secj, &tls, why, sizeof why) < 0) {
        egress_rules_release(&rules);
        return fail("%s", why);
    }
    egd_sandbox_t *s = egd_sandbox_find(d, &a);
    if (s && strcmp(s->id, id) != 0) { /* the address went to another sandbox: the old one's end */
        egd_proxy_recheck(d, s, true);
        egd_udp_recheck(d, s, true);
        egress_rules_release(&s->rules);
        egd_tls_free(s->tls);
        memset(s, 0, sizeof *s);
        s = NULL;
    }
    if (!s) {
        for (size_t i = 0; i < EGD_SANDBOXES_MAX && !s; i++)
            if (!d->sbx[i].used)
                s = &d->sbx[i];
        if (!s) {
            egress_rules_release(&rules);
            egd_tls_free(tls);
            return fail("too many sandboxes", NULL);
        }
        memset(s, 0, sizeof *s);
        s->used = true;
        s->addr = a;
        snprintf(s->id, sizeof s->id, "%s", id);
    }
    snprintf(s->tenant, sizeof s->tenant, "%s", tenant ? tenant : "");
    egress_rules_release(&s->rules);
    s->rules = rules;
    memcpy(s->cidrs, cidrs, nc * sizeof cidrs[0]);
    s->ncidrs = nc;
    egd_tls_free(s->tls); /* (a connection looks its sandbox's up at each step) */
    s->tls = tls;
    unsigned closed = egd_proxy_recheck(d, s, false) + egd_udp_recheck(d, s, false);
    json_object *o = ok();
    jsonx_add_int(o, "closed", closed);
    return o;
}

static json_object *op_drop(egd_t *d, json_object *req)
{
    const char *addr = jsonx_get_str(req, "addr"), *id = jsonx_get_str(req, "sandbox");
    egd_addr_t a;
    egd_sandbox_t *s = NULL;
    if (id) { /* by sandbox id */
        for (size_t i = 0; i < EGD_SANDBOXES_MAX && !s; i++)
            if (d->sbx[i].used && strcmp(d->sbx[i].id, id) == 0)
                s = &d->sbx[i];
    } else if (!addr || !egd_addr_parse(addr, &a)) {
        return fail("addr: an IP address (or sandbox: an id)", NULL);
    } else {
        s = egd_sandbox_find(d, &a);
    }
    unsigned closed = 0;
    if (s) {
        closed = egd_proxy_recheck(d, s, true) + egd_udp_recheck(d, s, true);
        egress_rules_release(&s->rules);
        egd_tls_free(s->tls);
        memset(s, 0, sizeof *s);
    }
    json_object *o = ok();
    jsonx_add_bool(o, "known", s != NULL);
    jsonx_add_int(o, "closed", closed);
    return o;
}

static json_object *op_stats(egd_t *d)
{
    json_object *o = ok(), *arr = json_object_new_array();
    for (size_t i = 0; i < EGD_SANDBOXES_MAX; i++) {
        egd_sandbox_t *s = &d->sbx[i];
        if (!s->used)
            continue;
        char a[48];
        egd_addr_format(&s->addr, a, sizeof a);
        json_object *e = json_object_new_object();
        jsonx_add_str(e, "sandbox", s->id);
        jsonx_add_str(e, "tenant", s->tenant);
        jsonx_add_str(e, "addr", a);
        jsonx_add_int(e, "tcp_allowed", (int64_t)s->n.tcp_allowed);
        jsonx_add_int(e, "tcp_refused", (int64_t)s->n.tcp_refused);
        jsonx_add_int(e, "dns_allowed", (int64_t)s->n.dns_allowed);
        jsonx_add_int(e, "dns_refused", (int64_t)s->n.dns_refused);
        jsonx_add_int(e, "udp_allowed", (int64_t)s->n.udp_allowed);
        jsonx_add_int(e, "udp_refused", (int64_t)s->n.udp_refused);
        jsonx_add_int(e, "udp_flows", s->flows);
        jsonx_add_int(e, "bytes_out", (int64_t)s->n.bytes_out);
        jsonx_add_int(e, "bytes_in", (int64_t)s->n.bytes_in);
        jsonx_add_int(e, "connections", s->conns);
        jsonx_add(e, "rules", egress_rules_to_json(&s->rules));
        jsonx_add_bool(e, "secrets", s->tls != NULL); /* never their values */
        json_object_array_add(arr, e);
    }
    jsonx_add(o, "sandboxes", arr);
    jsonx_add_int(o, "connections", d->nconns);
    jsonx_add_int(o, "udp_flows", d->nflows);
    jsonx_add_int(o, "dns_pending", d->npending);
    jsonx_add_int(o, "records", (int64_t)d->rec_n);
    jsonx_add_int(o, "records_dropped", (int64_t)d->rec_dropped);
    return o;
}

static json_object *op_drain(egd_t *d, json_object *req)
{
    int64_t max = 1000;
    jsonx_get_int(req, "max", &max);
    if (max < 1 || max > EGD_RECORDS_MAX)
        max = EGD_RECORDS_MAX;
    json_object *o = ok(), *arr = json_object_new_array();
    for (int64_t k = 0; k < max && d->rec_n > 0; k++) {
        egd_record_t *r = &d->records[d->rec_head];
        json_object *e = json_object_new_object();
        jsonx_add_int(e, "at_ms", r->at_ms);
        jsonx_add_str(e, "sandbox", r->sandbox);
        jsonx_add_str(e, "tenant", r->tenant);
        jsonx_add_str(e, "kind", r->kind);
        jsonx_add_str(e, "name", r->name);
        if (r->addr[0])
            jsonx_add_str(e, "addr", r->addr);
        jsonx_add_int(e, strcmp(r->kind, "dns") == 0 ? "qtype" : "port", r->port);
        jsonx_add_str(e, "verdict", r->allowed ? "allowed" : "refused");
        jsonx_add_str(e, "why", r->why);
        if (strcmp(r->kind, "dns") != 0 && r->allowed) {
            jsonx_add_int(e, "bytes_out", (int64_t)r->bytes_out);
            jsonx_add_int(e, "bytes_in", (int64_t)r->bytes_in);
        }
        json_object_array_add(arr, e);
        d->rec_head = (d->rec_head + 1) % EGD_RECORDS_MAX;
        d->rec_n--;
    }
    jsonx_add(o, "records", arr);
    jsonx_add_int(o, "dropped", (int64_t)d->rec_dropped);
    d->rec_dropped = 0;
    return o;
}

static void ctl_close(egd_t *d, struct bufferevent *bev)
{
    for (size_t i = 0; i < sizeof d->ctl_clients / sizeof d->ctl_clients[0]; i++)
        if (d->ctl_clients[i] == bev)
            d->ctl_clients[i] = NULL;
    bufferevent_free(bev);
}

static void ctl_read(struct bufferevent *bev, void *arg)
{
    egd_t *d = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    for (;;) {
        size_t n = 0;
        char *line = evbuffer_readln(in, &n, EVBUFFER_EOL_LF);
        if (!line) {
            if (evbuffer_get_length(in) > CONTROL_LINE_MAX)
                ctl_close(d, bev); /* not a client of ours */
            return;
        }
        json_object *req = NULL, *resp;
        if (jsonx_parse(line, n, &req, NULL) < 0 || !json_object_is_type(req, json_type_object)) {
            resp = fail("a JSON object per line", NULL);
        } else {
            const char *op = jsonx_get_str(req, "op");
            resp = !op                         ? fail("op: set, drop, stats or drain", NULL)
                   : strcmp(op, "set") == 0    ? op_set(d, req)
                   : strcmp(op, "drop") == 0   ? op_drop(d, req)
                   : strcmp(op, "stats") == 0  ? op_stats(d)
                   : strcmp(op, "drain") == 0  ? op_drain(d, req)
                                               : fail("op %s: set, drop, stats or drain", op);
        }
        json_object_put(req);
        free(line);
        const char *text = json_object_to_json_string_ext(resp, JSON_C_TO_STRING_PLAIN);
        evbuffer_add_printf(bufferevent_get_output(bev), "%s\n", text);
        json_object_put(resp);
    }
}

static void ctl_event(struct bufferevent *bev, short what, void *arg)
{
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        ctl_close(arg, bev);
}

static void ctl_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
    (void)l, (void)sa, (void)salen;
    egd_t *d = arg;
    size_t slot = 0, nslots = sizeof d->ctl_clients / sizeof d->ctl_clients[0];
    while (slot < nslots && d->ctl_clients[slot])
        slot++;
    struct bufferevent *bev = slot < nslots ? bufferevent_socket_new(d->base, fd, BEV_OPT_CLOSE_ON_FREE) : NULL;
    if (!bev) { /* the worker holds one connection; more are not ours */
        evutil_closesocket(fd);
        return;
    }
    d->ctl_clients[slot] = bev;
    bufferevent_setcb(bev, ctl_read, NULL, ctl_event, d);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
}

int egd_control_start(egd_t *d, const char *path, char *err, size_t errlen)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    size_t pl = strlen(path);
    if (pl >= sizeof a.sun_path) {
        snprintf(err, errlen, "control socket path too long: %s", path);
        return -1;
    }
    memcpy(a.sun_path, path, pl + 1);
    unlink(path);
    mode_t old = umask(077);
    d->ctl = evconnlistener_new_bind(d->base, ctl_accept, d, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 16,
                                     (struct sockaddr *)&a, (int)sizeof a);
    umask(old);
    if (!d->ctl || chmod(path, 0600) != 0) {
        snprintf(err, errlen, "listen on %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

void egd_control_stop(egd_t *d)
{
    for (size_t i = 0; i < sizeof d->ctl_clients / sizeof d->ctl_clients[0]; i++)
        if (d->ctl_clients[i])
            ctl_close(d, d->ctl_clients[i]);
    if (d->ctl)
        evconnlistener_free(d->ctl);
}
