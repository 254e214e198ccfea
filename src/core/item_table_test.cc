#include "src/core/item_table.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "shardq/slice.h"

namespace shardq {
namespace {

// Strings of every shape a plan may hold, each rendered back unchanged.
const std::vector<std::string>& Shapes() {
  static const auto* shapes = new std::vector<std::string>{
      "data/part-0.tfrecord?start=0&end=1048576",
      "data/part-0.tfrecord?start=1048576&end=2097152",
      "data/whole.txt",
      "sqlite:data/train.db?table=clicks&start=100&end=200",
      "sqlite:data/train.db?table=clicks",
      "data/odd.txt?end=10&start=0",        // parameters in another order
      "data/half.txt?start=5",              // one bound only
      "data/bad.txt?start=x&end=3",         // ParseItem refuses it
      "a?b?start=0&end=5",                  // a '?' inside the work
      "a?b",                                // a query that is not key=value
      "x?mystart=1&start=2&end=3",
      "z?start=007&end=9",                  // not how StrCat writes 7
      "big?start=0&end=9223372036854775807",
      "?start=0&end=1",
      "dup?start=0&end=5",
      "dup?start=0&end=5",
  };
  return *shapes;
}

TEST(ItemTable, RendersEveryItemByteIdentical) {
  auto table = ItemTable::FromStrings(Shapes());
  ASSERT_EQ(table->size(), static_cast<int64_t>(Shapes().size()));
  for (int64_t i = 0; i < table->size(); ++i) {
    const std::string& item = Shapes()[static_cast<size_t>(i)];
    EXPECT_EQ(table->Render(i), item);
    EXPECT_TRUE(table->Equals(i, item)) << item;
    EXPECT_FALSE(table->Equals(i, item + "x")) << item;
  }
  EXPECT_EQ(table->Strings(), Shapes());
}

TEST(ItemTable, KeepsRangesAsIntegers) {
  auto table = ItemTable::FromStrings(Shapes());
  EXPECT_EQ(table->Range(0), (ItemRange{0, 1048576}));
  EXPECT_EQ(table->Range(2), ItemRange{});
  EXPECT_EQ(table->Range(3), (ItemRange{100, 200}));
  EXPECT_EQ(table->Range(5), (ItemRange{0, 10}));  // literal, still splittable
  EXPECT_EQ(table->Range(6), ItemRange{});
  EXPECT_FALSE(table->Parses(7));
  EXPECT_TRUE(table->Parses(5));
}

// A work cut into ranges from 0 has the size its plan saw (the end of its
// last range); any other work's is unknown, -1. Restored tables agree.
TEST(ItemTable, WorkSizeIsTheEndOfAWorkCutIntoRangesFromZero) {
  auto table = ItemTable::FromStrings(Shapes());
  EXPECT_EQ(table->WorkSize(0), 2097152);
  EXPECT_EQ(table->WorkSize(1), 2097152);
  EXPECT_EQ(table->WorkSize(2), -1);   // whole
  EXPECT_EQ(table->WorkSize(3), -1);   // its table is also listed whole
  EXPECT_EQ(table->WorkSize(5), -1);   // literal
  EXPECT_EQ(table->WorkSize(6), -1);   // one bound only
  EXPECT_EQ(table->WorkSize(7), -1);   // does not parse
  EXPECT_EQ(table->WorkSize(8), -1);   // "a?b" is also listed whole (item 9)
  EXPECT_EQ(table->WorkSize(13), 1);
  EXPECT_EQ(table->WorkSize(10), -1);  // its ranges do not start at 0
  EXPECT_EQ(table->WorkSize(11), -1);  // literal
  EXPECT_EQ(table->WorkSize(12), 9223372036854775807);
  EXPECT_EQ(table->WorkSize(15), 5);
  journal::ItemTable proto;
  table->ToProto(&proto);
  auto back = ItemTable::FromProto(proto, "test");
  ASSERT_TRUE(back.ok()) << back.status();
  for (int64_t i = 0; i < table->size(); ++i) {
    EXPECT_EQ((*back)->WorkSize(i), table->WorkSize(i)) << Shapes()[static_cast<size_t>(i)];
  }
  // Slices of two files, out of order (a shuffled plan keeps its items'
  // order, but nothing here depends on it).
  auto sliced = ItemTable::FromStrings({"b.txt?start=10&end=25", "a.txt?start=0&end=7",
                                        "b.txt?start=0&end=10", "a.txt?start=7&end=9"});
  EXPECT_EQ(sliced->WorkSize(0), 25);
  EXPECT_EQ(sliced->WorkSize(1), 9);
  EXPECT_EQ(sliced->WorkSize(2), 25);
  EXPECT_EQ(sliced->WorkSize(3), 9);
}

TEST(ItemTable, NarrowedRangesRenderAsFormatItem) {
  auto table = ItemTable::FromStrings(Shapes());
  for (int64_t i = 0; i < table->size(); ++i) {
    if (!table->Parses(i)) continue;
    SliceSpec spec = *ParseItem(Shapes()[static_cast<size_t>(i)]);
    spec.start = 3;
    spec.end = 4;
    EXPECT_EQ(table->RenderRange(i, ItemRange{3, 4}), FormatItem(spec)) << i;
    spec.end.reset();
    EXPECT_EQ(table->RenderRange(i, ItemRange{3, -1}), FormatItem(spec)) << i;
  }
  // Its own range renders the planned string itself.
  EXPECT_EQ(table->RenderRange(5, ItemRange{0, 10}), "data/odd.txt?end=10&start=0");
}

TEST(ItemTable, StoresEachWorkOnce) {
  std::vector<std::string> items;
  for (int i = 0; i < 3000; ++i) {
    items.push_back(absl::StrCat("data/part-", i / 1000, ".tfrecord?start=", (i % 1000) * 10,
                                 "&end=", (i % 1000 + 1) * 10));
  }
  auto table = ItemTable::FromStrings(items);
  EXPECT_EQ(table->num_works(), 3);
  EXPECT_EQ(table->Strings(), items);
}

TEST(ItemTable, ProtoRoundTripKeepsEveryItem) {
  auto table = ItemTable::FromStrings(Shapes());
  journal::ItemTable proto;
  table->ToProto(&proto);
  auto back = ItemTable::FromProto(proto, "test");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((*back)->Strings(), Shapes());
  for (int64_t i = 0; i < table->size(); ++i) EXPECT_EQ((*back)->Range(i), table->Range(i));
}

TEST(ItemTable, ADamagedProtoIsDataLoss) {
  auto table = ItemTable::FromStrings(Shapes());
  journal::ItemTable proto;
  table->ToProto(&proto);
  journal::ItemTable bad = proto;
  bad.set_item_work(0, 1000);
  EXPECT_EQ(ItemTable::FromProto(bad, "t").status().code(), absl::StatusCode::kDataLoss);
  bad = proto;
  bad.add_item_length(1);
  EXPECT_EQ(ItemTable::FromProto(bad, "t").status().code(), absl::StatusCode::kDataLoss);
  bad = proto;
  bad.set_work_kinds(std::string(static_cast<size_t>(bad.works_size()), '\x09'));
  EXPECT_EQ(ItemTable::FromProto(bad, "t").status().code(), absl::StatusCode::kDataLoss);
}

// The structural bound behind the memory target: a 1,000,000-slice
// plan of a few hundred works costs about 20 bytes an item.
TEST(ItemTable, AMillionSlicesTakeAboutTwentyBytesEach) {
  std::vector<std::string> items;
  items.reserve(1000000);
  for (int64_t i = 0; i < 1000000; ++i) {
    items.push_back(absl::StrCat("data/part-", i / 1000, ".tfrecord?start=", (i % 1000) * 1048576,
                                 "&end=", (i % 1000 + 1) * 1048576));
  }
  auto table = ItemTable::FromStrings(items);
  EXPECT_LE(table->BytesUsed(), size_t{21} * 1000000);
  journal::ItemTable proto;
  table->ToProto(&proto);
  EXPECT_LE(proto.ByteSizeLong(), size_t{8} * 1000000);  // stored: delta-coded varints
  EXPECT_EQ(table->Render(123456), items[123456]);
}

}  // namespace
}  // namespace shardq
