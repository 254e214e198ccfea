// Shared handling of the flags every client verb takes.
#ifndef SHARDQ_TOOLS_CLIENT_FLAGS_H_
#define SHARDQ_TOOLS_CLIENT_FLAGS_H_

#include "absl/status/statusor.h"
#include "src/client/backend.h"
#include "tools/verbs.h"

namespace shardq {

// Registers --address, --name, --token-file, --tls-ca, --connect-timeout
// (and --worker when `with_worker`).
void AddClientFlags(CLI::App* cmd, ClientFlags* flags, bool with_worker);

// Registers --connect-timeout alone (for a verb that registers the other
// client flags itself); does nothing when `cmd` already has it.
void AddConnectTimeoutFlag(CLI::App* cmd, ClientFlags* flags);

// Connects as the flags (or the environment: SHARDQ_ADDRESS, SHARDQ_TOKEN,
// SHARDQ_TLS_CA, ...) say. Errors name the flag or file.
absl::StatusOr<ConnectedBackend> ConnectFromFlags(const ClientFlags& flags);

// Prints "shardq <verb>: <status>" to stderr and returns the exit code for it.
int ReportError(const char* verb, const absl::Status& status);

}  // namespace shardq

#endif  // SHARDQ_TOOLS_CLIENT_FLAGS_H_
