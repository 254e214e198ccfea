#include "shardq/slice.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace shardq {
namespace {

// Splits "k=v&k=v"; nullopt when any part is not of that shape.
std::optional<std::vector<std::pair<std::string, std::string>>> SplitQuery(
    absl::string_view query) {
  std::vector<std::pair<std::string, std::string>> out;
  if (query.empty()) return std::nullopt;
  for (absl::string_view part : absl::StrSplit(query, '&')) {
    size_t eq = part.find('=');
    if (eq == absl::string_view::npos || eq == 0) return std::nullopt;
    out.emplace_back(std::string(part.substr(0, eq)),
                     std::string(part.substr(eq + 1)));
  }
  return out;
}

}  // namespace

absl::StatusOr<SliceSpec> ParseItem(absl::string_view item) {
  SliceSpec spec;
  size_t q = item.rfind('?');
  std::optional<std::vector<std::pair<std::string, std::string>>> query;
  if (q != absl::string_view::npos) query = SplitQuery(item.substr(q + 1));
  if (!query) {
    spec.work = std::string(item);
    return spec;
  }
  spec.work = std::string(item.substr(0, q));
  for (auto& [key, value] : *query) {
    if (key == "start" || key == "end") {
      int64_t v = 0;
      if (!absl::SimpleAtoi(value, &v) || v < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("item '", item, "': ", key, "='", value,
                         "' is not a non-negative integer"));
      }
      (key == "start" ? spec.start : spec.end) = v;
    } else {
      spec.params[key] = value;
    }
  }
  if (spec.start && spec.end && *spec.start > *spec.end) {
    return absl::InvalidArgumentError(
        absl::StrCat("item '", item, "': start=", *spec.start,
                     " is after end=", *spec.end));
  }
  return spec;
}

std::string FormatItem(const SliceSpec& spec) {
  std::string out = spec.work;
  char sep = '?';
  for (const auto& [key, value] : spec.params) {
    absl::StrAppend(&out, std::string(1, sep), key, "=", value);
    sep = '&';
  }
  if (spec.start) {
    absl::StrAppend(&out, std::string(1, sep), "start=", *spec.start);
    sep = '&';
  }
  if (spec.end) absl::StrAppend(&out, std::string(1, sep), "end=", *spec.end);
  return out;
}

}  // namespace shardq
