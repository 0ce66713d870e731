/*
 * bench/line_transfer.c - what this machine charges for sharing a cache line,
 * and how fast each of its CPUs runs the same loop.
 *
 *   bazel run //bench:line_transfer [-- --rounds N]
 *
 * Two figures that bound every multi-thread ratio in docs/BENCHMARKS.md:
 *   - for each pair of CPUs the process may run on, the one-way cost of
 *     moving a written cache line from one to the other: two threads pinned
 *     there take turns incrementing one word (each waits to see the other's
 *     increment), so each turn is one transfer of the line;
 *   - for each CPU, a fixed dependent integer loop (shift, xor, multiply)
 *     pinned there, in ns an iteration.  On a shared virtual machine the
 *     CPUs need not be equal, and a one-thread figure then depends on which
 *     CPU the thread ran on.
 * The transfer is timed on the wall clock, the loop on the thread's CPU
 * clock; the machine should be otherwise idle.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/clock.h"

static _Atomic uint64_t turn_word __attribute__((aligned(64)));

struct side {
	int cpu;
	uint64_t parity; /* the turns this side takes: 0 or 1 */
	uint64_t rounds;
	int pinned;
};

static int pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

/* Take every other turn: wait for the word to have our parity, then add 1. */
static void *ping(void *arg)
{
	struct side *s = arg;
	s->pinned = pin(s->cpu);
	for (uint64_t i = 0; i < s->rounds; i++) {
		uint64_t v;
		/* acquire: the other side's increment, then ours after it. */
		while (((v = atomic_load_explicit(&turn_word, memory_order_acquire)) & 1) !=
		       s->parity)
			;
		atomic_store_explicit(&turn_word, v + 1, memory_order_release);
	}
	return NULL;
}

/* One-way ns per transfer between @a and @b, or a negative value when a
 * thread could not be made or pinned. */
static double transfer_ns(int a, int b, uint64_t rounds)
{
	struct side sa = {a, 0, rounds, 0}, sb = {b, 1, rounds, 0};
	pthread_t ta, tb;
	atomic_store(&turn_word, 0);
	double t0 = kvb_wall_seconds();
	if (pthread_create(&ta, NULL, ping, &sa) != 0)
		return -1;
	if (pthread_create(&tb, NULL, ping, &sb) != 0) {
		/* Let the first side finish alone: hand it every other turn. */
		sb.pinned = 1;
		for (uint64_t i = 0; i < rounds; i++) {
			uint64_t v;
			while (((v = atomic_load(&turn_word)) & 1) != 1)
				;
			atomic_store(&turn_word, v + 1);
		}
		pthread_join(ta, NULL);
		return -1;
	}
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	double t = kvb_wall_seconds() - t0;
	if (!sa.pinned || !sb.pinned)
		return -1;
	return t * 1e9 / (double)(2 * rounds);
}

struct loop_arg {
	int cpu;
	uint64_t iters;
	double ns;
};

/* A dependent chain of shifts, xors and multiplies: the CPU's own speed, no
 * memory, and nothing a compiler can fold into fewer steps. */
static void *spin_loop(void *arg)
{
	struct loop_arg *l = arg;
	if (!pin(l->cpu)) {
		l->ns = -1;
		return NULL;
	}
	volatile uint64_t sink;
	uint64_t x = 1;
	double t0 = kvb_cpu_seconds();
	for (uint64_t i = 0; i < l->iters; i++)
		x = (x ^ (x >> 29)) * 6364136223846793005ull; /* not foldable */
	l->ns = (kvb_cpu_seconds() - t0) * 1e9 / (double)l->iters;
	sink = x;
	(void)sink;
	return NULL;
}

static void usage(const char *me)
{
	fprintf(stderr, "usage: %s [--rounds N]   (N: turns per CPU pair, default 1000000)\n", me);
}

int main(int argc, char **argv)
{
	uint64_t rounds = 1000000;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
			char *end;
			unsigned long long v = strtoull(argv[++i], &end, 10);
			if (*end || v == 0 || v > (1ull << 40)) {
				usage(argv[0]);
				return 2;
			}
			rounds = v;
		} else {
			usage(argv[0]);
			return 2;
		}
	}
	cpu_set_t allowed;
	if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
		perror("sched_getaffinity");
		return 1;
	}
	int cpus[CPU_SETSIZE], n = 0;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &allowed))
			cpus[n++] = c;

	printf("CPUs this process may run on: %d\n\n", n);
	printf("one CPU's speed: a dependent shift-xor-multiply chain pinned there\n");
	printf("cpu   ns an iteration\n");
	for (int i = 0; i < n; i++) {
		struct loop_arg l = {cpus[i], rounds * 200, 0};
		pthread_t t;
		if (pthread_create(&t, NULL, spin_loop, &l) != 0) {
			printf("%-5d (no thread)\n", cpus[i]);
			continue;
		}
		pthread_join(t, NULL);
		if (l.ns < 0)
			printf("%-5d (could not pin)\n", cpus[i]);
		else
			printf("%-5d %.3f\n", cpus[i], l.ns);
	}

	printf("\ncache-line transfer between two CPUs: one-way ns (%llu turns)\n",
	       (unsigned long long)rounds);
	if (n < 2) {
		printf("(one CPU: no pair to measure)\n");
		return 0;
	}
	printf("from  to    ns\n");
	for (int i = 0; i < n && i < 16; i++)
		for (int j = i + 1; j < n && j < 16; j++) {
			double ns = transfer_ns(cpus[i], cpus[j], rounds);
			if (ns < 0)
				printf("%-5d %-5d (could not pin)\n", cpus[i], cpus[j]);
			else
				printf("%-5d %-5d %.1f\n", cpus[i], cpus[j], ns);
		}
	return 0;
}
