#include "src/observe/summary_writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/shardq/tensorboard.pb.h"
#include "src/io/tfrecord.h"

namespace shardq {

QueueMetrics DeriveMetrics(const QueueStats& now, absl::Time at, const QueueStats* before,
                           absl::Time before_at) {
  QueueMetrics m;
  m.stats = now;
  if (before != nullptr) {
    const double seconds = absl::ToDoubleSeconds(at - before_at);
    if (seconds > 0) {
      m.take_rate = static_cast<double>(now.taken - before->taken) / seconds;
      m.complete_rate = static_cast<double>(now.completed - before->completed) / seconds;
    }
  }
  return m;
}

std::map<std::string, double> Scalars(const QueueMetrics& m) {
  const QueueStats& s = m.stats;
  const std::string q = absl::StrCat("shardq/", s.name, "/");
  std::map<std::string, double> out = {
      {q + "pending", static_cast<double>(s.pending)},
      {q + "leased", static_cast<double>(s.leased)},
      {q + "completed", static_cast<double>(s.completed)},
      {q + "taken", static_cast<double>(s.taken)},
      {q + "lease_expiries", static_cast<double>(s.expired)},
      {q + "released", static_cast<double>(s.released)},
      {q + "duplicates", static_cast<double>(s.duplicates)},
      {q + "splits", static_cast<double>(s.splits)},
      {q + "split_items_open", static_cast<double>(s.split_items_open)},
      {q + "records", static_cast<double>(s.records)},
      {q + "take_rate", m.take_rate},
      {q + "complete_rate", m.complete_rate},
  };
  for (size_t e = 0; e < s.epochs.size(); ++e) {
    const std::string p = absl::StrCat(q, "epoch_", s.epochs[e].epoch, "/");
    out[p + "pending"] = static_cast<double>(s.epochs[e].pending);
    out[p + "leased"] = static_cast<double>(s.epochs[e].leased);
    out[p + "completed"] = static_cast<double>(s.epochs[e].completed);
  }
  for (const auto& [worker, w] : s.workers) {
    out[absl::StrCat(q, "worker/", worker, "/completed")] = static_cast<double>(w.completed);
    out[absl::StrCat(q, "worker/", worker, "/items_per_second")] = w.items_per_second;
  }
  return out;
}

absl::StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::Create(
    const std::string& logdir) {
  if (::mkdir(logdir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::PermissionDeniedError(absl::StrCat("summary dir '", logdir,
                                                    "': cannot create: ", std::strerror(errno)));
  }
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "host");
  // TensorBoard picks up files whose name contains "tfevents".
  const std::string path =
      absl::StrCat(logdir, "/events.out.tfevents.", absl::ToUnixSeconds(absl::Now()), ".",
                   host, ".", ::getpid(), ".shardq");
  absl::StatusOr<std::unique_ptr<TFRecordWriter>> writer = TFRecordWriter::Create(path);
  if (!writer.ok()) return writer.status();
  std::unique_ptr<EventFileWriter> out(new EventFileWriter(path, *std::move(writer)));
  tensorboard::Event version;
  version.set_wall_time(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  version.set_file_version("brain.Event:2");
  if (absl::Status s = out->writer_->Write(version.SerializeAsString()); !s.ok()) return s;
  if (absl::Status s = out->writer_->Flush(); !s.ok()) return s;
  return out;
}

EventFileWriter::EventFileWriter(std::string path, std::unique_ptr<TFRecordWriter> writer)
    : path_(std::move(path)), writer_(std::move(writer)) {}

EventFileWriter::~EventFileWriter() { writer_->Close().IgnoreError(); }

absl::Status EventFileWriter::WriteScalars(int64_t step, absl::Time wall_time,
                                           const std::map<std::string, double>& scalars) {
  tensorboard::Event event;
  event.set_wall_time(absl::ToDoubleSeconds(wall_time - absl::UnixEpoch()));
  event.set_step(step);
  for (const auto& [tag, value] : scalars) {
    tensorboard::Summary::Value* v = event.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  return writer_->Write(event.SerializeAsString());
}

absl::Status EventFileWriter::Flush() { return writer_->Flush(); }

std::string PrometheusLabelValue(absl::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '\\' || c == '"') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

namespace {

std::string Label(absl::string_view value) { return PrometheusLabelValue(value); }

}  // namespace

std::string PrometheusText(const std::vector<QueueMetrics>& queues,
                           const JournalMetrics* journal) {
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help) {
    absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  };
  auto sample = [&](const char* name, const std::string& labels, double value) {
    absl::StrAppend(&out, name, "{", labels, "} ", absl::StrFormat("%.17g", value), "\n");
  };
  struct Family {
    const char* name;
    const char* type;
    const char* help;
    double (*get)(const QueueMetrics&);
  };
  const Family families[] = {
      {"shardq_items_pending", "gauge", "Items waiting to be handed out, all epochs.",
       [](const QueueMetrics& m) { return double(m.stats.pending); }},
      {"shardq_items_leased", "gauge", "Items held by workers right now.",
       [](const QueueMetrics& m) { return double(m.stats.leased); }},
      {"shardq_items_completed_total", "counter", "Items completed (first completions).",
       [](const QueueMetrics& m) { return double(m.stats.completed); }},
      {"shardq_items_taken_total", "counter", "Items handed out, including repeats.",
       [](const QueueMetrics& m) { return double(m.stats.taken); }},
      {"shardq_lease_expiries_total", "counter", "Leases that timed out.",
       [](const QueueMetrics& m) { return double(m.stats.expired); }},
      {"shardq_releases_total", "counter", "Items given back by their worker.",
       [](const QueueMetrics& m) { return double(m.stats.released); }},
      {"shardq_duplicate_completions_total", "counter",
       "Completions of items already completed.",
       [](const QueueMetrics& m) { return double(m.stats.duplicates); }},
      {"shardq_splits_total", "counter", "Held items split to rebalance the tail.",
       [](const QueueMetrics& m) { return double(m.stats.splits); }},
      {"shardq_split_items_open", "gauge", "Ranges split off held items, not completed yet.",
       [](const QueueMetrics& m) { return double(m.stats.split_items_open); }},
      {"shardq_records_total", "counter",
       "Records read, as workers report them with their completions (re-runs included).",
       [](const QueueMetrics& m) { return double(m.stats.records); }},
  };
  for (const Family& f : families) {
    family(f.name, f.type, f.help);
    for (const QueueMetrics& m : queues) {
      sample(f.name, absl::StrCat("queue=\"", Label(m.stats.name), "\""), f.get(m));
    }
  }
  family("shardq_epoch_items", "gauge", "Items per epoch by state.");
  for (const QueueMetrics& m : queues) {
    for (size_t e = 0; e < m.stats.epochs.size(); ++e) {
      const std::string base = absl::StrCat("queue=\"", Label(m.stats.name), "\",epoch=\"",
                                            m.stats.epochs[e].epoch, "\"");
      sample("shardq_epoch_items", base + ",state=\"pending\"", double(m.stats.epochs[e].pending));
      sample("shardq_epoch_items", base + ",state=\"leased\"", double(m.stats.epochs[e].leased));
      sample("shardq_epoch_items", base + ",state=\"completed\"",
             double(m.stats.epochs[e].completed));
    }
  }
  const struct {
    const char* name;
    const char* type;
    const char* help;
    double (*get)(const WorkerStats&);
  } worker_families[] = {
      {"shardq_worker_items_completed_total", "counter", "Items completed per worker.",
       [](const WorkerStats& w) { return double(w.completed); }},
      {"shardq_worker_items_taken_total", "counter", "Items handed out per worker.",
       [](const WorkerStats& w) { return double(w.taken); }},
      {"shardq_worker_items_held", "gauge", "Leases each worker holds right now.",
       [](const WorkerStats& w) { return double(w.held); }},
      {"shardq_worker_records_total", "counter",
       "Records read per worker, as reported with its completions.",
       [](const WorkerStats& w) { return double(w.records); }},
  };
  for (const auto& f : worker_families) {
    family(f.name, f.type, f.help);
    for (const QueueMetrics& m : queues) {
      for (const auto& [worker, w] : m.stats.workers) {
        sample(f.name,
               absl::StrCat("queue=\"", Label(m.stats.name), "\",worker=\"", Label(worker), "\""),
               f.get(w));
      }
    }
  }
  if (journal != nullptr) {
    const struct {
      const char* name;
      const char* help;
      int64_t value;
    } counters[] = {
        {"shardq_journal_commits_total", "Journal commits (one fsync each).", journal->commits},
        {"shardq_journal_entries_total",
         "Journal entries stored (updates and snapshots); per commit: how many share an fsync.",
         journal->entries},
        {"shardq_journal_bytes_total", "Bytes of journal entries stored.", journal->bytes},
        {"shardq_journal_snapshots_total", "Queue snapshots stored.", journal->snapshots},
    };
    for (const auto& c : counters) {
      family(c.name, "counter", c.help);
      absl::StrAppend(&out, c.name, " ", c.value, "\n");
    }
  }
  return out;
}

std::string LeadershipText(const LeadershipMetrics& leadership) {
  const std::string label = absl::StrCat("{job=\"", PrometheusLabelValue(leadership.job), "\"}");
  return absl::StrCat(
      "# HELP shardq_leader 1 while this coordinator leads its job, 0 while it stands by.\n",
      "# TYPE shardq_leader gauge\n", "shardq_leader", label, " ", leadership.leading ? 1 : 0,
      "\n",
      "# HELP shardq_failovers_total Times this coordinator took its job over after standing "
      "by.\n",
      "# TYPE shardq_failovers_total counter\n", "shardq_failovers_total", label, " ",
      leadership.failovers, "\n");
}

std::string SessionsText(const SessionMetrics& sessions) {
  return absl::StrCat(
      "# HELP shardq_sessions_open Session streams (one per worker and queue) open now.\n",
      "# TYPE shardq_sessions_open gauge\n", "shardq_sessions_open ", sessions.open, "\n",
      "# HELP shardq_sessions_limit Session streams held at once (serve --max-sessions); more "
      "are refused.\n",
      "# TYPE shardq_sessions_limit gauge\n", "shardq_sessions_limit ", sessions.limit, "\n");
}

}  // namespace shardq
