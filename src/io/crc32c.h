// CRC32C (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78), the
// checksum of TFRecord files, and the TFRecord "masked" form of it.
//
// Crc32c()/Crc32cExtend() use the fastest implementation the CPU can run
// (checked once, at the first call): carry-less multiplication folding
// (VPCLMULQDQ, on 512- or 256-bit registers), else the SSE4.2 crc32
// instruction, else a portable slicing-by-8 table implementation. Every
// implementation is exposed so that tests can check that they agree.
//
// All functions are pure and thread-safe.
#ifndef SHARDQ_IO_CRC32C_H_
#define SHARDQ_IO_CRC32C_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "src/io/little_endian.h"

namespace shardq {

// Returns the CRC32C of data[0, n) appended to a message whose CRC32C is
// `crc`: Crc32cExtend(Crc32c(a), b.data(), b.size()) == Crc32c(a + b), and
// Crc32cExtend(0, p, n) == Crc32c(absl::string_view(p, n)).
uint32_t Crc32cExtend(uint32_t crc, const char* data, size_t n);

// Copies data[0, n) to dst (n bytes, not overlapping data) and returns
// Crc32cExtend(crc, data, n): one pass over the data where the CPU folds
// with VPCLMULQDQ (the loads the checksum makes are stored), a memcpy and
// then the checksum of the copied bytes (still in cache) elsewhere.
uint32_t Crc32cExtendCopy(uint32_t crc, const char* data, size_t n, char* dst);

// Crc32cExtend(0, data, 8): the checksum of a TFRecord length, with one
// crc32 instruction where the CPU has it (once per record, so the general
// path's dispatch and loop set-up would cost more than the checksum).
uint32_t Crc32cOf8(const char* data);

// Returns the CRC32C of `data`.
inline uint32_t Crc32c(absl::string_view data) {
  return Crc32cExtend(0, data.data(), data.size());
}

// Same contract as Crc32cExtend, always computed with the portable tables.
uint32_t Crc32cPortable(uint32_t crc, const char* data, size_t n);

// True when this CPU has the SSE4.2 crc32 instruction.
bool HardwareCrc32cAvailable();

// Same contract as Crc32cExtend, computed with the SSE4.2 instruction. When
// HardwareCrc32cAvailable() is false it falls back to Crc32cPortable (it
// never executes an instruction the CPU lacks).
uint32_t Crc32cHardware(uint32_t crc, const char* data, size_t n);

// One implementation of Crc32cExtend's contract, by name: "portable",
// "crc32" (the SSE4.2 instruction, three streams), "fold256" (VPCLMULQDQ
// on 256-bit registers) or "fold512" (VPCLMULQDQ with AVX-512).
struct Crc32cImplementation {
  const char* name;
  uint32_t (*extend)(uint32_t crc, const char* data, size_t n);
  // Crc32cExtendCopy's contract, on this implementation.
  uint32_t (*extend_copy)(uint32_t crc, const char* data, size_t n, char* dst);
};

// Every implementation this CPU can run, the portable one first and the one
// Crc32cExtend uses last; for tests and benchmarks that compare them.
std::vector<Crc32cImplementation> AvailableCrc32cImplementations();

// TFRecord stores CRCs masked, because the CRC of a string that itself
// contains embedded CRCs is weak. MaskCrc rotates right by 15 bits and adds
// a constant; UnmaskCrc(MaskCrc(c)) == c for every c.
inline uint32_t MaskCrc(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
inline uint32_t UnmaskCrc(uint32_t masked) {
  const uint32_t rotated = masked - 0xa282ead8u;
  return (rotated >> 17) | (rotated << 15);
}

// True when the 12 bytes at `header` start a TFRecord: the masked CRC32C
// of the 8 length bytes matches the 4 that follow (little endian).
inline bool TFRecordLengthCrcMatches(const char* header) {
  return Crc32c(absl::string_view(header, 8)) ==
         UnmaskCrc(DecodeLittleEndian32(header + 8));
}

}  // namespace shardq

#endif  // SHARDQ_IO_CRC32C_H_
