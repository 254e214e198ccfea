#include "src/io/crc32c.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shardq {
namespace {

using Crc32cFn = uint32_t (*)(uint32_t, const char*, size_t);

struct Implementation {
  const char* name;
  Crc32cFn fn;
};

std::vector<Implementation> Implementations() {
  std::vector<Implementation> out = {{"dispatch", &Crc32cExtend},
                                     {"hardware", &Crc32cHardware}};
  for (const Crc32cImplementation& impl : AvailableCrc32cImplementations()) {
    out.push_back({impl.name, impl.extend});
  }
  return out;
}

uint32_t CrcOf(Crc32cFn fn, const std::string& s) {
  return fn(0, s.data(), s.size());
}

// RFC 3720 (iSCSI), appendix B.4.
TEST(Crc32c, MatchesRfc3720TestVectors) {
  std::string zeros(32, '\0');
  std::string ones(32, '\xff');
  std::string ascending(32, '\0');
  std::string descending(32, '\0');
  for (int i = 0; i < 32; ++i) {
    ascending[i] = static_cast<char>(i);
    descending[i] = static_cast<char>(31 - i);
  }
  const unsigned char read_pdu[48] = {
      0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
      0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  const std::string pdu(reinterpret_cast<const char*>(read_pdu),
                        sizeof(read_pdu));
  for (const Implementation& impl : Implementations()) {
    SCOPED_TRACE(impl.name);
    EXPECT_EQ(CrcOf(impl.fn, zeros), 0x8A9136AAu);
    EXPECT_EQ(CrcOf(impl.fn, ones), 0x62A8AB43u);
    EXPECT_EQ(CrcOf(impl.fn, ascending), 0x46DD794Eu);
    EXPECT_EQ(CrcOf(impl.fn, descending), 0x113FDB5Cu);
    EXPECT_EQ(CrcOf(impl.fn, pdu), 0xD9963A56u);
  }
}

TEST(Crc32c, MatchesStandardCheckValue) {
  for (const Implementation& impl : Implementations()) {
    SCOPED_TRACE(impl.name);
    EXPECT_EQ(CrcOf(impl.fn, "123456789"), 0xE3069283u);
    EXPECT_EQ(CrcOf(impl.fn, ""), 0u);
  }
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
}

TEST(Crc32c, ExtendEqualsCrcOfConcatenation) {
  const std::string a = "hello, ";
  const std::string b = "world";
  EXPECT_EQ(Crc32cExtend(Crc32c(a), b.data(), b.size()), Crc32c(a + b));
  EXPECT_EQ(Crc32cPortable(Crc32c(a), b.data(), b.size()), Crc32c(a + b));
  EXPECT_EQ(Crc32cHardware(Crc32c(a), b.data(), b.size()), Crc32c(a + b));
}

TEST(Crc32c, HardwareAndPortableAgreeOnRandomInputs) {
  if (!HardwareCrc32cAvailable()) {
    GTEST_SKIP() << "no SSE4.2 on this CPU; Crc32cHardware is the portable code";
  }
  std::mt19937_64 rng(20240605);
  std::string buffer(3 * 1024 * 4 + 64, '\0');
  for (char& c : buffer) c = static_cast<char>(rng());
  std::uniform_int_distribution<size_t> offset_dist(0, 15);
  // Lengths cross the 3 x 1 KiB blocks of the hardware path.
  std::uniform_int_distribution<size_t> length_dist(0, 3 * 1024 * 4);
  for (int trial = 0; trial < 2000; ++trial) {
    const size_t offset = offset_dist(rng);
    const size_t length = length_dist(rng) % (buffer.size() - offset + 1);
    const uint32_t seed_crc = trial % 2 == 0 ? 0 : static_cast<uint32_t>(rng());
    ASSERT_EQ(Crc32cHardware(seed_crc, buffer.data() + offset, length),
              Crc32cPortable(seed_crc, buffer.data() + offset, length))
        << "offset " << offset << " length " << length;
  }
  std::string big(1 << 20 | 5, '\0');
  for (char& c : big) c = static_cast<char>(rng());
  EXPECT_EQ(Crc32cHardware(0, big.data(), big.size()),
            Crc32cPortable(0, big.data(), big.size()));
}

// Every implementation this CPU runs against the portable tables, over
// lengths that cross each one's block sizes (16 to 3 KiB steps) and start
// from every alignment, from a zero and from a random register.
TEST(Crc32c, EveryAvailableImplementationAgreesWithThePortableTables) {
  const std::vector<Crc32cImplementation> impls =
      AvailableCrc32cImplementations();
  ASSERT_FALSE(impls.empty());
  EXPECT_STREQ(impls.front().name, "portable");
  std::mt19937_64 rng(20261205);
  std::string buffer(4 * 3072 + 64, '\0');
  for (char& c : buffer) c = static_cast<char>(rng());
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 300; ++n) lengths.push_back(n);
  for (size_t n : {383, 384, 385, 511, 512, 513, 1000, 1023, 1024, 1025, 3071,
                   3072, 3073, 4 * 3072}) {
    lengths.push_back(n);
  }
  for (const Crc32cImplementation& impl : impls) {
    SCOPED_TRACE(impl.name);
    for (size_t length : lengths) {
      for (size_t offset = 0; offset < 64; offset += 7) {
        const char* p = buffer.data() + offset;
        const uint32_t seed = static_cast<uint32_t>(rng());
        ASSERT_EQ(impl.extend(0, p, length), Crc32cPortable(0, p, length))
            << "offset " << offset << " length " << length;
        ASSERT_EQ(impl.extend(seed, p, length), Crc32cPortable(seed, p, length))
            << "offset " << offset << " length " << length;
        // The copying form: the same checksum, and exactly the n bytes
        // copied (the guard bytes around them untouched), to a destination
        // at another alignment.
        std::string copy(length + 2 * 64, '#');
        char* dst = copy.data() + 64 + (offset * 3) % 32;
        ASSERT_EQ(impl.extend_copy(seed, p, length, dst), Crc32cPortable(seed, p, length))
            << "offset " << offset << " length " << length;
        ASSERT_EQ(std::string(dst, length), std::string(p, length))
            << "offset " << offset << " length " << length;
        const size_t before = static_cast<size_t>(dst - copy.data());
        ASSERT_EQ(copy.substr(0, before), std::string(before, '#'));
        ASSERT_EQ(copy.substr(before + length), std::string(copy.size() - before - length, '#'));
      }
    }
  }
}

TEST(Crc32c, ExtendCopyCopiesAndChecksums) {
  std::mt19937_64 rng(11);
  std::string data(70000, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  std::string copy(data.size(), '\0');
  for (size_t n : {0, 1, 15, 16, 127, 128, 255, 256, 1000, 4096, 70000}) {
    ASSERT_EQ(Crc32cExtendCopy(7, data.data(), n, copy.data()),
              Crc32cExtend(7, data.data(), n));
    ASSERT_EQ(copy.compare(0, n, data, 0, n), 0) << n;
  }
}

TEST(Crc32c, OfEightBytesEqualsThePortableTables) {
  std::mt19937_64 rng(13);
  std::string data(8 * 1000 + 7, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  // Every alignment, and lengths a TFRecord header really holds.
  for (size_t at = 0; at + 8 <= data.size(); at += 7) {
    ASSERT_EQ(Crc32cOf8(data.data() + at),
              Crc32cPortable(0, data.data() + at, 8))
        << at;
  }
  const std::string zeros(8, '\0');
  EXPECT_EQ(Crc32cOf8(zeros.data()), Crc32c(zeros));
}

TEST(Crc32c, ExtendingPieceByPieceEqualsOneShot) {
  std::mt19937_64 rng(7);
  std::string data(20000, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  uint32_t crc = 0;
  size_t pos = 0;
  while (pos < data.size()) {
    const size_t n = std::min<size_t>(rng() % 5000, data.size() - pos);
    crc = Crc32cExtend(crc, data.data() + pos, n);
    pos += n;
  }
  EXPECT_EQ(crc, Crc32c(data));
}

TEST(Crc32c, UnmaskInvertsMask) {
  EXPECT_EQ(MaskCrc(0), 0xa282ead8u);
  std::mt19937 rng(1);
  for (int i = 0; i < 1000; ++i) {
    const uint32_t crc = rng();
    EXPECT_EQ(UnmaskCrc(MaskCrc(crc)), crc);
  }
  const uint32_t crc = Crc32c("foo");
  EXPECT_EQ(MaskCrc(crc), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

}  // namespace
}  // namespace shardq
