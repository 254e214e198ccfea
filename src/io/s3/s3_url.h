// s3://bucket/key names: parsing, the URI encoding of SigV4 requests, and
// key patterns (globs). Pure functions, thread-safe.
#ifndef SHARDQ_IO_S3_S3_URL_H_
#define SHARDQ_IO_S3_S3_URL_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardq {

inline constexpr absl::string_view kS3Scheme = "s3://";

// An object (or, for a pattern, a key pattern) in a bucket.
struct S3Url {
  std::string bucket;
  std::string key;  // no leading '/'; may be empty for a bucket URL

  // "s3://bucket/key"
  std::string ToString() const;
};

// True when `path` names an object in S3-compatible storage ("s3://...").
bool IsS3Path(absl::string_view path);

// Parses "s3://bucket/key". INVALID_ARGUMENT naming the URL when it does
// not start with s3://, the bucket is empty or not a valid bucket name
// (3-63 of [a-z0-9.-]), or the key is empty (unless allow_empty_key).
absl::StatusOr<S3Url> ParseS3Url(absl::string_view url,
                                 bool allow_empty_key = false);

// SigV4's URI encoding (RFC 3986 unreserved characters kept, every other
// byte %XX in upper-case hex); '/' is kept when keep_slash (object paths).
std::string UriEncode(absl::string_view s, bool keep_slash);

// True when `key` holds * ? or [ (a pattern to list and match).
bool IsKeyPattern(absl::string_view key);

// The literal part of a key pattern before its first * ? or [ (the prefix
// a listing asks for).
std::string PatternListPrefix(absl::string_view key_pattern);

// Shell-style match of a whole key: * and ? do not match '/', [...] is a
// set (fnmatch with FNM_PATHNAME).
bool KeyMatches(absl::string_view key_pattern, absl::string_view key);

}  // namespace shardq

#endif  // SHARDQ_IO_S3_S3_URL_H_
