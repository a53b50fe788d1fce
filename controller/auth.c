/* Bearer-token authentication: look the token up by its id, compare the
 * BLAKE2b hash in constant time. */
#include "api.h"
#include "db.h"
#include "token.h"

#include <string.h>
#include <strings.h>

const char *auth_bearer(const char *header)
{
    if (!header || strncasecmp(header, "Bearer ", 7) != 0)
        return NULL;
    const char *token = header + 7;
    while (*token == ' ')
        token++;
    return token;
}

int auth_token_check(PGconn *db, const char *token, auth_info_t *ret)
{
    char id[SBX_ID_MAX], hash[72];
    if (token_parse_id(token, id) < 0)
        return SBX_EAUTH;
    int rc = store_token_find(db, id, hash, ret);
    if (rc == SBX_EDB)
        return rc;
    /* Unknown, revoked, expired or wrong secret: one answer for all. */
    return rc < 0 || !token_verify(token, hash) ? SBX_EAUTH : 0;
}

int auth_request(req_t *rq)
{
    const char *token = auth_bearer(http_header(rq, "Authorization"));
    if (!token) {
        http_reply_error(rq, API_UNAUTHORIZED, "missing bearer token (Authorization: Bearer TOKEN)");
        return SBX_EAUTH;
    }
    char id[SBX_ID_MAX];
    if (token_parse_id(token, id) < 0) {
        http_reply_error(rq, API_UNAUTHORIZED, "invalid token");
        return SBX_EAUTH;
    }
    int rc = auth_token_check(rq->db, token, &rq->auth);
    if (rc == SBX_EDB) {
        http_reply_error(rq, API_UNAVAILABLE, "database unavailable: %s", db_last_error());
        return rc;
    }
    if (rc < 0) {
        http_reply_error(rq, API_UNAUTHORIZED, "invalid, revoked or expired token");
        return SBX_EAUTH;
    }
    return 0;
}

const char *auth_scope(const req_t *rq)
{
    return rq->auth.role == ROLE_ADMIN ? NULL : rq->auth.tenant_id;
}
