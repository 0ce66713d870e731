/*
 * stress/progress.c - see progress.h.  Drawn with "\r\033[K" (carriage
 * return, erase to end of line), which every terminal emulator understands.
 */
#include "stress/progress.h"

#include <stdio.h>

#include "stress/util.h"

void prog_init(prog *p, bool want)
{
	p->enabled = want && su_is_tty();
	p->drawn = false;
	p->last_ns = 0;
}

bool prog_due(const prog *p)
{
	return p->enabled && su_now_ns() - p->last_ns >= PROG_PERIOD_MS * 1000000ull;
}

void prog_update(prog *p, const char *line)
{
	if (!p->enabled)
		return;
	p->last_ns = su_now_ns();
	fprintf(stderr, "\r\033[K%s", line);
	fflush(stderr);
	p->drawn = true;
}

void prog_done(prog *p)
{
	if (p->enabled && p->drawn) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
	}
	p->drawn = false;
}
