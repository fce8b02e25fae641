/* CRC-32C (Castagnoli) and CRC-32 (IEEE) for the Kafka codec.
 *
 * Header-only (static functions): setup.py compiles each .pyx on its own, so the only
 * way to ship C next to a Cython module without touching setup.py is to include it.
 *
 * Paths, chosen once by kp_crc_init() (call it before anything else):
 *   - x86-64 with SSE4.2 + PCLMULQDQ: the crc32 instruction on three independent streams
 *     (its latency is 3 cycles but it issues once per cycle, so three chains keep the unit
 *     busy); the three partial CRCs are merged with carry-less multiplications by
 *     x^(8*len - 33) mod P, followed by one crc32 instruction that does the reduction.
 *   - x86-64 with AVX-512 + VPCLMULQDQ, inputs of 256 bytes and more: carry-less folding of
 *     256 bytes per step (see kp_fold_avx512).
 *   - AArch64 compiled with the CRC extension: the crc32c instructions, one stream.
 *   - everything else: slicing-by-8 tables (eight bytes per step, no data-dependent branch).
 * CRC-32 (IEEE) only serves legacy message sets: slicing-by-8, or the AVX-512 fold with
 * its own constants where that is available.
 *
 * Conventions: all functions take and return the finished CRC value (pre- and
 * post-inversion included), so crc(a + b) == update(update(0, a), b).
 */
#ifndef KP_CRC32C_H
#define KP_CRC32C_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KP_POLY_CRC32C 0x82F63B78u /* reflected 0x1EDC6F41 */
#define KP_POLY_CRC32 0xEDB88320u  /* reflected 0x04C11DB7 */

/* ---------------------------------------------------------------------------------- */
/* Portable path: slicing-by-8.                                                        */

static uint32_t kp_tab_crc32c[8][256];
static uint32_t kp_tab_crc32[8][256];

/* tab[k][b] is the CRC register after feeding byte b followed by k zero bytes. */
static void kp_build_tables(uint32_t tab[8][256], uint32_t poly) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int j = 0; j < 8; j++)
            c = (c & 1) ? (c >> 1) ^ poly : c >> 1;
        tab[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = tab[0][i];
        for (int k = 1; k < 8; k++) {
            c = tab[0][c & 0xFF] ^ (c >> 8);
            tab[k][i] = c;
        }
    }
}

static uint32_t kp_crc_slice8(const uint32_t tab[8][256], uint32_t crc,
                              const unsigned char *p, size_t n) {
    uint32_t c = ~crc;
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= c;
        c = tab[7][lo & 0xFF] ^ tab[6][(lo >> 8) & 0xFF] ^ tab[5][(lo >> 16) & 0xFF] ^
            tab[4][lo >> 24] ^ tab[3][hi & 0xFF] ^ tab[2][(hi >> 8) & 0xFF] ^
            tab[1][(hi >> 16) & 0xFF] ^ tab[0][hi >> 24];
        p += 8;
        n -= 8;
    }
#endif
    while (n--)
        c = tab[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return ~c;
}

static uint32_t kp_crc32c_sw(uint32_t crc, const unsigned char *p, size_t n) {
    return kp_crc_slice8((const uint32_t(*)[256])kp_tab_crc32c, crc, p, n);
}

static uint32_t kp_crc32_sw(uint32_t crc, const unsigned char *p, size_t n) {
    return kp_crc_slice8((const uint32_t(*)[256])kp_tab_crc32, crc, p, n);
}

/* x^n mod P in the reflected representation (bit 31 is x^0). */
static inline uint32_t kp_xpow_mod_poly(uint64_t n, uint32_t poly) {
    uint32_t r = 0x80000000u;
    while (n--)
        r = (r & 1) ? (r >> 1) ^ poly : r >> 1;
    return r;
}

static inline uint32_t kp_xpow_mod(uint64_t n) {
    return kp_xpow_mod_poly(n, KP_POLY_CRC32C);
}

/* ---------------------------------------------------------------------------------- */
/* x86-64: SSE4.2 crc32 on three streams, merged with PCLMULQDQ.                       */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KP_HAVE_X86_HW 1
#include <nmmintrin.h>
#include <wmmintrin.h>

/* Streams are a multiple of 16 bytes long, at most KP_LONG. Inputs of 3 * KP_LONG bytes
 * and more go through full-length blocks; what is left (48 bytes or more) takes one
 * more block with streams of a third of it, so a single stream (a third of the speed)
 * never handles more than 47 bytes. */
#define KP_LONG 8192

/* kp_shift16[m] = x^(128m - 33) mod P: the merge constant that moves a partial CRC
 * forward by 16m bytes (m = 1 .. 2 * KP_LONG / 16). */
static uint32_t kp_shift16[2 * KP_LONG / 16 + 1];

__attribute__((target("sse4.2,pclmul"))) static inline uint64_t
kp_clmul(uint32_t a, uint64_t k) {
    __m128i r = _mm_clmulepi64_si128(_mm_cvtsi32_si128((int)a), _mm_cvtsi64_si128((long long)k), 0);
    return (uint64_t)_mm_cvtsi128_si64(r);
}

static inline uint64_t kp_load64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Three streams of `len` bytes each, starting at p; c0 is the running register. */
#define KP_THREE_WAY(len, k1, k2)                                                         \
    do {                                                                                  \
        uint64_t c1 = 0, c2 = 0;                                                          \
        const unsigned char *stop = p + (len);                                            \
        do {                                                                              \
            c0 = _mm_crc32_u64(c0, kp_load64(p));                                         \
            c1 = _mm_crc32_u64(c1, kp_load64(p + (len)));                                 \
            c2 = _mm_crc32_u64(c2, kp_load64(p + 2 * (len)));                             \
            c0 = _mm_crc32_u64(c0, kp_load64(p + 8));                                     \
            c1 = _mm_crc32_u64(c1, kp_load64(p + (len) + 8));                             \
            c2 = _mm_crc32_u64(c2, kp_load64(p + 2 * (len) + 8));                         \
            p += 16;                                                                      \
        } while (p < stop);                                                               \
        /* c0 sits 2*len bytes before the end, c1 len bytes: shift and add. */            \
        c0 = _mm_crc32_u64(0, kp_clmul((uint32_t)c0, (k2)) ^ kp_clmul((uint32_t)c1, (k1))) \
             ^ c2;                                                                        \
        p += 2 * (len);                                                                   \
        n -= 3 * (len);                                                                   \
    } while (0)

__attribute__((target("sse4.2,pclmul"))) static uint32_t
kp_crc32c_hw(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c0 = (uint32_t)~crc;
    /* Align so the 8-byte loads do not straddle cache lines. */
    while (n && ((uintptr_t)p & 7)) {
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
        n--;
    }
    while (n >= 3 * KP_LONG)
        KP_THREE_WAY(KP_LONG, kp_shift16[KP_LONG / 16], kp_shift16[2 * KP_LONG / 16]);
    if (n >= 48) {
        const size_t len = (n / 3) & ~(size_t)15;
        KP_THREE_WAY(len, kp_shift16[len / 16], kp_shift16[2 * len / 16]);
    }
    while (n >= 8) {
        c0 = _mm_crc32_u64(c0, kp_load64(p));
        p += 8;
        n -= 8;
    }
    while (n--)
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
    return ~(uint32_t)c0;
}
#endif

/* ---------------------------------------------------------------------------------- */
/* x86-64 with AVX-512 + VPCLMULQDQ: fold 256 bytes per step with carry-less multiplies. */
/*
 * The data is viewed as 128-bit lanes, each a polynomial in the reflected bit order
 * (bit k of the lane is the coefficient of x^(127-k)). Moving a lane A = L*x^64 + H
 * forward by D bits means A*x^D = L*x^(64+D) + H*x^D; modulo P this equals
 * clmul(L, x^(D+31)) ^ clmul(H, x^(D-33)) with 32-bit reflected constants (the 33 makes
 * up for the bit order of the product). The result still fits a 128-bit lane and is
 * xored into the lane D bits further on. Four 512-bit accumulators (16 lanes) keep the
 * multiplier busy; at the end the lanes are folded into one 128-bit remainder.
 * Nothing here depends on the polynomial but the constants, so CRC-32 (IEEE) uses the
 * same folding; only the last step, reducing the remainder to 32 bits, differs: the
 * crc32 instruction for CRC-32C, two table steps for CRC-32.
 */
#if defined(KP_HAVE_X86_HW) && ((defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 8) || \
                                (defined(__clang__) && __clang_major__ >= 8))
#define KP_HAVE_AVX512 1
#include <immintrin.h>

#define KP_AVX512_TARGET __attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.2")))
/* The fold starts by loading 256 bytes; shorter inputs take another path. */
#define KP_AVX512_MIN 256

/* (K1, K2) pairs, K1 in the low and K2 in the high 64 bits, for D = 128, 256, 384,
 * 512 and 2048 bits. */
typedef struct {
    uint64_t k128[2], k256[2], k384[2], k512[2], k2048[2];
} kp_fold_consts_t;

static kp_fold_consts_t kp_fold_crc32c, kp_fold_crc32;

static void kp_fold_pair(uint64_t k[2], uint64_t d, uint32_t poly) {
    k[0] = kp_xpow_mod_poly(d + 31, poly);
    k[1] = kp_xpow_mod_poly(d - 33, poly);
}

static void kp_fold_init(kp_fold_consts_t *k, uint32_t poly) {
    kp_fold_pair(k->k128, 128, poly);
    kp_fold_pair(k->k256, 256, poly);
    kp_fold_pair(k->k384, 384, poly);
    kp_fold_pair(k->k512, 512, poly);
    kp_fold_pair(k->k2048, 2048, poly);
}

KP_AVX512_TARGET static inline __m128i kp_fold_x(__m128i a, const uint64_t k[2]) {
    __m128i kk = _mm_loadu_si128((const __m128i *)k);
    return _mm_xor_si128(_mm_clmulepi64_si128(a, kk, 0x00), _mm_clmulepi64_si128(a, kk, 0x11));
}

/* fold(a) ^ b on all four lanes (0x96 = three-way xor). */
KP_AVX512_TARGET static inline __m512i kp_fold_z(__m512i a, __m512i k, __m512i b) {
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(a, k, 0x00),
                                     _mm512_clmulepi64_epi128(a, k, 0x11), b, 0x96);
}

/* Fold all whole 16-byte units of p[0..*n) (*n >= KP_AVX512_MIN) starting from the
 * finished CRC `crc`; returns the 128-bit remainder and leaves the tail (< 16 bytes)
 * in *pp / *n. */
KP_AVX512_TARGET static inline __m128i
kp_fold_avx512(uint32_t crc, const unsigned char **pp, size_t *pn, const kp_fold_consts_t *k) {
    const unsigned char *p = *pp;
    size_t n = *pn;
    /* The incoming register is xored into the first 32 bits of the message. */
    __m512i x0 = _mm512_xor_si512(_mm512_loadu_si512((const void *)p),
                                  _mm512_maskz_set1_epi32(1, (int)~crc));
    __m512i x1 = _mm512_loadu_si512((const void *)(p + 64));
    __m512i x2 = _mm512_loadu_si512((const void *)(p + 128));
    __m512i x3 = _mm512_loadu_si512((const void *)(p + 192));
    p += 256;
    n -= 256;
    const __m512i k2048 = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)k->k2048));
    while (n >= 256) {
        x0 = kp_fold_z(x0, k2048, _mm512_loadu_si512((const void *)p));
        x1 = kp_fold_z(x1, k2048, _mm512_loadu_si512((const void *)(p + 64)));
        x2 = kp_fold_z(x2, k2048, _mm512_loadu_si512((const void *)(p + 128)));
        x3 = kp_fold_z(x3, k2048, _mm512_loadu_si512((const void *)(p + 192)));
        p += 256;
        n -= 256;
    }
    /* Four accumulators into one: each sits 64 bytes before the next. */
    const __m512i k512 = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)k->k512));
    x1 = kp_fold_z(x0, k512, x1);
    x2 = kp_fold_z(x1, k512, x2);
    x3 = kp_fold_z(x2, k512, x3);
    while (n >= 64) {
        x3 = kp_fold_z(x3, k512, _mm512_loadu_si512((const void *)p));
        p += 64;
        n -= 64;
    }
    /* Four lanes into one: lane i sits 16 * (3 - i) bytes before the last. */
    __m128i a = _mm512_extracti32x4_epi32(x3, 3);
    a = _mm_xor_si128(a, kp_fold_x(_mm512_castsi512_si128(x3), k->k384));
    a = _mm_xor_si128(a, kp_fold_x(_mm512_extracti32x4_epi32(x3, 1), k->k256));
    a = _mm_xor_si128(a, kp_fold_x(_mm512_extracti32x4_epi32(x3, 2), k->k128));
    while (n >= 16) {
        a = _mm_xor_si128(kp_fold_x(a, k->k128), _mm_loadu_si128((const __m128i *)p));
        p += 16;
        n -= 16;
    }
    *pp = p;
    *pn = n;
    return a;
}

KP_AVX512_TARGET static uint32_t
kp_crc32c_avx512(uint32_t crc, const unsigned char *p, size_t n) {
    if (n < KP_AVX512_MIN)
        return kp_crc32c_hw(crc, p, n);
    __m128i a = kp_fold_avx512(crc, &p, &n, &kp_fold_crc32c);
    /* Register of the 128-bit remainder, computed from a zero register. */
    uint64_t c = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(a));
    c = _mm_crc32_u64(c, (uint64_t)_mm_extract_epi64(a, 1));
    while (n >= 8) {
        c = _mm_crc32_u64(c, kp_load64(p));
        p += 8;
        n -= 8;
    }
    while (n--)
        c = _mm_crc32_u8((uint32_t)c, *p++);
    return ~(uint32_t)c;
}

KP_AVX512_TARGET static uint32_t
kp_crc32_avx512(uint32_t crc, const unsigned char *p, size_t n) {
    if (n < KP_AVX512_MIN)
        return kp_crc32_sw(crc, p, n);
    __m128i a = kp_fold_avx512(crc, &p, &n, &kp_fold_crc32);
    unsigned char rem[16];
    _mm_storeu_si128((__m128i *)rem, a);
    /* Feeding the remainder from a zero register (finished value 0xFFFFFFFF) gives the
     * finished CRC so far; the tail continues from it. */
    return kp_crc32_sw(kp_crc32_sw(0xFFFFFFFFu, rem, 16), p, n);
}
#endif

/* ---------------------------------------------------------------------------------- */
/* AArch64 built with the CRC extension (__ARM_FEATURE_CRC32, e.g. Apple silicon or    */
/* -march=armv8-a+crc): the crc32c instructions, known present at compile time.        */

#if defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
#define KP_HAVE_ARM_CRC 1
#include <arm_acle.h>

static uint32_t kp_crc32c_arm(uint32_t crc, const unsigned char *p, size_t n) {
    uint32_t c = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        c = __crc32cb(c, *p++);
        n--;
    }
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __crc32cd(c, v);
        p += 8;
        n -= 8;
    }
    while (n--)
        c = __crc32cb(c, *p++);
    return ~c;
}
#endif

/* ---------------------------------------------------------------------------------- */
/* Dispatch.                                                                            */

typedef uint32_t (*kp_crc_fn)(uint32_t, const unsigned char *, size_t);

/* Every CRC-32C path, best last; a NULL entry is not available on this CPU/build. */
enum {
    KP_PATH_SOFTWARE = 0,
    KP_PATH_ARM = 1,
    KP_PATH_SSE42 = 2,
    KP_PATH_AVX512 = 3,
    KP_NPATHS = 4
};
static kp_crc_fn kp_crc32c_paths[KP_NPATHS] = {kp_crc32c_sw, NULL, NULL, NULL};
static const char *const kp_crc32c_path_names[KP_NPATHS] = {"software", "armv8-crc", "sse4.2",
                                                            "avx512"};
static kp_crc_fn kp_crc32c_impl = kp_crc32c_sw;
static const char *kp_crc32c_impl_name = "software";
/* CRC-32 (IEEE): slicing-by-8, or the AVX-512 fold where available. */
static kp_crc_fn kp_crc32_impl = kp_crc32_sw;
static const char *kp_crc32_impl_name = "software";

static void kp_crc_init(void) {
    kp_build_tables(kp_tab_crc32c, KP_POLY_CRC32C);
    kp_build_tables(kp_tab_crc32, KP_POLY_CRC32);
#ifdef KP_HAVE_ARM_CRC
    kp_crc32c_paths[KP_PATH_ARM] = kp_crc32c_arm;
#endif
#ifdef KP_HAVE_X86_HW
    /* clmul yields the product times x (bit order), and the final crc32 multiplies by
     * x^32: shifting by L bytes therefore needs x^(8L - 33). */
    kp_shift16[0] = 0; /* unused: streams are never empty */
    kp_shift16[1] = kp_xpow_mod(128 - 33);
    for (size_t m = 2; m < sizeof kp_shift16 / sizeof kp_shift16[0]; m++) {
        /* Times x^128: sixteen zero bytes through the byte table. */
        uint32_t r = kp_shift16[m - 1];
        for (int i = 0; i < 16; i++)
            r = kp_tab_crc32c[0][r & 0xFF] ^ (r >> 8);
        kp_shift16[m] = r;
    }
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("pclmul"))
        kp_crc32c_paths[KP_PATH_SSE42] = kp_crc32c_hw;
#endif
#ifdef KP_HAVE_AVX512
    kp_fold_init(&kp_fold_crc32c, KP_POLY_CRC32C);
    kp_fold_init(&kp_fold_crc32, KP_POLY_CRC32);
    /* libgcc's avx512f check includes the OS saving the zmm state (XGETBV). The AVX-512
     * path hands inputs below KP_AVX512_MIN to the SSE4.2 one, so it needs both. */
    if (kp_crc32c_paths[KP_PATH_SSE42] && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("vpclmulqdq")) {
        kp_crc32c_paths[KP_PATH_AVX512] = kp_crc32c_avx512;
        kp_crc32_impl = kp_crc32_avx512;
        kp_crc32_impl_name = "avx512";
    }
#endif
    for (int i = 0; i < KP_NPATHS; i++) {
        if (kp_crc32c_paths[i]) {
            kp_crc32c_impl = kp_crc32c_paths[i];
            kp_crc32c_impl_name = kp_crc32c_path_names[i];
        }
    }
}

static inline uint32_t kp_crc32c(uint32_t crc, const unsigned char *p, size_t n) {
    return kp_crc32c_impl(crc, p, n);
}

static inline uint32_t kp_crc32(uint32_t crc, const unsigned char *p, size_t n) {
    return kp_crc32_impl(crc, p, n);
}

#endif /* KP_CRC32C_H */
