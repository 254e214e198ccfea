// Fuzz target: the item-string parser (include/shardq/slice.h).
//
// Two round-trip properties:
//  1. Any string: ParseItem either fails with INVALID_ARGUMENT naming the
//     item, or returns a spec whose FormatItem parses back to the same spec
//     (and formats to the same string again).
//  2. Any well-formed spec built from the input (a work name without '?',
//     parameter keys without '?', '&', '=' that are not start/end, values
//     without '?' or '&', 0 <= start <= end): ParseItem(FormatItem(spec))
//     returns exactly that spec.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "fuzz/fuzz_check.h"
#include "shardq/slice.h"

namespace shardq {
namespace {

bool SameSpec(const SliceSpec& a, const SliceSpec& b) {
  return a.work == b.work && a.start == b.start && a.end == b.end &&
         a.params == b.params;
}

std::string Show(const SliceSpec& s) {
  std::string out = absl::StrCat("{work='", s.work, "'");
  if (s.start) absl::StrAppend(&out, " start=", *s.start);
  if (s.end) absl::StrAppend(&out, " end=", *s.end);
  for (const auto& [k, v] : s.params) absl::StrAppend(&out, " ", k, "='", v, "'");
  return out + "}";
}

std::string Without(absl::string_view s, absl::string_view banned) {
  std::string out;
  for (char c : s) {
    if (banned.find(c) == absl::string_view::npos) out.push_back(c);
  }
  return out;
}

// Up to 8 bytes as a non-negative int64; nullopt for an empty part.
std::optional<int64_t> Number(absl::string_view part) {
  if (part.empty()) return std::nullopt;
  uint64_t v = 0;
  for (size_t i = 0; i < part.size() && i < 8; ++i) {
    v = (v << 8) | static_cast<uint8_t>(part[i]);
  }
  // Small values are the interesting ones; keep every width reachable.
  v >>= (static_cast<uint8_t>(part[0]) % 64);
  return static_cast<int64_t>(v & 0x7fffffffffffffffull);
}

void CheckStringRoundTrip(absl::string_view item) {
  absl::StatusOr<SliceSpec> spec = ParseItem(item);
  if (!spec.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(spec.status()),
               spec.status().ToString());
    FUZZ_CHECK(absl::StrContains(spec.status().message(), item),
               "the error does not name the item: " + spec.status().ToString());
    return;
  }
  if (spec->start && spec->end) {
    FUZZ_CHECK(*spec->start <= *spec->end, Show(*spec));
  }
  FUZZ_CHECK((!spec->start || *spec->start >= 0) &&
                 (!spec->end || *spec->end >= 0),
             Show(*spec));
  if (item.find('?') == absl::string_view::npos) {
    FUZZ_CHECK(spec->work == item && spec->whole() && spec->params.empty(),
               "an item without '?' is all work name: " + Show(*spec));
  }
  const std::string formatted = FormatItem(*spec);
  absl::StatusOr<SliceSpec> again = ParseItem(formatted);
  FUZZ_CHECK(again.ok(), absl::StrCat("'", formatted, "' (from '", item,
                                      "') does not parse: ",
                                      again.status().ToString()));
  FUZZ_CHECK(SameSpec(*spec, *again),
             absl::StrCat("'", item, "' -> ", Show(*spec), " -> '", formatted,
                          "' -> ", Show(*again)));
  FUZZ_CHECK(FormatItem(*again) == formatted,
             "FormatItem is not stable: '" + formatted + "'");
}

void CheckSpecRoundTrip(absl::string_view input) {
  // Parts separated by '\n': work, start, end, then key=value parameters.
  std::vector<absl::string_view> parts = absl::StrSplit(input, '\n');
  SliceSpec spec;
  spec.work = Without(parts[0], "?");
  if (parts.size() > 1) spec.start = Number(parts[1]);
  if (parts.size() > 2) spec.end = Number(parts[2]);
  if (spec.start && spec.end && *spec.start > *spec.end) {
    std::swap(*spec.start, *spec.end);
  }
  for (size_t i = 3; i < parts.size(); ++i) {
    const size_t eq = parts[i].find('=');
    const std::string key = Without(parts[i].substr(0, eq), "?&=");
    if (key.empty() || key == "start" || key == "end") continue;
    spec.params[key] = eq == absl::string_view::npos
                           ? std::string()
                           : Without(parts[i].substr(eq + 1), "?&");
  }
  const std::string formatted = FormatItem(spec);
  absl::StatusOr<SliceSpec> parsed = ParseItem(formatted);
  FUZZ_CHECK(parsed.ok(), absl::StrCat(Show(spec), " -> '", formatted,
                                       "' does not parse: ",
                                       parsed.status().ToString()));
  FUZZ_CHECK(SameSpec(spec, *parsed), absl::StrCat(Show(spec), " -> '",
                                                   formatted, "' -> ",
                                                   Show(*parsed)));
}

}  // namespace
}  // namespace shardq

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  shardq::CheckStringRoundTrip(input);
  shardq::CheckSpecRoundTrip(input);
  return 0;
}
