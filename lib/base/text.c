/*
 * lib/base/text.c - bounded text building and Prometheus exposition lines
 * (see text.h): the one writer behind the pool's and the buffer cache's
 * Prometheus text and the pool's report.
 */
#include "lib/base/text.h"

#include <kvpool/status.h>

#include <stdarg.h>
#include <stdio.h>

void kvpi_text_printf(struct kvpi_text *t, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	size_t room = t->len < t->cap ? t->cap - t->len : 0;
	int n = vsnprintf(room ? t->buf + t->len : NULL, room, fmt, ap);
	va_end(ap);
	if (n > 0)
		t->len += (size_t)n;
}

int kvpi_text_finish(struct kvpi_text *t, size_t *len)
{
	*len = t->len;
	if (t->len + 1 <= t->cap)
		return KVP_OK;
	if (t->cap) /* no partial text: an empty string */
		t->buf[0] = '\0';
	return KVP_ERANGE;
}

bool kvpi_prom_valid_name(const char *p)
{
	if (!p || !*p)
		return false;
	for (const char *c = p; *c; c++) {
		bool alpha =
		    (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || *c == '_' || *c == ':';
		bool digit = *c >= '0' && *c <= '9';
		if (!alpha && !(digit && c != p))
			return false;
	}
	return true;
}

void kvpi_prom_u64(struct kvpi_text *t, const char *prefix, const char *name, const char *type,
                   const char *help, uint64_t v)
{
	kvpi_text_printf(t, "# HELP %s_%s %s\n# TYPE %s_%s %s\n%s_%s %llu\n", prefix, name, help,
	                 prefix, name, type, prefix, name, (unsigned long long)v);
}

void kvpi_prom_f64(struct kvpi_text *t, const char *prefix, const char *name, const char *help,
                   double v)
{
	kvpi_text_printf(t, "# HELP %s_%s %s\n# TYPE %s_%s gauge\n%s_%s %.6f\n", prefix, name, help,
	                 prefix, name, prefix, name, v);
}
