/*
 * lib/remote/remote_queue.c - the bounded write queue between publishers and the writer.
 *
 * Dmitry Vyukov's bounded ring: each cell carries a sequence number that
 * says whether it is free for the producer at position pos (seq == pos) or
 * full for the consumer (seq == pos + 1).  A producer claims a position
 * with one CAS on tail, copies its block's rows into the cell's own buffer
 * (made at init, so nothing is allocated on the way) and commits; it never
 * waits, and a full ring is a plain "no" (the caller counts the drop).
 * There is one consumer, the writer thread: it peeks at filled cells in
 * order, sends them, and releases them, so head needs no CAS.  The tail
 * position doubles as the count of records ever claimed.
 */
#include "lib/remote/remote_internal.h"

#include <stdlib.h>

int kvpi_remote_queue_init(struct kvpi_remote_queue *q, uint32_t cap, size_t value_cap)
{
	uint64_t n = 2;
	while (n < cap)
		n <<= 1;
	q->cells = calloc(n, sizeof *q->cells);
	q->mem = malloc(n * value_cap);
	if (q->cells == NULL || q->mem == NULL) {
		kvpi_remote_queue_free(q);
		return KVP_ENOMEM;
	}
	for (uint64_t i = 0; i < n; i++) {
		atomic_init(&q->cells[i].seq, i);
		q->cells[i].buf = q->mem + i * value_cap;
	}
	q->value_cap = value_cap;
	q->mask = n - 1;
	atomic_init(&q->tail, 0);
	atomic_init(&q->head, 0);
	return KVP_OK;
}

void kvpi_remote_queue_free(struct kvpi_remote_queue *q)
{
	free(q->cells);
	free(q->mem);
	q->cells = NULL;
	q->mem = NULL;
}

struct kvpi_remote_cell *kvpi_remote_queue_claim(struct kvpi_remote_queue *q, uint64_t *pos_out)
{
	/* relaxed: only a hint; the CAS below decides, and the cell's seq orders the data */
	uint64_t pos = atomic_load_explicit(&q->tail, memory_order_relaxed);
	for (;;) {
		struct kvpi_remote_cell *c = &q->cells[pos & q->mask];
		/* acquire: pairs with the consumer's release that freed the cell */
		uint64_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
		int64_t d = (int64_t)(seq - pos);
		if (d == 0) {
			/* relaxed: claiming the position orders nothing; seq publishes the cell */
			if (atomic_compare_exchange_weak_explicit(&q->tail, &pos, pos + 1,
			                                          memory_order_relaxed,
			                                          memory_order_relaxed)) {
				*pos_out = pos;
				return c;
			}
		} else if (d < 0) {
			return NULL; /* full: the cell still holds a record a lap behind */
		} else {
			pos = atomic_load_explicit(&q->tail, memory_order_relaxed);
		}
	}
}

void kvpi_remote_queue_commit(struct kvpi_remote_cell *c, uint64_t pos)
{
	/* release: the record and rows are written before the consumer sees the cell full */
	atomic_store_explicit(&c->seq, pos + 1, memory_order_release);
}

struct kvpi_remote_cell *kvpi_remote_queue_peek(struct kvpi_remote_queue *q, uint64_t i)
{
	/* relaxed: head is written by this thread only */
	uint64_t pos = atomic_load_explicit(&q->head, memory_order_relaxed) + i;
	struct kvpi_remote_cell *c = &q->cells[pos & q->mask];
	/* acquire: pairs with the producer's commit; the record is complete */
	return atomic_load_explicit(&c->seq, memory_order_acquire) == pos + 1 ? c : NULL;
}

void kvpi_remote_queue_release(struct kvpi_remote_queue *q, uint64_t n)
{
	/* relaxed: head is written by this thread only */
	uint64_t pos = atomic_load_explicit(&q->head, memory_order_relaxed);
	for (uint64_t i = 0; i < n; i++) {
		struct kvpi_remote_cell *c = &q->cells[(pos + i) & q->mask];
		/* release: the cell is read before a producer of the next lap reuses it */
		atomic_store_explicit(&c->seq, pos + i + q->mask + 1, memory_order_release);
	}
	/* relaxed: read by this thread and, as a statistic, by others */
	atomic_store_explicit(&q->head, pos + n, memory_order_relaxed);
}

uint64_t kvpi_remote_queue_depth(struct kvpi_remote_queue *q)
{
	/* relaxed: a gauge */
	uint64_t h = atomic_load_explicit(&q->head, memory_order_relaxed);
	uint64_t t = atomic_load_explicit(&q->tail, memory_order_relaxed);
	return t > h ? t - h : 0;
}
