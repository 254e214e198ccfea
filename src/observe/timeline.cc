#include "src/observe/timeline.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace shardq {

absl::string_view ItemEventKindName(ItemEventKind kind) {
  switch (kind) {
    case ItemEventKind::kTake: return "take";
    case ItemEventKind::kComplete: return "complete";
    case ItemEventKind::kRelease: return "release";
    case ItemEventKind::kExpire: return "expire";
    case ItemEventKind::kSplit: return "split";
    case ItemEventKind::kFail: return "fail";
  }
  return "unknown";
}

Timeline::Timeline(size_t events_per_queue)
    : events_per_queue_(std::max<size_t>(1, events_per_queue)) {}

void Timeline::Push(QueueLog& log, ItemEvent event) const {
  if (log.events.size() >= events_per_queue_) {
    log.events.pop_front();
    ++log.dropped;
  }
  log.events.push_back(std::move(event));
}

void Timeline::Record(absl::string_view queue, const journal::Update& update) {
  absl::MutexLock lock(&mu_);
  if (update.has_create() || update.has_restore()) {
    queues_.erase(std::string(queue));
    queues_[std::string(queue)];
    return;
  }
  auto it = queues_.find(queue);
  if (it == queues_.end()) it = queues_.emplace(std::string(queue), QueueLog()).first;
  QueueLog& log = it->second;
  if (update.has_lease()) {
    ItemEvent e;
    e.kind = ItemEventKind::kTake;
    e.at_us = update.time_us();
    e.worker = update.lease().worker();
    e.lease_id = update.lease().lease_id();
    e.epoch = update.lease().epoch();
    e.index = update.lease().index();
    e.taken_us = e.at_us;
    log.open[e.lease_id] = e;
    Push(log, std::move(e));
    return;
  }
  uint64_t lease_id;
  ItemEventKind kind;
  switch (update.kind_case()) {
    case journal::Update::kComplete:
      lease_id = update.complete().lease_id();
      kind = ItemEventKind::kComplete;
      break;
    case journal::Update::kRelease:
      lease_id = update.release().lease_id();
      kind = ItemEventKind::kRelease;
      break;
    case journal::Update::kExpire:
      lease_id = update.expire().lease_id();
      kind = ItemEventKind::kExpire;
      break;
    case journal::Update::kSplit:
      lease_id = update.split().lease_id();
      kind = ItemEventKind::kSplit;
      break;
    case journal::Update::kFail:
      lease_id = update.fail().lease_id();
      kind = ItemEventKind::kFail;
      break;
    default:
      return;
  }
  ItemEvent e;
  auto open = log.open.find(lease_id);
  if (open != log.open.end()) {
    e = open->second;  // worker, epoch, index, taken_us
  } else {
    e.lease_id = lease_id;
    e.taken_us = 0;
    if (update.has_complete()) e.worker = update.complete().worker();
  }
  e.kind = kind;
  e.at_us = update.time_us();
  if (kind == ItemEventKind::kSplit) e.split_point = update.split().split_point();
  if (kind == ItemEventKind::kFail) e.reason = update.fail().reason();
  // A split leaves the lease with its holder (on a shorter range).
  if (kind != ItemEventKind::kSplit && open != log.open.end()) log.open.erase(open);
  Push(log, std::move(e));
}

std::vector<ItemEvent> Timeline::Since(absl::string_view queue, int64_t since_us,
                                       size_t limit) const {
  absl::MutexLock lock(&mu_);
  auto it = queues_.find(queue);
  if (it == queues_.end()) return {};
  const std::deque<ItemEvent>& events = it->second.events;
  // Events are appended in update order, whose times never go backwards by
  // more than the clock does; a binary search on at_us is good enough.
  auto first = std::lower_bound(events.begin(), events.end(), since_us,
                                [](const ItemEvent& e, int64_t t) { return e.at_us < t; });
  const size_t available = static_cast<size_t>(events.end() - first);
  if (available > limit) first = events.end() - static_cast<std::ptrdiff_t>(limit);
  return std::vector<ItemEvent>(first, events.end());
}

std::vector<ItemEvent> Timeline::Open(absl::string_view queue) const {
  absl::MutexLock lock(&mu_);
  auto it = queues_.find(queue);
  if (it == queues_.end()) return {};
  std::vector<ItemEvent> out;
  out.reserve(it->second.open.size());
  for (const auto& [lease, e] : it->second.open) out.push_back(e);
  std::sort(out.begin(), out.end(), [](const ItemEvent& a, const ItemEvent& b) {
    return a.taken_us != b.taken_us ? a.taken_us < b.taken_us : a.lease_id < b.lease_id;
  });
  return out;
}

int64_t Timeline::Dropped(absl::string_view queue) const {
  absl::MutexLock lock(&mu_);
  auto it = queues_.find(queue);
  return it == queues_.end() ? 0 : it->second.dropped;
}

void LatencyHistogram::Observe(absl::Duration d) {
  const double seconds = absl::ToDoubleSeconds(d);
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < kBucketsSeconds.size(); ++i) {
    if (seconds <= kBucketsSeconds[i]) {
      ++counts_[i];
      break;
    }
  }
  ++count_;
  sum_ += seconds;
}

std::string LatencyHistogram::PrometheusText(absl::string_view name,
                                             absl::string_view help) const {
  std::string out = absl::StrCat("# HELP ", name, " ", help, "\n# TYPE ", name, " histogram\n");
  absl::MutexLock lock(&mu_);
  int64_t cumulative = 0;
  for (size_t i = 0; i < kBucketsSeconds.size(); ++i) {
    cumulative += counts_[i];
    absl::StrAppend(&out, name, "_bucket{le=\"", absl::StrFormat("%g", kBucketsSeconds[i]),
                    "\"} ", cumulative, "\n");
  }
  absl::StrAppend(&out, name, "_bucket{le=\"+Inf\"} ", count_, "\n", name, "_sum ",
                  absl::StrFormat("%.17g", sum_), "\n", name, "_count ", count_, "\n");
  return out;
}

}  // namespace shardq
