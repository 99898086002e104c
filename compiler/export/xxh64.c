/* XXH64 (Yann Collet's xxHash, 64-bit; the published algorithm, seed 0 and
 * others): the digest that pins a package's weights.
 *
 * A package's weights are most of its bytes (98 MB of resnet50) and are
 * checked on every load. SHA-256 runs at ~250 MB/s here and the tensor file's
 * own CRC-32 at ~1.6 GB/s; XXH64 runs four independent lanes of a multiply
 * and a rotate, at memory speed. It guards against corruption (truncation,
 * flipped bytes), not against an attacker — as the CRC it replaces did; the
 * other files of a package keep their SHA-256.
 */
#include "export/pkg.h"

#include <string.h>

static const uint64_t P1 = 0x9E3779B185EBCA87ULL, P2 = 0xC2B2AE3D27D4EB4FULL,
                      P3 = 0x165667B19E3779F9ULL, P4 = 0x85EBCA77C2B2AE63ULL,
                      P5 = 0x27D4EB2F165667C5ULL;

static uint64_t rotl(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

/* Little-endian reads, as the algorithm defines them. */
static uint64_t read64(const unsigned char *p)
{
    uint64_t v = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(&v, p, 8);
#else
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
#endif
    return v;
}

static uint64_t read32(const unsigned char *p)
{
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24;
}

static uint64_t round64(uint64_t acc, uint64_t input)
{
    return rotl(acc + input * P2, 31) * P1;
}

static uint64_t merge(uint64_t h, uint64_t lane)
{
    return (h ^ round64(0, lane)) * P1 + P4;
}

/* The four lanes over every whole 32-byte stripe, folded into one value. */
static uint64_t stripes(const unsigned char **pp, const unsigned char *end, uint64_t seed)
{
    const unsigned char *p = *pp;
    uint64_t v1 = seed + P1 + P2, v2 = seed + P2, v3 = seed, v4 = seed - P1;
    for (; end - p >= 32; p += 32) {
        v1 = round64(v1, read64(p));
        v2 = round64(v2, read64(p + 8));
        v3 = round64(v3, read64(p + 16));
        v4 = round64(v4, read64(p + 24));
    }
    *pp = p;
    uint64_t h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
    return merge(merge(merge(merge(h, v1), v2), v3), v4);
}

uint64_t ptc_pkg_xxh64(const void *data, size_t len, uint64_t seed)
{
    const unsigned char *p = data, *end = p + len;
    uint64_t h = len >= 32 ? stripes(&p, end, seed) : seed + P5;
    h += (uint64_t)len;
    for (; end - p >= 8; p += 8)
        h = rotl(h ^ round64(0, read64(p)), 27) * P1 + P4;
    if (end - p >= 4) {
        h = rotl(h ^ read32(p) * P1, 23) * P2 + P3;
        p += 4;
    }
    for (; p < end; p++)
        h = rotl(h ^ *p * P5, 11) * P1;
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    return h ^ (h >> 32);
}
