/*
 * lib/prefix/prefix_hash.c - kvp_prefix_hash: the content key of one block.
 *
 * The key is SHA-256 (OpenSSL's libcrypto) of this byte string, truncated
 * to its first 16 bytes:
 *
 *   offset  size  field
 *   0       1     version, 0x01
 *   1       1     has_parent: 0x01 when @parent is given, else 0x00
 *   2       8     parent->lo, little-endian (zeros without a parent)
 *   10      8     parent->hi, little-endian (zeros without a parent)
 *   18      8     salt, little-endian
 *   26      n     the token bytes, as given
 *
 * The 32-byte digest d maps to the key as lo = d[0..8) read little-endian,
 * hi = d[8..16) read little-endian; d[16..32) is dropped.  So in Python:
 *
 *   h = hashlib.sha256(bytes([1, has_parent]) + struct.pack("<QQQ", plo, phi, salt)
 *                      + tokens).digest()
 *   lo, hi = struct.unpack_from("<QQ", h)
 *
 * docs/PREFIX.md gives the same layout with test vectors.  The version byte
 * lets a later layout coexist with this one; has_parent keeps a first block
 * apart from a child of the all-zero key.
 *
 * The digest is computed with libcrypto's SHA256_Init / _Update / _Final on
 * a context on the stack: no allocation and no lock, so the call is
 * thread-safe and wait-free.  OpenSSL 3 marks these functions deprecated in
 * favour of EVP_Digest*, which allocates a context per call and fetches
 * the algorithm through the provider table (a lock): 2 to 4 times slower
 * per key on this project's machine, and key hashing is on the admission
 * path of a serving engine.  They are present in every OpenSSL 3 release.
 */
#define OPENSSL_SUPPRESS_DEPRECATED /* SHA256_Init and co.: see above */

#include <kvpool/prefix.h>
#include <kvpool/status.h>

#include <openssl/sha.h>

#define PREFIX_HASH_VERSION 0x01u
#define PREFIX_HEADER_BYTES 26u

static void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

int kvp_prefix_hash(const kvp_hash *parent, uint64_t salt, const void *tokens, size_t n_bytes,
                    kvp_hash *out)
{
	uint8_t head[PREFIX_HEADER_BYTES], d[SHA256_DIGEST_LENGTH];
	SHA256_CTX ctx;

	if (!out || (!tokens && n_bytes))
		return KVP_EINVAL;
	head[0] = PREFIX_HASH_VERSION;
	head[1] = parent ? 1 : 0;
	put_le64(head + 2, parent ? parent->lo : 0);
	put_le64(head + 10, parent ? parent->hi : 0);
	put_le64(head + 18, salt);
	if (SHA256_Init(&ctx) != 1 || SHA256_Update(&ctx, head, sizeof head) != 1 ||
	    (n_bytes && SHA256_Update(&ctx, tokens, n_bytes) != 1) || SHA256_Final(d, &ctx) != 1)
		return KVP_ENOMEM; /* never seen: the software implementation cannot fail */
	out->lo = get_le64(d);
	out->hi = get_le64(d + 8);
	return KVP_OK;
}
