#include "src/observe/status_json.h"

namespace shardq {

nlohmann::json QueueStatsJson(const QueueStats& s) {
  nlohmann::json q = {
      {"name", s.name},       {"seed", s.seed},         {"items", s.num_items},
      {"epochs", s.num_epochs}, {"pending", s.pending}, {"leased", s.leased},
      {"completed", s.completed}, {"taken", s.taken},   {"expired", s.expired},
      {"released", s.released}, {"given_back", s.given_back}, {"duplicates", s.duplicates},
      {"records", s.records},
      {"splits", s.splits},     {"split_items_open", s.split_items_open},
      {"finished", s.finished}, {"failed", s.failed}, {"refused_completions", s.refused_completions},
      {"finished_with_failures", s.finished && s.failed > 0},
      {"max_attempts", s.max_attempts}, {"epochs_done", s.epochs_done}};
  q["per_epoch"] = nlohmann::json::array();
  for (const EpochStats& e : s.epochs) {
    q["per_epoch"].push_back({{"epoch", e.epoch},
                              {"pending", e.pending},
                              {"leased", e.leased},
                              {"completed", e.completed},
                              {"failed", e.failed}});
  }
  q["failed_items"] = nlohmann::json::array();
  for (const FailedItemStats& f : s.failed_items) {
    q["failed_items"].push_back({{"item", f.item},
                                 {"epoch", f.epoch},
                                 {"index", f.index},
                                 {"attempts", f.attempts},
                                 {"reason", f.reason}});
  }
  q["workers"] = nlohmann::json::array();
  for (const auto& [name, w] : s.workers) {
    q["workers"].push_back({{"worker", name},
                            {"completed", w.completed},
                            {"taken", w.taken},
                            {"held", w.held},
                            {"records", w.records},
                            {"sessions", w.sessions},
                            {"items_per_second", w.items_per_second}});
  }
  return q;
}

nlohmann::json StatusJson(const std::vector<QueueStats>& queues) {
  nlohmann::json out = {{"queues", nlohmann::json::array()}};
  for (const QueueStats& s : queues) out["queues"].push_back(QueueStatsJson(s));
  return out;
}

nlohmann::json ItemEventJson(const ItemEvent& e) {
  nlohmann::json j = {{"kind", std::string(ItemEventKindName(e.kind))},
                      {"t", static_cast<double>(e.at_us) / 1e6},
                      {"worker", e.worker},
                      {"lease", e.lease_id},
                      {"epoch", e.epoch},
                      {"index", e.index}};
  j["taken"] = e.taken_us > 0 ? nlohmann::json(static_cast<double>(e.taken_us) / 1e6)
                              : nlohmann::json(nullptr);
  if (e.kind == ItemEventKind::kSplit) j["split_point"] = e.split_point;
  if (e.kind == ItemEventKind::kFail) j["reason"] = e.reason;
  return j;
}

nlohmann::json TimelineJson(const Timeline& timeline, const std::string& queue,
                            int64_t since_us, int64_t now_us, size_t limit) {
  std::vector<ItemEvent> events = timeline.Since(queue, since_us, limit + 1);
  const bool truncated = events.size() > limit;
  if (truncated) events.erase(events.begin());
  nlohmann::json out = {{"queue", queue},
                        {"now", static_cast<double>(now_us) / 1e6},
                        {"since", static_cast<double>(since_us) / 1e6},
                        {"bound", timeline.events_per_queue()},
                        {"dropped", timeline.Dropped(queue)},
                        {"truncated", truncated},
                        {"events", nlohmann::json::array()},
                        {"open", nlohmann::json::array()}};
  for (const ItemEvent& e : events) out["events"].push_back(ItemEventJson(e));
  for (const ItemEvent& e : timeline.Open(queue)) out["open"].push_back(ItemEventJson(e));
  return out;
}

}  // namespace shardq
