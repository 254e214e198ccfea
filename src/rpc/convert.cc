#include "src/rpc/convert.h"

#include <optional>
#include <string>

namespace shardq {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

void ToProto(const absl::Status& status, v1::OpStatus* out) {
  out->set_code(static_cast<int32_t>(status.code()));
  out->set_message(std::string(status.message()));
}

absl::Status FromProto(const v1::OpStatus& op) {
  return absl::Status(static_cast<absl::StatusCode>(op.code()), op.message());
}

void ToProto(const QueueConfig& config, v1::QueueConfig* out) {
  ConfigToProto(config, out);
}

QueueConfig FromProto(const v1::QueueConfig& config) { return ConfigFromProto(config); }

void ToProto(const QueueInfo& info, v1::QueueInfo* out) {
  out->set_name(info.name);
  out->set_seed(info.seed);
  out->set_num_items(info.num_items);
  out->set_num_epochs(info.num_epochs);
  out->set_num_clients(info.num_clients);
  out->set_lease_timeout_ms(absl::ToInt64Milliseconds(info.lease_timeout));
  out->set_created(info.created);
}

QueueInfo FromProto(const v1::QueueInfo& info) {
  QueueInfo out;
  out.name = info.name();
  out.seed = info.seed();
  out.num_items = info.num_items();
  out.num_epochs = info.num_epochs();
  out.num_clients = info.num_clients();
  out.lease_timeout = absl::Milliseconds(info.lease_timeout_ms());
  out.created = info.created();
  return out;
}

void ToProto(const WorkItem& item, v1::WorkItem* out) {
  out->set_item(item.item);
  out->set_epoch(item.epoch);
  out->set_index(item.index);
  out->set_lease_id(item.lease_id);
  if (item.work_size >= 0) out->mutable_work_size()->set_size(item.work_size);
}

WorkItem FromProto(const v1::WorkItem& item) {
  WorkItem out{item.item(), item.epoch(), item.index(), item.lease_id(), nullptr,
               std::nullopt};  // parsed by WorkQueue::Take
  if (item.has_work_size() && item.work_size().size() >= 0) {
    out.work_size = item.work_size().size();
  }
  return out;
}

void ToProto(const QueueStats& stats, v1::QueueStatus* out) {
  out->set_name(stats.name);
  out->set_seed(stats.seed);
  out->set_num_items(stats.num_items);
  out->set_num_epochs(stats.num_epochs);
  out->set_pending(stats.pending);
  out->set_leased(stats.leased);
  out->set_completed(stats.completed);
  out->set_taken(stats.taken);
  out->set_expired(stats.expired);
  out->set_released(stats.released);
  out->set_given_back(stats.given_back);
  out->set_records(stats.records);
  out->set_duplicates(stats.duplicates);
  out->set_finished(stats.finished);
  out->set_splits(stats.splits);
  out->set_split_items_open(stats.split_items_open);
  out->set_failed(stats.failed);
  out->set_refused_completions(stats.refused_completions);
  out->set_max_attempts(stats.max_attempts);
  out->set_epochs_done(stats.epochs_done);
  for (const FailedItemStats& f : stats.failed_items) {
    v1::FailedItem* item = out->add_failed_items();
    item->set_item(f.item);
    item->set_epoch(f.epoch);
    item->set_index(f.index);
    item->set_attempts(f.attempts);
    item->set_reason(f.reason);
  }
  for (const EpochStats& e : stats.epochs) {
    v1::EpochStatus* epoch = out->add_epochs();
    epoch->set_pending(e.pending);
    epoch->set_leased(e.leased);
    epoch->set_completed(e.completed);
    epoch->set_epoch(e.epoch);
    epoch->set_failed(e.failed);
  }
  for (const auto& [name, w] : stats.workers) {
    v1::WorkerStatus* worker = out->add_workers();
    worker->set_worker(name);
    worker->set_taken(w.taken);
    worker->set_completed(w.completed);
    worker->set_held(w.held);
    worker->set_items_per_second(w.items_per_second);
    worker->set_records(w.records);
    worker->set_sessions(w.sessions);
  }
}

QueueStats FromProto(const v1::QueueStatus& status) {
  QueueStats out;
  out.name = status.name();
  out.seed = status.seed();
  out.num_items = status.num_items();
  out.num_epochs = status.num_epochs();
  out.pending = status.pending();
  out.leased = status.leased();
  out.completed = status.completed();
  out.taken = status.taken();
  out.expired = status.expired();
  out.released = status.released();
  out.given_back = status.given_back();
  out.records = status.records();
  out.duplicates = status.duplicates();
  out.finished = status.finished();
  out.splits = status.splits();
  out.split_items_open = status.split_items_open();
  out.failed = status.failed();
  out.refused_completions = status.refused_completions();
  out.max_attempts = status.max_attempts();
  out.epochs_done = status.epochs_done();
  for (const v1::FailedItem& f : status.failed_items()) {
    out.failed_items.push_back(
        FailedItemStats{f.item(), f.epoch(), f.index(), f.attempts(), f.reason()});
  }
  for (const v1::EpochStatus& e : status.epochs()) {
    out.epochs.push_back(
        EpochStats{e.pending(), e.leased(), e.completed(), e.epoch(), e.failed()});
  }
  for (const v1::WorkerStatus& w : status.workers()) {
    WorkerStats ws;
    ws.taken = w.taken();
    ws.completed = w.completed();
    ws.held = w.held();
    ws.items_per_second = w.items_per_second();
    ws.records = w.records();
    ws.sessions = w.sessions();
    out.workers[w.worker()] = ws;
  }
  return out;
}

void ToProto(const HeartbeatReply& reply, v1::HeartbeatResponse* out) {
  out->mutable_lost_lease_ids()->Add(reply.lost.begin(), reply.lost.end());
  for (const SplitProposal& p : reply.splits) {
    v1::SplitProposal* proposal = out->add_splits();
    proposal->set_lease_id(p.lease_id);
    proposal->set_split_point(p.split_point);
    proposal->set_min_residual(p.min_residual);
  }
}

HeartbeatReply FromProto(const v1::HeartbeatResponse& response) {
  HeartbeatReply reply;
  reply.lost.assign(response.lost_lease_ids().begin(), response.lost_lease_ids().end());
  for (const v1::SplitProposal& p : response.splits()) {
    reply.splits.push_back({p.lease_id(), p.split_point(), p.min_residual()});
  }
  return reply;
}

void ToProto(const Leadership& leadership, v1::Leadership* out) {
  out->set_job(leadership.job);
  out->set_leader(leadership.leader);
  out->set_term(leadership.term);
  for (const std::string& s : leadership.standbys) out->add_standbys(s);
  out->set_failovers(leadership.failovers);
}

Leadership FromProto(const v1::Leadership& leadership) {
  Leadership out;
  out.job = leadership.job();
  out.leader = leadership.leader();
  out.term = leadership.term();
  out.standbys.assign(leadership.standbys().begin(), leadership.standbys().end());
  out.failovers = leadership.failovers();
  return out;
}

void ToProto(const StepReport& report, v1::AgreeStepsRequest* out) {
  out->set_key(report.key);
  out->set_participant(report.participant);
  out->set_participants(report.participants);
  out->set_count(report.count);
  out->set_done(report.done);
}

StepReport FromProto(const v1::AgreeStepsRequest& request) {
  StepReport r;
  r.key = request.key();
  r.participant = request.participant();
  r.participants = request.participants();
  r.count = request.count();
  r.done = request.done();
  return r;
}

void ToProto(const StepTally& tally, v1::AgreeStepsResponse* out) {
  out->set_granted(tally.granted);
  out->set_agreed(tally.agreed);
  out->set_steps(tally.steps);
  out->set_max_count(tally.max_count);
  out->set_reported(tally.reported);
  out->set_done(tally.done);
}

StepTally FromProto(const v1::AgreeStepsResponse& response) {
  StepTally t;
  t.granted = response.granted();
  t.agreed = response.agreed();
  t.steps = response.steps();
  t.max_count = response.max_count();
  t.reported = response.reported();
  t.done = response.done();
  return t;
}

}  // namespace shardq
