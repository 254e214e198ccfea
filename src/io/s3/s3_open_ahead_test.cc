// S3FileSystem::WillOpen against the in-process HTTP server
// (s3_test_server.h): the open that follows a hint takes the stream the
// hint started (one GET, not two), also for a range a split shortened;
// another range, a hint whose answer failed, and a hint pushed out by
// newer ones are opened afresh. Waits are on what the server saw.
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "src/io/file.h"
#include "src/io/s3/s3_client.h"
#include "src/io/s3/s3_file.h"
#include "src/io/s3/s3_test_server.h"

namespace shardq {
namespace {

using ::shardq::testing_util::S3TestServer;
using Log = S3TestServer::Log;
using Reply = S3TestServer::Reply;
using Request = S3TestServer::Request;

constexpr absl::Duration kBound = absl::Seconds(60);
constexpr char kEtag[] = "feedface01";
constexpr char kPath[] = "s3://bucket/dir/key";
constexpr int64_t kLookAhead = 256 << 10;  // past the range, see s3_file.cc

std::string Object(size_t n) { return testing_util::TestObject(n); }

std::unique_ptr<S3TestServer> Serve(const std::string& object,
                                    S3TestServer::Script script = nullptr) {
  return testing_util::ServeOrFail(object, kEtag, std::move(script));
}

// A file system of its own (no other test's streams), whose hints wait
// longer than any test (a loaded machine must not expire one).
std::unique_ptr<S3FileSystem> FileSystemOf(const S3TestServer& server,
                                           bool open_ahead = true) {
  S3Config config;  // anonymous: the test server checks no signature
  config.endpoint = server.endpoint();
  config.retry.max_attempts = 2;
  config.retry.initial_backoff = absl::Milliseconds(1);
  config.retry.max_backoff = absl::Milliseconds(5);
  config.park_after = absl::InfiniteDuration();  // no GET ends for idleness
  config.open_ahead = open_ahead;
  return std::make_unique<S3FileSystem>(std::make_shared<S3Client>(config),
                                        absl::Hours(1));
}

size_t Gets(const Log& log) {
  size_t n = 0;
  for (const Request& r : log.requests) n += r.method == "GET";
  return n;
}

bool AwaitGets(const S3TestServer& server, size_t n) {
  return server.AwaitLog([n](const Log& log) { return Gets(log) >= n; }, kBound);
}

// Opens [start, end) and checks its bytes against the object.
void ExpectRange(FileSystem& fs, const std::string& object, int64_t start, int64_t end) {
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file = fs.OpenForRange(kPath, start, end);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->version(), kEtag);
  std::string got(static_cast<size_t>(end - start), '\0');
  ASSERT_TRUE(ReadFully(**file, start, got.size(), got.data()).ok());
  EXPECT_TRUE(got == object.substr(static_cast<size_t>(start), got.size()))
      << "bytes differ in [" << start << ", " << end << ")";
}

TEST(S3OpenAhead, TheOpenAfterAHintTakesItsStream) {
  const std::string object = Object(2 << 20);
  std::unique_ptr<S3TestServer> server = Serve(object);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<S3FileSystem> fs = FileSystemOf(*server);
  fs->WillOpen(kPath, 1000, 600000);
  fs->WillOpen(kPath, 1000, 600000);  // a second hint of the same range: nothing new
  ASSERT_TRUE(AwaitGets(*server, 1));
  ExpectRange(*fs, object, 1000, 600000);
  const Log log = server->log();
  ASSERT_EQ(Gets(log), 1u);
  EXPECT_EQ(log.requests[0].first, 1000);
  EXPECT_EQ(log.requests[0].last, 600000 + kLookAhead - 1);
}

// A hint serves an open of its own start only: a stream from another
// byte would fetch bytes the open did not ask for, or miss one it needs.
TEST(S3OpenAhead, AnOpenOfAnotherStartDoesNotTakeTheStream) {
  const std::string object = Object(2 << 20);
  std::unique_ptr<S3TestServer> server = Serve(object);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<S3FileSystem> fs = FileSystemOf(*server);
  fs->WillOpen(kPath, 9999, 400000);
  ASSERT_TRUE(AwaitGets(*server, 1));
  ExpectRange(*fs, object, 10000, 400000);
  EXPECT_EQ(Gets(server->log()), 2u);
  ExpectRange(*fs, object, 9999, 400000);  // still waiting: taken now
  EXPECT_EQ(Gets(server->log()), 2u);
}

TEST(S3OpenAhead, ARangeASplitShortenedStillTakesTheStream) {
  const std::string object = Object(2 << 20);
  std::unique_ptr<S3TestServer> server = Serve(object);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<S3FileSystem> fs = FileSystemOf(*server);
  fs->WillOpen(kPath, 4096, 1500000);
  ASSERT_TRUE(AwaitGets(*server, 1));
  ExpectRange(*fs, object, 4096, 700000);
  EXPECT_EQ(Gets(server->log()), 1u);
}

TEST(S3OpenAhead, AnotherRangeIsOpenedAfresh) {
  const std::string object = Object(1 << 20);
  std::unique_ptr<S3TestServer> server = Serve(object);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<S3FileSystem> fs = FileSystemOf(*server);
  fs->WillOpen(kPath, 0, 100000);
  ASSERT_TRUE(AwaitGets(*server, 1));
  ExpectRange(*fs, object, 5000, 90000);      // another start
  ExpectRange(*fs, object, 0, 500000 - 1);    // further than the hint fetches
  const Log log = server->log();
  ASSERT_EQ(Gets(log), 3u);
  EXPECT_EQ(log.requests[1].first, 5000);
  EXPECT_EQ(log.requests[2].first, 0);
}

TEST(S3OpenAhead, AHintWhoseAnswerFailedIsAskedAgainByTheOpen) {
  const std::string object = Object(1 << 20);
  // The first GET is refused (as an object not there yet would be); the
  // rest are served.
  std::unique_ptr<S3TestServer> server = Serve(object, [](const Request& r) {
    Reply reply;
    if (r.index == 0) reply.status = 404;
    return reply;
  });
  ASSERT_NE(server, nullptr);
  std::unique_ptr<S3FileSystem> fs = FileSystemOf(*server);
  fs->WillOpen(kPath, 0, 300000);
  ASSERT_TRUE(AwaitGets(*server, 1));
  ExpectRange(*fs, object, 0, 300000);
  EXPECT_EQ(Gets(server->log()), 2u);
}

// Past kMaxOpenedAhead waiting streams a hint starts nothing (dropping an
// older one instead would waste the GET of every hint when more readers
// hint than streams may wait); an open takes its stream and makes room.
TEST(S3OpenAhead, AtMostSoManyHintsWaitMoreStartNothing) {
  const std::string object = Object(1 << 20);
  std::unique_ptr<S3TestServer> server = Serve(object);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<S3FileSystem> fs = FileSystemOf(*server);
  const int kept = static_cast<int>(S3FileSystem::kMaxOpenedAhead);
  for (int i = 0; i < kept + 2; ++i) fs->WillOpen(kPath, i * 1000, i * 1000 + 500);
  ASSERT_TRUE(AwaitGets(*server, static_cast<size_t>(kept)));
  // The first hints wait; the last two started nothing, so their opens
  // send their own GETs.
  ExpectRange(*fs, object, 0, 500);
  EXPECT_EQ(Gets(server->log()), static_cast<size_t>(kept));
  ExpectRange(*fs, object, (kept + 1) * 1000, (kept + 1) * 1000 + 500);
  EXPECT_EQ(Gets(server->log()), static_cast<size_t>(kept) + 1);
  // The open of the first made room for a new hint.
  fs->WillOpen(kPath, 900000, 900500);
  ASSERT_TRUE(AwaitGets(*server, static_cast<size_t>(kept) + 2));
  ExpectRange(*fs, object, 900000, 900500);
  EXPECT_EQ(Gets(server->log()), static_cast<size_t>(kept) + 2);
}

// Off, a hint sends nothing: the hinted range is fetched by its open, after
// an open of another range made later than the hint.
TEST(S3OpenAhead, NothingStartsWhenTheConfigTurnsItOff) {
  const std::string object = Object(1 << 20);
  std::unique_ptr<S3TestServer> server = Serve(object);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<S3FileSystem> fs = FileSystemOf(*server, /*open_ahead=*/false);
  fs->WillOpen(kPath, 0, 300000);
  ExpectRange(*fs, object, 500000, 600000);
  ExpectRange(*fs, object, 0, 300000);
  const Log log = server->log();
  ASSERT_EQ(Gets(log), 2u);
  EXPECT_EQ(log.requests[0].first, 500000);
  EXPECT_EQ(log.requests[1].first, 0);
}

}  // namespace
}  // namespace shardq
