#include "src/core/item_table.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "shardq/slice.h"

namespace shardq {
namespace {

// A non-negative int64 written as StrCat writes it (no sign, no leading
// zero); -1 otherwise.
int64_t CanonicalNumber(absl::string_view digits) {
  if (digits.empty() || (digits.size() > 1 && digits[0] == '0')) return -1;
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
  }
  int64_t v = 0;
  return absl::SimpleAtoi(digits, &v) ? v : -1;
}

// Where "start=S&end=E" (canonical numbers, S <= E) begins at the end of
// `item`, or npos; sets `range`.
size_t CanonicalRangeSuffix(absl::string_view item, ItemRange* range) {
  const size_t e = item.rfind("&end=");
  if (e == absl::string_view::npos) return absl::string_view::npos;
  const size_t s = item.rfind("start=", e);
  if (s == absl::string_view::npos || s == 0) return absl::string_view::npos;
  const int64_t start = CanonicalNumber(item.substr(s + 6, e - s - 6));
  const int64_t end = CanonicalNumber(item.substr(e + 5));
  if (start < 0 || end < 0 || start > end) return absl::string_view::npos;
  *range = ItemRange{start, end};
  return s;
}

void AppendRange(ItemRange range, char sep, std::string* out) {
  if (range.start >= 0) {
    out->push_back(sep);
    absl::StrAppend(out, "start=", range.start);
    sep = '&';
  }
  if (range.end >= 0) {
    out->push_back(sep);
    absl::StrAppend(out, "end=", range.end);
  }
}

char SepOf(ItemTable::WorkKind kind) { return kind == ItemTable::WorkKind::kParams ? '&' : '?'; }

}  // namespace

std::shared_ptr<const ItemTable> ItemTable::FromStrings(const std::vector<std::string>& items) {
  auto table = std::make_shared<ItemTable>();
  table->work_.reserve(items.size());
  table->start_.reserve(items.size());
  table->end_.reserve(items.size());
  // Keys view the input strings (each work's text is a prefix of the
  // first item of that work), which outlive this call.
  absl::flat_hash_map<std::pair<absl::string_view, int>, uint32_t> index;
  for (const std::string& item : items) {
    absl::string_view text = item;
    WorkKind kind = WorkKind::kQuery;
    ItemRange range;
    const size_t suffix = CanonicalRangeSuffix(item, &range);
    if (suffix != absl::string_view::npos && item[suffix - 1] == '?') {
      // "work?start=S&end=E" with no other parameter: ParseItem's work is
      // everything before the last '?', which is this one.
      text = text.substr(0, suffix - 1);
    } else if (item.find('?') == std::string::npos) {
      range = ItemRange{};  // a whole work
    } else {
      // The general case: what FormatItem makes of the parse, or literal.
      range = ItemRange{};
      absl::StatusOr<SliceSpec> spec = ParseItem(item);
      if (!spec.ok()) {
        kind = WorkKind::kUnparsed;
      } else {
        if (spec->start.has_value() && spec->end.has_value()) {
          range = ItemRange{*spec->start, *spec->end};
        }
        const bool both_or_none = spec->start.has_value() == spec->end.has_value();
        if (both_or_none && FormatItem(*spec) == item) {
          // Canonical: the work text is the string without its range.
          kind = spec->params.empty() ? WorkKind::kQuery : WorkKind::kParams;
          if (range.full()) text = text.substr(0, CanonicalRangeSuffix(item, &range) - 1);
        } else {
          kind = WorkKind::kLiteral;
        }
      }
    }
    auto [it, inserted] = index.try_emplace(std::make_pair(text, static_cast<int>(kind)),
                                            static_cast<uint32_t>(table->works_.size()));
    if (inserted) table->works_.push_back(Work{std::string(text), kind});
    table->work_.push_back(it->second);
    table->start_.push_back(range.start);
    table->end_.push_back(range.end);
  }
  table->works_.shrink_to_fit();
  table->SetWorkSizes();
  return table;
}

absl::StatusOr<std::shared_ptr<const ItemTable>> ItemTable::FromProto(
    const journal::ItemTable& proto, absl::string_view what) {
  auto bad = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat(what, ": item table: ", why));
  };
  if (static_cast<int>(proto.work_kinds().size()) != proto.works_size()) {
    return bad(absl::StrCat(proto.works_size(), " works but ", proto.work_kinds().size(),
                            " kinds"));
  }
  const int n = proto.item_work_size();
  if (proto.item_start_delta_size() != n || proto.item_length_size() != n) {
    return bad(absl::StrCat(n, " items, ", proto.item_start_delta_size(), " starts and ",
                            proto.item_length_size(), " lengths"));
  }
  auto table = std::make_shared<ItemTable>();
  table->works_.reserve(static_cast<size_t>(proto.works_size()));
  for (int w = 0; w < proto.works_size(); ++w) {
    const auto kind = static_cast<uint8_t>(proto.work_kinds()[static_cast<size_t>(w)]);
    if (kind > static_cast<uint8_t>(WorkKind::kUnparsed)) {
      return bad(absl::StrCat("work ", w, " has unknown kind ", kind));
    }
    table->works_.push_back(Work{proto.works(w), static_cast<WorkKind>(kind)});
  }
  table->work_.reserve(static_cast<size_t>(n));
  table->start_.reserve(static_cast<size_t>(n));
  table->end_.reserve(static_cast<size_t>(n));
  int64_t previous_end = 0;
  for (int i = 0; i < n; ++i) {
    const uint32_t work = proto.item_work(i);
    const uint64_t length = proto.item_length(i);
    const int64_t delta = proto.item_start_delta(i);
    if (work >= table->works_.size() || length > uint64_t{1} << 63 ||
        (length > 0 && (delta > INT64_MAX - previous_end || delta < -previous_end))) {
      return bad(absl::StrCat("item ", i, " names work ", work, " of ",
                              table->works_.size(), " with length ", length, " at ", delta));
    }
    ItemRange range;
    if (length > 0) {
      range.start = previous_end + delta;
      if (length - 1 > static_cast<uint64_t>(INT64_MAX - range.start)) {
        return bad(absl::StrCat("item ", i, " ends past the largest offset"));
      }
      range.end = range.start + static_cast<int64_t>(length - 1);
      if (range.start < 0 || range.end < range.start) {
        return bad(absl::StrCat("item ", i, " has range [", range.start, ", ", range.end, ")"));
      }
      previous_end = range.end;
    }
    table->work_.push_back(work);
    table->start_.push_back(range.start);
    table->end_.push_back(range.end);
  }
  table->SetWorkSizes();
  return std::shared_ptr<const ItemTable>(std::move(table));
}

void ItemTable::SetWorkSizes() {
  // Per work: the lowest start and highest end of its items, or -2 once an
  // item without a full range (or of a literal kind) is seen.
  std::vector<int64_t> lowest(works_.size(), INT64_MAX);
  work_size_.assign(works_.size(), -1);
  for (size_t i = 0; i < work_.size(); ++i) {
    const uint32_t w = work_[i];
    if (lowest[w] == -2) continue;
    const WorkKind kind = works_[w].kind;
    if ((kind != WorkKind::kQuery && kind != WorkKind::kParams) || start_[i] < 0 ||
        end_[i] < 0) {
      lowest[w] = -2;
      continue;
    }
    lowest[w] = std::min(lowest[w], start_[i]);
    work_size_[w] = std::max(work_size_[w], end_[i]);
  }
  for (size_t w = 0; w < works_.size(); ++w) {
    if (lowest[w] != 0) work_size_[w] = -1;
  }
}

void ItemTable::ToProto(journal::ItemTable* out) const {
  std::string kinds;
  kinds.reserve(works_.size());
  out->mutable_works()->Reserve(static_cast<int>(works_.size()));
  for (const Work& w : works_) {
    out->add_works(w.text);
    kinds.push_back(static_cast<char>(w.kind));
  }
  out->set_work_kinds(std::move(kinds));
  const int n = static_cast<int>(work_.size());
  out->mutable_item_work()->Reserve(n);
  out->mutable_item_start_delta()->Reserve(n);
  out->mutable_item_length()->Reserve(n);
  int64_t previous_end = 0;
  for (size_t i = 0; i < work_.size(); ++i) {
    out->add_item_work(work_[i]);
    if (start_[i] >= 0 && end_[i] >= 0) {
      out->add_item_start_delta(start_[i] - previous_end);
      out->add_item_length(static_cast<uint64_t>(end_[i] - start_[i]) + 1);
      previous_end = end_[i];
    } else {
      out->add_item_start_delta(0);
      out->add_item_length(0);
    }
  }
}

std::string ItemTable::Render(int64_t index) const {
  const Work& w = works_[work_[Idx(index)]];
  if (w.kind == WorkKind::kLiteral || w.kind == WorkKind::kUnparsed) return w.text;
  std::string out;
  out.reserve(w.text.size() + 48);
  out = w.text;
  AppendRange(Range(index), SepOf(w.kind), &out);
  return out;
}

bool ItemTable::Equals(int64_t index, absl::string_view item) const {
  const Work& w = works_[work_[Idx(index)]];
  const ItemRange own = Range(index);
  if (w.kind == WorkKind::kLiteral || w.kind == WorkKind::kUnparsed || !own.full()) {
    return item == w.text;
  }
  ItemRange range;
  const size_t suffix = CanonicalRangeSuffix(item, &range);
  return suffix == w.text.size() + 1 && item[suffix - 1] == SepOf(w.kind) &&
         item.substr(0, w.text.size()) == w.text && range == own;
}

std::vector<std::string> ItemTable::Strings() const {
  std::vector<std::string> out;
  out.reserve(work_.size());
  for (int64_t i = 0; i < size(); ++i) out.push_back(Render(i));
  return out;
}

std::string ItemTable::RenderRange(int64_t index, ItemRange range) const {
  if (range == Range(index)) return Render(index);
  const Work& w = works_[work_[Idx(index)]];
  switch (w.kind) {
    case WorkKind::kUnparsed:
      return w.text;  // cannot be narrowed
    case WorkKind::kLiteral: {
      absl::StatusOr<SliceSpec> spec = ParseItem(w.text);
      if (!spec.ok()) return w.text;
      spec->start.reset();
      spec->end.reset();
      if (range.start >= 0) spec->start = range.start;
      if (range.end >= 0) spec->end = range.end;
      return FormatItem(*spec);
    }
    default: {
      std::string out = w.text;
      AppendRange(range, SepOf(w.kind), &out);
      return out;
    }
  }
}

absl::StatusOr<ItemRange> ItemTable::ParseRange(absl::string_view item) const {
  absl::StatusOr<SliceSpec> spec = ParseItem(item);
  if (!spec.ok()) return spec.status();
  return ItemRange{spec->start.value_or(-1), spec->end.value_or(-1)};
}

size_t ItemTable::BytesUsed() const {
  size_t bytes = works_.capacity() * sizeof(Work);
  for (const Work& w : works_) {
    if (w.text.capacity() > sizeof(std::string) - 1) bytes += w.text.capacity() + 1;
  }
  return bytes + work_size_.capacity() * sizeof(int64_t) + work_.capacity() * sizeof(uint32_t) +
         (start_.capacity() + end_.capacity()) * sizeof(int64_t);
}

}  // namespace shardq
