/*
 * lib/base/text.h - bounded text building and Prometheus exposition lines.
 *
 * Every text kvpool writes into a caller's buffer goes through one
 * appender; only the one-line stats summary does not.  The appender writes
 * what fits and counts the length the whole text needs.  At the end it
 * leaves the complete NUL-terminated text.  When the buffer was short, it
 * leaves an empty string instead, and returns KVP_ERANGE with the length
 * needed.  So no caller ever sees partial text.  The Prometheus helpers
 * write one family (# HELP, # TYPE, the sample) in the text exposition
 * format that promtool accepts.
 *
 *   function              who may call          notes
 *   --------------------  --------------------  ----------------------------
 *   kvpi_text_printf      the text's builder    never fails; counts overflow
 *   kvpi_text_finish      the text's builder    KVP_OK or KVP_ERANGE
 *   kvpi_prom_valid_name  anyone                pure
 *   kvpi_prom_u64/_f64    the text's builder    one family, one sample
 * A struct kvpi_text belongs to one thread; nothing here is shared.
 */
#ifndef KVPOOL_LIB_BASE_TEXT_H
#define KVPOOL_LIB_BASE_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A text being built into buf[0..cap); len counts what the whole text needs. */
struct kvpi_text {
	char *buf;
	size_t cap, len;
};

/** kvpi_text_printf - append printf-formatted text (what fits is written; len counts all) */
void kvpi_text_printf(struct kvpi_text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/**
 * kvpi_text_finish - end the text
 * @t:   the text
 * @len: out: the text's length without the NUL (also when it did not fit)
 *
 * Returns KVP_OK when the text and its NUL fit, else KVP_ERANGE and leaves
 * an empty string in a nonzero-capacity buffer (never partial text).
 */
int kvpi_text_finish(struct kvpi_text *t, size_t *len);

/** kvpi_prom_valid_name - whether @p is a Prometheus metric name: [a-zA-Z_:][a-zA-Z0-9_:]* */
bool kvpi_prom_valid_name(const char *p);

/** kvpi_prom_u64 - append family @prefix_@name (# HELP, # TYPE @type) with the sample @v */
void kvpi_prom_u64(struct kvpi_text *t, const char *prefix, const char *name, const char *type,
                   const char *help, uint64_t v);

/** kvpi_prom_f64 - as kvpi_prom_u64 for a gauge with a fractional value (6 decimals) */
void kvpi_prom_f64(struct kvpi_text *t, const char *prefix, const char *name, const char *help,
                   double v);

#endif /* KVPOOL_LIB_BASE_TEXT_H */
