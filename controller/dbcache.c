/* Prepared-statement cache: an open-addressing table of SQL texts (FNV-1a,
 * linear probing, deletion by backward shift), at most half full. */
#include "dbcache.h"
#include "errors.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot {
    char *sql; /* NULL: empty */
    uint64_t hash;
    char name[DBCACHE_NAME_MAX];
} slot_t;

struct dbcache {
    slot_t *slots;
    size_t mask, count, cap;
    unsigned long long next_id; /* never reused, even across a clear */
};

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

int dbcache_new(size_t cap, dbcache_t **ret)
{
    if (cap < 1 || cap > 65536)
        return SBX_EINVAL;
    size_t n = 2;
    while (n < 2 * cap)
        n *= 2;
    dbcache_t *c = calloc(1, sizeof *c);
    slot_t *slots = c ? calloc(n, sizeof *slots) : NULL;
    if (!slots) {
        free(c);
        return SBX_ENOMEM;
    }
    c->slots = slots;
    c->mask = n - 1;
    c->cap = cap;
    *ret = c;
    return 0;
}

void dbcache_free(dbcache_t *c)
{
    if (!c)
        return;
    dbcache_clear(c);
    free(c->slots);
    free(c);
}

/* The slot holding sql, or the empty slot where it would go. */
static slot_t *slot_for(const dbcache_t *c, const char *sql, uint64_t h)
{
    for (size_t i = h & c->mask;; i = (i + 1) & c->mask) {
        slot_t *s = &c->slots[i];
        if (!s->sql || (s->hash == h && strcmp(s->sql, sql) == 0))
            return s;
    }
}

const char *dbcache_find(const dbcache_t *c, const char *sql)
{
    if (!c || !sql)
        return NULL;
    slot_t *s = slot_for(c, sql, fnv1a(sql));
    return s->sql ? s->name : NULL;
}

int dbcache_add(dbcache_t *c, const char *sql, const char **ret_name)
{
    uint64_t h = fnv1a(sql);
    slot_t *s = slot_for(c, sql, h);
    if (s->sql)
        return SBX_ECONFLICT;
    if (c->count >= c->cap)
        return SBX_ETOOBIG;
    char *copy = strdup(sql);
    if (!copy)
        return SBX_ENOMEM;
    s->sql = copy;
    s->hash = h;
    snprintf(s->name, sizeof s->name, "sbx_%llu", ++c->next_id);
    c->count++;
    *ret_name = s->name;
    return 0;
}

void dbcache_remove(dbcache_t *c, const char *sql)
{
    if (!c || !sql)
        return;
    slot_t *s = slot_for(c, sql, fnv1a(sql));
    if (!s->sql)
        return;
    free(s->sql);
    s->sql = NULL;
    c->count--;
    /* Backward shift: move up every later entry of the run that the hole
     * would cut off from its home slot. */
    size_t hole = (size_t)(s - c->slots);
    for (size_t i = (hole + 1) & c->mask; c->slots[i].sql; i = (i + 1) & c->mask) {
        size_t home = c->slots[i].hash & c->mask;
        /* i's entry may stay when its home lies cyclically in (hole, i]. */
        bool stays = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
        if (stays)
            continue;
        c->slots[hole] = c->slots[i];
        c->slots[i].sql = NULL;
        hole = i;
    }
}

void dbcache_clear(dbcache_t *c)
{
    if (!c)
        return;
    for (size_t i = 0; i <= c->mask; i++) {
        free(c->slots[i].sql);
        c->slots[i].sql = NULL;
    }
    c->count = 0;
}

size_t dbcache_count(const dbcache_t *c) { return c ? c->count : 0; }
