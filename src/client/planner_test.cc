#include "src/client/planner.h"

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "src/io/compressed_tfrecord.h"
#include "src/io/tfrecord.h"

namespace shardq {
namespace {

std::string WriteFile(const std::string& name, const std::string& contents) {
  std::string path = testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

// An empty directory under the test temp dir, made afresh.
std::string FreshDir(const std::string& name) {
  const std::string dir = testing::TempDir() + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(PlanWorks, MissingFileIsNotFoundWithItsPath) {
  absl::Status s = PlanWorks({"/no/such/shardq-file.txt"}, "", 4).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("/no/such/shardq-file.txt"), std::string::npos);
  // Also without slicing: a queue of missing files is a mistake.
  EXPECT_EQ(PlanWorks({"/no/such/shardq-file.txt"}, "", std::nullopt).status().code(),
            absl::StatusCode::kNotFound);
}

// Works are measured several at once; the error reported is still the
// first in the works' order, and the plan keeps their order.
TEST(PlanWorks, ManyWorksKeepTheirOrderAndTheFirstMissingOneIsNamed) {
  std::vector<std::string> works;
  for (int i = 0; i < 100; ++i) {
    works.push_back(WriteFile("pm-" + std::to_string(i) + ".txt", std::string(10 + i, 'x') + "\n"));
  }
  absl::StatusOr<std::vector<std::string>> plan = PlanWorks(works, "", std::nullopt);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(*plan, works);
  for (int round = 0; round < 5; ++round) {
    std::vector<std::string> missing = works;
    missing[37] = "/no/such/shardq-first.txt";
    missing[38] = "/no/such/shardq-second.txt";
    missing[99] = "/no/such/shardq-last.txt";
    absl::Status s = PlanWorks(missing, "", 10).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
    EXPECT_NE(s.message().find("shardq-first.txt"), std::string::npos) << s;
  }
}

TEST(PlanWorks, PrefixIsPutBeforeEveryWork) {
  WriteFile("pa.txt", "hello\n");
  absl::StatusOr<std::vector<std::string>> plan =
      PlanWorks({"pa.txt"}, testing::TempDir() + "/", std::nullopt);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)[0], testing::TempDir() + "/pa.txt");
}

TEST(PlanWorks, EmptyWorksAndBadSliceCountsAreRejected) {
  EXPECT_EQ(PlanWorks({}, "", 3).status().code(), absl::StatusCode::kInvalidArgument);
  std::string f = WriteFile("pb.txt", "x\n");
  absl::Status s = PlanWorks({f}, "", 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("num_slices"), std::string::npos);
  std::string empty = WriteFile("pc.txt", "");
  s = PlanWorks({empty}, "", 3).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("empty"), std::string::npos);
}

// Issue 19: a directory is the files in it (it used to be refused as "not a
// regular file").
// Two works that read the same file would hand its records out twice in
// every epoch, silently: refused, naming both, however the file is named.
TEST(PlanWorks, WorksThatReadTheSameFileAreRefusedNamingThem) {
  const std::string dir = FreshDir("planner-same");
  const std::string a = dir + "/a.txt";
  const std::string b = dir + "/b.txt";
  std::ofstream(a) << "one\ntwo\n";
  std::ofstream(b) << "three\n";
  std::filesystem::create_symlink(a, dir + "/link.txt");
  auto refused = [](const std::vector<std::string>& works, const std::string& prefix,
                    std::optional<int64_t> slices) {
    return PlanWorks(works, prefix, slices).status();
  };
  absl::Status twice = refused({a, b, a}, "", std::nullopt);
  EXPECT_EQ(twice.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(twice.message().find("'" + a + "' is listed twice"), std::string::npos)
      << twice;
  EXPECT_NE(twice.message().find("twice in every epoch"), std::string::npos);
  // Another name of the same file: "./", a link, the prefix, a pattern or
  // a directory that also holds it.
  absl::Status dot = refused({a, dir + "/./a.txt"}, "", 2);
  EXPECT_EQ(dot.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(dot.message().find("are the same file"), std::string::npos) << dot;
  EXPECT_NE(dot.message().find(dir + "/./a.txt"), std::string::npos) << dot;
  EXPECT_EQ(refused({dir + "/link.txt", a}, "", std::nullopt).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused({"a.txt", "a.txt"}, dir + "/", std::nullopt).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused({dir + "/[ab].txt", b}, "", 3).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused({dir, b}, "", std::nullopt).code(), absl::StatusCode::kInvalidArgument);
  // Different files are fine, however alike their names or contents.
  std::filesystem::remove(dir + "/link.txt");
  std::filesystem::copy_file(a, dir + "/copy.txt");
  absl::StatusOr<std::vector<std::string>> plan =
      PlanWorks({a, dir + "/copy.txt", b}, "", std::nullopt);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->size(), 3u);
  EXPECT_TRUE(PlanWorks({dir}, "", 4).ok());
}

// A file whose name reads as an item of another work would be read as
// that other work by every reader: refused, sliced or not. '?' followed by
// something that is not key=value is part of the name.
TEST(PlanWorks, AFileWhoseNameReadsAsAnItemOfAnotherWorkIsRefused) {
  const std::string dir = FreshDir("planner-query");
  std::ofstream(dir + "/x") << "wrong\n";
  std::ofstream(dir + "/x?y=1.txt") << "right\n";
  std::ofstream(dir + "/q?mark.txt") << "fine\n";
  for (std::optional<int64_t> slices : {std::optional<int64_t>(), std::optional<int64_t>(2)}) {
    absl::Status s = PlanWorks({dir + "/x?y=1.txt"}, "", slices).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("work '" + dir + "/x?y=1.txt' reads as an item of work '" + dir +
                               "/x'"),
              std::string::npos)
        << s;
    absl::StatusOr<std::vector<std::string>> plan = PlanWorks({dir + "/q?mark.txt"}, "", slices);
    ASSERT_TRUE(plan.ok()) << plan.status();
  }
}

TEST(PlanWorks, DirectoryIsTheFilesInIt) {
  const std::string dir = FreshDir("planner-dir");
  std::ofstream(dir + "/b.txt") << "b\n";
  std::ofstream(dir + "/a.txt") << "a\n";
  absl::StatusOr<std::vector<std::string>> plan = PlanWorks({dir}, "", std::nullopt);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(*plan, (std::vector<std::string>{dir + "/a.txt", dir + "/b.txt"}));
}

// Issue 15 item 1: 500 gzip + 500 plain records in 7 slices: the gzip file
// is one whole item (it was "c.tfrecord.gz?start=0&end=1", of which readers
// returned one record), the plain file gets the other 6 slices.
TEST(PlanWorks, CompressedFileIsOneWholeItemAndPlainFilesGetTheirShare) {
  const std::string gz = testing::TempDir() + "/planner-c.tfrecord.gz";
  const std::string plain = testing::TempDir() + "/planner-p.tfrecord";
  {
    auto writer = CompressedTFRecordWriter::Create(gz, FileCompression::kGzip);
    ASSERT_TRUE(writer.ok()) << writer.status();
    std::string bytes;
    for (int i = 0; i < 500; ++i) {
      const std::string record = "record " + std::to_string(i);
      ASSERT_TRUE((*writer)->Write(record).ok());
      bytes += EncodeTFRecord(record);
    }
    ASSERT_TRUE((*writer)->Close().ok());
    WriteFile("planner-p.tfrecord", bytes);
  }
  absl::StatusOr<std::vector<std::string>> plan = PlanWorks({gz, plain}, "", 7);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->size(), 7u);
  EXPECT_EQ((*plan)[0], gz);
  for (size_t i = 1; i < plan->size(); ++i) {
    EXPECT_EQ((*plan)[i].rfind(plain + "?start=", 0), 0u) << (*plan)[i];
  }
  // Without num_slices it is one item per work, as before.
  plan = PlanWorks({gz, plain}, "", std::nullopt);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(*plan, (std::vector<std::string>{gz, plain}));
}

}  // namespace
}  // namespace shardq

namespace shardq {
namespace {

// A fresh directory under the test temp dir, holding an empty "sub".
std::string MakeDir(const std::string& name) {
  const std::string dir = FreshDir(name);
  std::filesystem::create_directories(dir + "/sub");
  return dir;
}

TEST(ExpandWorks, DirectoryAndGlobBecomeTheirFilesSortedByName) {
  const std::string dir = MakeDir("expand-a");
  for (const char* name : {"b.tfrecord", "a.tfrecord", "c.txt", ".hidden"}) {
    std::ofstream(dir + "/" + name) << "x\n";
  }
  std::ofstream(dir + "/sub/d.tfrecord") << "x\n";  // subdirectories are not read
  absl::StatusOr<std::vector<std::string>> all = ExpandWorks({"expand-a"}, testing::TempDir() + "/");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(*all, (std::vector<std::string>{dir + "/a.tfrecord", dir + "/b.tfrecord",
                                            dir + "/c.txt"}));
  absl::StatusOr<std::vector<std::string>> some = ExpandWorks({dir + "/*.tfrecord", dir + "/c.txt"}, "");
  ASSERT_TRUE(some.ok()) << some.status();
  EXPECT_EQ(*some, (std::vector<std::string>{dir + "/a.tfrecord", dir + "/b.tfrecord",
                                             dir + "/c.txt"}));
  // Tables keep their scheme first; a plain missing file is left for
  // MeasureWork to name.
  absl::StatusOr<std::vector<std::string>> other =
      ExpandWorks({"sqlite:x.db?table=t", "missing.txt"}, "p/");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(*other, (std::vector<std::string>{"sqlite:p/x.db?table=t", "p/missing.txt"}));
}

TEST(ExpandWorks, PatternMatchingNothingAndEmptyDirectoryAreNotFoundNamingThem) {
  const std::string dir = MakeDir("expand-b");
  absl::Status s = ExpandWorks({dir + "/*.tfrecord"}, "").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find(dir + "/*.tfrecord"), std::string::npos) << s;
  EXPECT_NE(s.message().find("matches no file"), std::string::npos) << s;
  s = ExpandWorks({dir + "/sub"}, "").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("holds no files"), std::string::npos) << s;
  // Through PlanWorks too.
  EXPECT_EQ(PlanWorks({dir + "/*.txt"}, "", 4).status().code(), absl::StatusCode::kNotFound);
}

TEST(ExpandWorks, AnExistingFileWhoseNameHasGlobCharactersIsThatFile) {
  const std::string dir = MakeDir("expand-c");
  std::ofstream(dir + "/odd[1].txt") << "x\n";
  std::ofstream(dir + "/odd1.txt") << "x\n";
  absl::StatusOr<std::vector<std::string>> got = ExpandWorks({dir + "/odd[1].txt"}, "");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, std::vector<std::string>{dir + "/odd[1].txt"});
}

}  // namespace
}  // namespace shardq
