#include "src/client/coordinator_address.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "src/store/etcd_client.h"
#include "src/store/etcd_leader.h"

namespace shardq {
namespace {

constexpr absl::string_view kEtcdScheme = "etcd://";

// gRPC's own target schemes: such a spec is one gRPC target, taken whole
// (gRPC's "ipv4:A:P,B:P" has commas of its own).
constexpr absl::string_view kGrpcSchemes[] = {"unix:", "unix-abstract:", "ipv4:",
                                              "ipv6:", "dns:",           "vsock:"};

bool IsGrpcTarget(absl::string_view spec) {
  if (absl::StrContains(spec, "://") && !absl::StartsWithIgnoreCase(spec, kEtcdScheme)) {
    return true;
  }
  return std::any_of(std::begin(kGrpcSchemes), std::end(kGrpcSchemes),
                     [&](absl::string_view scheme) { return absl::StartsWith(spec, scheme); });
}

absl::Status Bad(absl::string_view spec, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("coordinator address '", spec, "': ", why));
}

// One entry of a list: unix:PATH, or HOST:PORT with a port in 1..65535
// (an IPv6 host in brackets). Empty when it is fine, else why not.
std::string ListEntryProblem(absl::string_view entry) {
  if (entry.empty()) return "an entry is empty (two commas, or one at an end)";
  if (absl::StartsWith(entry, "unix:")) {
    return entry.size() > 5 ? "" : absl::StrCat("entry '", entry, "' names no socket path");
  }
  const size_t colon = entry.rfind(':');
  const std::string not_host_port = absl::StrCat(
      "entry '", entry, "' is not HOST:PORT or unix:PATH");
  if (colon == absl::string_view::npos || colon == 0) return not_host_port;
  const absl::string_view host = entry.substr(0, colon);
  const absl::string_view port_text = entry.substr(colon + 1);
  const bool bracketed = absl::StartsWith(host, "[") && absl::EndsWith(host, "]");
  if (!bracketed && absl::StrContains(host, ':')) {
    return absl::StrCat(not_host_port, " (an IPv6 host goes in brackets: [::1]:7077)");
  }
  for (char c : host) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c)) || c == '/' || c == ',') {
      return not_host_port;
    }
  }
  uint32_t port = 0;
  if (port_text.empty() || !std::all_of(port_text.begin(), port_text.end(),
                                        [](char c) { return absl::ascii_isdigit(c); })) {
    return absl::StrCat("entry '", entry, "' has no port number after its last ':'");
  }
  if (!absl::SimpleAtoi(port_text, &port) || port == 0 || port > 65535) {
    return absl::StrCat("entry '", entry, "' has port ", port_text, ", outside 1..65535");
  }
  return "";
}

absl::StatusOr<CoordinatorAddress> ParseEtcd(absl::string_view spec) {
  const absl::string_view rest = spec.substr(kEtcdScheme.size());
  const size_t slash = rest.find('/');
  if (slash == absl::string_view::npos) {
    return Bad(spec, "names no job; write etcd://HOST:PORT[,HOST:PORT...]/JOB");
  }
  const absl::string_view endpoints = rest.substr(0, slash);
  const absl::string_view job = rest.substr(slash + 1);
  if (absl::StripAsciiWhitespace(endpoints).empty()) {
    return Bad(spec, "names no etcd endpoint; write etcd://HOST:PORT[,HOST:PORT...]/JOB");
  }
  absl::StatusOr<std::vector<std::string>> members = ParseEtcdEndpoints(endpoints);
  if (!members.ok()) return Bad(spec, members.status().message());
  if (job.empty()) return Bad(spec, "names an empty job (nothing after the '/')");
  if (absl::StrContains(job, '/')) {
    return Bad(spec, absl::StrCat("job '", job, "' contains a '/'"));
  }
  if (!ValidEtcdJobName(job)) {
    return Bad(spec, absl::StrCat("job '", job,
                                  "' must be 1-200 printable characters without spaces"));
  }
  CoordinatorAddress out;
  out.spec = std::string(spec);
  out.etcd_endpoints = *std::move(members);
  out.etcd_job = std::string(job);
  return out;
}

}  // namespace

std::string CoordinatorAddress::Describe() const {
  if (from_etcd()) {
    return absl::StrCat("the leader of job '", etcd_job, "' as etcd at ",
                        absl::StrJoin(etcd_endpoints, ","), " names it");
  }
  if (coordinators.size() == 1) return absl::StrCat("coordinator ", coordinators[0]);
  return absl::StrCat("the leader among coordinators ", absl::StrJoin(coordinators, ","));
}

absl::StatusOr<CoordinatorAddress> ParseCoordinatorAddress(absl::string_view spec) {
  spec = absl::StripAsciiWhitespace(spec);
  if (spec.empty()) return absl::InvalidArgumentError("coordinator address is empty");
  if (absl::StartsWithIgnoreCase(spec, "etcd:")) {
    if (!absl::StartsWithIgnoreCase(spec, kEtcdScheme)) {
      return Bad(spec, "an etcd address is etcd://HOST:PORT[,HOST:PORT...]/JOB");
    }
    return ParseEtcd(spec);
  }
  CoordinatorAddress out;
  out.spec = std::string(spec);
  if (!absl::StrContains(spec, ',') || IsGrpcTarget(spec)) {
    out.coordinators.emplace_back(spec);
    return out;
  }
  for (absl::string_view entry : absl::StrSplit(spec, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (std::string problem = ListEntryProblem(entry); !problem.empty()) {
      return Bad(spec, problem);
    }
    if (std::find(out.coordinators.begin(), out.coordinators.end(), entry) !=
        out.coordinators.end()) {
      return Bad(spec, absl::StrCat("names '", entry, "' twice"));
    }
    out.coordinators.emplace_back(entry);
  }
  return out;
}

LeaderResolver::LeaderResolver(CoordinatorAddress address, LeaderLookup lookup)
    : address_(std::move(address)), lookup_(std::move(lookup)) {}

absl::StatusOr<std::unique_ptr<LeaderResolver>> LeaderResolver::Create(
    CoordinatorAddress address, absl::Duration etcd_call_timeout) {
  if (!address.from_etcd()) {
    if (address.coordinators.empty()) {
      return absl::InvalidArgumentError("coordinator address names no coordinator");
    }
    return std::make_unique<LeaderResolver>(std::move(address), nullptr);
  }
  if (address.etcd_job.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("coordinator address '", address.spec, "' names no job"));
  }
  EtcdClientOptions options;
  options.endpoints = address.etcd_endpoints;
  options.call_timeout = etcd_call_timeout;
  absl::StatusOr<std::unique_ptr<EtcdClient>> client = EtcdClient::Create(options);
  if (!client.ok()) return client.status();
  std::shared_ptr<EtcdClient> etcd = *std::move(client);
  const std::string job = address.etcd_job;
  LeaderLookup lookup = [etcd, job]() -> absl::StatusOr<std::string> {
    absl::StatusOr<EtcdLeader> leader = ReadEtcdLeader(*etcd, job);
    if (!leader.ok()) return leader.status();
    if (leader->advertise.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          etcd->Describe(), ": the leader of job '", job, "' (pid ", leader->pid, " on ",
          leader->host, ") advertises no address for clients"));
    }
    return leader->advertise;
  };
  return std::make_unique<LeaderResolver>(std::move(address), std::move(lookup));
}

absl::StatusOr<std::string> LeaderResolver::Current() {
  if (!address_.from_etcd()) {
    absl::MutexLock lock(&mu_);
    return address_.coordinators[index_];
  }
  {
    absl::MutexLock lock(&mu_);
    if (!etcd_leader_.empty()) return etcd_leader_;
  }
  absl::StatusOr<std::string> leader = lookup_();  // no lock: an RPC
  if (absl::IsNotFound(leader.status())) {
    // An election in progress (the leader is gone, no standby won yet).
    return absl::UnavailableError(absl::StrCat("nobody leads job '", address_.etcd_job,
                                               "' yet (", leader.status().message(), ")"));
  }
  // What the record says cannot be waited out (DATA_LOSS, a leader with no
  // address); any other failure of etcd (an answer held past its deadline
  // by a member without quorum is UNKNOWN) is etcd being away: retried, as
  // a coordinator that does not answer is.
  if (!leader.ok() && !absl::IsDataLoss(leader.status()) &&
      !absl::IsFailedPrecondition(leader.status()) &&
      !absl::IsInvalidArgument(leader.status())) {
    return absl::UnavailableError(leader.status().message());
  }
  if (!leader.ok()) return leader.status();
  absl::MutexLock lock(&mu_);
  etcd_leader_ = *leader;
  return etcd_leader_;
}

void LeaderResolver::Failed(absl::string_view target, absl::string_view leader_hint) {
  if (address_.single()) return;
  absl::MutexLock lock(&mu_);
  if (address_.from_etcd()) {
    if (etcd_leader_ == target) etcd_leader_.clear();
    return;
  }
  const std::vector<std::string>& list = address_.coordinators;
  if (list[index_] != target) return;
  auto hinted = std::find(list.begin(), list.end(), leader_hint);
  if (!leader_hint.empty() && leader_hint != target && hinted != list.end()) {
    index_ = static_cast<size_t>(hinted - list.begin());
  } else {
    index_ = (index_ + 1) % list.size();
  }
}

}  // namespace shardq
