#include "src/core/slice_plan.h"

#include <map>
#include <numeric>

#include "gtest/gtest.h"
#include "shardq/slice.h"
#include "src/core/queue_state.h"
#include "src/core/rng.h"

namespace shardq {
namespace {

TEST(PlanSlices, NoSliceCountGivesOneItemPerWork) {
  absl::StatusOr<std::vector<std::string>> plan =
      PlanSlices({{"a", 10}, {"b", 0}, {"c", 5}}, std::nullopt);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(*plan, (std::vector<std::string>{"a", "b", "c"}));
}

TEST(PlanSlices, CutsNearEqualRangesWithinEachWork) {
  absl::StatusOr<std::vector<std::string>> plan = PlanSlices({{"f", 10}}, 3);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(*plan, (std::vector<std::string>{"f?start=0&end=3", "f?start=3&end=6",
                                             "f?start=6&end=10"}));
}

TEST(PlanSlices, EmptyWorksGetNoSliceAndNonEmptyAtLeastOne) {
  absl::StatusOr<std::vector<std::string>> plan =
      PlanSlices({{"big", 1000000}, {"empty", 0}, {"tiny", 1}}, 4);
  ASSERT_TRUE(plan.ok());
  int tiny = 0;
  for (const std::string& item : *plan) {
    EXPECT_EQ(item.find("empty"), std::string::npos);
    if (item.rfind("tiny", 0) == 0) ++tiny;
  }
  EXPECT_EQ(tiny, 1);
}

TEST(PlanSlices, RangesTileEveryWorkExactly) {
  SplitMix64 rng(99);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<SizedWork> works;
    const int n = 1 + static_cast<int>(rng.UniformBelow(20));
    for (int i = 0; i < n; ++i) {
      works.push_back({"w" + std::to_string(i),
                       static_cast<int64_t>(rng.UniformBelow(5) == 0 ? 0 : rng.UniformBelow(100000))});
    }
    int64_t total = 0;
    for (auto& w : works) total += w.size;
    if (total == 0) continue;
    const int64_t slices = 1 + static_cast<int64_t>(rng.UniformBelow(300));
    absl::StatusOr<std::vector<std::string>> plan = PlanSlices(works, slices);
    ASSERT_TRUE(plan.ok());
    std::map<std::string, int64_t> covered_to;
    for (const std::string& item : *plan) {
      absl::StatusOr<SliceSpec> spec = ParseItem(item);
      ASSERT_TRUE(spec.ok());
      EXPECT_EQ(*spec->start, covered_to[spec->work]) << item;  // contiguous
      EXPECT_LT(*spec->start, *spec->end) << item;              // never empty
      covered_to[spec->work] = *spec->end;
    }
    int64_t non_empty = 0;
    for (auto& w : works) {
      if (w.size == 0) continue;
      ++non_empty;
      EXPECT_EQ(covered_to[w.name], w.size);
    }
    // About num_slices in total: exactly, unless the one-per-work floor or
    // the one-byte ceiling forces otherwise.
    EXPECT_EQ(static_cast<int64_t>(plan->size()), std::max(slices, non_empty));
  }
}

TEST(PlanSlices, SliceSizesAreNearEqualAcrossWorks) {
  absl::StatusOr<std::vector<std::string>> plan =
      PlanSlices({{"a", 300000}, {"b", 100000}, {"c", 600000}}, 10);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), 10u);
  for (const std::string& item : *plan) {
    absl::StatusOr<SliceSpec> spec = ParseItem(item);
    EXPECT_EQ(*spec->end - *spec->start, 100000) << item;
  }
}

TEST(PlanSlices, BadInputNamesTheCulprit) {
  EXPECT_EQ(PlanSlices({}, 3).status().code(), absl::StatusCode::kInvalidArgument);
  absl::Status s = PlanSlices({{"a", 1}}, 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("num_slices"), std::string::npos);
  s = PlanSlices({{"a", -1}}, 2).status();
  EXPECT_NE(s.message().find("'a'"), std::string::npos);
}

// A work named like a range of another is refused with or without slices:
// every reader would read it as that range of the other file.
TEST(PlanSlices, AWorkNamedLikeARangeIsRefusedSlicedOrNot) {
  for (std::optional<int64_t> slices : {std::optional<int64_t>(), std::optional<int64_t>(4)}) {
    absl::StatusOr<std::vector<std::string>> plan =
        PlanSlices({{"a.txt", 10, true}, {"q?start=1&end=2", 12, true}}, slices);
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(plan.status().message().find("work 'q?start=1&end=2' already has a range"),
              std::string::npos)
        << plan.status();
  }
  // Parameters that are not a range are a work's own (a table's).
  EXPECT_TRUE(PlanSlices({{"sqlite:t.db?table=t", 10, true}}, std::nullopt).ok());
}

TEST(PlanSlices, RefusesAPlanOverTheItemLimitWithoutMakingIt) {
  // 10^12 bytes cut into 10^9 slices: refused at once (making the strings
  // would take tens of gigabytes); the limit itself is allowed.
  absl::Status s = PlanSlices({{"big", int64_t{1} << 40}}, 1'000'000'000).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("1000000000 items, more than the limit of 1000000"),
            std::string::npos) << s;
  absl::StatusOr<std::vector<std::string>> at_limit =
      PlanSlices({{"big", int64_t{1} << 40}}, kMaxItemsPerQueue);
  ASSERT_TRUE(at_limit.ok()) << at_limit.status();
  EXPECT_EQ(static_cast<int64_t>(at_limit->size()), kMaxItemsPerQueue);
  // A slice per byte is the most a work gets: 6 bytes, 6 items, however
  // many slices were asked for.
  absl::StatusOr<std::vector<std::string>> tiny = PlanSlices({{"tiny", 6}}, 1'000'000'000'000);
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  EXPECT_EQ(tiny->size(), 6u);
}

TEST(PlanSlices, TableWorksKeepTheirParameters) {
  absl::StatusOr<std::vector<std::string>> plan =
      PlanSlices({{"sqlite:t.db?table=clicks", 200}}, 2);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ((*plan)[1], "sqlite:t.db?table=clicks&start=100&end=200");
}

// Issue 15 item 1: a compressed file (unsplittable) used to be measured as
// one unit and planned "f.gz?start=0&end=1", a range its readers could not
// honour. It is now one item with no range, and the other works share the
// rest of the slices by size.
TEST(PlanSlices, UnsplittableWorkIsOneWholeItemAndTheOthersShareTheRest) {
  absl::StatusOr<std::vector<std::string>> plan =
      PlanSlices({{"c.gz", 5000, false}, {"p", 6000}}, 7);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(*plan, (std::vector<std::string>{"c.gz", "p?start=0&end=1000", "p?start=1000&end=2000",
                                             "p?start=2000&end=3000", "p?start=3000&end=4000",
                                             "p?start=4000&end=5000", "p?start=5000&end=6000"}));
  // Too few slices for every work: one each, still.
  plan = PlanSlices({{"c.gz", 5000, false}, {"p", 6000}, {"d.gz", 9, false}}, 1);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(*plan, (std::vector<std::string>{"c.gz", "p?start=0&end=6000", "d.gz"}));
  // Only unsplittable works, and an empty one (no item, as for any work).
  plan = PlanSlices({{"c.gz", 5000, false}, {"e.gz", 0, false}}, 40);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(*plan, std::vector<std::string>{"c.gz"});
  // The plain works' shares are by their sizes among themselves.
  std::vector<int64_t> counts =
      AllocateSlices({{"a", 300, true}, {"c.gz", 1 << 30, false}, {"b", 100, true}}, 5);
  EXPECT_EQ(counts, (std::vector<int64_t>{3, 1, 1}));
}

}  // namespace
}  // namespace shardq
