#include "shardq/pipeline/internal/read_setup.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "shardq/item_source.h"
#include "shardq/pipeline/internal/item_ledger.h"

namespace shardq::pipeline::internal {
namespace {

absl::Status BadOption(const InterleaveOptions& options,
                       const std::string& field, int64_t value,
                       const std::string& requirement) {
  return absl::InvalidArgumentError(
      absl::StrCat("ReadItems '", options.name, "': ", field, " = ", value,
                   ", must be ", requirement));
}

}  // namespace

absl::StatusOr<InterleaveOptions> PrepareRead(ItemSource* source,
                                              const InterleaveOptions& options,
                                              PipelineContext* context) {
  if (source == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReadItems '", options.name, "': source is null"));
  }
  if (context->ledger != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ReadItems '", options.name,
        "': a pipeline may read from one source only"));
  }
  if (source->NextWaitsForItemsDone()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ReadItems '", options.name,
        "': an InputProducer cannot be a source (its NextItem waits for "
        "items the pipeline holds until their records are consumed); pass "
        "its WorkQueue, the pipeline fetches items ahead itself"));
  }
  if (options.block_length < 1) {
    return BadOption(options, "block_length", options.block_length, ">= 1");
  }
  if (options.buffer_size < 1) {
    return BadOption(options, "buffer_size", options.buffer_size, ">= 1");
  }
  if (options.cycle_length < 0) {
    return BadOption(options, "cycle_length", options.cycle_length, ">= 0");
  }
  if (options.num_parallel_reads < 0 ||
      options.num_parallel_reads > kMaxStageThreads) {
    return BadOption(options, "num_parallel_reads", options.num_parallel_reads,
                     absl::StrCat(">= 0 and <= ", kMaxStageThreads));
  }
  if (options.read_ahead < 0) {
    return BadOption(options, "read_ahead", options.read_ahead, ">= 0");
  }
  if (options.max_items_held < 0) {
    return BadOption(options, "max_items_held", options.max_items_held,
                     ">= 0");
  }
  if (options.take_poll_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ReadItems '", options.name, "': take_poll_interval = ",
        absl::FormatDuration(options.take_poll_interval), ", must be > 0"));
  }

  if (options.max_epoch < -1) {
    return BadOption(options, "max_epoch", options.max_epoch, ">= -1");
  }

  InterleaveOptions resolved = options;
  LeaseSource* leases = source->leases();
  if (options.max_epoch >= 0 && leases == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ReadItems '", options.name, "': max_epoch = ", options.max_epoch,
        " needs a WorkQueue source (an item of a later epoch is given back "
        "to the queue, which other sources cannot do)"));
  }
  if (leases != nullptr) {
    if (options.max_items_held > leases->num_clients()) {
      return BadOption(options, "max_items_held", options.max_items_held,
                       absl::StrCat("<= the num_clients of WorkQueue '",
                                    leases->name(), "' (",
                                    leases->num_clients(), ")"));
    }
    if (resolved.max_items_held == 0) {
      resolved.max_items_held = leases->num_clients();
    }
  }
  if (resolved.cycle_length == 0) {
    resolved.cycle_length =
        resolved.max_items_held > 0 ? resolved.max_items_held : 1;
  }
  if (resolved.max_items_held > 0 &&
      resolved.cycle_length > resolved.max_items_held) {
    return BadOption(options, "cycle_length", resolved.cycle_length,
                     absl::StrCat("<= max_items_held (",
                                  resolved.max_items_held,
                                  ", by default the WorkQueue's num_clients)"));
  }
  resolved.num_parallel_reads =
      std::min(resolved.num_parallel_reads, resolved.cycle_length);
  // 0 stays 0: ItemSlots sizes the read-ahead by the records' bytes. A
  // slot holds one record more than a block before the merge takes it
  // (see ReadStage::TakeBlock).
  if (resolved.read_ahead != 0) {
    resolved.read_ahead =
        std::max(resolved.read_ahead, resolved.block_length + 1);
  }

  LedgerOptions ledger_options;
  ledger_options.name = resolved.name;
  ledger_options.max_items_held = resolved.max_items_held;
  ledger_options.take_poll_interval = resolved.take_poll_interval;
  ledger_options.complete_when_read = resolved.complete_when_read;
  ledger_options.max_epoch = resolved.max_epoch;
  ledger_options.open_ahead = resolved.open_ahead;
  context->ledger =
      std::make_unique<ItemLedger>(source, leases, ledger_options);
  ItemLedger* ledger = context->ledger.get();
  ThreadCoordinator* coordinator = &context->coordinator;
  context->starters.push_back([ledger, coordinator] { ledger->Start(coordinator); });
  return resolved;
}

}  // namespace shardq::pipeline::internal
