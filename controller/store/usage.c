/* The live counters (migration 0014): folding their log, and checking them
 * against a recount. */
#include "store_int.h"

int store_usage_fold(PGconn *c, int *ret_folded)
{
    long long n = 0;
    PGresult *r = db_exec(c, "SELECT sandbox_usage_fold()", 0, NULL);
    if (!r)
        return SBX_EDB;
    n = db_get_ll(r, 0, 0);
    PQclear(r);
    *ret_folded += (int)(n > INT32_MAX ? INT32_MAX : n);
    return 0;
}

int store_usage_check(PGconn *c, long long *ret_corrected)
{
    *ret_corrected = 0;
    PGresult *r = db_exec(c, "SELECT sandbox_usage_check()", 0, NULL);
    if (!r)
        return SBX_EDB;
    *ret_corrected = db_get_ll(r, 0, 0);
    PQclear(r);
    return 0;
}
