// Internal to the etcd store (etcd_store.cc, etcd_store_open.cc): how its
// keys are spelled and its operations built. See etcd_store.h for the
// layout.
#ifndef SHARDQ_STORE_ETCD_STORE_KEYS_H_
#define SHARDQ_STORE_ETCD_STORE_KEYS_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "proto/etcd/etcd_rpc.pb.h"
#include "src/io/crc32c.h"

namespace shardq {
namespace etcd_store_keys {

// 20 decimal digits: keys sort by sequence.
inline std::string SeqKey(uint64_t seq) { return absl::StrFormat("%020u", seq); }

inline uint32_t Checksum(absl::string_view bytes) { return MaskCrc(Crc32c(bytes)); }

inline etcdserverpb::RequestOp PutOp(std::string key, std::string value) {
  etcdserverpb::RequestOp op;
  op.mutable_request_put()->set_key(std::move(key));
  op.mutable_request_put()->set_value(std::move(value));
  return op;
}

// Deletes [key, end).
inline etcdserverpb::RequestOp DeleteOp(std::string key, std::string end) {
  etcdserverpb::RequestOp op;
  op.mutable_request_delete_range()->set_key(std::move(key));
  op.mutable_request_delete_range()->set_range_end(std::move(end));
  return op;
}

}  // namespace etcd_store_keys
}  // namespace shardq

#endif  // SHARDQ_STORE_ETCD_STORE_KEYS_H_
