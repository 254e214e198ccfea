#include "src/server/listen_address.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace shardq {
namespace {

TEST(ParseListenAddress, KeepsHostAndPort) {
  absl::StatusOr<ListenAddress> a = ParseListenAddress("--listen", "127.0.0.1:7077");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 7077);
  EXPECT_EQ(a->ToString(), "127.0.0.1:7077");
  a = ParseListenAddress("--http", "[::1]:0");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->host, "[::1]");
  EXPECT_EQ(a->port, 0);
}

TEST(ParseListenAddress, RefusesPortsOutsideTheRangeInsteadOfWrappingThem) {
  for (const char* bad : {"127.0.0.1:70000", "127.0.0.1:65536", "127.0.0.1:-1",
                          "127.0.0.1:", "127.0.0.1:x", "127.0.0.1:+80", "127.0.0.1", ":80",
                          "127.0.0.1:99999999999999999999"}) {
    absl::StatusOr<ListenAddress> a = ParseListenAddress("--http", bad);
    ASSERT_FALSE(a.ok()) << bad;
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(a.status().message().find("--http"), absl::string_view::npos) << a.status();
  }
  absl::StatusOr<ListenAddress> a = ParseListenAddress("--listen", "127.0.0.1:70000");
  EXPECT_NE(a.status().message().find("port '70000' is not in 1..65535"),
            absl::string_view::npos)
      << a.status();
}

TEST(ExplainBindFailure, NamesAnAddressSomeoneListensOn) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ListenAddress taken{"127.0.0.1", ntohs(addr.sin_port)};
  absl::Status s = ExplainBindFailure("--listen", taken);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("address " + taken.ToString() + " already in use"),
            absl::string_view::npos)
      << s;
  ::close(fd);
  EXPECT_TRUE(ExplainBindFailure("--listen", taken).ok());
}

TEST(CheckUnixSocketFree, NamesASocketSomeoneAcceptsOnAndAllowsAStaleFile) {
  const std::string path = testing::TempDir() + "/listen-" + std::to_string(::getpid()) + ".sock";
  ::unlink(path.c_str());
  EXPECT_TRUE(CheckUnixSocketFree("--listen", path).ok());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof(addr.sun_path));
  std::memcpy(addr.sun_path, path.data(), path.size());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  absl::Status s = CheckUnixSocketFree("--listen", path);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("address unix:" + path + " already in use"), absl::string_view::npos)
      << s;
  ::close(fd);  // the file stays: a stale socket, free to take
  EXPECT_TRUE(CheckUnixSocketFree("--listen", path).ok());
  ::unlink(path.c_str());
}

TEST(ConstantTimeEquals, ComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("secret", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secreT"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secret2"));
  EXPECT_FALSE(ConstantTimeEquals("", "x"));
}

}  // namespace
}  // namespace shardq
