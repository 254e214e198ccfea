// The version of the worker session protocol (coordinator.proto,
// ProtocolVersion): sent by a client in SessionOpen and by the coordinator
// in SessionOpened. The same major version works together (a newer minor
// version only adds fields the other side ignores); a different major
// version is refused with FAILED_PRECONDITION naming both. Also the other
// constants both sides of the wire must agree on.
#ifndef SHARDQ_RPC_PROTOCOL_VERSION_H_
#define SHARDQ_RPC_PROTOCOL_VERSION_H_

namespace shardq {

inline constexpr int kProtocolMajor = 1;
// Minor versions: 1 added WorkItem.work_size (an item's planned work size;
// a client of minor 0 ignores it, a coordinator of minor 0 sends none and
// its clients then check no size).
inline constexpr int kProtocolMinor = 1;

// The trailing metadata in which a standby coordinator of a highly
// available job names the leader's advertised address (in every answer it
// refuses with UNAVAILABLE "not leader: ..."): clients given several
// coordinators go straight to it.
inline constexpr char kLeaderMetadataKey[] = "shardq-leader";

}  // namespace shardq

#endif  // SHARDQ_RPC_PROTOCOL_VERSION_H_
