// What clients send is checked before it makes or changes a queue: names
// and item strings (issue 15 item 10), the residual ranges of a restored
// checkpoint (item 9) and the split settings of an attaching client
// (item 8).
#include "src/core/validate.h"

#include <memory>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/core/queue_state.h"

namespace shardq {
namespace {

using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

QueueConfig Config() {
  QueueConfig c;
  c.name = "q";
  c.items = {"a.txt?start=0&end=1000", "b.txt?start=1000&end=2000", "whole.gz"};
  c.num_epochs = 2;
  c.shuffle = false;
  c.seed = 1;
  return c;
}

TEST(ValidateName, RefusesEmptyTooLongAndControlCharactersNamingTheField) {
  EXPECT_TRUE(ValidateName("queue name", "train-2024.v1 (ü)").ok());
  EXPECT_TRUE(ValidateName("worker name", std::string(kMaxNameBytes, 'w')).ok());
  for (const std::string& bad :
       {std::string(), std::string(kMaxNameBytes + 1, 'w'), std::string("a\0b", 3),
        std::string("a\nb"), std::string("tab\there"), std::string("esc\x1b"),
        std::string("del\x7f")}) {
    absl::Status s = ValidateName("worker name", bad);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << absl::CHexEscape(bad) << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr("worker name"));
    // The message itself carries no raw control character.
    for (char c : s.message()) EXPECT_GE(static_cast<unsigned char>(c), 0x20) << s;
  }
  EXPECT_THAT(ValidateName("queue name", "a\nb").message(),
              HasSubstr("control character 0x0a at byte 1"));
}

TEST(ValidateConfig, RefusesQueueNamesAndItemsWithControlCharacters) {
  QueueConfig c = Config();
  c.name = std::string("q\0hidden", 8);
  absl::Status s = ValidateConfig(c);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("queue name"));

  c = Config();
  c.items[1] = "b.txt\n?start=0&end=1";
  s = ValidateConfig(c);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("item 1"));
  EXPECT_THAT(s.message(), HasSubstr("0x0a"));

  c = Config();
  c.items[2] = "";
  s = ValidateConfig(c);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("item 2"));
  // QueueState::Create applies the same checks.
  EXPECT_TRUE(absl::IsInvalidArgument(QueueState::Create(c).status()));
}

TEST(ConfigDifferences, SplitSettingsMustAgreeToAttach) {
  QueueConfig existing = Config();
  QueueConfig requested = Config();
  EXPECT_TRUE(ConfigDifferences(existing, requested).empty());

  requested.split = false;
  std::vector<std::string> diffs = ConfigDifferences(existing, requested);
  ASSERT_EQ(diffs.size(), 1u);
  EXPECT_THAT(diffs[0], HasSubstr("split (existing on, requested off"));

  requested = Config();
  requested.split_min_residual = 4096;
  diffs = ConfigDifferences(existing, requested);
  ASSERT_EQ(diffs.size(), 1u);
  EXPECT_EQ(diffs[0], "split_min_residual (existing 1, requested 4096)");

  // Without splitting, the smallest split-off range means nothing.
  existing.split = requested.split = false;
  EXPECT_TRUE(ConfigDifferences(existing, requested).empty());
}

journal::Checkpoint CheckpointOf(const QueueConfig& config) {
  journal::Checkpoint c;
  ConfigToProto(config, c.mutable_config());
  return c;
}

void AddResidual(journal::Checkpoint* c, int64_t epoch, int64_t index,
                 const std::string& item = "") {
  journal::Ref* r = c->add_residual();
  r->set_epoch(epoch);
  r->set_index(index);
  if (!item.empty()) r->set_item_override(item);
}

TEST(ValidateCheckpointResiduals, AcceptsWhatARealRunWrites) {
  journal::Checkpoint c = CheckpointOf(Config());
  AddResidual(&c, 0, 0, "a.txt?start=100&end=400");
  AddResidual(&c, 0, 0, "a.txt?start=400&end=1000");
  AddResidual(&c, 0, 0, "a.txt?start=400&end=400");  // read to its end
  AddResidual(&c, 1, 0, "a.txt?start=0&end=1000");   // another epoch
  AddResidual(&c, 0, 1);                              // the whole item
  AddResidual(&c, 0, 2, "whole.gz?start=12345");      // progress in an unranged item
  EXPECT_TRUE(ValidateCheckpointResiduals(c).ok()) << ValidateCheckpointResiduals(c);
  absl::StatusOr<journal::Update> update = QueueState::RestoreUpdate(c, "", kT0);
  EXPECT_TRUE(update.ok()) << update.status();
}

// Each residual `item` of planned item `index`, added to a valid
// checkpoint, is refused with INVALID_ARGUMENT naming the item.
void ExpectRefused(int64_t epoch, int64_t index, const std::string& item,
                   const std::string& why, const std::string& other = "") {
  journal::Checkpoint c = CheckpointOf(Config());
  if (!other.empty()) AddResidual(&c, epoch, index, other);
  AddResidual(&c, epoch, index, item);
  for (const absl::Status& s :
       {ValidateCheckpointResiduals(c), QueueState::RestoreUpdate(c, "", kT0).status()}) {
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << item << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("item ", index))) << s;
    EXPECT_THAT(s.message(), HasSubstr(why)) << s;
  }
}

TEST(ValidateCheckpointResiduals, RefusesRangesThatAreNotPartOfTheirPlannedItem) {
  ExpectRefused(0, 0, "other.txt?start=0&end=10", "does not read the planned item");
  ExpectRefused(0, 0, "a.txt?start=0&end=10&table=t", "does not read the planned item");
  ExpectRefused(0, 0, "a.txt?start=900&end=1001", "outside the planned item");
  ExpectRefused(0, 1, "b.txt?start=999&end=1500", "outside the planned item");
  ExpectRefused(0, 1, "b.txt?start=1500", "outside the planned item");  // to the end of b.txt
  ExpectRefused(0, 0, "a.txt?start=9&end=x", "not a non-negative integer");
  ExpectRefused(0, 0, "a.txt?start=100&end=300", "overlap", "a.txt?start=200&end=400");
  ExpectRefused(1, 0, "a.txt?start=100&end=300", "overlap", "a.txt?start=0&end=1000");
  ExpectRefused(0, 1, "b.txt?start=1000&end=2000", "overlap", "b.txt?start=1000&end=2000");
  ExpectRefused(0, 3, "c.txt", "outside the plan");
  ExpectRefused(2, 0, "a.txt?start=0&end=10", "outside the plan");
}

TEST(ValidateCheckpointResiduals, AResidualWithoutARangeIsTheWholeItem) {
  journal::Checkpoint c = CheckpointOf(Config());
  AddResidual(&c, 0, 1);
  AddResidual(&c, 0, 1, "b.txt?start=1500&end=1600");
  absl::Status s = ValidateCheckpointResiduals(c);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("residual ranges of epoch 0 item 1 overlap"));
  // An unranged planned item can only be read whole, or from an offset on.
  c = CheckpointOf(Config());
  AddResidual(&c, 0, 2);
  AddResidual(&c, 0, 2);
  EXPECT_THAT(ValidateCheckpointResiduals(c).message(), HasSubstr("overlap"));
}

TEST(ValidateCheckpointResiduals, RefusesAHundredThousandRangesForOneItem) {
  // The report: 100,000 residual strings for one planned item were accepted.
  QueueConfig config = Config();
  config.items[0] = "big.txt?start=0&end=10000000";
  journal::Checkpoint c = CheckpointOf(config);
  for (int i = 0; i < 100000; ++i) {
    AddResidual(&c, 0, 0, absl::StrCat("big.txt?start=", i * 100, "&end=", i * 100 + 50));
  }
  absl::StatusOr<journal::Update> update = QueueState::RestoreUpdate(c, "", kT0);
  EXPECT_TRUE(absl::IsInvalidArgument(update.status())) << update.status();
  EXPECT_THAT(update.status().message(), HasSubstr("epoch 0 item 0"));
  EXPECT_THAT(update.status().message(), HasSubstr(absl::StrCat(kMaxResidualsPerItem)));
  // The same strings, all one range, are refused as overlapping.
  journal::Checkpoint same = CheckpointOf(config);
  for (int i = 0; i < 3; ++i) AddResidual(&same, 0, 0, "big.txt?start=0&end=50");
  EXPECT_THAT(ValidateCheckpointResiduals(same).message(), HasSubstr("overlap"));
}

}  // namespace
}  // namespace shardq
