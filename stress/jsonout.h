/*
 * stress/jsonout.h - the --json files of kvpool_replay and kvpool_stress,
 * built with jansson so that they are valid JSON whatever the input (a
 * trace path that is not UTF-8, a figure that is not finite).
 *
 *   function       notes
 *   -------------  ----------------------------------------------------------
 *   jo_u64, jo_f64 add a number to an object (a non-finite double is null)
 *   jo_text        a JSON string of any bytes: invalid UTF-8 bytes become
 *                  the text "\xNN" (backslash, x, two hex digits)
 *   jo_write       write the document to a file; -1 after printing why not
 * Single-threaded: each program writes its file once, at the end.
 */
#ifndef KVPOOL_STRESS_JSONOUT_H
#define KVPOOL_STRESS_JSONOUT_H

#include <jansson.h>
#include <stdint.h>

/** jo_u64 - @o[@key] = @v (below 2^63: jansson's integers are signed) */
void jo_u64(json_t *o, const char *key, uint64_t v);

/** jo_f64 - @o[@key] = @v, or null when @v is NaN or infinite */
void jo_f64(json_t *o, const char *key, double v);

/** jo_text - a new JSON string holding @s; never NULL unless out of memory */
json_t *jo_text(const char *s);

/**
 * jo_write - write @root (indented, keys in insertion order) to @path
 * @prog: the program's name for the error message
 * Return: 0, or -1 after printing "PROG: cannot write PATH: why".
 */
int jo_write(json_t *root, const char *path, const char *prog);

#endif /* KVPOOL_STRESS_JSONOUT_H */
