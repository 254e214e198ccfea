// SessionClient's operations, each one session message and its answer
// (the stream and its retries are in session_client.cc).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/shardq/coordinator.pb.h"
#include "src/client/session_client.h"
#include "src/rpc/convert.h"

namespace shardq {
namespace {

// The take's part of an answer, as QueueBackend::Take returns it.
absl::StatusOr<std::vector<WorkItem>> TakenItems(const v1::SessionResponse& answer,
                                                 absl::string_view queue) {
  if (answer.take_status().code() != 0) return FromProto(answer.take_status());
  if (answer.end_of_input()) {
    return absl::OutOfRangeError(absl::StrCat("queue '", queue, "': end of input"));
  }
  std::vector<WorkItem> items;
  items.reserve(answer.items_size());
  for (const v1::WorkItem& item : answer.items()) items.push_back(FromProto(item));
  return items;
}

absl::StatusOr<CompleteOutcome> Completed(const v1::SessionResponse& answer,
                                          uint64_t lease_id) {
  for (const v1::CompleteResult& r : answer.complete_results()) {
    if (r.lease_id() != lease_id) continue;
    if (r.status().code() != 0) return FromProto(r.status());
    return r.duplicate() ? CompleteOutcome::kDuplicate : CompleteOutcome::kCompleted;
  }
  return absl::InternalError(
      absl::StrCat("the coordinator's answer has no result for completing lease ", lease_id));
}

int64_t WaitMs(absl::Time deadline) {
  return absl::ToInt64Milliseconds(
      std::clamp(deadline - absl::Now(), absl::ZeroDuration(), SessionClient::kLongPoll));
}

}  // namespace

absl::StatusOr<std::vector<WorkItem>> SessionClient::Take(int64_t max_items,
                                                          absl::Time deadline, int64_t ahead) {
  v1::SessionRequest request;
  request.set_take(max_items);
  request.set_take_ahead(ahead);
  request.set_take_wait_ms(WaitMs(deadline));
  absl::StatusOr<v1::SessionResponse> answer =
      Call(request, absl::Milliseconds(request.take_wait_ms()));
  if (!answer.ok()) return answer.status();
  return TakenItems(*answer, queue());
}

CompleteAndTakeReply SessionClient::CompleteAndTake(uint64_t lease_id, int64_t records,
                                                    int64_t max_items, absl::Time deadline,
                                                    int64_t ahead) {
  v1::SessionRequest request;
  request.add_complete_lease_ids(lease_id);
  if (records > 0) request.add_complete_records(records);
  request.set_take(max_items);
  request.set_take_ahead(ahead);
  request.set_take_wait_ms(WaitMs(deadline));
  absl::StatusOr<v1::SessionResponse> answer =
      Call(request, absl::Milliseconds(request.take_wait_ms()));
  CompleteAndTakeReply reply;
  if (!answer.ok()) {
    reply.completed = answer.status();
    reply.taken = answer.status();
    return reply;
  }
  reply.completed = Completed(*answer, lease_id);
  reply.taken = TakenItems(*answer, queue());
  return reply;
}

absl::StatusOr<CompleteOutcome> SessionClient::Complete(uint64_t lease_id, int64_t records) {
  v1::SessionRequest request;
  request.add_complete_lease_ids(lease_id);
  if (records > 0) request.add_complete_records(records);
  absl::StatusOr<v1::SessionResponse> answer = Call(request, absl::ZeroDuration());
  if (!answer.ok()) return answer.status();
  return Completed(*answer, lease_id);
}

namespace {

absl::StatusOr<v1::ReleaseResult> Released(const absl::StatusOr<v1::SessionResponse>& answer,
                                           uint64_t lease_id) {
  if (!answer.ok()) return answer.status();
  for (const v1::ReleaseResult& r : answer->release_results()) {
    if (r.lease_id() != lease_id) continue;
    if (r.status().code() != 0) return FromProto(r.status());
    return r;
  }
  return absl::InternalError(
      absl::StrCat("the coordinator's answer has no result for releasing lease ", lease_id));
}

}  // namespace

absl::Status SessionClient::Release(uint64_t lease_id) {
  v1::SessionRequest request;
  request.add_releases()->set_lease_id(lease_id);
  return Released(Call(request, absl::ZeroDuration()), lease_id).status();
}

absl::StatusOr<bool> SessionClient::Fail(uint64_t lease_id, absl::string_view reason) {
  v1::SessionRequest request;
  v1::SessionRelease* release = request.add_releases();
  release->set_lease_id(lease_id);
  release->set_failed(true);
  release->set_reason(std::string(reason));
  absl::StatusOr<v1::ReleaseResult> result =
      Released(Call(request, absl::ZeroDuration()), lease_id);
  if (!result.ok()) return result.status();
  return result->item_failed();
}

absl::StatusOr<bool> SessionClient::AcceptSplit(uint64_t lease_id, int64_t split_point) {
  v1::SessionRequest request;
  v1::SplitAnswer* split = request.add_split_answers();
  split->set_lease_id(lease_id);
  split->set_split_point(split_point);
  absl::StatusOr<v1::SessionResponse> answer = Call(request, absl::ZeroDuration());
  if (!answer.ok()) return answer.status();
  for (const v1::SplitResult& r : answer->split_results()) {
    if (r.lease_id() != lease_id) continue;
    if (r.status().code() != 0) return FromProto(r.status());
    return r.accepted();
  }
  return absl::InternalError(
      absl::StrCat("the coordinator's answer has no result for the split of lease ", lease_id));
}

absl::Status SessionClient::ReportProgress(
    const std::vector<std::pair<uint64_t, int64_t>>& progress) {
  v1::SessionRequest request;
  for (const auto& [lease, offset] : progress) {
    v1::LeaseProgress* p = request.add_progress();
    p->set_lease_id(lease);
    p->set_offset(offset);
  }
  absl::StatusOr<v1::SessionResponse> answer = Call(request, absl::ZeroDuration());
  if (!answer.ok()) return answer.status();
  return FromProto(answer->progress_status());
}

}  // namespace shardq
