/*
 * The identity of a cost table: which file, which schema, how many samples, and a
 * fingerprint of every sample, written into plan.json so that a prediction can be
 * traced to the exact table it was made with and a changed table noticed.
 */
#include "internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ---- Identity ------------------------------------------------------------------------------ */

/* 64-bit FNV-1a (Fowler, Noll, Vo; http://www.isthe.com/chongo/tech/comp/fnv/). */
#define FNV_OFFSET 14695981039346656037ull
#define FNV_PRIME 1099511628211ull

static uint64_t fnv_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * FNV_PRIME;
    return h;
}

static uint64_t fnv_str(uint64_t h, const char *s)
{
    return fnv_bytes(h, s, strlen(s) + 1); /* the NUL separates fields */
}

/* Integers and doubles as 8 little-endian bytes, whatever the host order. */
static uint64_t fnv_u64(uint64_t h, uint64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    return fnv_bytes(h, b, 8);
}

static uint64_t fnv_double(uint64_t h, double d)
{
    uint64_t v;
    memcpy(&v, &d, sizeof v);
    return fnv_u64(h, v);
}

/* The samples in index order, which is total over every hashed field, so the hash
 * depends on the samples and not on the order they were inserted in. Where a sample
 * came from and when are not hashed: they do not change any lookup. */
void pt_costdb_identity(const pt_costdb *db, pt_costdb_id *out)
{
    memset(out, 0, sizeof *out);
    uint64_t h = FNV_OFFSET;
    if (db) {
        snprintf(out->path, sizeof out->path, "%s", db->path);
        out->schema_version = db->schema_version;
        out->kernel_samples = (int64_t)db->nk;
        out->coll_samples = (int64_t)db->nc;
        h = fnv_u64(h, db->nk);
        for (size_t i = 0; i < db->nk; i++) {
            const pt_ksample *s = &db->ks[db->k_by_key[i]];
            h = fnv_str(fnv_str(h, s->device), s->key);
            h = fnv_u64(h, (uint64_t)s->dtype);
            h = fnv_double(fnv_double(fnv_double(h, s->flops), s->bytes), s->time_s);
        }
        h = fnv_u64(h, db->nc);
        for (size_t i = 0; i < db->nc; i++) {
            const pt_csample *s = &db->cs[db->c_by_cfg[i]];
            h = fnv_u64(fnv_str(h, s->backend), (uint64_t)s->op);
            h = fnv_u64(fnv_u64(h, (uint64_t)s->group), (uint64_t)s->ranks_per_node);
            h = fnv_double(fnv_double(h, s->bytes), s->time_s);
        }
        /* fitted figures change what analytic lookups answer; summed row hashes do
         * not depend on the order the fits were stored in */
        uint64_t fits = 0;
        for (size_t i = 0; i < db->nfits; i++) {
            const pt_fit_row *f = &db->fits[i];
            uint64_t r = fnv_u64(fnv_str(fnv_str(FNV_OFFSET, f->target), f->cls),
                                 (uint64_t)f->what);
            fits += fnv_double(fnv_double(r, f->p1), f->p2);
        }
        if (db->nfits)
            h = fnv_u64(fnv_u64(h, db->nfits), fits);
    } else {
        out->schema_version = pt_costdb_schema_version();
    }
    snprintf(out->fingerprint, sizeof out->fingerprint, "%016" PRIx64, h);
}
