// The verbs of the `shardq` command line. Each Add* registers a subcommand
// and its flags (writing into the options struct); each Run* executes it and
// returns the process exit code.
#ifndef SHARDQ_TOOLS_VERBS_H_
#define SHARDQ_TOOLS_VERBS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"

namespace shardq {

// Exit code of a bad argument or usage (CLI11's own codes are mapped to it).
inline constexpr int kExitUsage = 2;

// Exit code of `take` at end of input.
inline constexpr int kExitEndOfInput = 3;
// Exit code of `worker` when the queue finished with failed items.
inline constexpr int kExitFinishedWithFailures = 4;

// Flags every client verb shares.
struct ClientFlags {
  std::string address;
  std::string name = "work_queue";
  std::string token_file;
  std::string tls_ca;
  std::string worker;
  // --connect-timeout: seconds to wait for the coordinator's first answer.
  double connect_timeout_seconds = 60;
  // --take-ahead (worker, take): items leased ahead of the one in hand.
  int64_t take_ahead = 1;
};

struct ServeOptions {
  std::string listen = "127.0.0.1:7077";
  std::string token_file;
  std::string tls_cert;
  std::string tls_key;
  std::string port_file;
  std::string state_dir;
  std::string http;
  std::string summary_dir;
  double summary_interval_seconds = 10;
  bool http_public = false;      // --http without the token
  int64_t max_request_mb = 64;   // largest gRPC request
  int session_queues = 16;       // ServerOptions::session_queues
  int64_t max_sessions = 0;      // ServerOptions::max_sessions (its default, set by the verb)
  // High availability (tools/serve_ha.cc): etcd members, the job, what
  // clients dial, the election lease.
  std::string etcd;
  std::string job;
  std::string advertise;
  int64_t etcd_lease_ttl_seconds = 5;
};
CLI::App* AddServe(CLI::App& app, ServeOptions* o);
int RunServe(const ServeOptions& o);

struct CreateOptions {
  ClientFlags client;
  int64_t epochs = 1;
  std::optional<uint64_t> seed;
  bool no_shuffle = false;
  std::optional<int64_t> slices;
  std::string prefix;
  double lease_timeout_seconds = 30;
  int64_t num_clients = 1;
  bool no_split = false;            // tail rebalancing off
  int64_t split_min_residual = 1;   // bytes (rows for tables)
  int64_t max_attempts = 3;         // failed attempts before an item is set aside
  std::vector<std::string> works;
};
CLI::App* AddCreate(CLI::App& app, CreateOptions* o);
int RunCreate(const CreateOptions& o);

CLI::App* AddTake(CLI::App& app, ClientFlags* o);
int RunTake(const ClientFlags& o);

struct WorkerOptions {
  ClientFlags client;
  int max_failures = 3;
  std::vector<std::string> command;
};
CLI::App* AddWorker(CLI::App& app, WorkerOptions* o);
int RunWorker(const WorkerOptions& o);

struct StatusOptions {
  ClientFlags client;
  bool json = false;
  bool failed = false;  // list the failed items
  bool watch = false;
  double watch_interval_seconds = 1;
};
CLI::App* AddStatus(CLI::App& app, StatusOptions* o);
int RunStatus(const StatusOptions& o);

struct SnapshotOptions {
  ClientFlags client;
  std::string out;
};
CLI::App* AddSnapshot(CLI::App& app, SnapshotOptions* o);
int RunSnapshot(const SnapshotOptions& o);

struct RestoreOptions {
  ClientFlags client;
  std::string in;
};
CLI::App* AddRestore(CLI::App& app, RestoreOptions* o);
int RunRestore(const RestoreOptions& o);

struct ReportOptions {
  std::string address;  // the coordinator's --http HOST:PORT
  std::string name;
  std::string out;
  std::string png;      // empty: no screenshot
  std::string token_file;
};
CLI::App* AddReport(CLI::App& app, ReportOptions* o);
int RunReport(const ReportOptions& o);

}  // namespace shardq

#endif  // SHARDQ_TOOLS_VERBS_H_
