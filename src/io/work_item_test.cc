// Parse once (issue 16): an item's string is parsed where it enters the
// client, and readers read what the parsed spec says.
#include "shardq/work_item.h"

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shardq/item_source.h"
#include "shardq/text_line_reader.h"

namespace shardq {
namespace {

using ::testing::HasSubstr;

TEST(ParseWorkItem, FillsTheSpecOnce) {
  WorkItem item;
  item.item = "data/part-3.txt?start=10&end=20";
  ASSERT_TRUE(ParseWorkItem(&item).ok());
  ASSERT_TRUE(item.spec.has_value());
  EXPECT_EQ(item.spec->work, "data/part-3.txt");
  EXPECT_EQ(item.spec->start, 10);
  EXPECT_EQ(item.spec->end, 20);
}

TEST(ParseWorkItem, BadStringIsInvalidArgumentAndLeavesNoSpec) {
  WorkItem item;
  item.item = "f?start=x&end=3";
  absl::Status s = ParseWorkItem(&item);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("start='x'"));
  EXPECT_FALSE(item.spec.has_value());
  EXPECT_EQ(SpecOf(item).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ListItemSource, HandsOutParsedItems) {
  ListItemSource source({"a.txt?start=0&end=4"});
  absl::StatusOr<WorkItem> item = source.NextItem();
  ASSERT_TRUE(item.ok());
  ASSERT_TRUE(item->spec.has_value());
  EXPECT_EQ(item->spec->end, 4);
}

// Hands out one item whose string and spec disagree: a reader that parsed
// the string again would read the wrong file.
class SpecSource final : public ItemSource {
 public:
  explicit SpecSource(WorkItem item) : item_(std::move(item)) {}
  absl::StatusOr<WorkItem> NextItem() override {
    if (given_) return absl::OutOfRangeError("end");
    given_ = true;
    return item_;
  }
  absl::Status ItemDone(const WorkItem&) override { return absl::OkStatus(); }

 private:
  WorkItem item_;
  bool given_ = false;
};

TEST(TextLineReader, ReadsTheParsedSpecNotTheString) {
  const std::string path =
      absl::StrCat(::testing::TempDir(), "/work_item_test-lines.txt");
  std::ofstream(path, std::ios::binary) << "one\ntwo\nthree\n";
  WorkItem item;
  item.item = "no-such-file.txt";
  item.spec = SliceSpec{path, 4, 8, {}};
  SpecSource source(item);
  TextLineReader reader;
  absl::StatusOr<std::vector<Record>> got = reader.ReadUpTo(source, 10);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].value, "two");
  EXPECT_EQ((*got)[0].key, "no-such-file.txt:4");  // keys name the item
}

}  // namespace
}  // namespace shardq
