#include "tools/client_flags.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"

namespace shardq {

void AddClientFlags(CLI::App* cmd, ClientFlags* flags, bool with_worker) {
  cmd->add_option("--address", flags->address,
                  "coordinator HOST:PORT or unix:PATH; the coordinators of an HA job as "
                  "H1:P1,H2:P2 or etcd://HOST:PORT[,HOST:PORT]/JOB (default: SHARDQ_ADDRESS, "
                  "TF_CONFIG, MASTER_ADDR+SHARDQ_PORT)");
  cmd->add_option("--name", flags->name, "queue name")->capture_default_str();
  cmd->add_option("--token-file", flags->token_file,
                  "file holding the coordinator's token (default: SHARDQ_TOKEN)");
  cmd->add_option("--tls-ca", flags->tls_ca,
                  "PEM CA certificate: connect with TLS (default: SHARDQ_TLS_CA)");
  if (with_worker) {
    cmd->add_option("--worker", flags->worker,
                    "worker name (default: from the environment, else host-pid)");
  }
  AddConnectTimeoutFlag(cmd, flags);
}

void AddConnectTimeoutFlag(CLI::App* cmd, ClientFlags* flags) {
  if (cmd->get_option_no_throw("--connect-timeout") != nullptr) return;
  cmd->add_option("--connect-timeout", flags->connect_timeout_seconds,
                  "seconds to wait for the coordinator's first answer before failing with "
                  "UNAVAILABLE (once it has answered, calls retry through its restarts)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

absl::StatusOr<ConnectedBackend> ConnectFromFlags(const ClientFlags& flags) {
  std::string token;
  if (!flags.token_file.empty()) {
    std::ifstream in(flags.token_file);
    if (!in) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot read --token-file '", flags.token_file, "'"));
    }
    std::stringstream contents;
    contents << in.rdbuf();
    token = std::string(absl::StripAsciiWhitespace(contents.str()));
  }
  absl::StatusOr<ConnectedBackend> connected =
      ConnectBackend(flags.address, token, flags.tls_ca, flags.worker,
                     absl::Seconds(flags.connect_timeout_seconds));
  if (!connected.ok()) return connected.status();
  if (connected->address.empty()) {
    return absl::InvalidArgumentError(
        "no coordinator: give --address HOST:PORT or set SHARDQ_ADDRESS");
  }
  return connected;
}

int ReportError(const char* verb, const absl::Status& status) {
  std::fprintf(stderr, "shardq %s: %s\n", verb, status.ToString().c_str());
  return absl::IsInvalidArgument(status) ? 2 : 1;
}

}  // namespace shardq
