// The JSON documents of `shardq status --json`, the status page's /api/*
// endpoints and `shardq report` (keys listed in docs/cli.md).
#ifndef SHARDQ_OBSERVE_STATUS_JSON_H_
#define SHARDQ_OBSERVE_STATUS_JSON_H_

#include <cstdint>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "shardq/work_item.h"
#include "src/observe/timeline.h"

namespace shardq {

// One queue as `status --json` lists it under "queues".
nlohmann::json QueueStatsJson(const QueueStats& s);

// {"queues": [...]}: the whole answer of `status --json` and /api/status.
nlohmann::json StatusJson(const std::vector<QueueStats>& queues);

// One item event: {"kind", "t" (seconds since the Unix epoch), "worker",
// "lease", "epoch", "index", "taken" (seconds; null when not seen),
// "split_point" (splits), "reason" (failures)}.
nlohmann::json ItemEventJson(const ItemEvent& e);

// /api/timeline: {"queue", "now", "since", "bound" (events kept per
// queue), "dropped" (events dropped for it so far), "truncated" (more
// than `limit` matched: the newest were kept), "events" [...] (oldest
// first), "open" [...] (leases held now, as take events)}.
nlohmann::json TimelineJson(const Timeline& timeline, const std::string& queue,
                            int64_t since_us, int64_t now_us, size_t limit);

}  // namespace shardq

#endif  // SHARDQ_OBSERVE_STATUS_JSON_H_
