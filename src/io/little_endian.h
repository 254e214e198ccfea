// Little-endian fixed-width integers (TFRecord framing, CRC32C input), and
// the check of a TFRecord header's length checksum: the one place they are
// encoded and decoded.
#ifndef SHARDQ_IO_LITTLE_ENDIAN_H_
#define SHARDQ_IO_LITTLE_ENDIAN_H_

#include <cstdint>
#include <cstring>
#include <string>

namespace shardq {

// T is uint32_t or uint64_t.
template <typename T>
inline T DecodeLittleEndian(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof(value));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  if constexpr (sizeof(T) == 8) {
    value = __builtin_bswap64(value);
  } else {
    value = __builtin_bswap32(value);
  }
#endif
  return value;
}

inline uint32_t DecodeLittleEndian32(const char* p) {
  return DecodeLittleEndian<uint32_t>(p);
}

inline uint64_t DecodeLittleEndian64(const char* p) {
  return DecodeLittleEndian<uint64_t>(p);
}

inline void EncodeLittleEndian64(uint64_t value, char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(value >> (8 * i));
}

inline void AppendLittleEndian32(uint32_t value, std::string* out) {
  char bytes[4];
  for (int i = 0; i < 4; ++i) bytes[i] = static_cast<char>(value >> (8 * i));
  out->append(bytes, sizeof(bytes));
}

}  // namespace shardq

#endif  // SHARDQ_IO_LITTLE_ENDIAN_H_
