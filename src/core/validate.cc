#include "src/core/validate.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "shardq/slice.h"

namespace shardq {
namespace {

// Longest prefix of a bad value quoted in an error message.
constexpr size_t kQuotedBytes = 80;

std::string Quote(absl::string_view value) {
  const bool cut = value.size() > kQuotedBytes;
  return absl::StrCat("\"", absl::CHexEscape(value.substr(0, kQuotedBytes)),
                      cut ? "...\"" : "\"");
}

// The first control character of `value`, if any.
std::optional<size_t> ControlCharacter(absl::string_view value) {
  for (size_t i = 0; i < value.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    if (c < 0x20 || c == 0x7f) return i;
  }
  return std::nullopt;
}

std::string ControlCharacterAt(absl::string_view value, size_t at) {
  return absl::StrCat("control character 0x",
                      absl::Hex(static_cast<unsigned char>(value[at]), absl::kZeroPad2),
                      " at byte ", at);
}

// A [start, end) range of item units; end == max for "to the end of the work".
struct Range {
  int64_t start = 0;
  int64_t end = std::numeric_limits<int64_t>::max();
  std::string text;  // the item string it came from, for messages
};

Range RangeOf(const SliceSpec& spec, const std::string& text) {
  Range r;
  r.start = spec.start.value_or(0);
  if (spec.end.has_value()) r.end = *spec.end;
  r.text = text;
  return r;
}

}  // namespace

absl::Status ValidateName(absl::string_view field, absl::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, " must have 1 to ", kMaxNameBytes,
                                                   " bytes, got ", name.size(),
                                                   name.empty() ? "" : ": ",
                                                   name.empty() ? "" : Quote(name)));
  }
  if (std::optional<size_t> at = ControlCharacter(name)) {
    return absl::InvalidArgumentError(absl::StrCat(field, " ", Quote(name), " contains a ",
                                                   ControlCharacterAt(name, *at)));
  }
  return absl::OkStatus();
}

absl::Status ValidateItemString(absl::string_view queue, size_t index, absl::string_view item) {
  if (item.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("queue '", absl::CHexEscape(queue), "': item ", index, " of the plan is empty"));
  }
  if (std::optional<size_t> at = ControlCharacter(item)) {
    return absl::InvalidArgumentError(absl::StrCat("queue '", absl::CHexEscape(queue), "': item ",
                                                   index, " of the plan ", Quote(item),
                                                   " contains a ", ControlCharacterAt(item, *at)));
  }
  return absl::OkStatus();
}

absl::Status ValidateCheckpointResiduals(const journal::Checkpoint& checkpoint) {
  const v1::QueueConfig& config = checkpoint.config();
  const std::string what = absl::StrCat("checkpoint of queue '",
                                        absl::CHexEscape(config.name()), "'");
  if (checkpoint.residual_size() > kMaxResiduals) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", checkpoint.residual_size(),
                                                   " residual ranges; the limit is ",
                                                   kMaxResiduals));
  }
  const int64_t num_items = config.items_size();
  // Per (epoch, planned item): the ranges listed for it.
  std::map<std::pair<int64_t, int64_t>, std::vector<Range>> ranges;
  std::map<int64_t, std::optional<SliceSpec>> planned;  // parsed once per item
  for (const journal::Ref& r : checkpoint.residual()) {
    const std::string item_name = absl::StrCat("residual of epoch ", r.epoch(), " item ",
                                               r.index());
    if (r.epoch() < 0 || r.epoch() >= config.num_epochs() || r.index() < 0 ||
        r.index() >= num_items) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": ", item_name, " is outside the plan (", num_items, " items, ",
          config.num_epochs(), " epochs)"));
    }
    const std::string& plan_item = config.items(static_cast<int>(r.index()));
    auto [it, inserted] = planned.try_emplace(r.index());
    if (inserted) {
      absl::StatusOr<SliceSpec> spec = ParseItem(plan_item);
      if (spec.ok()) it->second = *std::move(spec);
    }
    const std::optional<SliceSpec>& plan = it->second;
    std::vector<Range>& listed = ranges[{r.epoch(), r.index()}];
    if (static_cast<int64_t>(listed.size()) >= kMaxResidualsPerItem) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": more than ", kMaxResidualsPerItem, " residual ranges for epoch ", r.epoch(),
          " item ", r.index(), " (", Quote(plan_item), ")"));
    }
    const std::string& text = r.item_override().empty() ? plan_item : r.item_override();
    if (!plan.has_value()) {
      // A planned item without a readable range can only be read whole.
      if (text != plan_item) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": ", item_name, " is ", Quote(text), ", not the planned item ",
            Quote(plan_item)));
      }
      listed.push_back(Range{0, std::numeric_limits<int64_t>::max(), text});
      continue;
    }
    absl::StatusOr<SliceSpec> spec = ParseItem(text);
    if (!spec.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": ", item_name, ": ", spec.status().message()));
    }
    if (spec->work != plan->work || spec->params != plan->params) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": ", item_name, " is ", Quote(text), ", which does not read the planned item ",
          Quote(plan_item)));
    }
    const Range residual = RangeOf(*spec, text);
    const Range whole = RangeOf(*plan, plan_item);
    if (residual.start < whole.start || residual.end > whole.end) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": ", item_name, " is ", Quote(text), ", outside the planned item ",
          Quote(plan_item)));
    }
    listed.push_back(residual);
  }
  for (auto& [ref, listed] : ranges) {
    std::sort(listed.begin(), listed.end(),
              [](const Range& a, const Range& b) { return a.start < b.start; });
    const Range* previous = nullptr;
    for (const Range& r : listed) {
      if (r.start == r.end) continue;  // read to its end: overlaps nothing
      if (previous != nullptr && previous->end > r.start) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": residual ranges of epoch ", ref.first, " item ", ref.second, " overlap: ",
            Quote(previous->text), " and ", Quote(r.text)));
      }
      previous = &r;
    }
  }
  return absl::OkStatus();
}

}  // namespace shardq
