#include "src/io/crc32c.h"

#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SHARDQ_CRC32C_X86 1
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

inline uint64_t LoadLittleEndian64(const char* p) {
  uint64_t value;
  std::memcpy(&value, p, sizeof(value));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  value = __builtin_bswap64(value);
#endif
  return value;
}

uint32_t ExtendPortableRegister(uint32_t reg, const char* p, size_t n) {
  const auto& t = kByteTables.t;
  while (n >= 8) {
    const uint64_t v = LoadLittleEndian64(p) ^ reg;
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
constexpr size_t kStride = 1024;

struct ShiftTables {
  uint32_t t[4][256];
};

constexpr ShiftTables MakeShiftTables() {
  uint32_t basis[32] = {};
  for (int bit = 0; bit < 32; ++bit) {
    uint32_t reg = 1u << bit;
    for (size_t i = 0; i < kStride; ++i) {
      reg = (reg >> 8) ^ kByteTables.t[0][reg & 0xffu];
    }
    basis[bit] = reg;
  }
  ShiftTables tables{};
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

constexpr ShiftTables kShiftTables = MakeShiftTables();

inline uint32_t ShiftByStride(uint32_t reg) {
  const auto& t = kShiftTables.t;
  return t[0][reg & 0xffu] ^ t[1][(reg >> 8) & 0xffu] ^
         t[2][(reg >> 16) & 0xffu] ^ t[3][reg >> 24];
}

__attribute__((target("sse4.2"))) uint32_t ExtendHardwareRegister(
    uint32_t reg, const char* p, size_t n) {
  // Align so that the 8-byte loads never straddle a cache line.
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7u) != 0) {
    reg = _mm_crc32_u8(reg, static_cast<uint8_t>(*p));
    ++p;
    --n;
  }
  uint64_t reg0 = reg;
  while (n >= 3 * kStride) {
    uint64_t reg1 = 0;
    uint64_t reg2 = 0;
    for (size_t i = 0; i < kStride; i += 8) {
      reg0 = _mm_crc32_u64(reg0, LoadLittleEndian64(p + i));
      reg1 = _mm_crc32_u64(reg1, LoadLittleEndian64(p + kStride + i));
      reg2 = _mm_crc32_u64(reg2, LoadLittleEndian64(p + 2 * kStride + i));
    }
    reg0 = ShiftByStride(ShiftByStride(static_cast<uint32_t>(reg0)) ^
                         static_cast<uint32_t>(reg1)) ^
           static_cast<uint32_t>(reg2);
    p += 3 * kStride;
    n -= 3 * kStride;
  }
  while (n >= 8) {
    reg0 = _mm_crc32_u64(reg0, LoadLittleEndian64(p));
    p += 8;
    n -= 8;
  }
  reg = static_cast<uint32_t>(reg0);
  for (; n > 0; --n) reg = _mm_crc32_u8(reg, static_cast<uint8_t>(*p++));
  return reg;
}

#endif  // SHARDQ_CRC32C_X86

using ExtendRegisterFn = uint32_t (*)(uint32_t, const char*, size_t);

ExtendRegisterFn ChooseExtend() {
#ifdef SHARDQ_CRC32C_X86
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

uint32_t Crc32cPortable(uint32_t crc, const char* data, size_t n) {
  return ~ExtendPortableRegister(~crc, data, n);
}

uint32_t Crc32cHardware(uint32_t crc, const char* data, size_t n) {
#ifdef SHARDQ_CRC32C_X86
  if (HardwareCrc32cAvailable()) return ~ExtendHardwareRegister(~crc, data, n);
#endif
  return Crc32cPortable(crc, data, n);
}

}  // namespace shardq
