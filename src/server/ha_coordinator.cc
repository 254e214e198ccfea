#include "src/server/ha_coordinator.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/core/process.h"
#include "src/log/log.h"
#include "src/server/listen_address.h"
#include "src/store/etcd_store.h"

namespace shardq {
namespace {

// How often a standby tries to lead: a fifth of the TTL, at most 500 ms,
// so a killed leader is replaced within about TTL + 0.5 s.
absl::Duration PollOf(int64_t ttl_seconds) {
  return std::min(absl::Milliseconds(500), absl::Seconds(ttl_seconds) / 5);
}

// How often a leader checks its lease and its store.
constexpr absl::Duration kLeaderCheck = absl::Milliseconds(100);

std::string StandbyPrefix(const std::string& job) {
  return EtcdStore::JobPrefix(job) + "standby/";
}

// "host:port" clients dial for a listen address that bound `port`.
std::string AdvertiseOf(const std::string& listen, int port) {
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host == "0.0.0.0" || host == "[::]" || host.empty()) {
    char name[256] = {0};
    gethostname(name, sizeof(name) - 1);
    host = name;
  }
  return absl::StrCat(host, ":", port);
}

}  // namespace

HaCoordinator::HaCoordinator(const HaOptions& options) : options_(options) {}

absl::StatusOr<std::unique_ptr<HaCoordinator>> HaCoordinator::Start(const HaOptions& options) {
  if (options.job.empty() || absl::StrContains(options.job, '/')) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--job must be a non-empty name without '/' (the job's keys live under /shardq/<job>/), "
        "got '", options.job, "'"));
  }
  if (!options.server.state_dir.empty()) {
    return absl::InvalidArgumentError(
        "--state-dir and --etcd exclude each other: with --etcd the job's state lives in etcd");
  }
  if (options.lease_ttl_seconds < 1 || options.lease_ttl_seconds > 3600) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--etcd-lease-ttl must be in 1..3600 seconds, got ", options.lease_ttl_seconds));
  }
  absl::StatusOr<std::vector<std::string>> endpoints = ParseEtcdEndpoints(options.etcd);
  if (!endpoints.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--etcd: ", endpoints.status().message()));
  }
  EtcdClientOptions client_options;
  client_options.endpoints = *endpoints;
  // A call that hangs must end well within the lease.
  client_options.call_timeout =
      std::clamp(absl::Seconds(options.lease_ttl_seconds) / 3, absl::Milliseconds(300),
                 absl::Seconds(2));
  absl::StatusOr<std::unique_ptr<EtcdClient>> client = EtcdClient::Create(client_options);
  if (!client.ok()) return client.status();

  std::unique_ptr<HaCoordinator> ha(new HaCoordinator(options));
  ha->client_ = *std::move(client);
  absl::StatusOr<std::unique_ptr<StandbyServer>> standby =
      StandbyServer::Start(options.server, options.job);
  if (!standby.ok()) return standby.status();
  ha->standby_ = *std::move(standby);
  ha->port_ = ha->standby_->port();
  // From now on the port stays the same, whoever serves it.
  const std::string host = options.server.listen.substr(0, options.server.listen.rfind(':'));
  ha->options_.server.listen = absl::StrCat(host, ":", ha->port_);
  ha->advertise_ =
      options.advertise.empty() ? AdvertiseOf(options.server.listen, ha->port_) : options.advertise;
  ha->standby_->SetLeader(ha->advertise_, "", 0);
  ha->loop_ = std::thread([h = ha.get()] {
    NameThisThread("ha");
    h->Loop();
  });
  return ha;
}

HaCoordinator::~HaCoordinator() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    stop_cv_.SignalAll();
  }
  if (loop_.joinable()) loop_.join();
  standby_.reset();
}

bool HaCoordinator::WaitOrStop(absl::Duration d) {
  const absl::Time until = absl::Now() + d;
  absl::MutexLock lock(&mu_);
  while (!stopping_ && absl::Now() < until) stop_cv_.WaitWithDeadline(&mu_, until);
  return stopping_;
}

absl::Status HaCoordinator::StartStandbyServer() {
  absl::StatusOr<std::unique_ptr<StandbyServer>> standby =
      StandbyServer::Start(options_.server, options_.job);
  if (!standby.ok()) return standby.status();
  standby_ = *std::move(standby);
  absl::MutexLock lock(&mu_);
  standby_->SetLeader(advertise_, known_leader_, known_term_);
  return absl::OkStatus();
}

void HaCoordinator::Loop() {
  while (true) {
    std::unique_ptr<EtcdElection> election;
    if (!StandBy(&election)) return;
    const std::string why = Lead(*election);
    election.reset();  // revokes the lease: the key goes, a standby may win at once
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || !fatal_.ok()) return;
    }
    SHARDQ_LOG_WARN("job '{}': stepped down ({}); standing by", options_.job, why);
    if (absl::Status s = StartStandbyServer(); !s.ok()) {
      SHARDQ_LOG_ERROR("job '{}': cannot serve as a standby any more: {}", options_.job,
                       s.ToString());
      absl::MutexLock lock(&mu_);
      fatal_ = s;
      return;
    }
  }
}

bool HaCoordinator::StandBy(std::unique_ptr<EtcdElection>* election) {
  const absl::Duration poll = PollOf(options_.lease_ttl_seconds);
  std::string said;  // the last line logged, so each change is said once
  auto say = [&](const std::string& line) {
    if (line == said) return;
    said = line;
    SHARDQ_LOG_INFO("{}", line);
  };
  bool saw_other = false;
  while (true) {
    if (*election == nullptr) {
      EtcdElectionOptions eo;
      eo.client = client_;
      eo.job = options_.job;
      eo.advertise = advertise_;
      eo.lease_ttl_seconds = options_.lease_ttl_seconds;
      absl::StatusOr<std::unique_ptr<EtcdElection>> created = EtcdElection::Create(eo);
      if (!created.ok()) {
        const std::string why(created.status().message());
        standby_->SetUnknown(advertise_, why);
        say(absl::StrCat("job '", options_.job, "': standing by, etcd does not answer: ", why));
        if (WaitOrStop(poll)) return false;
        continue;
      }
      *election = *std::move(created);
      // Registered with the lease: the key goes when this process does.
      etcdserverpb::PutRequest put;
      put.set_key(absl::StrCat(StandbyPrefix(options_.job),
                               absl::Hex((*election)->lease_id(), absl::kZeroPad16)));
      put.set_value(advertise_);
      put.set_lease((*election)->lease_id());
      if (absl::StatusOr<etcdserverpb::PutResponse> r = client_->Put(put); !r.ok()) {
        SHARDQ_LOG_WARN("job '{}': could not register as a standby: {}", options_.job,
                        r.status().ToString());
      }
    }
    absl::StatusOr<bool> won = (*election)->TryLead();
    if (won.ok() && *won) {
      if (saw_other) {
        absl::MutexLock lock(&mu_);
        ++failovers_;
      }
      return true;
    }
    if (!won.ok()) {
      if ((*election)->lease_lost()) {
        election->reset();  // a new lease next round
        continue;
      }
      const std::string why(won.status().message());
      standby_->SetUnknown(advertise_, why);
      say(absl::StrCat("job '", options_.job, "': standing by, etcd does not answer: ", why));
    } else if (absl::StatusOr<EtcdLeader> leader = ReadEtcdLeader(*client_, options_.job);
               leader.ok()) {
      saw_other = true;
      {
        absl::MutexLock lock(&mu_);
        known_leader_ = leader->advertise;
        known_term_ = leader->term;
      }
      standby_->SetLeader(advertise_, leader->advertise, leader->term);
      say(absl::StrCat("job '", options_.job, "': standing by at ", advertise_, "; ",
                       leader->advertise, " leads (term ", leader->term, ")"));
    } else if (!absl::IsNotFound(leader.status())) {
      const std::string why(leader.status().message());
      standby_->SetUnknown(advertise_, why);
      say(absl::StrCat("job '", options_.job, "': standing by, cannot read the leader: ", why));
    }
    if (WaitOrStop(poll)) return false;
  }
}

std::string HaCoordinator::Lead(EtcdElection& election) {
  const int64_t term = election.term();
  etcdserverpb::DeleteRangeRequest unregister;
  unregister.set_key(absl::StrCat(StandbyPrefix(options_.job),
                                  absl::Hex(election.lease_id(), absl::kZeroPad16)));
  (void)client_->DeleteRange(unregister);  // best effort: it goes with the lease anyway
  standby_.reset();                        // frees the port for the coordinator
  const std::string store_name =
      absl::StrCat(client_->Describe(), ", job '", options_.job, "'");
  ServerOptions server = options_.server;
  server.open_coordinator = [&]() -> absl::StatusOr<std::unique_ptr<CoordinatorImpl>> {
    EtcdStoreOptions so;
    so.client = client_;
    so.job = options_.job;
    so.guard_key = election.key();
    so.guard_create_revision = term;
    RecoveredState recovered;
    absl::StatusOr<std::unique_ptr<EtcdStore>> store = EtcdStore::Open(so, &recovered);
    if (!store.ok()) return store.status();
    CoordinatorOptions co;
    co.snapshot_every = options_.snapshot_every;
    co.grants_wait_for_store = true;
    return CoordinatorImpl::CreateWithStore(co, *std::move(store), std::move(recovered),
                                            store_name);
  };
  server.leadership = [this] { return leadership(); };
  absl::StatusOr<std::unique_ptr<CoordinatorServer>> started = CoordinatorServer::Start(server);
  if (!started.ok()) {
    // etcd going away is waited out; state that does not recover (a
    // damaged key, a bad TLS file) is not retried: it ends the process.
    if (!absl::IsUnavailable(started.status())) {
      absl::MutexLock lock(&mu_);
      fatal_ = started.status();
    }
    return absl::StrCat("it won term ", term, " but could not serve: ",
                        started.status().ToString());
  }
  CoordinatorImpl* coordinator = (*started)->coordinator();
  {
    absl::MutexLock lock(&mu_);
    leading_ = started->get();
    term_ = term;
    known_leader_ = advertise_;
    known_term_ = term;
    if (observer_ != nullptr) coordinator->SetObserver(observer_);
  }
  const CoordinatorImpl::Recovery& r = coordinator->recovery();
  SHARDQ_LOG_INFO("job '{}': leading at {} (term {}); recovered {} queue(s) from {} in {:.2f} s "
                  "({} update(s) replayed after their snapshots)",
                  options_.job, advertise_, term, r.queues, store_name,
                  absl::ToDoubleSeconds(r.took), r.updates_replayed);
  std::string why;
  while (!WaitOrStop(kLeaderCheck)) {
    if (election.lease_lost()) {
      why = absl::StrCat("its etcd lease of term ", term,
                         " was lost: it was paused or cut off from etcd past the lease TTL");
      break;
    }
    if (absl::Status s = coordinator->Writable(); !s.ok()) {
      why = std::string(s.message());
      break;
    }
  }
  {
    absl::MutexLock lock(&mu_);
    leading_ = nullptr;
    term_ = 0;
    if (!why.empty()) known_leader_.clear();
  }
  coordinator->SetObserver(nullptr);
  (*started)->Shutdown();
  started->reset();  // a clean stop snapshots every queue; a fenced one stores nothing
  return why;
}

bool HaCoordinator::leading() const {
  absl::MutexLock lock(&mu_);
  return leading_ != nullptr;
}

int64_t HaCoordinator::failovers() const {
  absl::MutexLock lock(&mu_);
  return failovers_;
}

absl::Status HaCoordinator::fatal() const {
  absl::MutexLock lock(&mu_);
  return fatal_;
}

std::vector<std::string> HaCoordinator::Standbys() const {
  const std::string prefix = StandbyPrefix(options_.job);
  etcdserverpb::RangeRequest range;
  range.set_key(prefix);
  range.set_range_end(EtcdPrefixEnd(prefix));
  std::vector<std::string> out;
  absl::StatusOr<etcdserverpb::RangeResponse> r = client_->Range(range);
  if (!r.ok()) return out;  // the status answer goes on without them
  for (const etcdserverpb::KeyValue& kv : r->kvs()) {
    if (kv.value() != advertise_) out.push_back(kv.value());
  }
  return out;
}

Leadership HaCoordinator::leadership(bool standbys) const {
  Leadership out;
  out.job = options_.job;
  bool leading = false;
  {
    absl::MutexLock lock(&mu_);
    leading = leading_ != nullptr;
    out.leader = known_leader_;
    out.term = known_term_;
    out.failovers = failovers_;
  }
  if (leading && standbys) out.standbys = Standbys();
  return out;
}

std::vector<QueueStats> HaCoordinator::AllStats() const {
  absl::MutexLock lock(&mu_);
  if (leading_ == nullptr) return {};
  return leading_->coordinator()->AllStats();
}

std::optional<StoreTotals> HaCoordinator::journal_totals() const {
  absl::MutexLock lock(&mu_);
  if (leading_ == nullptr) return std::nullopt;
  return leading_->coordinator()->journal_totals();
}

std::optional<std::pair<int64_t, int64_t>> HaCoordinator::sessions() const {
  absl::MutexLock lock(&mu_);
  if (leading_ == nullptr) return std::nullopt;
  return std::make_pair(leading_->live_sessions(), leading_->max_sessions());
}

void HaCoordinator::SetObserver(CoordinatorImpl::Observer* observer) {
  absl::MutexLock lock(&mu_);
  observer_ = observer;
  if (leading_ != nullptr) leading_->coordinator()->SetObserver(observer);
}

}  // namespace shardq
