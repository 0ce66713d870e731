/*
 * lib/remote/remote_value.c - the value format: header, checksum, Redis key.
 *
 * A value is what a reader must be able to refuse: it comes from a server
 * anyone with access can write to, so every field the reader relies on is
 * in the header and checked, and a checksum over header and rows catches
 * a truncated or altered value.  The checksum is not a defence against an
 * attacker who can write to Redis (who can compute it too); Redis ACLs
 * are.  It is four independent multiply-rotate lanes over 8-byte words
 * (no library offers a fast non-cryptographic 64-bit hash, and SHA-256
 * would cost more than the copy it guards), folded at the end.
 */
#include "lib/remote/remote_internal.h"

#include <stdio.h>
#include <string.h>

#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full

static uint64_t rotl(uint64_t x, int r)
{
	return (x << r) | (x >> (64 - r));
}

static uint64_t load64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static uint64_t lane(uint64_t acc, uint64_t w)
{
	return rotl(acc + w * P2, 31) * P1;
}

uint64_t kvpi_remote_checksum(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t a0 = h + P1, a1 = h ^ P2, a2 = h, a3 = h - P1;
	size_t i = 0;
	for (; i + 32 <= n; i += 32) {
		a0 = lane(a0, load64(b + i));
		a1 = lane(a1, load64(b + i + 8));
		a2 = lane(a2, load64(b + i + 16));
		a3 = lane(a3, load64(b + i + 24));
	}
	uint64_t x = rotl(a0, 1) + rotl(a1, 7) + rotl(a2, 12) + rotl(a3, 18) + (uint64_t)n;
	for (; i + 8 <= n; i += 8)
		x = lane(x, load64(b + i));
	for (; i < n; i++)
		x = (x ^ b[i]) * P1;
	x ^= x >> 33;
	x *= P2;
	x ^= x >> 29;
	return x;
}

static void put16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
}

static void put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const unsigned char *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* The checksum of a value: bytes 0..39 of its header, then its rows. */
static uint64_t value_sum(const unsigned char *v, size_t rows_len)
{
	uint64_t h = kvpi_remote_checksum(0, v, 40);
	return kvpi_remote_checksum(h, v + KVP_REMOTE_HEADER_BYTES, rows_len);
}

void kvpi_remote_encode_header(void *hdr, const struct kvpi_remote_expect *e)
{
	unsigned char *p = hdr;
	memset(p, 0, KVP_REMOTE_HEADER_BYTES);
	put32(p, KVPI_REMOTE_MAGIC);
	put16(p + 4, KVPI_REMOTE_VERSION);
	put16(p + 6, KVP_REMOTE_HEADER_BYTES);
	put64(p + 8, e->key.lo);
	put64(p + 16, e->key.hi);
	p[24] = e->stream;
	p[25] = e->format;
	put32(p + 28, e->row_dim);
	put32(p + 32, e->n_rows);
	put32(p + 36, e->row_bytes);
	put64(p + 40, value_sum(p, (size_t)e->n_rows * e->row_bytes));
}

bool kvpi_remote_check(const void *v, size_t len, const struct kvpi_remote_expect *e)
{
	const unsigned char *p = v;
	size_t rows_len = (size_t)e->n_rows * e->row_bytes;
	if (v == NULL || len != KVP_REMOTE_HEADER_BYTES + rows_len)
		return false;
	if (get32(p) != KVPI_REMOTE_MAGIC || p[4] != KVPI_REMOTE_VERSION || p[5] != 0 ||
	    p[6] != KVP_REMOTE_HEADER_BYTES || p[7] != 0)
		return false;
	if (get64(p + 8) != e->key.lo || get64(p + 16) != e->key.hi || p[24] != e->stream ||
	    p[25] != e->format || get32(p + 28) != e->row_dim || get32(p + 32) != e->n_rows ||
	    get32(p + 36) != e->row_bytes)
		return false;
	return get64(p + 40) == value_sum(p, rows_len);
}

size_t kvpi_remote_key(char *out, const char *ns, kvp_stream stream, kvp_hash key)
{
	const char *s = stream == KVP_K ? "k" : stream == KVP_V ? "v" : "kv";
	int n = snprintf(out, KVPI_REMOTE_KEY_MAX, "%s:%s:%016llx%016llx", ns, s,
	                 (unsigned long long)key.hi, (unsigned long long)key.lo);
	return n < 0 ? 0 : (size_t)n;
}
