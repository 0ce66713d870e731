/*
 * stress/progress.h - a live progress line on a terminal.
 *
 * The line goes to stderr, redrawn in place ("\r" + erase) at most every
 * PROG_PERIOD_MS, and only when stderr is a terminal: logs and pipes get
 * nothing.  The caller formats the line (requests or operations done,
 * elapsed, blocks in use, rate) and calls prog_update from one thread.
 *
 * Not thread-safe: one thread drives a prog.
 */
#ifndef KVPOOL_STRESS_PROGRESS_H
#define KVPOOL_STRESS_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

#define PROG_PERIOD_MS 250

typedef struct prog {
	bool enabled;
	bool drawn;
	uint64_t last_ns;
} prog;

/** prog_init - enabled when @want and stderr is a terminal */
void prog_init(prog *p, bool want);

/** prog_due - whether a redraw is due now (cheap; call before formatting) */
bool prog_due(const prog *p);

/** prog_update - redraw the line with @line (no newline) */
void prog_update(prog *p, const char *line);

/** prog_done - erase the line, so the summary starts on a clean line */
void prog_done(prog *p);

#endif /* KVPOOL_STRESS_PROGRESS_H */
