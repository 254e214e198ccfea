#include "src/server/listen_address.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace shardq {

std::string ListenAddress::ToString() const { return absl::StrCat(host, ":", port); }

absl::StatusOr<ListenAddress> ParseListenAddress(absl::string_view flag,
                                                 absl::string_view value) {
  const size_t colon = value.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", value, "' is not HOST:PORT (for example 127.0.0.1:7077)"));
  }
  const absl::string_view port = value.substr(colon + 1);
  int number = -1;
  const bool digits = !port.empty() && port.size() <= 6 &&
                      std::all_of(port.begin(), port.end(), absl::ascii_isdigit);
  if (!digits || !absl::SimpleAtoi(port, &number) || number > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", value, "': port '", port,
                     "' is not in 1..65535 (or 0 to pick a free port)"));
  }
  ListenAddress out;
  out.host = std::string(value.substr(0, colon));
  out.port = number;
  return out;
}

absl::Status ExplainBindFailure(absl::string_view flag, const ListenAddress& address) {
  absl::string_view host = address.host;
  if (absl::ConsumePrefix(&host, "[")) absl::ConsumeSuffix(&host, "]");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string port = absl::StrCat(address.port);
  if (int rc = ::getaddrinfo(std::string(host).c_str(), port.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " '", address.ToString(),
                                                   "': cannot resolve the host: ",
                                                   ::gai_strerror(rc)));
  }
  absl::Status why = absl::OkStatus();
  for (addrinfo* a = found; a != nullptr && why.ok(); a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 1) != 0) {
      const int error = errno;
      why = error == EADDRINUSE
                ? absl::UnavailableError(
                      absl::StrCat("address ", address.ToString(), " already in use (", flag,
                                   "); is another shardq serve running there?"))
                : absl::UnavailableError(absl::StrCat("cannot listen on ", address.ToString(),
                                                      " (", flag, "): ",
                                                      std::strerror(error)));
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return why;
}

absl::Status CheckUnixSocketFree(absl::string_view flag, absl::string_view path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " 'unix:", path, "': the path must have 1..", sizeof(addr.sun_path) - 1, " bytes"));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::OkStatus();  // let the bind report it
  const bool in_use = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  if (in_use) {
    return absl::UnavailableError(absl::StrCat("address unix:", path, " already in use (", flag,
                                               "); is another shardq serve running there?"));
  }
  return absl::OkStatus();
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace shardq
