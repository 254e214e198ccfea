#include "src/io/s3/s3_url.h"

#include <fnmatch.h>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace shardq {
namespace {

bool ValidBucket(absl::string_view bucket) {
  if (bucket.size() < 3 || bucket.size() > 63) return false;
  for (char c : bucket) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::string S3Url::ToString() const {
  return absl::StrCat(kS3Scheme, bucket, "/", key);
}

bool IsS3Path(absl::string_view path) {
  return absl::StartsWith(path, kS3Scheme);
}

absl::StatusOr<S3Url> ParseS3Url(absl::string_view url, bool allow_empty_key) {
  if (!IsS3Path(url)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", url, "' is not an s3://bucket/key URL"));
  }
  absl::string_view rest = url.substr(kS3Scheme.size());
  const size_t slash = rest.find('/');
  S3Url out;
  out.bucket = std::string(rest.substr(0, slash));
  if (slash != absl::string_view::npos) {
    out.key = std::string(rest.substr(slash + 1));
  }
  if (!ValidBucket(out.bucket)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", url, "': '", out.bucket,
        "' is not a bucket name (3 to 63 characters of a-z 0-9 . -)"));
  }
  if (out.key.empty() && !allow_empty_key) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", url, "' names a bucket, not an object (s3://",
                     out.bucket, "/KEY)"));
  }
  return out;
}

std::string UriEncode(absl::string_view s, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '_' ||
                            c == '.' || c == '~';
    if (unreserved || (keep_slash && c == '/')) {
      out.push_back(c);
    } else {
      const unsigned char b = static_cast<unsigned char>(c);
      out.push_back('%');
      out.push_back(kHex[b >> 4]);
      out.push_back(kHex[b & 15]);
    }
  }
  return out;
}

bool IsKeyPattern(absl::string_view key) {
  return key.find_first_of("*?[") != absl::string_view::npos;
}

std::string PatternListPrefix(absl::string_view key_pattern) {
  return std::string(key_pattern.substr(0, key_pattern.find_first_of("*?[")));
}

bool KeyMatches(absl::string_view key_pattern, absl::string_view key) {
  const std::string pattern(key_pattern);
  const std::string name(key);
  return ::fnmatch(pattern.c_str(), name.c_str(), FNM_PATHNAME) == 0;
}

}  // namespace shardq
