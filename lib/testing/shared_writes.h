/*
 * lib/testing/shared_writes.h - diagnostics: which atomic writes of the
 * library land on a cache line that another thread wrote last.
 *
 * Not part of any build.  bench/shared_writes.sh compiles the library with
 * this header forced in front of every lib/ file (-include), which wraps
 * the C11 atomic writes (store, exchange, compare-exchange, fetch-add/sub/
 * or/and, the _explicit forms) so that each first notes its address.  A
 * table indexed by a hash of the line remembers the thread that wrote each
 * line last; a write by another thread counts as a transfer against its call
 * site (file:line).  At exit the sites with the most transfers are printed
 * to stderr.
 *
 * What it sees and what it does not: only atomic writes (plain stores and
 * mutexes are not wrapped; bench/mutex_handoffs.sh counts the mutexes), and
 * a transfer is "another thread wrote this line last", not "the line was
 * still in that core's cache": the count is an upper bound on the lines
 * that move between cores, useful to rank the sites.  Lines that collide in
 * the table (2^22 entries) are rare.  The bookkeeping itself is an atomic
 * exchange on a shared table, so timings under it mean nothing.
 */
#ifndef KVPOOL_LIB_TESTING_SHARED_WRITES_H
#define KVPOOL_LIB_TESTING_SHARED_WRITES_H

/* Before any system header, as the library's files that need it define it. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

struct kvpi_sw_site {
	const char *name; /* file:line */
	uint64_t writes, transfers;
	struct kvpi_sw_site *next;
	int listed;
};

/* One definition across the library's files (weak). */
__attribute__((weak)) _Atomic uint64_t kvpi_sw_last[1u << 22];
__attribute__((weak)) struct kvpi_sw_site *_Atomic kvpi_sw_sites;
__attribute__((weak)) _Atomic unsigned kvpi_sw_threads;
__attribute__((weak)) _Atomic int kvpi_sw_printed;
__attribute__((weak)) _Thread_local unsigned kvpi_sw_me;

__attribute__((weak)) int kvpi_sw_by_transfers(const void *a, const void *b)
{
	const struct kvpi_sw_site *x = *(struct kvpi_sw_site *const *)a;
	const struct kvpi_sw_site *y = *(struct kvpi_sw_site *const *)b;
	return (x->transfers < y->transfers) - (x->transfers > y->transfers);
}

/* At exit: the total, then the 25 sites with the most transfers. */
__attribute__((weak, destructor)) void kvpi_sw_report(void)
{
	struct kvpi_sw_site *v[4096];
	uint64_t w = 0, t = 0;
	int n = 0;
	if (atomic_exchange(&kvpi_sw_printed, 1))
		return;
	for (struct kvpi_sw_site *s = atomic_load(&kvpi_sw_sites); s && n < 4096; s = s->next) {
		v[n++] = s;
		w += s->writes;
		t += s->transfers;
	}
	qsort(v, (size_t)n, sizeof v[0], kvpi_sw_by_transfers);
	fprintf(stderr,
	        "shared_writes: %llu atomic writes, %llu to a line another thread wrote last\n",
	        (unsigned long long)w, (unsigned long long)t);
	for (int i = 0; i < n && i < 25; i++)
		fprintf(stderr, "shared_writes: %12llu of %12llu  %s\n",
		        (unsigned long long)v[i]->transfers, (unsigned long long)v[i]->writes,
		        v[i]->name);
}

/* Note a write to @p at site @s. */
static inline void kvpi_sw_note(const volatile void *p, struct kvpi_sw_site *s)
{
	if (!kvpi_sw_me)
		kvpi_sw_me = atomic_fetch_add(&kvpi_sw_threads, 1) % 255 + 1;
	if (!__atomic_exchange_n(&s->listed, 1, __ATOMIC_RELAXED)) {
		struct kvpi_sw_site *h = atomic_load(&kvpi_sw_sites);
		do
			s->next = h;
		while (!atomic_compare_exchange_weak(&kvpi_sw_sites, &h, s));
	}
	uint64_t line = (uint64_t)(uintptr_t)p >> 6;
	uint64_t w = line << 8 | kvpi_sw_me;
	uint64_t old = __c11_atomic_exchange(&kvpi_sw_last[(line * 0x9e3779b97f4a7c15ull) >> 42], w,
	                                     __ATOMIC_RELAXED);
	__atomic_fetch_add(&s->writes, 1, __ATOMIC_RELAXED);
	if (old >> 8 == line && (old & 255) != kvpi_sw_me)
		__atomic_fetch_add(&s->transfers, 1, __ATOMIC_RELAXED);
}

#define KVPI_SW_STR2(x) #x
#define KVPI_SW_STR(x)  KVPI_SW_STR2(x)
#define KVPI_SW(o)                                                                                 \
	({                                                                                         \
		static struct kvpi_sw_site s_ = {__FILE__ ":" KVPI_SW_STR(__LINE__), 0, 0, 0, 0};  \
		kvpi_sw_note((o), &s_);                                                            \
	})

/* clang's <stdatomic.h> names; stdatomic.h is included above, so a later
 * include of it is a no-op and these stay. */
#undef atomic_store_explicit
#define atomic_store_explicit(o, v, m) (KVPI_SW(o), __c11_atomic_store((o), (v), (m)))
#undef atomic_exchange_explicit
#define atomic_exchange_explicit(o, v, m) (KVPI_SW(o), __c11_atomic_exchange((o), (v), (m)))
#undef atomic_compare_exchange_strong_explicit
#define atomic_compare_exchange_strong_explicit(o, e, d, s, f)                                     \
	(KVPI_SW(o), __c11_atomic_compare_exchange_strong((o), (e), (d), (s), (f)))
#undef atomic_compare_exchange_weak_explicit
#define atomic_compare_exchange_weak_explicit(o, e, d, s, f)                                       \
	(KVPI_SW(o), __c11_atomic_compare_exchange_weak((o), (e), (d), (s), (f)))
#undef atomic_fetch_add_explicit
#define atomic_fetch_add_explicit(o, v, m) (KVPI_SW(o), __c11_atomic_fetch_add((o), (v), (m)))
#undef atomic_fetch_sub_explicit
#define atomic_fetch_sub_explicit(o, v, m) (KVPI_SW(o), __c11_atomic_fetch_sub((o), (v), (m)))
#undef atomic_fetch_or_explicit
#define atomic_fetch_or_explicit(o, v, m) (KVPI_SW(o), __c11_atomic_fetch_or((o), (v), (m)))
#undef atomic_fetch_and_explicit
#define atomic_fetch_and_explicit(o, v, m) (KVPI_SW(o), __c11_atomic_fetch_and((o), (v), (m)))

#endif /* KVPOOL_LIB_TESTING_SHARED_WRITES_H */
