// Test helpers: the format 1 forms that shardq wrote before compact queue
// state (creation updates and snapshots holding the plan as item strings),
// and the format 2 snapshots it wrote before compact ended leases, made
// from today's forms, to test that they are still read. They write what
// QueueState::CreationUpdate and ToSnapshot wrote at 8e58587 (format 1)
// and ff37fc7 (format 2).
#ifndef SHARDQ_CORE_LEGACY_FORMAT_TESTING_H_
#define SHARDQ_CORE_LEGACY_FORMAT_TESTING_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/shardq/journal.pb.h"
#include "src/core/item_table.h"
#include "src/core/queue_state.h"

namespace shardq {
namespace testing_legacy {

// Items of every shape a plan may hold (ranges, whole files, tables,
// parameters out of order, a half-open range, a malformed one).
inline std::vector<std::string> ItemsOfEveryShape() {
  return {"data/a.tfrecord?start=0&end=1000",
          "data/a.tfrecord?start=1000&end=2000",
          "data/whole.txt",
          "sqlite:data/t.db?table=clicks&start=0&end=500",
          "data/odd.txt?end=300&start=0",
          "data/half.txt?start=7",
          "data/bad.txt?start=x",
          "data/b.tfrecord?start=0&end=4096"};
}

// The format 1 creation update of `config` (its items as strings).
inline journal::Update CreationUpdate(const QueueConfig& config, absl::Time now) {
  journal::Update update;
  update.set_time_us(absl::ToUnixMicros(now));
  ConfigToProto(config, update.mutable_create()->mutable_config());
  return update;
}

// The format 2 form of a format 3 snapshot: the ended leases as
// LeaseRecords in `expired`.
inline journal::QueueSnapshot SnapshotFormat2(const journal::QueueSnapshot& current) {
  journal::QueueSnapshot out = current;
  out.clear_ended_leases();
  out.set_format(2);
  const journal::EndedLeases& e = current.ended_leases();
  for (int i = 0; i < e.lease_id_size(); ++i) {
    journal::LeaseRecord* l = out.add_expired();
    l->set_lease_id(e.lease_id(i));
    l->mutable_ref()->set_epoch(e.epoch(i));
    l->mutable_ref()->set_index(e.index(i));
    if (e.worker(i) > 0) l->set_worker(e.workers(static_cast<int>(e.worker(i)) - 1));
    l->set_ended(static_cast<unsigned char>(e.ended()[static_cast<size_t>(i)]));
  }
  return out;
}

// The format 1 form of a format 3 (or 2) snapshot.
inline journal::QueueSnapshot Snapshot(const journal::QueueSnapshot& compact) {
  journal::QueueSnapshot out = SnapshotFormat2(compact);
  auto table = ItemTable::FromProto(compact.items(), "legacy");
  const int64_t n = (*table)->size();
  const int64_t total = n * compact.config().num_epochs();
  out.clear_format();
  out.clear_items();
  out.clear_pending_slots();
  out.clear_range_overrides();
  for (int64_t i = 0; i < n; ++i) out.mutable_config()->add_items((*table)->Render(i));
  for (int64_t slot : compact.pending_slots()) {
    journal::Ref* r = out.add_pending();
    if (slot < total) {
      r->set_epoch(slot / n);
      r->set_index(slot % n);
    } else {
      const int64_t k = slot - total;
      r->set_epoch(compact.extras(static_cast<int>(k)).epoch());
      r->set_index(n + k);
    }
  }
  for (const journal::RangeOverride& o : compact.range_overrides()) {
    (*out.mutable_overrides())[o.slot()] =
        (*table)->RenderRange(o.slot() % n, ItemRange{o.start(), o.end()});
  }
  for (journal::ExtraItem& x : *out.mutable_extras()) {
    x.set_item((*table)->RenderRange(x.index(), ItemRange{x.start(), x.end()}));
    x.clear_start();
    x.clear_end();
  }
  return out;
}

}  // namespace testing_legacy
}  // namespace shardq

#endif  // SHARDQ_CORE_LEGACY_FORMAT_TESTING_H_
