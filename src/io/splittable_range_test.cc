#include "shardq/splittable_range.h"

#include <atomic>
#include <cstdint>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace shardq {
namespace {

TEST(SplittableRange, StartsWithTheItemsRange) {
  SplittableRange range(10, 100);
  EXPECT_EQ(range.start(), 10);
  EXPECT_EQ(range.end(), 100);
}

TEST(SplittableRange, SplitIsRefusedBeforeAnyClaim) {
  SplittableRange range(0, 100);
  EXPECT_EQ(range.Split(50, 1), std::nullopt);
  EXPECT_EQ(range.Split(0, 0), std::nullopt);
  EXPECT_EQ(range.end(), 100);
  // A reader that never claimed still reads its whole range.
  EXPECT_TRUE(range.Claim(99));
}

TEST(SplittableRange, ClaimSucceedsInsideTheRangeAndFailsAtItsEnd) {
  SplittableRange range(0, 100);
  EXPECT_TRUE(range.Claim(0));
  EXPECT_TRUE(range.Claim(57));
  EXPECT_TRUE(range.Claim(99));
  EXPECT_FALSE(range.Claim(100));
  EXPECT_EQ(range.end(), 100);
}

TEST(SplittableRange, ClaimPastTheEndFails) {
  SplittableRange range(0, 100);
  EXPECT_TRUE(range.Claim(3));
  EXPECT_FALSE(range.Claim(250));
}

TEST(SplittableRange, SplitAheadOfTheReaderMovesTheEndToThePoint) {
  SplittableRange range(0, 100);
  ASSERT_TRUE(range.Claim(10));
  EXPECT_EQ(range.Split(50, 1), std::optional<int64_t>(50));
  EXPECT_EQ(range.end(), 50);
  EXPECT_TRUE(range.Claim(49));
  EXPECT_FALSE(range.Claim(50));
}

TEST(SplittableRange, SplitBehindTheReaderLandsOnTheFirstUnclaimedOffset) {
  SplittableRange range(0, 100);
  ASSERT_TRUE(range.Claim(0));
  ASSERT_TRUE(range.Claim(10));
  ASSERT_TRUE(range.Claim(20));
  EXPECT_EQ(range.Split(5, 1), std::optional<int64_t>(21));
  EXPECT_EQ(range.end(), 21);
  EXPECT_FALSE(range.Claim(21));
}

TEST(SplittableRange, SplitAtTheLastClaimedOffsetKeepsThatRecord) {
  SplittableRange range(0, 100);
  ASSERT_TRUE(range.Claim(30));
  EXPECT_EQ(range.Split(30, 1), std::optional<int64_t>(31));
}

TEST(SplittableRange, HeadKeepsAtLeastOneUnit) {
  SplittableRange range(10, 100);
  ASSERT_TRUE(range.Claim(10));
  EXPECT_EQ(range.Split(0, 1), std::optional<int64_t>(11));
  EXPECT_EQ(range.end(), 11);
}

TEST(SplittableRange, SplitLeavingLessThanMinResidualIsRefused) {
  SplittableRange range(0, 100);
  ASSERT_TRUE(range.Claim(0));
  EXPECT_EQ(range.Split(96, 5), std::nullopt);
  EXPECT_EQ(range.end(), 100);
  // Behind the reader: the residual is measured from the first unclaimed
  // offset, not from the point asked for.
  ASSERT_TRUE(range.Claim(90));
  EXPECT_EQ(range.Split(10, 10), std::nullopt);
  EXPECT_EQ(range.end(), 100);
  EXPECT_EQ(range.Split(10, 9), std::optional<int64_t>(91));
  EXPECT_EQ(range.end(), 91);
}

TEST(SplittableRange, ResidualOfExactlyMinResidualIsAccepted) {
  SplittableRange range(0, 100);
  ASSERT_TRUE(range.Claim(0));
  EXPECT_EQ(range.Split(95, 5), std::optional<int64_t>(95));
}

TEST(SplittableRange, EmptyResidualIsRefusedWhateverMinResidual) {
  SplittableRange range(0, 100);
  ASSERT_TRUE(range.Claim(0));
  EXPECT_EQ(range.Split(100, 0), std::nullopt);
  EXPECT_EQ(range.Split(150, -3), std::nullopt);
  EXPECT_EQ(range.end(), 100);
  EXPECT_EQ(range.Split(99, 0), std::optional<int64_t>(99));
}

TEST(SplittableRange, SplitAfterTheLastRecordWasClaimedIsRefused) {
  SplittableRange range(0, 100);
  ASSERT_TRUE(range.Claim(99));
  EXPECT_EQ(range.Split(50, 1), std::nullopt);
  EXPECT_EQ(range.end(), 100);
}

TEST(SplittableRange, SplitAfterTheReaderStoppedIsRefused) {
  SplittableRange range(0, 100);
  ASSERT_TRUE(range.Claim(40));
  ASSERT_FALSE(range.Claim(100));
  EXPECT_EQ(range.Split(50, 1), std::nullopt);
  EXPECT_EQ(range.end(), 100);
}

TEST(SplittableRange, RepeatedSplitsOnlyShrinkTheEnd) {
  SplittableRange range(0, 100);
  ASSERT_TRUE(range.Claim(5));
  EXPECT_EQ(range.Split(60, 1), std::optional<int64_t>(60));
  // At or past the current end: nothing left to split off.
  EXPECT_EQ(range.Split(60, 1), std::nullopt);
  EXPECT_EQ(range.Split(80, 1), std::nullopt);
  EXPECT_EQ(range.end(), 60);
  EXPECT_EQ(range.Split(30, 1), std::optional<int64_t>(30));
  EXPECT_EQ(range.end(), 30);
  ASSERT_TRUE(range.Claim(29));
  EXPECT_EQ(range.Split(0, 1), std::nullopt);  // only [29, 30) claimed left
  EXPECT_FALSE(range.Claim(30));
}

TEST(SplittableRange, RefusedSplitLeavesTheReaderReadingToTheEnd) {
  SplittableRange range(0, 1000);
  ASSERT_TRUE(range.Claim(0));
  EXPECT_EQ(range.Split(990, 50), std::nullopt);
  for (int64_t offset = 1; offset < 1000; offset += 7) {
    EXPECT_TRUE(range.Claim(offset)) << offset;
  }
  EXPECT_FALSE(range.Claim(1000));
}

TEST(SplittableRange, NonZeroStartSplitsInAbsoluteOffsets) {
  SplittableRange range(1000, 2000);
  ASSERT_TRUE(range.Claim(1200));
  EXPECT_EQ(range.Split(1100, 1), std::optional<int64_t>(1201));
  EXPECT_FALSE(range.Claim(1201));
}

// One thread claims increasing offsets until Claim says stop, another
// splits at random moments and points. However the two interleave, the
// reader keeps exactly the records that start before the final end, and
// stops at the first record at or after it: the residuals split off hold
// the rest, so nothing is read twice or lost.
TEST(SplittableRangeConcurrency, ReaderStopsExactlyAtTheFinalEndWhileSplit) {
  std::mt19937_64 rng(7001);
  constexpr int kTrials = 400;
  int trials_split_mid_read = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    const int64_t start = static_cast<int64_t>(rng() % 1000);
    const int64_t end = start + 1 + static_cast<int64_t>(rng() % 20000);
    const int64_t max_gap = 1 + static_cast<int64_t>(rng() % 40);
    const uint64_t reader_seed = rng();
    const uint64_t splitter_seed = rng();
    SplittableRange range(start, end);

    std::atomic<bool> go{false};
    std::atomic<int64_t> progress{start};  // last offset the reader claimed
    std::atomic<bool> reader_done{false};
    std::vector<int64_t> claimed;
    int64_t stopped_at = -1;
    std::thread reader([&] {
      std::mt19937_64 reader_rng(reader_seed);
      while (!go.load()) std::this_thread::yield();
      int64_t offset = start;
      while (true) {
        if (!range.Claim(offset)) {
          stopped_at = offset;
          break;
        }
        if (offset >= end) {
          ADD_FAILURE() << "Claim(" << offset << ") accepted past the end " << end;
          break;
        }
        claimed.push_back(offset);
        progress.store(offset, std::memory_order_relaxed);
        offset += 1 + static_cast<int64_t>(reader_rng() % max_gap);
        // Reading a record takes time: leave the splitter room to act.
        if (reader_rng() % 8 == 0) std::this_thread::yield();
      }
      reader_done.store(true);
    });

    std::vector<int64_t> accepted;
    int64_t last_end = end;
    bool split_mid_read = false;
    std::thread splitter([&] {
      std::mt19937_64 split_rng(splitter_seed);
      while (!go.load()) std::this_thread::yield();
      const int splits = 1 + static_cast<int>(split_rng() % 20);
      for (int i = 0; i < splits && !reader_done.load(); ++i) {
        // Let the reader move on a little, then split near it.
        const int64_t wait_for =
            progress.load(std::memory_order_relaxed) +
            static_cast<int64_t>(split_rng() % ((end - start) / 8 + 1));
        while (progress.load(std::memory_order_relaxed) < wait_for &&
               !reader_done.load()) {
          std::this_thread::yield();
        }
        // Mostly just ahead of the reader, where its next claim races
        // with the split; sometimes well behind or ahead of it.
        const int64_t here = progress.load(std::memory_order_relaxed);
        const int64_t point =
            split_rng() % 4 == 0
                ? here - 50 + static_cast<int64_t>(split_rng() % 400)
                : here + static_cast<int64_t>(split_rng() % (2 * max_gap + 1));
        const int64_t min_residual = static_cast<int64_t>(split_rng() % 64);
        const int64_t end_before = range.end();
        std::optional<int64_t> at = range.Split(point, min_residual);
        if (!at.has_value()) {
          EXPECT_EQ(range.end(), end_before);
          continue;
        }
        if (!reader_done.load()) split_mid_read = true;
        EXPECT_GE(*at, point);
        EXPECT_GT(*at, start);
        EXPECT_LT(*at, end_before);
        EXPECT_GE(end_before - *at, std::max<int64_t>(min_residual, 1));
        EXPECT_EQ(range.end(), *at);
        accepted.push_back(*at);
        last_end = *at;
      }
    });
    go.store(true);
    reader.join();
    splitter.join();
    if (split_mid_read) ++trials_split_mid_read;

    const int64_t final_end = range.end();
    EXPECT_EQ(final_end, last_end) << "trial " << trial;
    for (size_t i = 1; i < accepted.size(); ++i) {
      EXPECT_LT(accepted[i], accepted[i - 1]) << "trial " << trial;
    }
    ASSERT_FALSE(claimed.empty()) << "trial " << trial;  // Claim(start)
    EXPECT_LT(claimed.back(), final_end)
        << "trial " << trial << ": a record at or past the final end was kept";
    EXPECT_GE(stopped_at, final_end)
        << "trial " << trial << ": the reader stopped before the final end";
    // Every split left the claimed records in the head.
    for (int64_t at : accepted) {
      EXPECT_GT(at, claimed.back()) << "trial " << trial;
    }
    if (HasFailure()) return;
  }
  // The trials must actually race, or the test proves little.
  EXPECT_GT(trials_split_mid_read, kTrials / 10);
}

// The tightest race: the reader claims consecutive offsets as fast as it
// can while the splitter asks for a split just ahead of it, so the claim of
// the record at the split point lands between the split storing the new
// end and re-reading what was claimed. Either the reader keeps the record
// (and the split moves past it) or it stops there; never both or neither.
TEST(SplittableRangeConcurrency, ClaimRacingASplitJustAheadIsNeitherLostNorKeptTwice) {
  std::mt19937_64 rng(7002);
  constexpr int kTrials = 500;
  for (int trial = 0; trial < kTrials; ++trial) {
    constexpr int64_t kEnd = int64_t{1} << 40;
    SplittableRange range(0, kEnd);
    const int64_t wait_for = static_cast<int64_t>(rng() % 2000);
    const int64_t ahead = static_cast<int64_t>(rng() % 3);
    std::atomic<bool> go{false};
    std::atomic<int64_t> progress{0};
    std::atomic<bool> reader_done{false};
    int64_t last_claimed = -1;
    int64_t stopped_at = -1;
    std::thread reader([&] {
      while (!go.load()) std::this_thread::yield();
      for (int64_t offset = 0; offset < kEnd; ++offset) {
        if (!range.Claim(offset)) {
          stopped_at = offset;
          break;
        }
        last_claimed = offset;
        progress.store(offset, std::memory_order_relaxed);
      }
      reader_done.store(true);
    });
    std::optional<int64_t> at;
    std::thread splitter([&] {
      while (!go.load()) std::this_thread::yield();
      while (progress.load(std::memory_order_relaxed) < wait_for &&
             !reader_done.load()) {
        std::this_thread::yield();
      }
      while (!at.has_value() && !reader_done.load()) {
        at = range.Split(progress.load(std::memory_order_relaxed) + 1 + ahead, 1);
      }
    });
    go.store(true);
    reader.join();
    splitter.join();
    ASSERT_TRUE(at.has_value()) << "trial " << trial;
    EXPECT_EQ(range.end(), *at) << "trial " << trial;
    EXPECT_EQ(last_claimed + 1, stopped_at) << "trial " << trial;
    EXPECT_LT(last_claimed, *at)
        << "trial " << trial << ": record " << last_claimed
        << " kept by the reader and split off to the residual";
    EXPECT_GE(stopped_at, *at)
        << "trial " << trial << ": the reader stopped at " << stopped_at
        << " but the split left the head up to " << *at;
    if (HasFailure()) return;
  }
}

}  // namespace
}  // namespace shardq
