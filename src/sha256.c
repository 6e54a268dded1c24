/* sha256 — FIPS 180-4 §6.2: the compression function in portable C, and with
 * the x86 SHA extensions where the processor has them (every input file is
 * hashed for the trace, so on large programs the hash is a visible part of
 * reading them: about 220 MB/s portable, several times that with SHA-NI). */
#include "sha256.h"

#include <string.h>
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_SHA_NI 1
#endif

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void block_portable(uint32_t h[8], const uint8_t *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = k + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
        uint32_t t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

typedef void blocks_fn(uint32_t h[8], const uint8_t *p, size_t n);

static void blocks_portable(uint32_t h[8], const uint8_t *p, size_t n) {
    for (; n; n--, p += 64) block_portable(h, p);
}

#ifdef HAVE_SHA_NI
/* n blocks at p. The state lives in two registers as the instructions want
 * it: s0 = (a, b, e, f) and s1 = (c, d, g, h), highest lane first; each
 * sha256rnds2 does two rounds with the two low lanes of its message operand.
 * m[] holds the next sixteen schedule words, four per register; msg1, the
 * words seven back and msg2 extend it four at a time (W[t] = s1(W[t-2]) +
 * W[t-7] + s0(W[t-15]) + W[t-16]). */
__attribute__((target("sha,sse4.1,ssse3"))) static void blocks_ni(uint32_t h[8], const uint8_t *p, size_t n) {
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    __m128i t = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)h), 0xb1);        /* b a d c */
    __m128i s1 = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)(h + 4)), 0x1b); /* h g f e */
    __m128i s0 = _mm_alignr_epi8(t, s1, 8);                                          /* f e b a */
    s1 = _mm_blend_epi16(s1, t, 0xf0);                                               /* h g d c */
    for (; n; n--, p += 64) {
        __m128i save0 = s0, save1 = s1, m[4];
        for (int i = 0; i < 4; i++) m[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * i)), bswap);
        for (int i = 0; i < 16; i++) {
            __m128i w = _mm_add_epi32(m[i & 3], _mm_loadu_si128((const __m128i *)&K[4 * i]));
            s1 = _mm_sha256rnds2_epu32(s1, s0, w);
            s0 = _mm_sha256rnds2_epu32(s0, s1, _mm_shuffle_epi32(w, 0x0e));
            if (i < 12) {
                __m128i x = _mm_sha256msg1_epu32(m[i & 3], m[(i + 1) & 3]);
                x = _mm_add_epi32(x, _mm_alignr_epi8(m[(i + 3) & 3], m[(i + 2) & 3], 4));
                m[i & 3] = _mm_sha256msg2_epu32(x, m[(i + 3) & 3]);
            }
        }
        s0 = _mm_add_epi32(s0, save0);
        s1 = _mm_add_epi32(s1, save1);
    }
    t = _mm_shuffle_epi32(s0, 0x1b);                                 /* a b e f */
    s1 = _mm_shuffle_epi32(s1, 0xb1);                                /* g h c d */
    _mm_storeu_si128((__m128i *)h, _mm_blend_epi16(t, s1, 0xf0));    /* a b c d */
    _mm_storeu_si128((__m128i *)(h + 4), _mm_alignr_epi8(s1, t, 8)); /* e f g h */
}

static int have_sha_ni(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b & 1u << 29)) return 0; /* SHA */
    return __get_cpuid(1, &a, &b, &c, &d) && (c & 1u << 19) && (c & 1u << 9); /* SSE4.1, SSSE3 */
}
#endif

static void digest(const void *data, size_t n, uint8_t out[32], blocks_fn *blocks) {
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    const uint8_t *p = data;
    size_t i = n / 64 * 64;
    blocks(h, p, n / 64);
    uint8_t tail[128];
    size_t r = n - i;
    memset(tail, 0, sizeof tail);
    if (r) memcpy(tail, p + i, r);
    tail[r] = 0x80;
    size_t tl = r + 9 <= 64 ? 64 : 128;
    uint64_t bits = (uint64_t)n * 8;
    for (int j = 0; j < 8; j++) tail[tl - 1 - j] = (uint8_t)(bits >> (8 * j));
    blocks(h, tail, tl / 64);
    for (int j = 0; j < 8; j++) {
        out[4 * j] = (uint8_t)(h[j] >> 24);
        out[4 * j + 1] = (uint8_t)(h[j] >> 16);
        out[4 * j + 2] = (uint8_t)(h[j] >> 8);
        out[4 * j + 3] = (uint8_t)h[j];
    }
}

void sha256(const void *data, size_t n, uint8_t out[32]) {
#ifdef HAVE_SHA_NI
    if (have_sha_ni()) {
        digest(data, n, out, blocks_ni);
        return;
    }
#endif
    digest(data, n, out, blocks_portable);
}

void sha256_portable(const void *data, size_t n, uint8_t out[32]) { digest(data, n, out, blocks_portable); }
