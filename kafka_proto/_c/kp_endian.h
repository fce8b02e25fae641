/* Unaligned big-endian loads and stores for the wire codec.
 *
 * memcpy into a local is how C spells an unaligned access without undefined behaviour;
 * compilers turn it (plus the byte swap) into a single mov/movbe.
 */
#ifndef KP_ENDIAN_H
#define KP_ENDIAN_H

#include <stdint.h>
#include <string.h>

#if defined(_MSC_VER)
#  include <stdlib.h>
#  define KP_BSWAP16(x) _byteswap_ushort(x)
#  define KP_BSWAP32(x) _byteswap_ulong(x)
#  define KP_BSWAP64(x) _byteswap_uint64(x)
#  define KP_LITTLE_ENDIAN 1
#else
#  define KP_BSWAP16(x) __builtin_bswap16(x)
#  define KP_BSWAP32(x) __builtin_bswap32(x)
#  define KP_BSWAP64(x) __builtin_bswap64(x)
#  if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#    define KP_LITTLE_ENDIAN 0
#  else
#    define KP_LITTLE_ENDIAN 1
#  endif
#endif

#if KP_LITTLE_ENDIAN
#  define KP_TO_BE16(x) KP_BSWAP16(x)
#  define KP_TO_BE32(x) KP_BSWAP32(x)
#  define KP_TO_BE64(x) KP_BSWAP64(x)
#else
#  define KP_TO_BE16(x) (x)
#  define KP_TO_BE32(x) (x)
#  define KP_TO_BE64(x) (x)
#endif

static inline uint16_t kp_load_be16(const unsigned char *p) {
    uint16_t v; memcpy(&v, p, 2); return (uint16_t)KP_TO_BE16(v);
}
static inline uint32_t kp_load_be32(const unsigned char *p) {
    uint32_t v; memcpy(&v, p, 4); return (uint32_t)KP_TO_BE32(v);
}
static inline uint64_t kp_load_be64(const unsigned char *p) {
    uint64_t v; memcpy(&v, p, 8); return (uint64_t)KP_TO_BE64(v);
}
static inline void kp_store_be16(unsigned char *p, uint16_t v) {
    v = (uint16_t)KP_TO_BE16(v); memcpy(p, &v, 2);
}
static inline void kp_store_be32(unsigned char *p, uint32_t v) {
    v = (uint32_t)KP_TO_BE32(v); memcpy(p, &v, 4);
}
static inline void kp_store_be64(unsigned char *p, uint64_t v) {
    v = (uint64_t)KP_TO_BE64(v); memcpy(p, &v, 8);
}
/* IEEE-754 doubles travel as the big-endian bytes of their bit pattern. */
static inline double kp_load_be_f64(const unsigned char *p) {
    uint64_t u = kp_load_be64(p); double d; memcpy(&d, &u, 8); return d;
}
static inline void kp_store_be_f64(unsigned char *p, double d) {
    uint64_t u; memcpy(&u, &d, 8); kp_store_be64(p, u);
}

#endif /* KP_ENDIAN_H */
