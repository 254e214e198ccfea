#include "src/store/etcd_client.h"

#include <grpcpp/grpcpp.h>

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "src/rpc/grpc_fork.h"

namespace shardq {
namespace {

// etcd answers at most --max-request-bytes (1.5 MiB by default) per request,
// but a Range may return far more; the store pages its ranges anyway.
constexpr int kMaxReceiveBytes = 256 << 20;

absl::StatusCode ToAbslCode(grpc::StatusCode code) {
  // gRPC and absl share the canonical codes' numbers.
  return static_cast<absl::StatusCode>(static_cast<int>(code));
}

// No answer from this member: try the next one. A member cut off from its
// quorum holds a request until the caller's deadline and then answers with
// UNKNOWN "context deadline exceeded" (etcd's own error, not gRPC's), or
// names the missing leader; that is no answer either, not a refusal.
bool TryNextMember(const grpc::Status& status) {
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return true;
    case grpc::StatusCode::UNKNOWN: {
      const std::string& m = status.error_message();
      return absl::StrContains(m, "deadline exceeded") ||
             absl::StrContains(m, "request timed out") || absl::StrContains(m, "no leader") ||
             absl::StrContains(m, "leader changed");
    }
    default:
      return false;
  }
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseEtcdEndpoints(absl::string_view list) {
  std::vector<std::string> endpoints;
  for (absl::string_view part : absl::StrSplit(list, ',')) {
    part = absl::StripAsciiWhitespace(part);
    const size_t colon = part.rfind(':');
    uint32_t port = 0;
    if (part.empty() || colon == absl::string_view::npos || colon == 0 ||
        !absl::SimpleAtoi(part.substr(colon + 1), &port) || port == 0 || port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("etcd endpoint '", part, "' in '", list, "' is not HOST:PORT"));
    }
    endpoints.emplace_back(part);
  }
  return endpoints;
}

std::string EtcdPrefixEnd(absl::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    unsigned char last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(const EtcdClientOptions& options) {
  if (options.endpoints.empty()) {
    return absl::InvalidArgumentError("etcd: no endpoint given (want HOST:PORT[,HOST:PORT...])");
  }
  // Refused in a fork child that cannot use gRPC (src/rpc/grpc_fork.h),
  // before the credentials: making them initializes gRPC, which can hang in
  // such a child.
  if (absl::Status usable = CheckGrpcUsable(); !usable.ok()) return usable;
  std::vector<Member> members;
  for (const std::string& endpoint : options.endpoints) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(kMaxReceiveBytes);
    // A member that comes back is used again within a second.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    // Each client its own connections: a store and a resolver in one
    // process do not share one subchannel's backoff.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        CreateForkAwareChannel(endpoint, grpc::InsecureChannelCredentials(), args);
    if (!channel.ok()) return channel.status();
    Member m;
    m.endpoint = endpoint;
    m.kv = etcdserverpb::KV::NewStub(*channel);
    m.lease = etcdserverpb::Lease::NewStub(*channel);
    members.push_back(std::move(m));
  }
  return std::unique_ptr<EtcdClient>(
      new EtcdClient(options.endpoints, options.call_timeout, std::move(members)));
}

EtcdClient::EtcdClient(std::vector<std::string> endpoints, absl::Duration call_timeout,
                       std::vector<Member> members)
    : endpoints_(std::move(endpoints)), call_timeout_(call_timeout),
      members_(std::move(members)) {}

std::string EtcdClient::Describe() const {
  return absl::StrCat("etcd at ", absl::StrJoin(endpoints_, ","));
}

template <typename Attempt>
absl::Status EtcdClient::Call(absl::string_view what, Attempt attempt) {
  const size_t first = preferred_.load(std::memory_order_relaxed);
  std::vector<std::string> failures;
  for (size_t i = 0; i < members_.size(); ++i) {
    const size_t index = (first + i) % members_.size();
    Member& member = members_[index];
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + call_timeout_));
    const grpc::Status status = attempt(member, &context);
    if (status.ok()) {
      preferred_.store(index, std::memory_order_relaxed);
      return absl::OkStatus();
    }
    const absl::StatusCode code = ToAbslCode(status.error_code());
    if (!TryNextMember(status)) {
      preferred_.store(index, std::memory_order_relaxed);
      return absl::Status(code, absl::StrCat("etcd at ", member.endpoint, ": ", what, ": ",
                                             status.error_message()));
    }
    failures.push_back(absl::StrCat(
        member.endpoint, ": ",
        code == absl::StatusCode::kDeadlineExceeded
            ? absl::StrCat("no answer within ", absl::FormatDuration(call_timeout_))
            : absl::StrCat(status.error_message(), " (", absl::StatusCodeToString(code), ")")));
  }
  return absl::UnavailableError(absl::StrCat("etcd unavailable (no member answered; no quorum "
                                             "or unreachable): ",
                                             what, ": ", absl::StrJoin(failures, "; ")));
}

absl::StatusOr<etcdserverpb::RangeResponse> EtcdClient::Range(
    const etcdserverpb::RangeRequest& request) {
  etcdserverpb::RangeResponse response;
  absl::Status s = Call(absl::StrCat("range '", request.key(), "'"),
                        [&](Member& m, grpc::ClientContext* ctx) {
                          return m.kv->Range(ctx, request, &response);
                        });
  if (!s.ok()) return s;
  return response;
}

absl::StatusOr<etcdserverpb::PutResponse> EtcdClient::Put(const etcdserverpb::PutRequest& request) {
  etcdserverpb::PutResponse response;
  absl::Status s = Call(absl::StrCat("put '", request.key(), "'"),
                        [&](Member& m, grpc::ClientContext* ctx) {
                          return m.kv->Put(ctx, request, &response);
                        });
  if (!s.ok()) return s;
  return response;
}

absl::StatusOr<etcdserverpb::DeleteRangeResponse> EtcdClient::DeleteRange(
    const etcdserverpb::DeleteRangeRequest& request) {
  etcdserverpb::DeleteRangeResponse response;
  absl::Status s = Call(absl::StrCat("delete '", request.key(), "'"),
                        [&](Member& m, grpc::ClientContext* ctx) {
                          return m.kv->DeleteRange(ctx, request, &response);
                        });
  if (!s.ok()) return s;
  return response;
}

absl::StatusOr<etcdserverpb::TxnResponse> EtcdClient::Txn(const etcdserverpb::TxnRequest& request) {
  etcdserverpb::TxnResponse response;
  absl::Status s = Call(absl::StrCat("transaction of ", request.success_size(), " operation(s)"),
                        [&](Member& m, grpc::ClientContext* ctx) {
                          return m.kv->Txn(ctx, request, &response);
                        });
  if (!s.ok()) return s;
  return response;
}

absl::Status EtcdClient::Compact(int64_t revision) {
  etcdserverpb::CompactionRequest request;
  request.set_revision(revision);
  etcdserverpb::CompactionResponse response;
  return Call(absl::StrCat("compact to revision ", revision),
              [&](Member& m, grpc::ClientContext* ctx) {
                return m.kv->Compact(ctx, request, &response);
              });
}

absl::StatusOr<int64_t> EtcdClient::LeaseGrant(int64_t ttl_seconds) {
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(ttl_seconds);
  etcdserverpb::LeaseGrantResponse response;
  absl::Status s = Call(absl::StrCat("grant a lease of ", ttl_seconds, " s"),
                        [&](Member& m, grpc::ClientContext* ctx) {
                          return m.lease->LeaseGrant(ctx, request, &response);
                        });
  if (!s.ok()) return s;
  if (!response.error().empty()) {
    return absl::UnavailableError(
        absl::StrCat(Describe(), ": grant a lease: ", response.error()));
  }
  return response.id();
}

absl::Status EtcdClient::LeaseRevoke(int64_t lease_id) {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease_id);
  etcdserverpb::LeaseRevokeResponse response;
  absl::Status s = Call(absl::StrCat("revoke lease ", lease_id),
                        [&](Member& m, grpc::ClientContext* ctx) {
                          return m.lease->LeaseRevoke(ctx, request, &response);
                        });
  if (s.code() == absl::StatusCode::kNotFound) return absl::OkStatus();  // expired already
  return s;
}

absl::StatusOr<int64_t> EtcdClient::LeaseKeepAlive(int64_t lease_id) {
  etcdserverpb::LeaseKeepAliveRequest request;
  request.set_id(lease_id);
  etcdserverpb::LeaseKeepAliveResponse response;
  absl::Status s = Call(
      absl::StrCat("keep lease ", lease_id, " alive"), [&](Member& m, grpc::ClientContext* ctx) {
        std::unique_ptr<grpc::ClientReaderWriter<etcdserverpb::LeaseKeepAliveRequest,
                                                 etcdserverpb::LeaseKeepAliveResponse>>
            stream = m.lease->LeaseKeepAlive(ctx);
        if (stream->Write(request) && stream->Read(&response)) {
          stream->WritesDone();
          ctx->TryCancel();  // one renewal is all we wanted
          stream->Finish().ok();
          return grpc::Status::OK;
        }
        stream->WritesDone();
        grpc::Status status = stream->Finish();
        if (status.ok()) {
          return grpc::Status(grpc::StatusCode::UNAVAILABLE, "stream ended without an answer");
        }
        return status;
      });
  if (!s.ok()) return s;
  if (response.ttl() <= 0) {
    return absl::NotFoundError(
        absl::StrCat(Describe(), ": lease ", lease_id, " has expired"));
  }
  return response.ttl();
}

absl::StatusOr<etcdserverpb::KeyValue> EtcdClient::Get(absl::string_view key) {
  etcdserverpb::RangeRequest request;
  request.set_key(std::string(key));
  absl::StatusOr<etcdserverpb::RangeResponse> response = Range(request);
  if (!response.ok()) return response.status();
  if (response->kvs_size() == 0) {
    return absl::NotFoundError(absl::StrCat(Describe(), ": no key '", key, "'"));
  }
  return response->kvs(0);
}

}  // namespace shardq
