#include "src/io/crc32c.h"
#include "src/io/little_endian.h"
#include "src/io/prefetch.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SHARDQ_CRC32C_X86 1
#include <immintrin.h>
#include <nmmintrin.h>
#endif

namespace shardq {
namespace {

// Both implementations work on the raw CRC register; the public functions
// apply the standard pre- and post-inversion (~crc) around them.

constexpr uint32_t kReflectedPolynomial = 0x82F63B78u;

// kByteTables.t[s][b] is the register contribution of byte b followed by s
// zero bytes (slicing-by-8).
struct ByteTables {
  uint32_t t[8][256];
};

constexpr ByteTables MakeByteTables() {
  ByteTables tables{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t reg = b;
    for (int bit = 0; bit < 8; ++bit) {
      reg = (reg >> 1) ^ ((reg & 1u) != 0 ? kReflectedPolynomial : 0u);
    }
    tables.t[0][b] = reg;
  }
  for (int s = 1; s < 8; ++s) {
    for (int b = 0; b < 256; ++b) {
      const uint32_t prev = tables.t[s - 1][b];
      tables.t[s][b] = (prev >> 8) ^ tables.t[0][prev & 0xffu];
    }
  }
  return tables;
}

constexpr ByteTables kByteTables = MakeByteTables();

inline uint32_t StepByte(uint32_t reg, char byte) {
  return (reg >> 8) ^
         kByteTables.t[0][(reg ^ static_cast<uint8_t>(byte)) & 0xffu];
}


uint32_t ExtendPortableRegister(uint32_t reg, const char* p, size_t n) {
  const auto& t = kByteTables.t;
  while (n >= 8) {
    const uint64_t v = DecodeLittleEndian64(p) ^ reg;
    reg = t[7][v & 0xffu] ^ t[6][(v >> 8) & 0xffu] ^ t[5][(v >> 16) & 0xffu] ^
          t[4][(v >> 24) & 0xffu] ^ t[3][(v >> 32) & 0xffu] ^
          t[2][(v >> 40) & 0xffu] ^ t[1][(v >> 48) & 0xffu] ^ t[0][v >> 56];
    p += 8;
    n -= 8;
  }
  for (; n > 0; --n) reg = StepByte(reg, *p++);
  return reg;
}

#ifdef SHARDQ_CRC32C_X86

// The crc32 instruction has a latency of 3 cycles and a throughput of 1, so
// the hardware path runs three independent streams over consecutive
// kStride-byte blocks and merges them: the register after A|B|C (each
// kStride bytes) is Shift(Shift(crc(A)) ^ crc0(B)) ^ crc0(C), where crc0
// starts from a zero register and Shift feeds kStride zero bytes. The
// register update is linear over GF(2), so Shift is four table lookups.
// Two block sizes: 1024 bytes for long inputs, and 128 bytes so that
// records of a few hundred bytes to a few KiB (typical tf.Examples) also
// run three streams instead of one.
template <size_t kStride>
struct ShiftTables {
  uint32_t t[4][256];
};

template <size_t kStride>
constexpr ShiftTables<kStride> MakeShiftTables() {
  uint32_t basis[32] = {};
  for (int bit = 0; bit < 32; ++bit) {
    uint32_t reg = 1u << bit;
    for (size_t i = 0; i < kStride; ++i) {
      reg = (reg >> 8) ^ kByteTables.t[0][reg & 0xffu];
    }
    basis[bit] = reg;
  }
  ShiftTables<kStride> tables{};
  for (int k = 0; k < 4; ++k) {
    for (uint32_t v = 0; v < 256; ++v) {
      uint32_t image = 0;
      for (int bit = 0; bit < 8; ++bit) {
        if ((v >> bit) & 1u) image ^= basis[8 * k + bit];
      }
      tables.t[k][v] = image;
    }
  }
  return tables;
}

constexpr size_t kLongStride = 1024;
constexpr size_t kShortStride = 128;
constexpr ShiftTables<kLongStride> kLongShiftTables =
    MakeShiftTables<kLongStride>();
constexpr ShiftTables<kShortStride> kShortShiftTables =
    MakeShiftTables<kShortStride>();

template <size_t kStride>
inline uint32_t Shift(const ShiftTables<kStride>& tables, uint32_t reg) {
  const auto& t = tables.t;
  return t[0][reg & 0xffu] ^ t[1][(reg >> 8) & 0xffu] ^
         t[2][(reg >> 16) & 0xffu] ^ t[3][reg >> 24];
}

// Runs the three streams over as many 3 * kStride blocks as fit in n.
template <size_t kStride>
__attribute__((target("sse4.2"), always_inline)) inline uint64_t
ExtendThreeStreams(const ShiftTables<kStride>& tables, uint64_t reg0,
                   const char*& p, size_t& n) {
  while (n >= 3 * kStride) {
    uint64_t reg1 = 0;
    uint64_t reg2 = 0;
    for (size_t i = 0; i < kStride; i += 8) {
      reg0 = _mm_crc32_u64(reg0, DecodeLittleEndian64(p + i));
      reg1 = _mm_crc32_u64(reg1, DecodeLittleEndian64(p + kStride + i));
      reg2 = _mm_crc32_u64(reg2, DecodeLittleEndian64(p + 2 * kStride + i));
    }
    reg0 = Shift(tables, Shift(tables, static_cast<uint32_t>(reg0)) ^
                             static_cast<uint32_t>(reg1)) ^
           static_cast<uint32_t>(reg2);
    p += 3 * kStride;
    n -= 3 * kStride;
  }
  return reg0;
}

__attribute__((target("sse4.2"))) uint32_t ExtendHardwareRegister(
    uint32_t reg, const char* p, size_t n) {
  // Align long inputs so that the 8-byte loads never straddle a cache line;
  // for short ones (a record header) the byte steps would cost more.
  if (n >= 64) {
    while ((reinterpret_cast<uintptr_t>(p) & 7u) != 0) {
      reg = _mm_crc32_u8(reg, static_cast<uint8_t>(*p));
      ++p;
      --n;
    }
  }
  uint64_t reg0 = reg;
  reg0 = ExtendThreeStreams(kLongShiftTables, reg0, p, n);
  reg0 = ExtendThreeStreams(kShortShiftTables, reg0, p, n);
  while (n >= 8) {
    reg0 = _mm_crc32_u64(reg0, DecodeLittleEndian64(p));
    p += 8;
    n -= 8;
  }
  reg = static_cast<uint32_t>(reg0);
  for (; n > 0; --n) reg = _mm_crc32_u8(reg, static_cast<uint8_t>(*p++));
  return reg;
}

// Where the CPU has AVX-512 and VPCLMULQDQ, long inputs are folded with
// carry-less multiplications instead, 256 bytes per step in four 512-bit
// accumulators (each four independent 128-bit lanes): about four times the
// throughput of the crc32 instruction, which is what limits reading TFRecord
// files from the page cache. Folding a 128-bit block X = L|H (L its first 8
// bytes) forward by D bytes replaces it by L*k1 ^ H*k2 with k1 = x^(8D+63)
// and k2 = x^(8D-1) mod P, bit-reflected into the top of a 64-bit word: in
// the reflected domain a carry-less product carries an extra factor x, and
// what is congruent modulo P has the same CRC. The register is XORed into
// the first bytes first, and the final 16-byte remainder is then fed
// through the crc32 instruction from a zero register.
constexpr uint32_t kCastagnoliPolynomial = 0x1EDC6F41u;  // x^32 implied

constexpr uint64_t XPowModReflected(int exponent) {
  uint64_t r = 1;  // normal (non-reflected) form, bit d = coefficient of x^d
  for (int i = 0; i < exponent; ++i) {
    const bool carry = (r & 0x80000000u) != 0;
    r = (r << 1) & 0xffffffffu;
    if (carry) r ^= kCastagnoliPolynomial;
  }
  uint64_t reflected = 0;
  for (int d = 0; d < 32; ++d) {
    if ((r >> d) & 1u) reflected |= uint64_t{1} << (63 - d);
  }
  return reflected;
}

struct FoldConstants {
  uint64_t first;   // multiplies the block's first 8 bytes
  uint64_t second;  // multiplies its last 8 bytes
};

constexpr FoldConstants FoldBy(int bytes) {
  return {XPowModReflected(8 * bytes + 63), XPowModReflected(8 * bytes - 1)};
}

constexpr FoldConstants kFold16 = FoldBy(16);
constexpr FoldConstants kFold32 = FoldBy(32);
constexpr FoldConstants kFold48 = FoldBy(48);
constexpr FoldConstants kFold64 = FoldBy(64);
constexpr FoldConstants kFold128 = FoldBy(128);
constexpr FoldConstants kFold192 = FoldBy(192);
constexpr FoldConstants kFold256 = FoldBy(256);
constexpr size_t kFoldMinBytes = 256;

#define SHARDQ_FOLD_TARGET \
  __attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.2")))

SHARDQ_FOLD_TARGET inline __m128i Constants128(const FoldConstants& k) {
  return _mm_set_epi64x(static_cast<long long>(k.second),
                        static_cast<long long>(k.first));
}

SHARDQ_FOLD_TARGET inline __m512i Constants512(const FoldConstants& k) {
  const auto first = static_cast<long long>(k.first);
  const auto second = static_cast<long long>(k.second);
  return _mm512_set_epi64(second, first, second, first, second, first, second,
                          first);
}

// x folded forward by the constants' distance, XORed with `next`.
SHARDQ_FOLD_TARGET inline __m512i Fold512(__m512i x, __m512i k,
                                          __m512i next) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00),
                                   _mm512_clmulepi64_epi128(x, k, 0x11), next,
                                   0x96);
}

SHARDQ_FOLD_TARGET inline __m128i Fold128(__m128i x, __m128i k,
                                          __m128i next) {
  return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00),
                                     _mm_clmulepi64_si128(x, k, 0x11)),
                       next);
}

// Loads the 64 bytes at p and, with kCopy, stores them at d.
template <bool kCopy>
SHARDQ_FOLD_TARGET inline __m512i Take512(const char* p, char* d) {
  const __m512i v = _mm512_loadu_si512(p);
  if constexpr (kCopy) _mm512_storeu_si512(d, v);
  return v;
}

template <bool kCopy>
SHARDQ_FOLD_TARGET inline __m128i Take128(const char* p, char* d) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (kCopy) _mm_storeu_si128(reinterpret_cast<__m128i*>(d), v);
  return v;
}

// Moves the source (and, with kCopy, the destination) k bytes on.
template <bool kCopy>
inline void Advance(const char*& p, char*& d, size_t k) {
  p += k;
  if constexpr (kCopy) d += k;
}

// The register after p[0, n); with kCopy it also copies p[0, n) to d, in
// the same pass (the loads the fold makes anyway are stored).
template <bool kCopy>
SHARDQ_FOLD_TARGET uint32_t FoldRegister(uint32_t reg, const char* p, size_t n,
                                         char* d) {
  // Short records, one after the other, keep the stream ahead too (the
  // pipeline's ~200-byte TFRecords: 6% faster through a 1-thread pipeline).
  if (n < kFoldMinBytes) PrefetchAhead(p, n);
  if (n >= kFoldMinBytes) {
    const __m512i initial = _mm512_inserti32x4(
        _mm512_setzero_si512(), _mm_cvtsi32_si128(static_cast<int>(reg)), 0);
    __m512i x0 = _mm512_xor_si512(Take512<kCopy>(p, d), initial);
    __m512i x1 = Take512<kCopy>(p + 64, d + 64);
    __m512i x2 = Take512<kCopy>(p + 128, d + 128);
    __m512i x3 = Take512<kCopy>(p + 192, d + 192);
    Advance<kCopy>(p, d, 256);
    n -= 256;
    const __m512i k256 = Constants512(kFold256);
    while (n >= 256) {
      PrefetchAhead(p, 256);  // see prefetch.h
      x0 = Fold512(x0, k256, Take512<kCopy>(p, d));
      x1 = Fold512(x1, k256, Take512<kCopy>(p + 64, d + 64));
      x2 = Fold512(x2, k256, Take512<kCopy>(p + 128, d + 128));
      x3 = Fold512(x3, k256, Take512<kCopy>(p + 192, d + 192));
      Advance<kCopy>(p, d, 256);
      n -= 256;
    }
    __m512i x = Fold512(x0, Constants512(kFold192), x3);
    x = Fold512(x1, Constants512(kFold128), x);
    x = Fold512(x2, Constants512(kFold64), x);
    const __m512i k64 = Constants512(kFold64);
    while (n >= 64) {
      x = Fold512(x, k64, Take512<kCopy>(p, d));
      Advance<kCopy>(p, d, 64);
      n -= 64;
    }
    // The four lanes, through memory (GCC 12 warns on the extract
    // intrinsics' undefined operand).
    alignas(64) __m128i lanes[4];
    _mm512_store_si512(lanes, x);
    __m128i y = Fold128(lanes[0], Constants128(kFold48), lanes[3]);
    y = Fold128(lanes[1], Constants128(kFold32), y);
    y = Fold128(lanes[2], Constants128(kFold16), y);
    const __m128i k16 = Constants128(kFold16);
    while (n >= 16) {
      y = Fold128(y, k16, Take128<kCopy>(p, d));
      Advance<kCopy>(p, d, 16);
      n -= 16;
    }
    const auto low = static_cast<uint64_t>(_mm_cvtsi128_si64(y));
    const auto high = static_cast<uint64_t>(_mm_extract_epi64(y, 1));
    // Leave no dirty upper register state behind: GCC does not insert this
    // before the tail call below, and without it the SSE code that runs
    // next (malloc, memcpy, ...) was measured twice as slow.
    _mm256_zeroupper();
    reg = static_cast<uint32_t>(_mm_crc32_u64(_mm_crc32_u64(0, low), high));
  }
  if constexpr (kCopy) {
    if (n > 0) std::memcpy(d, p, n);
  }
  return ExtendHardwareRegister(reg, p, n);
}

SHARDQ_FOLD_TARGET uint32_t ExtendFoldRegister(uint32_t reg, const char* p,
                                               size_t n) {
  return FoldRegister<false>(reg, p, n, nullptr);
}

SHARDQ_FOLD_TARGET uint32_t CopyFoldRegister(uint32_t reg, const char* p,
                                             size_t n, char* d) {
  return FoldRegister<true>(reg, p, n, d);
}


#undef SHARDQ_FOLD_TARGET

// The same folding with 256-bit registers, for CPUs that have VPCLMULQDQ
// but not AVX-512 (AMD Zen 3, for one): 128 bytes per step in four
// accumulators of two 128-bit lanes each. It starts at 128 bytes, so that a
// typical 1 KB record spends most of its bytes in the folding loop.
constexpr FoldConstants kFold96 = FoldBy(96);
constexpr size_t kFold256MinBytes = 128;

#define SHARDQ_FOLD256_TARGET \
  __attribute__((target("avx2,vpclmulqdq,pclmul,sse4.2")))

SHARDQ_FOLD256_TARGET inline __m256i Constants256(const FoldConstants& k) {
  const auto first = static_cast<long long>(k.first);
  const auto second = static_cast<long long>(k.second);
  return _mm256_set_epi64x(second, first, second, first);
}

SHARDQ_FOLD256_TARGET inline __m256i Load256(const char* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

SHARDQ_FOLD256_TARGET inline __m256i Fold256(__m256i x, __m256i k,
                                             __m256i next) {
  return _mm256_xor_si256(_mm256_xor_si256(_mm256_clmulepi64_epi128(x, k, 0x00),
                                           _mm256_clmulepi64_epi128(x, k, 0x11)),
                          next);
}

SHARDQ_FOLD256_TARGET inline __m128i Fold128Avx2(__m128i x, __m128i k,
                                                 __m128i next) {
  return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00),
                                     _mm_clmulepi64_si128(x, k, 0x11)),
                       next);
}

template <bool kCopy>
SHARDQ_FOLD256_TARGET inline __m256i Take256(const char* p, char* d) {
  const __m256i v = Load256(p);
  if constexpr (kCopy) _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), v);
  return v;
}

template <bool kCopy>
SHARDQ_FOLD256_TARGET inline __m128i Take128Avx2(const char* p, char* d) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (kCopy) _mm_storeu_si128(reinterpret_cast<__m128i*>(d), v);
  return v;
}

// As FoldRegister, on 256-bit registers.
template <bool kCopy>
SHARDQ_FOLD256_TARGET uint32_t Fold256Register(uint32_t reg, const char* p,
                                               size_t n, char* d) {
  if (n < kFold256MinBytes) PrefetchAhead(p, n);  // as in FoldRegister
  if (n >= kFold256MinBytes) {
    const __m256i initial = _mm256_set_epi32(0, 0, 0, 0, 0, 0, 0,
                                             static_cast<int>(reg));
    __m256i x0 = _mm256_xor_si256(Take256<kCopy>(p, d), initial);
    __m256i x1 = Take256<kCopy>(p + 32, d + 32);
    __m256i x2 = Take256<kCopy>(p + 64, d + 64);
    __m256i x3 = Take256<kCopy>(p + 96, d + 96);
    Advance<kCopy>(p, d, 128);
    n -= 128;
    const __m256i k128 = Constants256(kFold128);
    while (n >= 128) {
      PrefetchAhead(p, 128);
      x0 = Fold256(x0, k128, Take256<kCopy>(p, d));
      x1 = Fold256(x1, k128, Take256<kCopy>(p + 32, d + 32));
      x2 = Fold256(x2, k128, Take256<kCopy>(p + 64, d + 64));
      x3 = Fold256(x3, k128, Take256<kCopy>(p + 96, d + 96));
      Advance<kCopy>(p, d, 128);
      n -= 128;
    }
    __m256i x = Fold256(x0, Constants256(kFold96), x3);
    x = Fold256(x1, Constants256(kFold64), x);
    x = Fold256(x2, Constants256(kFold32), x);
    const __m256i k32 = Constants256(kFold32);
    while (n >= 32) {
      x = Fold256(x, k32, Take256<kCopy>(p, d));
      Advance<kCopy>(p, d, 32);
      n -= 32;
    }
    const __m128i k16 = _mm_set_epi64x(static_cast<long long>(kFold16.second),
                                       static_cast<long long>(kFold16.first));
    __m128i y = Fold128Avx2(_mm256_castsi256_si128(x), k16,
                            _mm256_extracti128_si256(x, 1));
    while (n >= 16) {
      y = Fold128Avx2(y, k16, Take128Avx2<kCopy>(p, d));
      Advance<kCopy>(p, d, 16);
      n -= 16;
    }
    const auto low = static_cast<uint64_t>(_mm_cvtsi128_si64(y));
    const auto high = static_cast<uint64_t>(_mm_extract_epi64(y, 1));
    _mm256_zeroupper();  // as in ExtendFoldRegister
    reg = static_cast<uint32_t>(_mm_crc32_u64(_mm_crc32_u64(0, low), high));
  }
  if constexpr (kCopy) {
    if (n > 0) std::memcpy(d, p, n);
  }
  return ExtendHardwareRegister(reg, p, n);
}

SHARDQ_FOLD256_TARGET uint32_t ExtendFold256Register(uint32_t reg,
                                                     const char* p,
                                                     size_t n) {
  return Fold256Register<false>(reg, p, n, nullptr);
}

SHARDQ_FOLD256_TARGET uint32_t CopyFold256Register(uint32_t reg,
                                                   const char* p, size_t n,
                                                   char* d) {
  return Fold256Register<true>(reg, p, n, d);
}

#undef SHARDQ_FOLD256_TARGET

bool Fold256Available() {
  static const bool available = [] {
    __builtin_cpu_init();
    return HardwareCrc32cAvailable() &&
           __builtin_cpu_supports("avx2") != 0 &&
           __builtin_cpu_supports("vpclmulqdq") != 0 &&
           __builtin_cpu_supports("pclmul") != 0;
  }();
  return available;
}

bool FoldAvailable() {
  static const bool available = [] {
    __builtin_cpu_init();
    return HardwareCrc32cAvailable() &&
           __builtin_cpu_supports("avx512f") != 0 &&
           __builtin_cpu_supports("vpclmulqdq") != 0 &&
           __builtin_cpu_supports("pclmul") != 0;
  }();
  return available;
}

// The fastest register update this CPU can run with the crc32 instruction.
uint32_t ExtendBestHardwareRegister(uint32_t reg, const char* p, size_t n) {
  if (FoldAvailable()) return ExtendFoldRegister(reg, p, n);
  if (Fold256Available()) return ExtendFold256Register(reg, p, n);
  return ExtendHardwareRegister(reg, p, n);
}

#endif  // SHARDQ_CRC32C_X86

using ExtendRegisterFn = uint32_t (*)(uint32_t, const char*, size_t);
using CopyRegisterFn = uint32_t (*)(uint32_t, const char*, size_t, char*);

// A copying form of `Extend`, for the paths that do not fold: memcpy, then
// the checksum of the source (still in cache).
template <ExtendRegisterFn Extend>
uint32_t CopyThenExtend(uint32_t reg, const char* p, size_t n, char* d) {
  if (n > 0) std::memcpy(d, p, n);
  return Extend(reg, p, n);
}

CopyRegisterFn ChooseCopy() {
#ifdef SHARDQ_CRC32C_X86
  if (FoldAvailable()) return &CopyFoldRegister;
  if (Fold256Available()) return &CopyFold256Register;
  if (HardwareCrc32cAvailable()) return &CopyThenExtend<ExtendHardwareRegister>;
#endif
  return &CopyThenExtend<ExtendPortableRegister>;
}

ExtendRegisterFn ChooseExtend() {
#ifdef SHARDQ_CRC32C_X86
  if (FoldAvailable()) return &ExtendFoldRegister;
  if (Fold256Available()) return &ExtendFold256Register;
  if (HardwareCrc32cAvailable()) return &ExtendHardwareRegister;
#endif
  return &ExtendPortableRegister;
}

}  // namespace

bool HardwareCrc32cAvailable() {
#ifdef SHARDQ_CRC32C_X86
  static const bool available = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") != 0;
  }();
  return available;
#else
  return false;
#endif
}

uint32_t Crc32cExtend(uint32_t crc, const char* data, size_t n) {
  static const ExtendRegisterFn extend = ChooseExtend();
  return ~extend(~crc, data, n);
}

#ifdef SHARDQ_CRC32C_X86
namespace {
__attribute__((target("sse4.2"))) uint32_t HardwareCrc32cOf8(const char* data) {
  return ~static_cast<uint32_t>(
      _mm_crc32_u64(0xffffffffu, DecodeLittleEndian64(data)));
}
}  // namespace
#endif

uint32_t Crc32cOf8(const char* data) {
#ifdef SHARDQ_CRC32C_X86
  if (HardwareCrc32cAvailable()) return HardwareCrc32cOf8(data);
#endif
  return Crc32cExtend(0, data, 8);
}

uint32_t Crc32cExtendCopy(uint32_t crc, const char* data, size_t n, char* dst) {
  static const CopyRegisterFn copy = ChooseCopy();
  return ~copy(~crc, data, n, dst);
}

uint32_t Crc32cPortable(uint32_t crc, const char* data, size_t n) {
  return ~ExtendPortableRegister(~crc, data, n);
}

namespace {

// The public form (pre- and post-inverted) of a register function.
template <ExtendRegisterFn Extend>
uint32_t Public(uint32_t crc, const char* data, size_t n) {
  return ~Extend(~crc, data, n);
}
template <CopyRegisterFn Copy>
uint32_t PublicCopy(uint32_t crc, const char* data, size_t n, char* dst) {
  return ~Copy(~crc, data, n, dst);
}

}  // namespace

std::vector<Crc32cImplementation> AvailableCrc32cImplementations() {
  std::vector<Crc32cImplementation> out = {
      {"portable", &Crc32cPortable,
       &PublicCopy<CopyThenExtend<ExtendPortableRegister>>}};
#ifdef SHARDQ_CRC32C_X86
  if (HardwareCrc32cAvailable()) {
    out.push_back({"crc32", &Public<ExtendHardwareRegister>,
                   &PublicCopy<CopyThenExtend<ExtendHardwareRegister>>});
  }
  if (Fold256Available()) {
    out.push_back({"fold256", &Public<ExtendFold256Register>,
                   &PublicCopy<CopyFold256Register>});
  }
  if (FoldAvailable()) {
    out.push_back({"fold512", &Public<ExtendFoldRegister>,
                   &PublicCopy<CopyFoldRegister>});
  }
#endif
  return out;
}

uint32_t Crc32cHardware(uint32_t crc, const char* data, size_t n) {
#ifdef SHARDQ_CRC32C_X86
  // The same code as Crc32cExtend uses, so that tests comparing it with
  // the portable tables check the folding path too where the CPU has it.
  if (HardwareCrc32cAvailable()) {
    return ~ExtendBestHardwareRegister(~crc, data, n);
  }
#endif
  return Crc32cPortable(crc, data, n);
}

}  // namespace shardq
