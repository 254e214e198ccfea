// The stages over FromVector (no work items): order, errors, shuffling,
// batching, per-replica split and option checks.
#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shardq/internal/rng.h"
#include "shardq/pipeline/dataset.h"
#include "src/pipeline/dataset_test_util.h"
#include "src/pipeline/test_util.h"

namespace shardq::pipeline {
namespace {

using ::shardq::pipeline::testutil::Drain;
using ::shardq::pipeline::testutil::DrainDataset;
using ::shardq::pipeline::testutil::ValueOrDie;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<int> Range(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// A map function whose duration varies by element, so that parallel
// workers finish out of order.
int SlowSquare(int x) {
  absl::SleepFor(absl::Microseconds((x * 7919) % 13 * 50));
  return x * x;
}

std::vector<int> Squares(int n) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(i * i);
  return v;
}

TEST(Map, KeepsInputOrderWithManyThreads) {
  MapOptions options;
  options.num_threads = 4;
  EXPECT_EQ(DrainDataset(FromVector(Range(300)).Map(SlowSquare, options)),
            Squares(300));
}

TEST(Map, RunsInTheCallingThreadWithZeroThreads) {
  MapOptions options;
  options.num_threads = 0;
  EXPECT_EQ(DrainDataset(FromVector(Range(50)).Map(SlowSquare, options)),
            Squares(50));
}

TEST(Map, NonDeterministicHandsOnEveryResultOnce) {
  MapOptions options;
  options.num_threads = 4;
  options.deterministic = false;
  std::vector<int> out =
      DrainDataset(FromVector(Range(300)).Map(SlowSquare, options));
  std::sort(out.begin(), out.end());
  EXPECT_EQ(out, Squares(300));
}

TEST(Map, ChangesTheElementType) {
  std::vector<std::string> out = DrainDataset(FromVector(Range(3)).Map(
      [](int x) -> absl::StatusOr<std::string> { return absl::StrCat("#", x); }));
  EXPECT_THAT(out, ElementsAre("#0", "#1", "#2"));
}

TEST(Map, ErrorReachesTheConsumerAtItsPosition) {
  for (int threads : {0, 1, 4}) {
    MapOptions options;
    options.name = "parse";
    options.num_threads = threads;
    auto dataset = FromVector(Range(200)).Map(
        [](int x) -> absl::StatusOr<int> {
          if (x == 57) return absl::InvalidArgumentError("bad value 57");
          return SlowSquare(x);
        },
        options);
    auto it = ValueOrDie(dataset.MakeIterator());
    for (int i = 0; i < 57; ++i) {
      absl::StatusOr<int> next = it->Next();
      ASSERT_TRUE(next.ok()) << threads << " threads: " << next.status();
      EXPECT_EQ(*next, i * i);
    }
    absl::StatusOr<int> error = it->Next();
    EXPECT_EQ(error.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(error.status().message(), HasSubstr("parse: element 57"));
    EXPECT_THAT(error.status().message(), HasSubstr("bad value 57"));
    // Sticky.
    EXPECT_EQ(it->Next().status(), error.status());
  }
}

TEST(Shuffle, IsAPermutationFixedByTheSeed) {
  ShuffleOptions options;
  options.buffer_size = 64;
  options.seed = 42;
  std::vector<int> a = DrainDataset(FromVector(Range(1000)).Shuffle(options));
  std::vector<int> b = DrainDataset(FromVector(Range(1000)).Shuffle(options));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, Range(1000));
  options.seed = 43;
  EXPECT_NE(DrainDataset(FromVector(Range(1000)).Shuffle(options)), a);
  std::sort(a.begin(), a.end());
  EXPECT_EQ(a, Range(1000));
}

// The shuffle buffer's documented draw, written out: fill the buffer to
// buffer_size, hand on a uniformly drawn element (the last one takes its
// place), take the next input; once the input ends, draw what is left.
std::vector<int> ReferenceShuffle(const std::vector<int>& input, size_t size,
                                  uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<int> buffer;
  std::vector<int> out;
  auto draw = [&] {
    const size_t i = static_cast<size_t>(rng.UniformBelow(buffer.size()));
    out.push_back(buffer[i]);
    buffer[i] = buffer.back();
    buffer.pop_back();
  };
  for (int v : input) {
    buffer.push_back(v);
    if (buffer.size() == size) draw();
  }
  while (!buffer.empty()) draw();
  return out;
}

TEST(Shuffle, DrawsAsTheDocumentedBuffer) {
  for (const int64_t size : {2, 3, 64, 999, 1000, 5000}) {
    ShuffleOptions options;
    options.buffer_size = size;
    options.seed = 7;
    EXPECT_EQ(DrainDataset(FromVector(Range(1000)).Shuffle(options)),
              ReferenceShuffle(Range(1000), static_cast<size_t>(size), 7))
        << "buffer_size " << size;
  }
}

TEST(Shuffle, BufferOfOneKeepsTheOrder) {
  ShuffleOptions options;
  options.buffer_size = 1;
  EXPECT_EQ(DrainDataset(FromVector(Range(100)).Shuffle(options)), Range(100));
}

TEST(Shuffle, ABufferFarBeyondTheDataAndTheMemoryCostsNothingUpFront) {
  // 2^40 elements of room would be terabytes if reserved at once.
  ShuffleOptions options;
  options.buffer_size = int64_t{1} << 40;
  std::vector<int> out = DrainDataset(FromVector(Range(5000)).Shuffle(options));
  std::sort(out.begin(), out.end());
  EXPECT_EQ(out, Range(5000));
}

std::vector<int64_t> BatchSizes(const std::vector<Batch<int>>& batches) {
  std::vector<int64_t> sizes;
  for (const Batch<int>& b : batches) {
    sizes.push_back(b.size());
    EXPECT_EQ(b.padded.size(), b.rows.size());
    EXPECT_EQ(b.num_padded(), 0);
  }
  return sizes;
}

TEST(Batch, LastBatchIsShortUnlessDropped) {
  BatchOptions options;
  options.batch_size = 3;
  std::vector<Batch<int>> batches =
      DrainDataset(FromVector(Range(10)).Batch(options));
  EXPECT_THAT(BatchSizes(batches), ElementsAre(3, 3, 3, 1));
  EXPECT_THAT(batches[1].rows, ElementsAre(3, 4, 5));
  options.drop_remainder = true;
  auto it = ValueOrDie(FromVector(Range(10)).Batch(options).MakeIterator());
  EXPECT_THAT(BatchSizes(Drain(*it)), ElementsAre(3, 3, 3));
  EXPECT_EQ(it->stats().records_dropped, 0);  // no records: FromVector
  EXPECT_EQ(it->stats().short_batches, 1);
}

TEST(Prefetch, HandsOnEverythingInOrder) {
  EXPECT_EQ(DrainDataset(FromVector(Range(500)).Prefetch(3)), Range(500));
  MapOptions map;
  map.num_threads = 3;
  EXPECT_EQ(DrainDataset(FromVector(Range(200)).Prefetch(1).Map(SlowSquare, map)
                             .Prefetch(2)),
            Squares(200));
}

TEST(Prefetch, ABufferFarBeyondTheMemoryCostsNothingUpFront) {
  EXPECT_EQ(DrainDataset(FromVector(Range(5000)).Prefetch(int64_t{1} << 40)), Range(5000));
}

TEST(Prefetch, TryNextGivesUpAfterItsTimeoutAndLosesNothing) {
  // The map blocks until released, so the Prefetch thread has nothing to
  // hand on: a bounded wait must give up without consuming anything.
  auto release = std::make_shared<absl::Notification>();
  auto dataset = FromVector(Range(3))
                     .Map([release](int x) {
                       release->WaitForNotification();
                       return x;
                     })
                     .Prefetch(1);
  auto it = ValueOrDie(dataset.MakeIterator());
  absl::StatusOr<std::optional<int>> early = it->TryNext(absl::Milliseconds(5));
  ASSERT_TRUE(early.ok()) << early.status();
  EXPECT_FALSE(early->has_value());
  release->Notify();
  std::vector<int> got;
  while (true) {
    absl::StatusOr<std::optional<int>> next = it->TryNext(absl::Milliseconds(5));
    if (absl::IsOutOfRange(next.status())) break;
    ASSERT_TRUE(next.ok()) << next.status();
    if (next->has_value()) got.push_back(**next);
  }
  EXPECT_EQ(got, Range(3));
}

// An element that records, once, the thread that destroys it.
struct Traced {
  struct Probe {
    int value;
    std::vector<std::thread::id>* destroyed_in;  // guarded by *mu
    absl::Mutex* mu;
    ~Probe() {
      absl::MutexLock lock(mu);
      destroyed_in->push_back(std::this_thread::get_id());
    }
  };
  std::unique_ptr<Probe> probe;  // null once moved from
};

TEST(Prefetch, RecycledElementsDieInTheFillThreadUntilTheEnd) {
  absl::Mutex mu;
  std::vector<std::thread::id> destroyed_in;
  std::thread::id fill_thread;
  MapOptions inline_map;
  inline_map.num_threads = 0;  // runs in the thread that pulls: Prefetch's
  constexpr int kN = 200;
  auto dataset = FromVector(Range(kN))
                     .Map(
                         [&](int x) {
                           {
                             absl::MutexLock lock(&mu);
                             fill_thread = std::this_thread::get_id();
                           }
                           // No temporary Probe: each one made is counted.
                           return Traced{std::unique_ptr<Traced::Probe>(
                               new Traced::Probe{x, &destroyed_in, &mu})};
                         },
                         inline_map)
                     .Prefetch(2);
  auto it = ValueOrDie(dataset.MakeIterator());
  std::vector<int> got;
  std::optional<Traced> last;
  while (true) {
    absl::StatusOr<std::optional<Traced>> next = it->Next();
    if (absl::IsOutOfRange(next.status())) break;
    ASSERT_TRUE(next.ok()) << next.status();
    ASSERT_TRUE(next->has_value());
    got.push_back((*next)->probe->value);
    if (last.has_value()) it->Recycle(*std::move(last));
    last = *std::move(*next);
  }
  EXPECT_EQ(got, Range(kN));
  const auto in_caller = [&] {
    absl::MutexLock lock(&mu);
    return std::count(destroyed_in.begin(), destroyed_in.end(),
                      std::this_thread::get_id());
  };
  // After the end, a recycled element is destroyed at once, in the caller
  // (the fill thread may still be freeing what it was handed before).
  const auto before = in_caller();
  it->Recycle(*std::move(last));
  EXPECT_EQ(in_caller(), before + 1);
  it.reset();  // joins the fill thread
  absl::MutexLock lock(&mu);
  // Every element is destroyed once: by the fill thread while it ran (a
  // buffer of 2 keeps it running until the consumer is near the end), the
  // rest by the consumer.
  EXPECT_EQ(destroyed_in.size(), static_cast<size_t>(kN));
  EXPECT_GT(std::count(destroyed_in.begin(), destroyed_in.end(), fill_thread),
            kN / 2);
}

TEST(StringPool, KeepsStringsWithinItsBounds) {
  internal::StringPool pool;
  std::vector<std::string> give;
  give.push_back(std::string(100, 'a'));
  give.push_back(std::string(internal::StringPool::kMaxStringBytes + 1, 'b'));
  give.push_back(std::string(200, 'c'));
  pool.Give(&give);
  EXPECT_TRUE(give.empty());  // two kept, the huge one freed
  EXPECT_EQ(pool.size(), 2u);
  std::vector<std::string> got;
  pool.Take(5, &got);
  ASSERT_EQ(got.size(), 2u);
  for (const std::string& s : got) EXPECT_GE(s.capacity(), 100u);
  EXPECT_EQ(pool.size(), 0u);

  // Full by count: what does not fit stays with the caller.
  std::vector<std::string> many(internal::StringPool::kMaxStrings + 3,
                                std::string(32, 'x'));
  pool.Give(&many);
  EXPECT_EQ(pool.size(), internal::StringPool::kMaxStrings);
  EXPECT_EQ(many.size(), 3u);
  got.clear();
  pool.Take(internal::StringPool::kMaxStrings, &got);

  // Full by bytes: kMaxBytes of capacity at most.
  std::vector<std::string> big(
      internal::StringPool::kMaxBytes / internal::StringPool::kMaxStringBytes + 4,
      std::string(internal::StringPool::kMaxStringBytes, 'y'));
  pool.Give(&big);
  EXPECT_LE(pool.size() * internal::StringPool::kMaxStringBytes,
            internal::StringPool::kMaxBytes);
  EXPECT_GE(big.size(), 4u);
}

TEST(StringPool, KeepsBlocksWholeWithinItsBounds) {
  internal::StringPool pool;
  using Block = internal::StringPool::Block;
  std::vector<Block> blocks;
  std::vector<std::string> rows(3, std::string(100, 'a'));
  const std::optional<size_t> bytes = internal::BlockBytes(rows);
  ASSERT_TRUE(bytes.has_value());
  EXPECT_GE(*bytes, 300u);
  blocks.push_back(Block{rows, *bytes});
  // Over the byte bound: stays with the caller.
  blocks.push_back(Block{{std::string(10, 'b')}, internal::StringPool::kMaxBytes});
  blocks.push_back(Block{rows, *bytes});
  pool.GiveBlocks(&blocks);
  EXPECT_EQ(pool.size(), 6u);
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(blocks[0].strings, std::vector<std::string>{std::string(10, 'b')});
  // Taken string by string, across blocks, kept strings first.
  std::vector<std::string> loose = {std::string(50, 'c')};
  pool.Give(&loose);
  std::vector<std::string> got;
  pool.Take(2, &got);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], std::string(50, 'c'));
  pool.Take(10, &got);
  EXPECT_EQ(got.size(), 7u);
  EXPECT_EQ(pool.size(), 0u);
  for (size_t i = 1; i < got.size(); ++i) EXPECT_GE(got[i].capacity(), 100u);

  // Full by count.
  std::vector<Block> many;
  many.push_back(Block{std::vector<std::string>(internal::StringPool::kMaxStrings,
                                                std::string(20, 'x')),
                       0});
  many.push_back(Block{std::vector<std::string>(1, std::string(20, 'y')), 0});
  many.back().bytes = *internal::BlockBytes(many.back().strings);
  many.front().bytes = *internal::BlockBytes(many.front().strings);
  pool.GiveBlocks(&many);
  EXPECT_EQ(pool.size(), internal::StringPool::kMaxStrings);
  ASSERT_EQ(many.size(), 1u);
  EXPECT_EQ(many[0].strings[0], std::string(20, 'y'));

  // A string longer than the pool keeps: no block of it.
  EXPECT_FALSE(internal::BlockBytes(
                   {std::string(internal::StringPool::kMaxStringBytes + 1, 'z')})
                   .has_value());
}

TEST(StringPool, HarvestTakesTheStringsOfKnownElements) {
  std::vector<std::string> out;
  Batch<Record> batch;
  batch.rows.push_back(Record{std::string(40, 'k'), std::string(50, 'v')});
  batch.rows.push_back(Record{"", "short"});  // held inline: nothing to take
  internal::Harvest(batch, &out);
  ASSERT_EQ(out.size(), 1u);  // the long value; keys are not taken
  EXPECT_EQ(out[0], std::string(50, 'v'));
  int plain = 7;
  internal::Harvest(plain, &out);  // unknown type: nothing
  EXPECT_EQ(out.size(), 1u);
}

// The ledger's per-item progress FIFO: order kept across wrap-around and
// growth (which happens with the ring's head anywhere), entries writable
// in place.
TEST(RecordProgress, KeepsOrderAcrossWrapAndGrowth) {
  internal::RecordProgress ring;
  std::deque<int64_t> expected;
  int64_t next = 0;
  // Push a few, pop fewer, so that the head walks round the buffer while
  // it grows from 16 to 128 entries.
  for (int round = 0; round < 40; ++round) {
    for (int k = 0; k < 5; ++k) {
      ring.push_back({next, false});
      expected.push_back(next++);
    }
    for (int k = 0; k < 3; ++k) {
      ASSERT_FALSE(ring.empty());
      EXPECT_EQ(ring.front().resume_offset, expected.front());
      ring.pop_front();
      expected.pop_front();
    }
    ASSERT_EQ(ring.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      ASSERT_EQ(ring[i].resume_offset, expected[i]) << "round " << round;
    }
  }
  ring[1].consumed = true;
  EXPECT_FALSE(ring.front().consumed);
  ring.pop_front();
  EXPECT_TRUE(ring.front().consumed);
}

TEST(Recycle, WithoutPrefetchDestroysInTheCaller) {
  auto it = ValueOrDie(FromVector(Range(3)).MakeIterator());
  absl::StatusOr<std::optional<int>> next = it->Next();
  ASSERT_TRUE(next.ok() && next->has_value());
  it->Recycle(**next);  // the default: nothing held, nothing changed
  EXPECT_EQ(Drain(*it), (std::vector<int>{1, 2}));
}

// Checks the per-replica invariant: every step has R batches of
// batch_size / R rows; returns the real rows per replica, per step.
std::vector<std::vector<int64_t>> RealRows(
    const std::vector<PerReplicaBatches<int>>& steps, int64_t replicas,
    int64_t per_replica) {
  std::vector<std::vector<int64_t>> real;
  for (const PerReplicaBatches<int>& step : steps) {
    EXPECT_EQ(step.num_replicas(), replicas);
    std::vector<int64_t> counts;
    for (const Batch<int>& batch : step.replicas) {
      EXPECT_EQ(batch.size(), per_replica);
      EXPECT_EQ(batch.padded.size(), batch.rows.size());
      counts.push_back(batch.num_real());
    }
    real.push_back(counts);
  }
  return real;
}

Dataset<PerReplicaBatches<int>> Distributed(int n, int64_t batch_size,
                                            int64_t replicas,
                                            DistributeOptions::Remainder mode) {
  BatchOptions batch;
  batch.batch_size = batch_size;
  DistributeOptions distribute;
  distribute.num_replicas = replicas;
  distribute.remainder = mode;
  return FromVector(Range(n)).Batch(batch).Distribute(distribute);
}

TEST(Distribute, PadGivesEveryReplicaABatchInEveryStep) {
  using V = std::vector<int64_t>;
  const auto kPad = DistributeOptions::Remainder::kPad;
  // 11 rows, global batch 6, 3 replicas: one full step, then 5 rows spread
  // 2, 2, 1 and padded to 2 each.
  std::vector<PerReplicaBatches<int>> steps =
      DrainDataset(Distributed(11, 6, 3, kPad));
  EXPECT_THAT(RealRows(steps, 3, 2), ElementsAre(V{2, 2, 2}, V{2, 2, 1}));
  EXPECT_THAT(steps[0].replicas[1].rows, ElementsAre(2, 3));
  EXPECT_THAT(steps[1].replicas[2].rows, ElementsAre(10, 0));
  EXPECT_THAT(steps[1].replicas[2].padded, ElementsAre(0, 1));
  // Fewer rows left than replicas: the others get all-padding batches.
  steps = DrainDataset(Distributed(13, 12, 4, kPad));
  EXPECT_THAT(RealRows(steps, 4, 3),
              ElementsAre(V{3, 3, 3, 3}, V{1, 0, 0, 0}));
  // An even split needs no padding.
  steps = DrainDataset(Distributed(12, 4, 2, kPad));
  EXPECT_THAT(RealRows(steps, 2, 2), ElementsAre(V{2, 2}, V{2, 2}, V{2, 2}));
}

TEST(Distribute, DropLeavesOutTheShortLastBatch) {
  using V = std::vector<int64_t>;
  const auto kDrop = DistributeOptions::Remainder::kDrop;
  EXPECT_THAT(RealRows(DrainDataset(Distributed(11, 6, 3, kDrop)), 3, 2),
              ElementsAre(V{2, 2, 2}));
  EXPECT_TRUE(DrainDataset(Distributed(5, 6, 3, kDrop)).empty());
}

TEST(Distribute, FollowsShuffleAndPrefetchOfBatches) {
  BatchOptions batch;
  batch.batch_size = 4;
  ShuffleOptions shuffle;
  shuffle.buffer_size = 3;
  DistributeOptions distribute;
  distribute.num_replicas = 2;
  std::vector<PerReplicaBatches<int>> steps = DrainDataset(
      FromVector(Range(10)).Batch(batch).Shuffle(shuffle).Prefetch(2)
          .Distribute(distribute));
  ASSERT_EQ(steps.size(), 3u);
  int64_t real = 0;
  for (const auto& step : steps) {
    for (const auto& b : step.replicas) real += b.num_real();
  }
  EXPECT_EQ(real, 10);
}

absl::Status BuildStatus(absl::StatusOr<std::unique_ptr<Iterator<int>>> it) {
  return it.status();
}

TEST(Options, BadValuesAreNamedAndStartNothing) {
  BatchOptions batch;
  batch.batch_size = 0;
  absl::Status s = FromVector(Range(3)).Batch(batch).MakeIterator().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("batch_size = 0"));

  MapOptions map;
  map.name = "decode";
  map.num_threads = -1;
  s = BuildStatus(FromVector(Range(3)).Map(SlowSquare, map).MakeIterator());
  EXPECT_THAT(s.message(), HasSubstr("Map 'decode': num_threads = -1"));
  // A million threads would take minutes to start: refused at once.
  map.num_threads = 1'000'000;
  s = BuildStatus(FromVector(Range(3)).Map(SlowSquare, map).MakeIterator());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("num_threads = 1000000, must be >= 0 and <= 1024"));

  ShuffleOptions shuffle;
  shuffle.buffer_size = 0;
  s = BuildStatus(FromVector(Range(3)).Shuffle(shuffle).MakeIterator());
  EXPECT_THAT(s.message(), HasSubstr("buffer_size = 0"));

  s = BuildStatus(FromVector(Range(3)).Prefetch(0).MakeIterator());
  EXPECT_THAT(s.message(), HasSubstr("Prefetch: buffer_size = 0"));

  batch.batch_size = 6;
  DistributeOptions distribute;
  distribute.num_replicas = 4;
  s = FromVector(Range(3)).Batch(batch).Distribute(distribute).MakeIterator()
          .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("divisor of the batch size 6"));

  // A bad option after a threaded stage: nothing was started, nothing
  // hangs.
  map.num_threads = 2;
  batch.batch_size = -1;
  s = FromVector(Range(3)).Map(SlowSquare, map).Prefetch(2).Batch(batch)
          .MakeIterator()
          .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
}

TEST(Distribute, NeedsABatchedInput) {
  Dataset<Batch<int>> not_from_batch =
      FromVector(std::vector<Batch<int>>(2, Batch<int>()));
  DistributeOptions distribute;
  distribute.num_replicas = 2;
  absl::Status s = not_from_batch.Distribute(distribute).MakeIterator().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("must be batched by Batch"));
}

}  // namespace
}  // namespace shardq::pipeline
