// S3RangeStream against an in-process HTTP server (s3_test_server.h) that
// serves ranged GETs of a known byte string and cuts, fails or watches the
// connections as each test says: every byte arrives once and in order,
// broken GETs resume from the next byte, 5xx is retried and 4xx is not,
// and an idle reader's GET is parked and resumed. Waits are on what the
// server saw, with generous bounds; nothing sleeps to synchronise.
#include "src/io/s3/s3_stream.h"

#include <algorithm>
#include <thread>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/io/s3/s3_client.h"
#include "src/io/s3/s3_test_server.h"

namespace shardq {
namespace {

using ::shardq::testing_util::S3TestServer;
using ::testing::HasSubstr;
using Request = S3TestServer::Request;
using Reply = S3TestServer::Reply;
using Log = S3TestServer::Log;

constexpr absl::Duration kBound = absl::Seconds(60);
constexpr char kEtag[] = "0123456789abcdef";
const S3Url kUrl{"bucket", "dir/key"};

std::string Object(size_t n) { return testing_util::TestObject(n); }

std::unique_ptr<S3TestServer> Serve(const std::string& object,
                                    S3TestServer::Script script = nullptr) {
  return testing_util::ServeOrFail(object, kEtag, std::move(script));
}

std::shared_ptr<S3Client> ClientOf(const S3TestServer& server) {
  S3Config config;  // anonymous: the test server checks no signature
  config.endpoint = server.endpoint();
  config.retry.max_attempts = 4;
  config.retry.initial_backoff = absl::Milliseconds(1);
  config.retry.max_backoff = absl::Milliseconds(5);
  return std::make_shared<S3Client>(config);
}

S3StreamOptions Options(size_t buffer_bytes, int64_t request_bytes) {
  S3StreamOptions options;
  options.buffer_bytes = buffer_bytes;
  options.request_bytes = request_bytes;
  // Only the park tests park: a slow moment of a loaded machine must not
  // add a GET that a test counts.
  options.park_after = absl::InfiniteDuration();
  return options;
}

struct Drained {
  std::string bytes;
  absl::Status status;  // why the reading stopped, when not at the end
};

// Reads from `offset` to the end of the stream's range or of the object,
// in reads of odd sizes (some small, some past kDirectReadBytes and the
// buffer).
Drained ReadToEnd(S3RangeStream& stream, int64_t offset) {
  static const size_t kSizes[] = {1, 7, 4093, 65537, 13, 100003, 262147, 511};
  Drained out;
  std::string piece;
  for (size_t i = 0; offset < stream.end(); ++i) {
    piece.resize(kSizes[i % (sizeof(kSizes) / sizeof(kSizes[0]))]);
    absl::StatusOr<std::optional<size_t>> got =
        stream.Read(offset, piece.size(), piece.data());
    if (!got.ok()) {
      out.status = got.status();
      return out;
    }
    if (!got->has_value()) {
      out.status = absl::InternalError(absl::StrCat("offset ", offset, " not served"));
      return out;
    }
    if (**got == 0) return out;  // the object ended
    out.bytes.append(piece.data(), **got);
    offset += static_cast<int64_t>(**got);
  }
  return out;
}

std::vector<Request> Gets(const S3TestServer& server) {
  std::vector<Request> gets;
  for (const Request& r : server.log().requests) {
    if (r.method == "GET") gets.push_back(r);
  }
  return gets;
}

TEST(S3RangeStream, DeliversEveryByteOnceInOrderAcrossOddSizedReads) {
  const std::string object = Object((3 << 20) + 17);
  std::unique_ptr<S3TestServer> server = Serve(object);
  ASSERT_NE(server, nullptr);
  const int64_t begin = 1000;
  const int64_t end = static_cast<int64_t>(object.size()) - 5;
  // A 256 KiB buffer, and GETs of 1 MiB: several GETs, each refilling it
  // many times.
  S3RangeStream stream(ClientOf(*server), kUrl, begin, end, "",
                       Options(256 << 10, 1 << 20));
  absl::StatusOr<std::optional<S3ObjectInfo>> answer = stream.Answer();
  ASSERT_TRUE(answer.ok()) << answer.status();
  ASSERT_TRUE(answer->has_value());
  EXPECT_EQ((*answer)->size, static_cast<int64_t>(object.size()));
  EXPECT_EQ((*answer)->etag, kEtag);

  Drained got = ReadToEnd(stream, begin);
  ASSERT_TRUE(got.status.ok()) << got.status;
  ASSERT_EQ(got.bytes.size(), static_cast<size_t>(end - begin));
  EXPECT_TRUE(got.bytes == object.substr(begin, end - begin)) << "bytes differ";

  // The range in consecutive GETs of request_bytes, each after the first
  // pinned to the first answer's ETag.
  const std::vector<Request> gets = Gets(*server);
  const int64_t request = 1 << 20;
  ASSERT_EQ(gets.size(), static_cast<size_t>((end - begin + request - 1) / request));
  int64_t next = begin;
  for (size_t i = 0; i < gets.size(); ++i) {
    EXPECT_EQ(gets[i].path, "/bucket/dir/key");
    EXPECT_EQ(gets[i].first, next) << i;
    EXPECT_EQ(gets[i].last, std::min(next + request, end) - 1) << i;
    EXPECT_EQ(gets[i].if_match, i == 0 ? "" : kEtag) << i;
    next = gets[i].last + 1;
  }
  EXPECT_EQ(next, end);
}

// Lend: views of the buffer itself, mixed with Reads, give every byte once
// and in order; a view never runs across the end of the buffer (it is one
// piece of memory); and a view keeps its bytes while the thread goes on
// filling the rest of the buffer, until the next read.
TEST(S3RangeStream, LentViewsGiveEveryByteOnceAndKeepTheirBytesUntilTheNextRead) {
  const std::string object = Object((2 << 20) + 333);
  std::unique_ptr<S3TestServer> server = Serve(object);
  ASSERT_NE(server, nullptr);
  const size_t capacity = 256 << 10;
  std::atomic<int> copies{0};
  S3StreamOptions options = Options(capacity, 1 << 20);
  options.while_copying = [&] { ++copies; };
  const int64_t begin = 777;
  const int64_t end = static_cast<int64_t>(object.size());
  S3RangeStream stream(ClientOf(*server), kUrl, begin, end, "", options);

  static const size_t kSizes[] = {4096, 1, 100003, 262144, 65537, 13};
  std::string got;
  std::string piece;
  bool checked_while_filling = false;
  for (size_t i = 0; begin + static_cast<int64_t>(got.size()) < end; ++i) {
    const int64_t offset = begin + static_cast<int64_t>(got.size());
    const size_t n = kSizes[i % (sizeof(kSizes) / sizeof(kSizes[0]))];
    if (i % 3 == 2) {  // every third a copying Read
      piece.resize(n);
      absl::StatusOr<std::optional<size_t>> read = stream.Read(offset, n, piece.data());
      ASSERT_TRUE(read.ok()) << read.status();
      ASSERT_TRUE(read->has_value());
      ASSERT_GT(**read, 0u) << offset;
      got.append(piece.data(), **read);
      continue;
    }
    absl::StatusOr<std::optional<absl::string_view>> lent = stream.Lend(offset, n);
    ASSERT_TRUE(lent.ok()) << lent.status();
    ASSERT_TRUE(lent->has_value()) << offset;
    const absl::string_view view = **lent;
    ASSERT_FALSE(view.empty()) << offset;
    ASSERT_LE(view.size(), n);
    ASSERT_LE(view.size(), capacity - static_cast<size_t>(offset) % capacity) << offset;
    if (!checked_while_filling && view.size() < 8192) {
      // The thread fills the rest of the buffer meanwhile (outside the
      // view); the view's bytes stay as they were.
      checked_while_filling = true;
      const int before = copies.load();
      const absl::Time bound = absl::Now() + kBound;
      while (copies.load() < before + 2 && absl::Now() < bound) {
        absl::SleepFor(absl::Milliseconds(1));
      }
    }
    ASSERT_TRUE(view == absl::string_view(object).substr(offset, view.size())) << offset;
    got.append(view.data(), view.size());
  }
  EXPECT_TRUE(checked_while_filling);
  ASSERT_EQ(got.size(), static_cast<size_t>(end - begin));
  EXPECT_TRUE(got == object.substr(begin)) << "bytes differ";
  // Before what the stream still holds: not served.
  absl::StatusOr<std::optional<absl::string_view>> behind = stream.Lend(begin, 10);
  ASSERT_TRUE(behind.ok()) << behind.status();
  EXPECT_FALSE(behind->has_value());
}

// A reader that starts a byte past the stream's beginning (a stream
// opened ahead for the text reader, read by the TFRecord reader), and
// whose read comes while the thread copies the first bytes in, before they
// count as arrived: they are dropped once they are there, and the reader
// gets the rest. (It used to wait forever for the bytes before its offset
// to go, and the full buffer parked the GET.) The first copy waits until
// the reader is about to read, then a moment for the read to reach its
// wait; a slower reader only makes the test pass without meeting the copy.
TEST(S3RangeStream, AReadMadeWhileTheFirstBytesAreCopiedInSkipsThem) {
  const std::string object = Object(1 << 20);
  std::unique_ptr<S3TestServer> server = Serve(object);
  ASSERT_NE(server, nullptr);
  const int64_t begin = 4095;
  absl::Notification copying;
  absl::Notification reading;
  std::atomic<int> copies{0};
  S3StreamOptions options = Options(64 << 10, 1 << 20);
  options.while_copying = [&] {
    if (copies++ > 0) return;
    copying.Notify();
    reading.WaitForNotification();
    absl::SleepFor(absl::Milliseconds(50));
  };
  S3RangeStream stream(ClientOf(*server), kUrl, begin, begin + (300 << 10), "", options);
  Drained got;
  std::thread reader([&] {
    copying.WaitForNotification();
    reading.Notify();
    got = ReadToEnd(stream, begin + 1);
  });
  reader.join();
  ASSERT_TRUE(got.status.ok()) << got.status;
  ASSERT_EQ(got.bytes.size(), static_cast<size_t>((300 << 10) - 1));
  EXPECT_TRUE(got.bytes == object.substr(begin + 1, got.bytes.size()));
}

TEST(S3RangeStream, ARangePastTheEndOfTheObjectEndsWithIt) {
  const std::string object = Object(100000);
  std::unique_ptr<S3TestServer> server = Serve(object);
  ASSERT_NE(server, nullptr);
  S3RangeStream stream(ClientOf(*server), kUrl, 99000, 500000, "",
                       Options(64 << 10, 1 << 20));
  Drained got = ReadToEnd(stream, 99000);
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_TRUE(got.bytes == object.substr(99000)) << got.bytes.size();
  EXPECT_EQ(Gets(*server).size(), 1u);
  // Lent at the object's end, inside the stream's range: an empty view.
  absl::StatusOr<std::optional<absl::string_view>> lent = stream.Lend(100000, 10);
  ASSERT_TRUE(lent.ok()) << lent.status();
  ASSERT_TRUE(lent->has_value());
  EXPECT_TRUE((*lent)->empty());

  S3RangeStream past(ClientOf(*server), kUrl, 100000, 200000, "",
                     Options(64 << 10, 1 << 20));
  absl::StatusOr<std::optional<S3ObjectInfo>> answer = past.Answer();
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_FALSE(answer->has_value());  // 416: no bytes, no size
  char byte = 0;
  absl::StatusOr<std::optional<size_t>> read = past.Read(100000, 1, &byte);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->value_or(99), 0u);
}

TEST(S3RangeStream, AConnectionCutMidRangeIsRetriedFromTheNextByte) {
  const std::string object = Object(2 << 20);
  const int64_t begin = 12345;
  const int64_t cut = 300001;
  // The first GET is cut mid-body; its retry is cut before any byte of
  // its body; the third attempt goes through.
  std::unique_ptr<S3TestServer> server = Serve(object, [&](const Request& r) {
    Reply reply;
    if (r.index == 0) reply.cut_after = cut;
    if (r.index == 1) reply.cut_after = 0;
    return reply;
  });
  ASSERT_NE(server, nullptr);
  std::shared_ptr<S3Client> client = ClientOf(*server);
  const int64_t end = static_cast<int64_t>(object.size());
  S3RangeStream stream(client, kUrl, begin, end, "", Options(128 << 10, 64 << 20));
  Drained got = ReadToEnd(stream, begin);
  ASSERT_TRUE(got.status.ok()) << got.status;
  ASSERT_EQ(got.bytes.size(), object.size() - begin);
  EXPECT_TRUE(got.bytes == object.substr(begin)) << "bytes duplicated or lost";

  const std::vector<Request> gets = Gets(*server);
  ASSERT_EQ(gets.size(), 3u);
  EXPECT_EQ(gets[0].first, begin);
  EXPECT_EQ(gets[1].first, begin + cut);  // the byte after the last one received
  EXPECT_EQ(gets[2].first, begin + cut);
  for (const Request& get : gets) EXPECT_EQ(get.last, end - 1);
  // The retries stay on the version the first answer was of.
  EXPECT_EQ(gets[1].if_match, kEtag);
  EXPECT_EQ(gets[2].if_match, kEtag);
  EXPECT_EQ(client->retries(), 2);
}

TEST(S3RangeStream, AServerErrorIsRetried) {
  const std::string object = Object(300000);
  std::unique_ptr<S3TestServer> server = Serve(object, [](const Request& r) {
    Reply reply;
    if (r.index == 0) reply.status = 503;
    if (r.index == 1) reply.status = 500;
    return reply;
  });
  ASSERT_NE(server, nullptr);
  std::shared_ptr<S3Client> client = ClientOf(*server);
  S3RangeStream stream(client, kUrl, 0, 300000, "", Options(64 << 10, 1 << 20));
  Drained got = ReadToEnd(stream, 0);
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_TRUE(got.bytes == object);
  const std::vector<Request> gets = Gets(*server);
  ASSERT_EQ(gets.size(), 3u);
  for (const Request& get : gets) EXPECT_EQ(get.first, 0);
  EXPECT_EQ(client->retries(), 2);
}

TEST(S3RangeStream, AServerErrorThatLastsIsUnavailableNamingTheUrlAndStatus) {
  std::unique_ptr<S3TestServer> server = Serve(Object(1000), [](const Request&) {
    Reply reply;
    reply.status = 503;
    return reply;
  });
  ASSERT_NE(server, nullptr);
  S3RangeStream stream(ClientOf(*server), kUrl, 0, 1000, "", Options(64 << 10, 1 << 20));
  absl::StatusOr<std::optional<S3ObjectInfo>> answer = stream.Answer();
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kUnavailable) << answer.status();
  EXPECT_THAT(answer.status().message(), HasSubstr("s3://bucket/dir/key"));
  EXPECT_THAT(answer.status().message(), HasSubstr("HTTP 503"));
  EXPECT_THAT(answer.status().message(), HasSubstr("gave up after 4 attempts"));
  EXPECT_EQ(Gets(*server).size(), 4u);  // S3Config::retry.max_attempts
  char byte = 0;
  EXPECT_EQ(stream.Read(0, 1, &byte).status().code(), absl::StatusCode::kUnavailable);
}

struct ClientErrorCase {
  int http_status;
  absl::StatusCode code;
  const char* names;  // what the message says besides the URL and status
};

class S3RangeStreamClientError : public ::testing::TestWithParam<ClientErrorCase> {};

TEST_P(S3RangeStreamClientError, IsNotRetriedAndNamesTheUrlAndStatus) {
  const ClientErrorCase c = GetParam();
  std::unique_ptr<S3TestServer> server = Serve(Object(1000), [c](const Request&) {
    Reply reply;
    reply.status = c.http_status;
    return reply;
  });
  ASSERT_NE(server, nullptr);
  std::shared_ptr<S3Client> client = ClientOf(*server);
  S3RangeStream stream(client, kUrl, 0, 1000, "", Options(64 << 10, 1 << 20));
  absl::StatusOr<std::optional<S3ObjectInfo>> answer = stream.Answer();
  const absl::Status& s = answer.status();
  EXPECT_EQ(s.code(), c.code) << s;
  EXPECT_THAT(s.message(), HasSubstr("s3://bucket/dir/key"));
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("HTTP ", c.http_status)));
  EXPECT_THAT(s.message(), HasSubstr(c.names));
  EXPECT_EQ(Gets(*server).size(), 1u);
  EXPECT_EQ(client->retries(), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Statuses, S3RangeStreamClientError,
    ::testing::Values(
        ClientErrorCase{403, absl::StatusCode::kPermissionDenied, "bucket 'bucket'"},
        ClientErrorCase{404, absl::StatusCode::kNotFound, "does not exist"},
        ClientErrorCase{400, absl::StatusCode::kInvalidArgument, "InvalidRequest"}),
    [](const ::testing::TestParamInfo<ClientErrorCase>& info) {
      return absl::StrCat("Http", info.param.http_status);
    });

// A GET cut mid-range whose retry finds the object replaced (412): the
// reader gets every byte before the failure, then the error, and the 4xx
// is not retried.
TEST(S3RangeStream, AClientErrorAfterSomeBytesComesAfterThoseBytes) {
  const std::string object = Object(1 << 20);
  const int64_t cut = 100003;
  std::unique_ptr<S3TestServer> server = Serve(object, [&](const Request& r) {
    Reply reply;
    if (r.index == 0) reply.cut_after = cut;
    if (r.index == 1) reply.status = 412;
    return reply;
  });
  ASSERT_NE(server, nullptr);
  S3RangeStream stream(ClientOf(*server), kUrl, 0, 1 << 20, "",
                       Options(64 << 10, 64 << 20));
  Drained got = ReadToEnd(stream, 0);
  EXPECT_EQ(got.status.code(), absl::StatusCode::kFailedPrecondition) << got.status;
  EXPECT_THAT(got.status.message(), HasSubstr("s3://bucket/dir/key"));
  EXPECT_THAT(got.status.message(), HasSubstr("HTTP 412"));
  ASSERT_EQ(got.bytes.size(), static_cast<size_t>(cut));
  EXPECT_TRUE(got.bytes == object.substr(0, cut));
  EXPECT_EQ(Gets(*server).size(), 2u);
}

// The GET of a reader that takes nothing is ended once its buffer has been
// full for park_after (the server sees the client close the connection),
// no new GET starts while the reader stays away, and when it comes back a
// new GET starts from the byte after the buffered ones.
TEST(S3RangeStream, AnIdleReadersGetIsParkedAndResumedFromTheNextByte) {
  const std::string object = Object(2 << 20);
  std::unique_ptr<S3TestServer> server = Serve(object);
  ASSERT_NE(server, nullptr);
  const size_t buffer = 64 << 10;
  S3StreamOptions options = Options(buffer, 64 << 20);
  options.park_after = absl::Milliseconds(20);
  const int64_t end = static_cast<int64_t>(object.size());
  S3RangeStream stream(ClientOf(*server), kUrl, 0, end, "", options);
  ASSERT_TRUE(server->AwaitLog(
      [](const Log& log) {
        return !log.requests.empty() &&
               log.closed_by_client.count(log.requests[0].connection) > 0;
      },
      kBound))
      << "the idle reader's GET was never ended";
  // Parked until the reader drains half the buffer: no GET meanwhile.
  EXPECT_EQ(Gets(*server).size(), 1u);

  Drained got = ReadToEnd(stream, 0);
  ASSERT_TRUE(got.status.ok()) << got.status;
  ASSERT_EQ(got.bytes.size(), object.size());
  EXPECT_TRUE(got.bytes == object) << "bytes duplicated or lost";

  // The reader read nothing before the park, so the buffer held exactly
  // [0, buffer): the next GET asks from `buffer` on. (A loaded machine may
  // pause the reader long enough for later parks; each resumes further on.)
  const std::vector<Request> gets = Gets(*server);
  ASSERT_GE(gets.size(), 2u);
  EXPECT_EQ(gets[0].first, 0);
  EXPECT_EQ(gets[1].first, static_cast<int64_t>(buffer));
  for (size_t i = 1; i < gets.size(); ++i) {
    EXPECT_GT(gets[i].first, gets[i - 1].first) << i;
    EXPECT_EQ(gets[i].last, end - 1) << i;
    EXPECT_EQ(gets[i].if_match, kEtag) << i;
  }
}

// A reader slower than the connection keeps the buffer full, but it takes
// bytes all the time: it is not idle, and its one GET stays open past
// park_after. park_after is long next to the reader's pace (a read every
// few milliseconds), so only a reader stopped for a whole second could
// be parked: the reader measures its own stops, and each one that long
// (a descheduled thread on a loaded machine) may have cost one more GET.
TEST(S3RangeStream, AReaderThatKeepsTakingBytesIsNotParked) {
  const std::string object = Object(32 << 20);
  std::unique_ptr<S3TestServer> server = Serve(object);
  ASSERT_NE(server, nullptr);
  S3StreamOptions options = Options(64 << 10, 64 << 20);
  options.park_after = absl::Seconds(1);
  S3RangeStream stream(ClientOf(*server), kUrl, 0,
                       static_cast<int64_t>(object.size()), "", options);
  const absl::Time until = absl::Now() + 3 * options.park_after;
  int64_t offset = 0;
  char piece[4096];
  size_t long_stops = 0;
  absl::Time last_read = absl::Now();
  while (absl::Now() < until) {
    if (absl::Now() - last_read >= options.park_after) ++long_stops;
    absl::StatusOr<std::optional<size_t>> got = stream.Read(offset, sizeof(piece), piece);
    last_read = absl::Now();
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(got->has_value() && **got > 0) << offset;
    ASSERT_EQ(std::string(piece, **got), object.substr(offset, **got)) << offset;
    offset += static_cast<int64_t>(**got);
    absl::SleepFor(absl::Milliseconds(2));  // the reader's pace, not a wait
  }
  ASSERT_LT(offset, static_cast<int64_t>(object.size()) - (4 << 20))
      << "the reader was not slower than the connection";
  const Log log = server->log();
  EXPECT_LE(log.requests.size(), 1u + long_stops);
  EXPECT_LE(log.closed_by_client.size(), long_stops);
}

TEST(S3RangeStream, DestroyingAStreamMidRangeEndsItsGet) {
  const std::string object = Object(8 << 20);
  std::unique_ptr<S3TestServer> server = Serve(object);
  ASSERT_NE(server, nullptr);
  {
    S3RangeStream stream(ClientOf(*server), kUrl, 0,
                         static_cast<int64_t>(object.size()), "",
                         Options(64 << 10, 64 << 20));
    char piece[1000];
    absl::StatusOr<std::optional<size_t>> got = stream.Read(0, sizeof(piece), piece);
    ASSERT_TRUE(got.ok()) << got.status();
  }  // joins the thread: the GET is cancelled, not read to its end
  EXPECT_TRUE(server->AwaitLog(
      [](const Log& log) { return log.closed_by_client.count(0) > 0; }, kBound));
  EXPECT_EQ(Gets(*server).size(), 1u);
}

}  // namespace
}  // namespace shardq
