// Internal to the pipeline: the non-template part of building ReadItems.
#ifndef SHARDQ_SRC_PIPELINE_READ_SETUP_H_
#define SHARDQ_SRC_PIPELINE_READ_SETUP_H_

#include "absl/status/statusor.h"
#include "shardq/item_source.h"
#include "shardq/pipeline/stage_options.h"
#include "shardq/pipeline/internal/stage.h"

namespace shardq::pipeline::internal {

// Checks `options` against `source` and returns them with every default
// resolved (cycle_length, max_items_held, num_parallel_reads capped at
// cycle_length; a read_ahead of 0 stays 0, for ItemSlots to size by the
// records' bytes). Creates the pipeline's ledger in `context` and queues
// its start. INVALID_ARGUMENT names the stage and the field (or
// the reason the source is refused); FAILED_PRECONDITION if `context`
// already has a reading stage.
absl::StatusOr<InterleaveOptions> PrepareRead(ItemSource* source,
                                              const InterleaveOptions& options,
                                              PipelineContext* context);

}  // namespace shardq::pipeline::internal

#endif  // SHARDQ_SRC_PIPELINE_READ_SETUP_H_
