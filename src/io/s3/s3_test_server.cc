#include "src/io/s3/s3_test_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"

namespace shardq {
namespace testing_util {
namespace {

constexpr size_t kSendPiece = 64 << 10;

const char* Reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 206: return "Partial Content";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 412: return "Precondition Failed";
    case 416: return "Requested Range Not Satisfiable";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Status";
  }
}

const char* ErrorCode(int status) {
  switch (status) {
    case 403: return "AccessDenied";
    case 404: return "NoSuchKey";
    case 412: return "PreconditionFailed";
    case 416: return "InvalidRange";
    case 503: return "SlowDown";
    default: return status >= 500 ? "InternalError" : "InvalidRequest";
  }
}

// Sends all of [data, data + n); false when the connection is gone.
bool SendAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t sent = ::send(fd, data, std::min(n, kSendPiece), MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) return false;
    data += sent;
    n -= static_cast<size_t>(sent);
  }
  return true;
}

// Parses "bytes=F-L" / "bytes=F-" into request->first / last.
void ParseRange(absl::string_view value, S3TestServer::Request* request) {
  if (!absl::ConsumePrefix(&value, "bytes=")) return;
  const size_t dash = value.find('-');
  if (dash == absl::string_view::npos) return;
  int64_t first = -1;
  int64_t last = -1;
  if (!absl::SimpleAtoi(value.substr(0, dash), &first)) return;
  if (dash + 1 < value.size() && !absl::SimpleAtoi(value.substr(dash + 1), &last)) {
    return;
  }
  request->first = first;
  request->last = last;
}

}  // namespace

absl::StatusOr<std::unique_ptr<S3TestServer>> S3TestServer::Start(
    std::string object, std::string etag, Script script) {
  std::unique_ptr<S3TestServer> server(
      new S3TestServer(std::move(object), std::move(etag), std::move(script)));
  server->listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (server->listen_fd_ < 0) return absl::InternalError("socket failed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  if (::bind(server->listen_fd_, reinterpret_cast<sockaddr*>(&address),
             sizeof(address)) != 0 ||
      ::listen(server->listen_fd_, 64) != 0 ||
      ::getsockname(server->listen_fd_, reinterpret_cast<sockaddr*>(&address),
                    &length) != 0) {
    return absl::InternalError(
        absl::StrCat("listen on 127.0.0.1: ", std::strerror(errno)));
  }
  server->port_ = ntohs(address.sin_port);
  S3TestServer* raw = server.get();
  server->accept_thread_ = std::thread([raw] { raw->Accept(); });
  return server;
}

S3TestServer::S3TestServer(std::string object, std::string etag, Script script)
    : object_(std::move(object)),
      etag_(std::move(etag)),
      script_(std::move(script)) {}

S3TestServer::~S3TestServer() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (listen_fd_ >= 0) ::shutdown(listen_fd_, SHUT_RDWR);  // wakes accept
  if (accept_thread_.joinable()) accept_thread_.join();
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);  // wakes recv / send
    threads = std::move(connection_threads_);
  }
  for (std::thread& thread : threads) thread.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

std::string S3TestServer::endpoint() const {
  return absl::StrCat("http://127.0.0.1:", port_);
}

S3TestServer::Log S3TestServer::log() const {
  absl::MutexLock lock(&mu_);
  return log_;
}

bool S3TestServer::AwaitLog(const std::function<bool(const Log&)>& done,
                            absl::Duration bound) const {
  absl::MutexLock lock(&mu_);
  auto holds = [this, &done]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return done(log_);
  };
  return mu_.AwaitWithTimeout(absl::Condition(&holds), bound);
}

void S3TestServer::Accept() {
  for (int connection = 0;; ++connection) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    absl::MutexLock lock(&mu_);
    if (fd < 0) {
      if (stopping_) return;
      continue;  // EINTR, ECONNABORTED: the next one
    }
    if (stopping_) {
      ::close(fd);
      return;
    }
    open_fds_.insert(fd);
    connection_threads_.emplace_back([this, fd, connection] { Serve(fd, connection); });
  }
}

void S3TestServer::Serve(int fd, int connection) {
  std::string pending;
  bool client_closed = false;
  while (true) {
    const size_t end_of_head = pending.find("\r\n\r\n");
    if (end_of_head == std::string::npos) {
      char data[4096];
      const ssize_t got = ::recv(fd, data, sizeof(data), 0);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {  // FIN or RST from the client, or the server stops
        client_closed = true;
        break;
      }
      pending.append(data, static_cast<size_t>(got));
      continue;
    }
    // GET and HEAD carry no body: the head is the whole request.
    const std::string head = pending.substr(0, end_of_head);
    pending.erase(0, end_of_head + 4);
    Request request;
    request.connection = connection;
    const std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
    const std::vector<absl::string_view> words = absl::StrSplit(lines[0], ' ');
    if (words.size() >= 2) {
      request.method = std::string(words[0]);
      request.path = std::string(words[1]);
    }
    for (size_t i = 1; i < lines.size(); ++i) {
      const size_t colon = lines[i].find(':');
      if (colon == absl::string_view::npos) continue;
      const std::string name = absl::AsciiStrToLower(lines[i].substr(0, colon));
      absl::string_view value = absl::StripAsciiWhitespace(lines[i].substr(colon + 1));
      if (name == "range") ParseRange(value, &request);
      if (name == "if-match") {
        absl::ConsumePrefix(&value, "\"");
        absl::ConsumeSuffix(&value, "\"");
        request.if_match = std::string(value);
      }
    }
    {
      absl::MutexLock lock(&mu_);
      request.index = static_cast<int>(log_.requests.size());
      log_.requests.push_back(request);
    }
    if (!Answer(fd, request)) break;
  }
  absl::MutexLock lock(&mu_);
  if (client_closed && !stopping_) log_.closed_by_client.insert(connection);
  open_fds_.erase(fd);
  ::close(fd);
}

bool S3TestServer::Answer(int fd, const Request& request) {
  const Reply reply = script_ != nullptr ? script_(request) : Reply();
  const int64_t size = static_cast<int64_t>(object_.size());
  int status = reply.status;
  int64_t first = 0;
  int64_t last = size - 1;
  if (status == 0) {
    if (!request.if_match.empty() && request.if_match != etag_) {
      status = 412;
    } else if (request.first >= 0 && request.first >= size) {
      status = 416;
    } else if (request.first >= 0) {
      status = 206;
      first = request.first;
      if (request.last >= 0) last = std::min(request.last, size - 1);
    } else {
      status = 200;
    }
  }
  std::string headers = absl::StrCat("HTTP/1.1 ", status, " ", Reason(status), "\r\n");
  absl::string_view body;
  std::string error;
  if (status == 200 || status == 206) {
    absl::StrAppend(&headers, "ETag: \"", etag_, "\"\r\n",
                    "Content-Type: application/octet-stream\r\n");
    if (status == 206) {
      absl::StrAppend(&headers, "Content-Range: bytes ", first, "-", last, "/", size, "\r\n");
    }
    body = absl::string_view(object_).substr(static_cast<size_t>(first),
                                              static_cast<size_t>(last - first + 1));
  } else {
    if (status == 416) absl::StrAppend(&headers, "Content-Range: bytes */", size, "\r\n");
    error = absl::StrCat(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>", ErrorCode(status),
        "</Code><Message>scripted ", status, "</Message><Resource>", request.path,
        "</Resource></Error>");
    absl::StrAppend(&headers, "Content-Type: application/xml\r\n");
    body = error;
  }
  absl::StrAppend(&headers, "Content-Length: ", body.size(), "\r\n\r\n");
  if (request.method == "HEAD") body = absl::string_view();
  const bool cut = reply.cut_after >= 0 &&
                   static_cast<size_t>(reply.cut_after) < body.size();
  if (cut) body = body.substr(0, static_cast<size_t>(reply.cut_after));
  const bool sent = SendAll(fd, headers.data(), headers.size()) &&
                    SendAll(fd, body.data(), body.size());
  if (!sent) {
    absl::MutexLock lock(&mu_);
    if (!stopping_) log_.closed_by_client.insert(request.connection);
    return false;
  }
  return !cut;
}

std::string TestObject(size_t n) {
  std::mt19937 rng(20260212);
  std::string bytes(n, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  return bytes;
}

std::unique_ptr<S3TestServer> ServeOrFail(const std::string& object, const std::string& etag,
                                          S3TestServer::Script script) {
  absl::StatusOr<std::unique_ptr<S3TestServer>> server =
      S3TestServer::Start(object, etag, std::move(script));
  if (!server.ok()) {
    ADD_FAILURE() << "S3TestServer::Start: " << server.status();
    return nullptr;
  }
  return *std::move(server);
}

}  // namespace testing_util
}  // namespace shardq
