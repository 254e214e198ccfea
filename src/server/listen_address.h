// The addresses a coordinator listens on (--listen for gRPC, --http for the
// status page): parsed once at the boundary, and, when a bind fails, the
// reason found and named. Also the token comparison both servers use.
// Pure functions, thread-safe.
#ifndef SHARDQ_SERVER_LISTEN_ADDRESS_H_
#define SHARDQ_SERVER_LISTEN_ADDRESS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardq {

struct ListenAddress {
  // As given: a name, an IPv4 address or a bracketed IPv6 one ("[::1]").
  std::string host;
  // 1..65535, or 0: the kernel picks a free port.
  int port = 0;

  std::string ToString() const;  // "host:port"
};

// `value` as HOST:PORT; INVALID_ARGUMENT naming `flag` and the value when
// the host is missing or the port is not a decimal number in 0..65535
// (gRPC itself would take 70000 as 70000 mod 65536).
absl::StatusOr<ListenAddress> ParseListenAddress(absl::string_view flag,
                                                 absl::string_view value);

// Why `address` could not be bound, found by binding a probe socket to it
// the way the servers do (SO_REUSEADDR, never SO_REUSEPORT):
// UNAVAILABLE "address H:P already in use" for EADDRINUSE, UNAVAILABLE
// naming the address and errno otherwise (for example an address that is
// not local), INVALID_ARGUMENT naming `flag` when the host does not
// resolve. OK when the probe binds, so the failure lay elsewhere.
absl::Status ExplainBindFailure(absl::string_view flag, const ListenAddress& address);

// For gRPC's "unix:PATH" addresses (which gRPC binds after deleting any
// file at PATH, taking the socket from whoever listens there): UNAVAILABLE
// "address unix:PATH already in use" when a process accepts connections
// at PATH; OK when nothing does (a stale socket file is fine).
absl::Status CheckUnixSocketFree(absl::string_view flag, absl::string_view path);

// True when `a` equals `b`; the time taken does not depend on where they
// differ (only on their lengths).
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

}  // namespace shardq

#endif  // SHARDQ_SERVER_LISTEN_ADDRESS_H_
