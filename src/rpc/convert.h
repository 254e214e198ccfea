// The one place where shardq's C++ types meet the wire: absl::Status <->
// grpc::Status, and core structs <-> proto messages. Used by the gRPC
// adapter (server side) and the remote backend (client side). Pure
// functions, thread-safe.
#ifndef SHARDQ_RPC_CONVERT_H_
#define SHARDQ_RPC_CONVERT_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"
#include "proto/shardq/coordinator.pb.h"
#include "src/core/queue_state.h"
#include "src/types/queue_types.h"
#include "shardq/work_item.h"

namespace shardq {

// Largest message either side accepts: a queue's plan travels in one
// CreateQueue request, and the largest plan a queue accepts (kMaxPlanBytes
// of item strings, at most kMaxItemsPerQueue of them) fits with room to
// spare; a larger request is refused before it is parsed.
inline constexpr int kMaxMessageBytes = 160 << 20;
static_assert(kMaxMessageBytes >= kMaxPlanBytes + 8 * kMaxItemsPerQueue + (1 << 20));

// Codes map one to one (both follow google.rpc.Code); the message is kept.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);
// An operation's outcome inside a session message; OK is code 0.
void ToProto(const absl::Status& status, v1::OpStatus* out);
absl::Status FromProto(const v1::OpStatus& op);

void ToProto(const QueueConfig& config, v1::QueueConfig* out);
QueueConfig FromProto(const v1::QueueConfig& config);

void ToProto(const QueueInfo& info, v1::QueueInfo* out);
QueueInfo FromProto(const v1::QueueInfo& info);

void ToProto(const WorkItem& item, v1::WorkItem* out);
WorkItem FromProto(const v1::WorkItem& item);

void ToProto(const QueueStats& stats, v1::QueueStatus* out);
QueueStats FromProto(const v1::QueueStatus& status);

void ToProto(const Leadership& leadership, v1::Leadership* out);
Leadership FromProto(const v1::Leadership& leadership);

void ToProto(const HeartbeatReply& reply, v1::HeartbeatResponse* out);
HeartbeatReply FromProto(const v1::HeartbeatResponse& response);

// Equal steps (AgreeSteps); the request's queue is set apart.
void ToProto(const StepReport& report, v1::AgreeStepsRequest* out);
StepReport FromProto(const v1::AgreeStepsRequest& request);
void ToProto(const StepTally& tally, v1::AgreeStepsResponse* out);
StepTally FromProto(const v1::AgreeStepsResponse& response);

}  // namespace shardq

#endif  // SHARDQ_RPC_CONVERT_H_
