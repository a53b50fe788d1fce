/* GET /v1/images: the images the ready workers have (each with the workers
 * and the isolation classes that can run it), as far as the caller's tenant
 * policy allows them; what a create may name without a pull. */
#include "api.h"
#include "db.h"
#include "imageref.h"
#include "jsonx.h"
#include "limits.h"

#include <stdio.h>
#include <string.h>

/* What a create of image would meet in policy_check_spec (api_sandboxes.c):
 * the server's registries rule, the tenant's registries, its images. */
static bool image_allowed(const controller_t *ctl, const policy_t *p, const char *image)
{
    char reg[SBX_MAX_REGISTRY_BYTES + 1] = "", why[400];
    return imageref_check(cfg_str(&ctl->cfg, CFG_IMAGE_REGISTRIES), image, why, sizeof why) == 0 &&
           imageref_registry(image, reg, sizeof reg) == 0 && policy_registry_allowed(p, reg) &&
           policy_image_allowed(p, image);
}

void api_images_list(req_t *rq)
{
    controller_t *ctl = rq->ctl;
    const char *tenant = http_query(rq, "tenant");
    bool admin = rq->auth.role == ROLE_ADMIN;
    if (!admin && tenant && strcmp(tenant, rq->auth.tenant) != 0) {
        http_reply_error(rq, API_FORBIDDEN, "this token belongs to tenant %s and cannot list the images of tenant %s",
                         rq->auth.tenant, tenant);
        return;
    }
    /* A member sees what its policy allows; an admin everything, or what
     * the tenant it names may use. */
    if (!admin)
        tenant = rq->auth.tenant;
    policy_t policy;
    policy_init(&policy);
    if (tenant) {
        char tenant_id[SBX_ID_MAX];
        int rc = store_tenant_policy_by_name(rq->db, tenant, tenant_id, &policy);
        if (rc < 0) {
            policy_release(&policy);
            if (rc == SBX_ENOTFOUND)
                http_reply_error(rq, API_NOT_FOUND, "no tenant %s", tenant);
            else
                http_reply_error(rq, API_UNAVAILABLE, "database unavailable: %s", db_last_error());
            return;
        }
    }
    json_object *rows = NULL;
    api_error_t err;
    if (store_images_list(rq->db, &rows, &err) < 0) {
        policy_release(&policy);
        http_reply_api_error(rq, &err);
        return;
    }
    json_object *out = json_object_new_array();
    size_t hidden = 0;
    for (size_t i = 0; i < json_object_array_length(rows); i++) {
        json_object *img = json_object_array_get_idx(rows, i);
        const char *name = jsonx_get_str(img, "name");
        if (tenant && (!name || !image_allowed(ctl, &policy, name))) {
            hidden++;
            continue;
        }
        json_object_array_add(out, json_object_get(img));
    }
    json_object_put(rows);
    const char *def = cfg_str(&ctl->cfg, CFG_DEFAULT_IMAGE);
    json_object *resp = json_object_new_object();
    jsonx_add(resp, "images", out);
    if (def && *def && (!tenant || image_allowed(ctl, &policy, def)))
        jsonx_add_str(resp, "default_image", def);
    if (tenant) {
        jsonx_add_str(resp, "tenant", tenant);
        /* the patterns a create's image must match (absent: any) */
        if (policy.images_set) {
            json_object *pats = json_object_new_array();
            for (size_t i = 0; i < policy.n_images; i++)
                json_object_array_add(pats, json_object_new_string(policy.images[i]));
            jsonx_add(resp, "allowed", pats);
        }
        jsonx_add_int(resp, "not_allowed", (int64_t)hidden);
    }
    policy_release(&policy);
    http_reply_json(rq, 200, resp);
}
