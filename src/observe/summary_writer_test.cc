#include "src/observe/summary_writer.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/shardq/tensorboard.pb.h"
#include "src/io/tfrecord.h"

namespace shardq {
namespace {

QueueStats Sample(int64_t taken, int64_t completed) {
  QueueStats s;
  s.name = "train";
  s.num_items = 10;
  s.num_epochs = 2;
  s.taken = taken;
  s.completed = completed;
  s.pending = 20 - completed - 2;
  s.leased = 2;
  s.expired = 1;
  s.duplicates = 1;
  s.epochs = {EpochStats{0, 1, 9, /*epoch=*/0}, EpochStats{8, 1, 1, /*epoch=*/1}};
  s.workers["w0"] = WorkerStats{6, 5, 1, 2.5, /*records=*/50 * completed};
  s.records = 100 * completed;
  return s;
}

TEST(SummaryWriter, EventFileReadsBackWithTheScalars) {
  const std::string dir = absl::StrCat(testing::TempDir(), "/events-", ::getpid());
  std::filesystem::remove_all(dir);
  absl::StatusOr<std::unique_ptr<EventFileWriter>> writer = EventFileWriter::Create(dir);
  ASSERT_TRUE(writer.ok()) << writer.status();
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  QueueStats before = Sample(4, 3);
  QueueStats after = Sample(14, 10);
  QueueMetrics m = DeriveMetrics(after, t0 + absl::Seconds(2), &before, t0);
  EXPECT_DOUBLE_EQ(m.take_rate, 5.0);
  ASSERT_TRUE((*writer)->WriteScalars(7, t0 + absl::Seconds(2), Scalars(m)).ok());
  ASSERT_TRUE((*writer)->Flush().ok());
  const std::string path = (*writer)->path();
  EXPECT_NE(path.find("tfevents"), std::string::npos);

  auto reader = TFRecordSliceReader::Open(path, 0, -1);
  ASSERT_TRUE(reader.ok());
  std::string record;
  ASSERT_TRUE(*(*reader)->Next(&record, nullptr));
  tensorboard::Event version;
  ASSERT_TRUE(version.ParseFromString(record));
  EXPECT_EQ(version.file_version(), "brain.Event:2");
  ASSERT_TRUE(*(*reader)->Next(&record, nullptr));
  tensorboard::Event event;
  ASSERT_TRUE(event.ParseFromString(record));
  EXPECT_EQ(event.step(), 7);
  EXPECT_DOUBLE_EQ(event.wall_time(), 1002.0);
  std::map<std::string, float> values;
  for (const auto& v : event.summary().value()) values[v.tag()] = v.simple_value();
  EXPECT_EQ(values.at("shardq/train/completed"), 10.f);
  EXPECT_EQ(values.at("shardq/train/leased"), 2.f);
  EXPECT_EQ(values.at("shardq/train/take_rate"), 5.f);
  EXPECT_EQ(values.at("shardq/train/lease_expiries"), 1.f);
  EXPECT_EQ(values.at("shardq/train/duplicates"), 1.f);
  EXPECT_EQ(values.at("shardq/train/epoch_1/pending"), 8.f);
  EXPECT_EQ(values.at("shardq/train/worker/w0/completed"), 5.f);
  EXPECT_FALSE(*(*reader)->Next(&record, nullptr));
}

TEST(SummaryWriter, PrometheusTextHasOneSamplePerQueueAndEscapesLabels) {
  QueueStats s = Sample(14, 10);
  s.name = "we\"ird";
  std::string text = PrometheusText({DeriveMetrics(s, absl::Now(), nullptr, absl::Now())});
  EXPECT_NE(text.find("# TYPE shardq_items_completed_total counter"), std::string::npos);
  EXPECT_NE(text.find("shardq_items_completed_total{queue=\"we\\\"ird\"} 10\n"),
            std::string::npos);
  EXPECT_NE(text.find("shardq_epoch_items{queue=\"we\\\"ird\",epoch=\"1\",state=\"pending\"} 8"),
            std::string::npos);
  EXPECT_NE(text.find("shardq_lease_expiries_total{queue=\"we\\\"ird\"} 1"), std::string::npos);
}

// With many epochs, stats list only the epochs in progress: labels and tags
// carry each one's own number, not its position in the list.
TEST(SummaryWriter, EpochsAreLabelledWithTheirNumberNotTheirPosition) {
  QueueStats s = Sample(14, 10);
  s.num_epochs = 1000;
  s.epochs = {EpochStats{3, 2, 5, /*epoch=*/57}, EpochStats{10, 0, 0, /*epoch=*/58}};
  QueueMetrics m = DeriveMetrics(s, absl::Now(), nullptr, absl::Now());
  const std::string text = PrometheusText({m});
  EXPECT_NE(text.find("shardq_epoch_items{queue=\"train\",epoch=\"57\",state=\"pending\"} 3"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("shardq_epoch_items{queue=\"train\",epoch=\"58\",state=\"pending\"} 10"),
            std::string::npos);
  EXPECT_EQ(text.find("epoch=\"0\""), std::string::npos);
  const std::map<std::string, double> scalars = Scalars(m);
  EXPECT_EQ(scalars.at("shardq/train/epoch_57/completed"), 5.0);
  EXPECT_EQ(scalars.count("shardq/train/epoch_0/completed"), 0u);
}

TEST(SummaryWriter, WhatOnlyGrowsIsACounterAndNoRateIsPrecomputed) {
  QueueStats before = Sample(4, 3);
  QueueStats after = Sample(14, 10);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  const std::string text =
      PrometheusText({DeriveMetrics(after, t0 + absl::Seconds(2), &before, t0)});
  for (const char* counter :
       {"shardq_items_completed_total", "shardq_items_taken_total",
        "shardq_worker_items_completed_total", "shardq_worker_items_taken_total",
        "shardq_lease_expiries_total", "shardq_releases_total",
        "shardq_duplicate_completions_total", "shardq_splits_total", "shardq_records_total",
        "shardq_worker_records_total"}) {
    EXPECT_NE(text.find(absl::StrCat("# TYPE ", counter, " counter\n")), std::string::npos)
        << counter;
  }
  for (const char* gauge : {"shardq_items_pending", "shardq_items_leased",
                            "shardq_split_items_open", "shardq_epoch_items",
                            "shardq_worker_items_held"}) {
    EXPECT_NE(text.find(absl::StrCat("# TYPE ", gauge, " gauge\n")), std::string::npos)
        << gauge;
  }
  EXPECT_NE(text.find("shardq_items_taken_total{queue=\"train\"} 14\n"), std::string::npos);
  EXPECT_NE(text.find("shardq_worker_items_completed_total{queue=\"train\",worker=\"w0\"} 5\n"),
            std::string::npos);
  EXPECT_NE(text.find("shardq_worker_items_taken_total{queue=\"train\",worker=\"w0\"} 6\n"),
            std::string::npos);
  EXPECT_NE(text.find("shardq_worker_items_held{queue=\"train\",worker=\"w0\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("shardq_records_total{queue=\"train\"} 1000\n"), std::string::npos);
  EXPECT_NE(text.find("shardq_worker_records_total{queue=\"train\",worker=\"w0\"} 500\n"),
            std::string::npos);
  // The old names, typed gauge, and the precomputed rate are gone.
  EXPECT_EQ(text.find("shardq_items_completed{"), std::string::npos);
  EXPECT_EQ(text.find("shardq_worker_items_completed{"), std::string::npos);
  EXPECT_EQ(text.find("_rate"), std::string::npos) << text;
}

TEST(SummaryWriter, LabelValuesEscapeBackslashQuoteAndNewline) {
  EXPECT_EQ(PrometheusLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  QueueStats s = Sample(14, 10);
  s.workers.clear();
  s.workers["host\n\"1\""] = WorkerStats{1, 1, 0, 0};
  const std::string text = PrometheusText({DeriveMetrics(s, absl::Now(), nullptr, absl::Now())});
  EXPECT_NE(text.find("worker=\"host\\n\\\"1\\\"\"} 1\n"), std::string::npos) << text;
}

TEST(SummaryWriter, TheJournalIsPublishedOnlyWhenThereIsOne) {
  QueueStats s = Sample(14, 10);
  const std::vector<QueueMetrics> queues = {DeriveMetrics(s, absl::Now(), nullptr, absl::Now())};
  EXPECT_EQ(PrometheusText(queues).find("shardq_journal"), std::string::npos);
  JournalMetrics journal;
  journal.commits = 4;
  journal.entries = 30;
  journal.bytes = 900;
  journal.snapshots = 1;
  const std::string text = PrometheusText(queues, &journal);
  EXPECT_NE(text.find("# TYPE shardq_journal_commits_total counter\n"
                      "shardq_journal_commits_total 4\n"),
            std::string::npos);
  EXPECT_NE(text.find("shardq_journal_entries_total 30\n"), std::string::npos);
  EXPECT_NE(text.find("shardq_journal_bytes_total 900\n"), std::string::npos);
  EXPECT_NE(text.find("shardq_journal_snapshots_total 1\n"), std::string::npos);
}

TEST(SummaryWriter, LeadershipIsAGaugeAndFailoversACounterLabelledByJob) {
  LeadershipMetrics leading;
  leading.job = "train\"x";
  leading.leading = true;
  leading.failovers = 2;
  std::string text = LeadershipText(leading);
  EXPECT_NE(text.find("# TYPE shardq_leader gauge\nshardq_leader{job=\"train\\\"x\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE shardq_failovers_total counter\n"
                      "shardq_failovers_total{job=\"train\\\"x\"} 2\n"),
            std::string::npos)
      << text;
  LeadershipMetrics standing_by;
  standing_by.job = "j";
  text = LeadershipText(standing_by);
  EXPECT_NE(text.find("shardq_leader{job=\"j\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("shardq_failovers_total{job=\"j\"} 0\n"), std::string::npos) << text;
}

TEST(SummaryWriter, SessionsOpenAndTheirLimitAreGauges) {
  const std::string text = SessionsText(SessionMetrics{42, 100000});
  EXPECT_NE(text.find("# TYPE shardq_sessions_open gauge\nshardq_sessions_open 42\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE shardq_sessions_limit gauge\nshardq_sessions_limit 100000\n"),
            std::string::npos)
      << text;
}

TEST(SummaryWriter, SplitsAreACounterAndOpenSplitItemsAGauge) {
  QueueStats s = Sample(14, 10);
  s.splits = 3;
  s.split_items_open = 1;
  const std::string text = PrometheusText({DeriveMetrics(s, absl::Now(), nullptr, absl::Now())});
  EXPECT_NE(text.find("# HELP shardq_splits_total "), std::string::npos);
  EXPECT_NE(text.find("# TYPE shardq_splits_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("shardq_splits_total{queue=\"train\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("# HELP shardq_split_items_open "), std::string::npos);
  EXPECT_NE(text.find("# TYPE shardq_split_items_open gauge\n"), std::string::npos);
  EXPECT_NE(text.find("shardq_split_items_open{queue=\"train\"} 1\n"), std::string::npos);
}

TEST(SummaryWriter, ScalarsCarrySplitsNextToTheOtherQueueCounters) {
  QueueStats s = Sample(14, 10);
  s.splits = 3;
  s.split_items_open = 1;
  const std::map<std::string, double> scalars =
      Scalars(DeriveMetrics(s, absl::Now(), nullptr, absl::Now()));
  EXPECT_EQ(scalars.at("shardq/train/splits"), 3.0);
  EXPECT_EQ(scalars.at("shardq/train/split_items_open"), 1.0);
  EXPECT_EQ(scalars.at("shardq/train/records"), 1000.0);
  // 12 per queue, 3 per epoch (2 epochs), 2 per worker (1 worker).
  EXPECT_EQ(scalars.size(), 12u + 2 * 3 + 2);
}

TEST(SummaryWriter, UnwritableDirectoryIsAnError) {
  EXPECT_FALSE(EventFileWriter::Create("/proc/shardq-no/events").ok());
}

}  // namespace
}  // namespace shardq
