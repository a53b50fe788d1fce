/* Bearer-token authentication: look the token up by its id, compare the
 * BLAKE2b hash in constant time. */
#include "api.h"
#include "db.h"
#include "token.h"

#include <string.h>
#include <strings.h>

int auth_request(req_t *rq)
{
    const char *h = http_header(rq, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) {
        http_reply_error(rq, API_UNAUTHORIZED, "missing bearer token (Authorization: Bearer TOKEN)");
        return SBX_EAUTH;
    }
    const char *token = h + 7;
    while (*token == ' ')
        token++;
    char id[SBX_ID_MAX], hash[72];
    if (token_parse_id(token, id) < 0) {
        http_reply_error(rq, API_UNAUTHORIZED, "invalid token");
        return SBX_EAUTH;
    }
    int rc = store_token_find(rq->db, id, hash, &rq->auth);
    if (rc == SBX_EDB) {
        http_reply_error(rq, API_UNAVAILABLE, "database unavailable: %s", db_last_error());
        return rc;
    }
    if (rc < 0 || !token_verify(token, hash)) {
        /* Unknown, revoked, expired or wrong secret: one answer for all. */
        http_reply_error(rq, API_UNAUTHORIZED, "invalid, revoked or expired token");
        return SBX_EAUTH;
    }
    return 0;
}

const char *auth_scope(const req_t *rq)
{
    return rq->auth.role == ROLE_ADMIN ? NULL : rq->auth.tenant_id;
}
