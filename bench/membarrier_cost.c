/*
 * bench/membarrier_cost.c - what the heavy barrier costs on this machine.
 *
 *   bazel run //bench:membarrier_cost [-- --rounds N]
 *
 * The pool's drain (a thread short of blocks empties the other threads'
 * magazines) and the revocation of an owner's bias each start with one
 * membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED): the kernel interrupts every
 * CPU that runs a thread of the process and waits for each.  Its cost
 * depends on what the other threads are doing, so it is timed here in three
 * cases, N calls each, wall clock, percentiles of single calls:
 *   - alone:    no other thread in the process;
 *   - busy:     one other thread spinning (a server's worker mid-request):
 *               every call interrupts its CPU;
 *   - sleeping: one other thread sleeping 50 us at a time (often off-CPU).
 * On a virtual machine an interrupt to another virtual CPU goes through the
 * hypervisor; docs/BENCHMARKS.md ("Draining near exhaustion") puts the
 * figures beside the replay's allocate latency.  Without membarrier (old
 * kernel, seccomp) it says so and exits 0.
 */
#define _GNU_SOURCE
#include <linux/membarrier.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "bench/clock.h"

enum { ALONE, BUSY, SLEEPING };
static const char *const case_name[] = {"alone", "busy", "sleeping"};

static atomic_int stop;

static long membarrier(int cmd)
{
	return syscall(SYS_membarrier, cmd, 0, 0);
}

/* The other thread: spin, or sleep 50 us at a time, until told to stop. */
static void *other(void *arg)
{
	int how = *(int *)arg;
	/* relaxed: a flag polled until it turns; nothing else is published. */
	while (!atomic_load_explicit(&stop, memory_order_relaxed))
		if (how == SLEEPING)
			nanosleep(&(struct timespec){0, 50000}, NULL);
	return NULL;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Time @n barriers with the other thread doing @how; print the percentiles. */
static int run_case(int how, size_t n, double *ns)
{
	pthread_t th;
	atomic_store_explicit(&stop, 0, memory_order_relaxed);
	if (how != ALONE && pthread_create(&th, NULL, other, &how) != 0) {
		fprintf(stderr, "membarrier_cost: cannot start a thread\n");
		return -1;
	}
	usleep(10000); /* let it reach its loop */
	for (size_t i = 0; i < n; i++) {
		double t0 = kvb_wall_seconds();
		if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0) {
			fprintf(stderr, "membarrier_cost: membarrier failed\n");
			n = i;
			break;
		}
		ns[i] = (kvb_wall_seconds() - t0) * 1e9;
	}
	atomic_store_explicit(&stop, 1, memory_order_relaxed);
	if (how != ALONE)
		pthread_join(th, NULL);
	if (n == 0)
		return -1;
	qsort(ns, n, sizeof *ns, cmp_double);
	printf("%-9s %10.0f %10.0f %10.0f %10.0f\n", case_name[how], ns[n / 2], ns[n * 99 / 100],
	       ns[n * 999 / 1000], ns[n - 1]);
	return 0;
}

int main(int argc, char **argv)
{
	size_t rounds = 20000;
	for (int i = 1; i < argc; i++) {
		char *end;
		if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
			unsigned long v = strtoul(argv[++i], &end, 10);
			if (*end != '\0' || v < 1 || v > 10000000) {
				fprintf(stderr, "membarrier_cost: --rounds takes 1..10000000\n");
				return 2;
			}
			rounds = v;
		} else {
			fprintf(stderr, "usage: membarrier_cost [--rounds N]\n");
			return 2;
		}
	}
	long cmds = membarrier(MEMBARRIER_CMD_QUERY);
	if (cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) ||
	    membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) != 0) {
		printf("membarrier_cost: no MEMBARRIER_CMD_PRIVATE_EXPEDITED here "
		       "(kvpool runs its seq_cst fallback)\n");
		return 0;
	}
	double *ns = malloc(rounds * sizeof *ns);
	if (ns == NULL) {
		fprintf(stderr, "membarrier_cost: out of memory\n");
		return 1;
	}
	printf("membarrier(PRIVATE_EXPEDITED), %zu calls a case, wall ns a call; %ld CPUs online\n",
	       rounds, sysconf(_SC_NPROCESSORS_ONLN));
	printf("%-9s %10s %10s %10s %10s\n", "other", "p50", "p99", "p99.9", "max");
	int rc = 0;
	for (int how = ALONE; how <= SLEEPING && rc == 0; how++)
		rc = run_case(how, rounds, ns);
	free(ns);
	return rc == 0 ? 0 : 1;
}
