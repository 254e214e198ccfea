// Validation of what clients send: names, item strings and the residual
// ranges of a checkpoint. Every check answers INVALID_ARGUMENT naming the
// field (or the item) and the value that was wrong, so that nothing a
// client sends is accepted and later shown cut short or read twice.
//
// Pure functions, thread-safe.
#ifndef SHARDQ_CORE_VALIDATE_H_
#define SHARDQ_CORE_VALIDATE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "proto/shardq/journal.pb.h"

namespace shardq {

// Longest queue or worker name, in bytes (names travel in every request
// and are kept per worker).
inline constexpr size_t kMaxNameBytes = 256;

// Most residual ranges a checkpoint may list for one planned item of one
// epoch, and in all. A residual range is the unread part of an item held
// when the checkpoint was taken, or a range split off it; a real run makes
// at most one per worker that helped with the item.
inline constexpr int64_t kMaxResidualsPerItem = 1 << 16;
inline constexpr int64_t kMaxResiduals = 1 << 20;

// OK when `name` has 1 to kMaxNameBytes bytes and no control character
// (bytes 0x00-0x1f and 0x7f: NUL, newline, tab, escape...). Otherwise
// INVALID_ARGUMENT naming `field` (e.g. "queue name", "worker name") and
// the (escaped) value.
absl::Status ValidateName(absl::string_view field, absl::string_view name);

// OK when item `index` of queue `queue`'s plan is non-empty and has no
// control character; INVALID_ARGUMENT naming the queue, the index and the
// (escaped) item otherwise.
absl::Status ValidateItemString(absl::string_view queue, size_t index, absl::string_view item);

// OK when every residual range of `checkpoint` belongs to its plan: it
// names an epoch and item of the plan; its item string (item_override), when
// set, reads the same work with the same parameters as the planned item and
// a [start, end) inside the planned item's range; ranges listed for one
// planned item of one epoch do not overlap (a residual without an override
// stands for the whole item); and there are at most kMaxResidualsPerItem per
// planned item and kMaxResiduals in all. INVALID_ARGUMENT naming the epoch,
// the item and the offending range otherwise. Checks the residuals only:
// the config is checked by ValidateConfig, the completion bitsets when the
// queue is built.
absl::Status ValidateCheckpointResiduals(const journal::Checkpoint& checkpoint);

}  // namespace shardq

#endif  // SHARDQ_CORE_VALIDATE_H_
