// A small HTTP/1.1 server on 127.0.0.1 for tests of the S3 client and its
// streams: it serves one object (at any path) to HEAD and ranged GET, the
// way an S3 server does (206 with Content-Range, 416 past the end, 412 when
// If-Match names another ETag, kept-alive connections), and does to each
// request what the test's script says: answer, fail with an HTTP status, or
// cut the connection after some of the body. It writes down every request
// and every connection that the client closed, and lets a test wait for
// them. Test-only. Thread-safe.
#ifndef SHARDQ_IO_S3_S3_TEST_SERVER_H_
#define SHARDQ_IO_S3_S3_TEST_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace shardq {
namespace testing_util {

class S3TestServer {
 public:
  struct Request {
    int index = 0;       // in the order of arrival, from 0
    int connection = 0;  // the TCP connection that carried it, from 0
    std::string method;  // "GET" or "HEAD"
    std::string path;
    // "Range: bytes=first-last"; -1 where absent (last -1: to the end).
    int64_t first = -1;
    int64_t last = -1;
    std::string if_match;  // without its quotes; "" when absent
  };

  struct Reply {
    // 0: serve the object (206 for a range inside it, 416 past its end,
    // 412 for an If-Match of another ETag, 200 without a Range). Else this
    // status, with an S3 error document as its body.
    int status = 0;
    // >= 0: the connection is closed after this many bytes of the body
    // (the headers promise all of them).
    int64_t cut_after = -1;
  };
  using Script = std::function<Reply(const Request&)>;

  // What the server has seen so far.
  struct Log {
    std::vector<Request> requests;
    // Connections the client closed (the server did not).
    std::set<int> closed_by_client;
  };

  // Listens on an ephemeral port of 127.0.0.1. `script` (null: serve every
  // request) is called once per request, on the connection's thread.
  static absl::StatusOr<std::unique_ptr<S3TestServer>> Start(
      std::string object, std::string etag, Script script = nullptr);
  // Closes every connection and waits for the server's threads.
  ~S3TestServer();
  S3TestServer(const S3TestServer&) = delete;
  S3TestServer& operator=(const S3TestServer&) = delete;

  // "http://127.0.0.1:PORT", for S3Config::endpoint.
  std::string endpoint() const;

  Log log() const;
  // Waits until `done(log)` holds (true) or `bound` has passed (false).
  bool AwaitLog(const std::function<bool(const Log&)>& done,
                absl::Duration bound) const;

 private:
  S3TestServer(std::string object, std::string etag, Script script);
  void Accept();
  void Serve(int fd, int connection);
  // Writes the answer to `request`; false once the connection is done
  // (cut by the script or closed by the client).
  bool Answer(int fd, const Request& request);

  const std::string object_;
  const std::string etag_;
  const Script script_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::thread accept_thread_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Log log_ ABSL_GUARDED_BY(mu_);
  std::set<int> open_fds_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> connection_threads_ ABSL_GUARDED_BY(mu_);
};

// Bytes no shifted or repeated piece of which matches another place (a
// fixed pseudo-random sequence), for the object a test serves.
std::string TestObject(size_t n);

// S3TestServer::Start, as a test uses it: a failure to start is a test
// failure (reported here), and null is returned.
std::unique_ptr<S3TestServer> ServeOrFail(const std::string& object, const std::string& etag,
                                          S3TestServer::Script script = nullptr);

}  // namespace testing_util
}  // namespace shardq

#endif  // SHARDQ_IO_S3_S3_TEST_SERVER_H_
