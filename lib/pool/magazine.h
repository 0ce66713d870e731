/*
 * lib/pool/magazine.h - the magazine protocol: a thread's cache of free blocks,
 * entered by its owner with plain stores and drained by starving threads.
 *
 * Included by lib/pool/pool_internal.h, since it needs struct kvp_pool.
 * Include that header, not this one.  The drain itself is in
 * lib/pool/magazine.c.
 *
 * Protocol (one magazine per stream per slot; struct kvpi_mag in lib/pool/tslot.h):
 *
 *   in_call   written only by the slot's thread.  It is 1 while the thread
 *             is inside a block-path call that may touch the magazine,
 *             else 0.
 *   claimed   taken with a CAS, 0 -> 1, by a drainer (or the exiting
 *             owner), among threads that are not the magazine's owner.
 *   starving  per stream, in the pool.  Every drainer raises it (seq_cst)
 *             for the whole drain.
 *
 * The owner enters by storing in_call = 1 and then loading starving.  If
 * starving is not 0, the owner stores in_call = 0 and leaves the magazine
 * alone; the global stack serves it.
 *
 * A drainer raises starving and issues the heavy barrier.  That barrier is
 * membarrier in asym mode, and nothing in the seq_cst fallback (see
 * kvpi_light_store below).  Then it loads in_call of each magazine.  At 0
 * it claims the magazine and empties it into the global stack.  At 1 it
 * skips the magazine or waits for 0.
 *
 * Why the owner and a drainer are never inside the same magazine (the
 * Dekker argument):
 *   - an owner that loaded starving == 0 has its in_call == 1 seen by every
 *     drainer that raised starving before;
 *   - an owner that entered after a drainer's barrier sees starving != 0.
 * Drainers exclude each other with 'claimed'.  So take one pass that waited
 * for every in_call == 1.  After it, each free block of the stream is on
 * the global stack, or in transit in a call about to push it there.  In
 * asym mode the owner never executes a locked instruction for its
 * magazine.
 *
 * The same asymmetric Dekker pair guards two more things: the owner op
 * against a bias revoker (lib/pool/owner.h), and a raw op against a
 * raw-bias revoker (lib/pool/bias.c).  kvpi_light_store is its
 * frequent side.
 *
 * Synchronization:
 *
 *   function              who                          waits
 *   --------------------  ---------------------------  ----------------------
 *   kvpi_mag_enter/leave  the slot's thread            never (starving: it
 *   kvpi_mag_pop/push                                  leaves the magazine)
 *   kvpi_mag_flush_all    a holder (owner inside, or   never
 *                         a claimer)
 *   kvpi_drain_magazines  a starving thread, starving  for owners inside a
 *                         raised                       call, other claimers
 */
#ifndef KVPOOL_LIB_POOL_MAGAZINE_H
#define KVPOOL_LIB_POOL_MAGAZINE_H

#ifndef KVPOOL_LIB_POOL_INTERNAL_H
#error "include lib/pool/pool_internal.h, which includes this header"
#endif

/*
 * The two asymmetric Dekker pairs: magazine entry against a drainer, and
 * owner op against a bias revoker.  The frequent side stores its "inside"
 * word and then loads the other side's word.  The rare side stores its
 * word, issues the heavy barrier, then loads the frequent side's word.
 * Once membarrier has failed, kvpi_heavy_barrier uses an mprotect TLB
 * shootdown instead, which gives the same every-CPU fence
 * (lib/base/barrier.c).
 *
 * asym mode.  The frequent side's store (release) and load (relaxed or
 * acquire) are plain moves on x86, with a compiler barrier between them.
 * The heavy barrier is membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED).  It
 * runs a full fence on every CPU running a thread of the process before it
 * returns.  So one of two things holds.  Either the frequent thread's store
 * had left its store buffer before the rare side's load, which then sees
 * it.  Or the frequent thread's load runs after the fence, and sees the
 * rare side's store, made before the syscall.
 *
 * fallback mode.  All four accesses are seq_cst, and the heavy barrier is
 * empty.  In the single total order of seq_cst operations, one of the two
 * stores precedes the other side's load.
 */
static inline void kvpi_light_store_m(bool asym, _Atomic uintptr_t *w, uintptr_t v)
{
	if (asym) {
		/* release (a plain store on x86 and, unlike a relaxed one, a
		 * synchronisation point for whoever reads it) + compiler
		 * barrier: the heavy side's membarrier supplies the fence. */
		atomic_store_explicit(w, v, memory_order_release);
		atomic_signal_fence(memory_order_seq_cst);
	} else {
		/* seq_cst: the store half of the symmetric Dekker pair. */
		atomic_store_explicit(w, v, memory_order_seq_cst);
	}
}

/* kvpi_light_store_m for pool @p's mode. */
static inline void kvpi_light_store(const struct kvp_pool *p, _Atomic uintptr_t *w, uintptr_t v)
{
	kvpi_light_store_m(p->asym, w, v);
}

/*
 * kvpi_mag_enter - the owner enters magazine @m of stream @si
 *
 * Returns false, leaving the magazine alone, when the stream is starving
 * (a drainer may hold the magazine).  On true the caller holds it until
 * kvpi_mag_leave.
 */
static inline bool kvpi_mag_enter(struct kvp_pool *p, struct kvpi_mag *m, int si)
{
	uint32_t st;
	/* The mode, read once: the compiler barrier in the store would make
	 * it read p->asym again. */
	bool asym = p->asym;
	kvpi_light_store_m(asym, &m->in_call, 1);
	if (asym)
		/* acquire: a drainer's release decrement of starving makes its
		 * writes to this magazine visible once we read the count it left. */
		st = atomic_load_explicit(&p->starving[si], memory_order_acquire);
	else
		/* seq_cst: the load half of the symmetric Dekker pair. */
		st = atomic_load_explicit(&p->starving[si], memory_order_seq_cst);
	if (__builtin_expect(st == 0, 1))
		return true;
	/* release: nothing touched; lets a waiting drainer go on. */
	atomic_store_explicit(&m->in_call, 0, memory_order_release);
	return false;
}

/** kvpi_mag_leave - the owner leaves its magazine */
static inline void kvpi_mag_leave(struct kvpi_mag *m)
{
	/* release: a drainer that reads 0 (acquire) sees the ids and count. */
	atomic_store_explicit(&m->in_call, 0, memory_order_release);
}

/* kvpi_mag_count - the count of a magazine the caller holds */
static inline uint32_t kvpi_mag_count(struct kvpi_mag *m)
{
	/* relaxed: we hold the magazine; the holder's release/acquire on
	 * in_call or claimed orders count between holders. */
	return atomic_load_explicit(&m->count, memory_order_relaxed);
}

/* kvpi_mag_set_count - set the count of a magazine the caller holds */
static inline void kvpi_mag_set_count(struct kvpi_mag *m, uint32_t n)
{
	/* relaxed: as in kvpi_mag_count. */
	atomic_store_explicit(&m->count, n, memory_order_relaxed);
}

/*
 * kvpi_mag_take_top - move the newest @t of the @cnt ids of held magazine
 * @m into @ids, newest first, and leave it @cnt - @t (@t <= @cnt): the
 * order a one-block take would give them in, one at a time.
 */
static inline void kvpi_mag_take_top(struct kvpi_mag *m, uint32_t cnt, kvpi_u32_alias *ids,
                                     uint32_t t)
{
	for (uint32_t i = 0; i < t; i++)
		ids[i] = m->ids[cnt - 1 - i];
	kvpi_mag_set_count(m, cnt - t);
}

/* kvpi_mag_flush_all - move every id of held magazine @m to stream @si's stack */
static inline void kvpi_mag_flush_all(struct kvp_pool *p, int si, struct kvpi_mag *m)
{
	uint32_t cnt = kvpi_mag_count(m);
	kvpi_fs_push_ids(&p->fs[si], &p->bt, m->ids, cnt);
	kvpi_mag_set_count(m, 0);
}

/** kvpi_use_magazine - whether slot @s caches free blocks */
static inline bool kvpi_use_magazine(const struct kvp_pool *p, const struct kvpi_tslot *s)
{
	return p->thread_cache != 0 && !kvpi_tslot_is_fallback(p, s);
}

/*
 * kvpi_mag_pop - take one block of stream @si from the thread's own magazine
 * into *@id; false when it is empty or the stream is starving.  Needs no
 * kvpi_use_magazine check: the fallback slot's magazines and those of a
 * pool with thread_cache 0 stay empty (nothing is ever pushed to them).
 */
static inline __attribute__((always_inline)) bool
kvpi_mag_pop(struct kvp_pool *p, struct kvpi_tslot *s, int si, uint32_t *id)
{
	struct kvpi_mag *m = &s->mag[si];
	if (!kvpi_mag_enter(p, m, si))
		return false;
	/* relaxed: we hold the magazine (see the protocol above). */
	uint32_t cnt = atomic_load_explicit(&m->count, memory_order_relaxed);
	bool hit = cnt != 0;
	if (hit) {
		*id = m->ids[cnt - 1];
		atomic_store_explicit(&m->count, cnt - 1, memory_order_relaxed);
	}
	kvpi_mag_leave(m);
	return hit;
}

/*
 * kvpi_mag_push - give block @id of stream @si to the thread's own magazine;
 * false when it is full or the stream is starving.  @s must not be the
 * fallback slot (its magazines have no room).
 */
static inline __attribute__((always_inline)) bool
kvpi_mag_push(struct kvp_pool *p, struct kvpi_tslot *s, int si, uint32_t id)
{
	struct kvpi_mag *m = &s->mag[si];
	if (!kvpi_mag_enter(p, m, si))
		return false;
	/* relaxed: we hold the magazine. */
	uint32_t cnt = atomic_load_explicit(&m->count, memory_order_relaxed);
	bool room = cnt < m->cap;
	if (room) {
		m->ids[cnt] = id;
		atomic_store_explicit(&m->count, cnt + 1, memory_order_relaxed);
	}
	kvpi_mag_leave(m);
	return room;
}

/*
 * kvpi_get_one_fast - take one block of stream @si from the thread's own
 * magazine into *@id; false when it is empty or the stream is starving
 * (then kvpi_get_blocks does the rest).
 */
static inline bool kvpi_get_one_fast(struct kvp_pool *p, struct kvpi_tslot *s, int si, uint32_t *id)
{
	return kvpi_use_magazine(p, s) && kvpi_mag_pop(p, s, si, id);
}

/*
 * kvpi_put_one_fast - give block @id of stream @si to the thread's own
 * magazine; false when it is full or the stream is starving (then
 * kvpi_put_blocks does the rest).
 */
static inline bool kvpi_put_one_fast(struct kvp_pool *p, struct kvpi_tslot *s, int si, uint32_t id)
{
	return kvpi_use_magazine(p, s) && kvpi_mag_push(p, s, si, id);
}

#endif /* KVPOOL_LIB_POOL_MAGAZINE_H */
