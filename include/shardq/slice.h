// Item strings: a work name, optionally followed by a range, e.g.
//   data/part-3.txt?start=1048576&end=2097152
//   sqlite:data/train.db?table=clicks&start=100000&end=200000
// Pure functions, thread-safe.
#ifndef SHARDQ_SLICE_H_
#define SHARDQ_SLICE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardq {

struct SliceSpec {
  std::string work;                 // the part before '?'
  std::optional<int64_t> start;     // inclusive; unset: start of the work
  std::optional<int64_t> end;       // exclusive; unset: end of the work
  std::map<std::string, std::string> params;  // other query parameters

  bool whole() const { return !start.has_value() && !end.has_value(); }
};

// Parses an item string. A '?' introduces query parameters only when what
// follows is a list of key=value pairs; otherwise the whole string is the
// work name. INVALID_ARGUMENT (naming the item and the field) when start/end
// are not non-negative integers or start > end.
absl::StatusOr<SliceSpec> ParseItem(absl::string_view item);

// Formats `work?start=S&end=E` (plus extra params, sorted by key, first).
std::string FormatItem(const SliceSpec& spec);

}  // namespace shardq

#endif  // SHARDQ_SLICE_H_
