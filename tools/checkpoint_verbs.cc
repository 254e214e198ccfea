// `shardq snapshot` and `shardq restore`: a training job's checkpoint of a
// queue, saved next to the model checkpoint and restored with it.
#include <cstdio>

#include "src/client/checkpoint_file.h"
#include "tools/client_flags.h"
#include "tools/verbs.h"

namespace shardq {

CLI::App* AddSnapshot(CLI::App& app, SnapshotOptions* o) {
  CLI::App* cmd = app.add_subcommand(
      "snapshot", "Save a queue's checkpoint: completed items and the unread rest of held ones");
  AddClientFlags(cmd, &o->client, /*with_worker=*/false);
  cmd->add_option("--out", o->out, "checkpoint file to write")->required();
  return cmd;
}

int RunSnapshot(const SnapshotOptions& o) {
  absl::StatusOr<ConnectedBackend> connected = ConnectFromFlags(o.client);
  if (!connected.ok()) return ReportError("snapshot", connected.status());
  absl::StatusOr<journal::Checkpoint> checkpoint =
      connected->backend->ExportCheckpoint(o.client.name);
  if (!checkpoint.ok()) return ReportError("snapshot", checkpoint.status());
  if (absl::Status s = WriteCheckpointFile(o.out, *checkpoint); !s.ok()) {
    return ReportError("snapshot", s);
  }
  std::printf("queue=%s residual=%d out=%s\n", o.client.name.c_str(),
              checkpoint->residual_size(), o.out.c_str());
  return 0;
}

CLI::App* AddRestore(CLI::App& app, RestoreOptions* o) {
  CLI::App* cmd = app.add_subcommand(
      "restore", "Create a queue from a checkpoint saved by `shardq snapshot`");
  AddClientFlags(cmd, &o->client, /*with_worker=*/false);
  // Restore keeps the checkpoint's queue name unless --name is given.
  o->client.name.clear();
  cmd->add_option("--in", o->in, "checkpoint file to read")->required();
  return cmd;
}

int RunRestore(const RestoreOptions& o) {
  absl::StatusOr<ConnectedBackend> connected = ConnectFromFlags(o.client);
  if (!connected.ok()) return ReportError("restore", connected.status());
  absl::StatusOr<journal::Checkpoint> checkpoint = ReadCheckpointFile(o.in);
  if (!checkpoint.ok()) return ReportError("restore", checkpoint.status());
  absl::StatusOr<QueueInfo> info =
      connected->backend->RestoreCheckpoint(*checkpoint, o.client.name);
  if (!info.ok()) return ReportError("restore", info.status());
  std::printf("queue=%s items=%lld epochs=%lld seed=%llu restored\n", info->name.c_str(),
              static_cast<long long>(info->num_items),
              static_cast<long long>(info->num_epochs),
              static_cast<unsigned long long>(info->seed));
  return 0;
}

}  // namespace shardq
