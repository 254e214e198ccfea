#include "src/io/s3/s3_xml.h"

#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace shardq {
namespace {

// The text between <tag> and </tag> at or after `from` within `xml`;
// `*found` says whether there was one. `*next` is set after the close tag.
absl::string_view Element(absl::string_view xml, absl::string_view tag,
                          size_t from, bool* found, size_t* next = nullptr) {
  const std::string open = absl::StrCat("<", tag, ">");
  const std::string close = absl::StrCat("</", tag, ">");
  *found = false;
  const size_t begin = xml.find(open, from);
  if (begin == absl::string_view::npos) return {};
  const size_t content = begin + open.size();
  const size_t end = xml.find(close, content);
  if (end == absl::string_view::npos) return {};
  *found = true;
  if (next != nullptr) *next = end + close.size();
  return xml.substr(content, end - content);
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

std::string XmlUnescape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const size_t amp = text.find('&', i);
    if (amp == absl::string_view::npos) {
      absl::StrAppend(&out, text.substr(i));
      break;
    }
    absl::StrAppend(&out, text.substr(i, amp - i));
    const size_t semi = text.find(';', amp);
    if (semi == absl::string_view::npos) {
      absl::StrAppend(&out, text.substr(amp));
      break;
    }
    const absl::string_view name = text.substr(amp + 1, semi - amp - 1);
    bool known = true;
    if (name == "amp") {
      out.push_back('&');
    } else if (name == "lt") {
      out.push_back('<');
    } else if (name == "gt") {
      out.push_back('>');
    } else if (name == "quot") {
      out.push_back('"');
    } else if (name == "apos") {
      out.push_back('\'');
    } else if (absl::StartsWith(name, "#")) {
      const std::string digits(name.substr(1));
      char* end = nullptr;
      const bool hex = !digits.empty() && (digits[0] == 'x' || digits[0] == 'X');
      const unsigned long cp = std::strtoul(digits.c_str() + (hex ? 1 : 0), &end, hex ? 16 : 10);
      known = !digits.empty() && end != nullptr && *end == '\0' && cp <= 0x10FFFF;
      if (known) AppendUtf8(static_cast<uint32_t>(cp), &out);
    } else {
      known = false;
    }
    if (!known) absl::StrAppend(&out, text.substr(amp, semi - amp + 1));
    i = semi + 1;
  }
  return out;
}

std::string TrimETag(absl::string_view etag) {
  etag = absl::StripAsciiWhitespace(etag);
  if (absl::StartsWith(etag, "W/")) etag.remove_prefix(2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') {
    etag = etag.substr(1, etag.size() - 2);
  }
  return std::string(etag);
}

absl::StatusOr<S3ListPage> ParseListPage(absl::string_view xml,
                                         absl::string_view url) {
  bool found = false;
  if (xml.find("<ListBucketResult") == absl::string_view::npos) {
    return absl::DataLossError(absl::StrCat(
        "listing ", url, ": the answer is not a ListBucketResult: '",
        xml.substr(0, 200), "'"));
  }
  S3ListPage page;
  size_t at = 0;
  while (true) {
    size_t next = 0;
    const absl::string_view contents = Element(xml, "Contents", at, &found, &next);
    if (!found) break;
    at = next;
    S3ObjectInfo info;
    bool has_key = false;
    bool has_size = false;
    info.key = XmlUnescape(Element(contents, "Key", 0, &has_key));
    const absl::string_view size = Element(contents, "Size", 0, &has_size);
    if (!has_key || !has_size || !absl::SimpleAtoi(size, &info.size) ||
        info.size < 0) {
      return absl::DataLossError(absl::StrCat(
          "listing ", url, ": an entry without a key or a size: '",
          contents.substr(0, 200), "'"));
    }
    bool has_etag = false;
    info.etag = TrimETag(XmlUnescape(Element(contents, "ETag", 0, &has_etag)));
    page.objects.push_back(std::move(info));
  }
  const absl::string_view truncated = Element(xml, "IsTruncated", 0, &found);
  if (found && truncated == "true") {
    page.next_continuation_token =
        XmlUnescape(Element(xml, "NextContinuationToken", 0, &found));
    if (page.next_continuation_token.empty()) {
      return absl::DataLossError(absl::StrCat(
          "listing ", url, ": a truncated page without a NextContinuationToken"));
    }
  }
  return page;
}

std::string ParseErrorSummary(absl::string_view xml) {
  bool in_error = false;
  const absl::string_view error = Element(xml, "Error", 0, &in_error);
  if (!in_error) return "";
  bool has_code = false;
  bool has_message = false;
  std::string code = XmlUnescape(Element(error, "Code", 0, &has_code));
  std::string message = XmlUnescape(Element(error, "Message", 0, &has_message));
  if (!has_code) return message;
  if (!has_message || message.empty()) return code;
  return absl::StrCat(code, ": ", message);
}

}  // namespace shardq
