/*
 * lib/prefix/prefix_owner.c - owners in prefix mode, on the pool's owner table.
 *
 * A prefix pool keeps its owners in the pool's own table (lib/pool/owner.h):
 * the same shards, records, per-thread record caches and id arrays
 * (lib/pool/idarray.h) as a plain pool, so registering, releasing and
 * listing an owner are the plain pool's calls in both modes.  What differs
 * is that a block may be held by several owners at once, so its position
 * in an owner's array cannot live in the block: the position in its latest
 * holder's array is kept as a hint beside the block (pside.pos_hint), and
 * checked against the array.  Dropping a hold is O(1) in the common case
 * of one holder, and otherwise a scan of the owner's array.  Prefix
 * records are never biased: every call holds the owner's shard mutex.
 */
#include "lib/prefix/prefix_internal.h"

struct kvpi_orec *kvpi_pfx_oget(struct kvp_pool *p, struct kvpi_tslot *s, struct kvpi_oshard *sh,
                                kvp_owner key, bool *made)
{
	struct kvpi_orec *r = kvpi_oshard_find(sh, key);
	*made = r == NULL;
	return r ? r : kvpi_oshard_insert(&p->owners, sh, &s->recs, key);
}

void kvpi_pfx_oremove(struct kvp_pool *p, struct kvpi_tslot *s, struct kvpi_oshard *sh,
                      struct kvpi_orec *r)
{
	kvpi_oshard_remove(&p->owners, sh, &s->recs, r);
}

/* Compaction's callback: the hint follows the id. */
static void moved(void *pf, uint32_t id, uint32_t pos)
{
	kvpi_pfx_set_hint(pf, id, pos);
}

int kvpi_pfx_oreserve(struct kvp_pool *p, struct kvpi_tslot *s, struct kvpi_orec *r, uint32_t extra)
{
	struct kvpi_idsrc src = kvpi_owners_idsrc(&p->owners, &s->recs);
	return kvpi_idarr_reserve(&r->ids, extra, moved, p->prefix, &src);
}

int64_t kvpi_pfx_ofind_pos(struct kvpi_prefix *pf, const struct kvpi_orec *r, uint32_t id)
{
	/* relaxed: a hint, checked against the array. */
	uint32_t h = atomic_load_explicit(&kvpi_pfx_side(pf, id)->pos_hint, memory_order_relaxed);
	if (h < r->ids.len && r->ids.ids[h] == id)
		return h;
	for (uint32_t i = r->ids.len; i-- > 0;)
		if (r->ids.ids[i] == id)
			return i;
	return -1;
}
