// The two XML documents shardq reads from S3: a ListObjectsV2 page and an
// error answer. A small scanner for their flat shape, not a general XML
// parser. Pure, thread-safe.
#ifndef SHARDQ_IO_S3_S3_XML_H_
#define SHARDQ_IO_S3_S3_XML_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardq {

// An object as a listing or a HEAD describes it.
struct S3ObjectInfo {
  std::string key;
  int64_t size = 0;
  std::string etag;  // without the surrounding quotes
};

struct S3ListPage {
  std::vector<S3ObjectInfo> objects;
  // Set when the listing goes on: ask again with this token.
  std::string next_continuation_token;
};

// Parses a ListObjectsV2 answer. DATA_LOSS naming `url` when it is not one
// (no ListBucketResult, a Contents without Key or Size, a truncated page
// without a continuation token).
absl::StatusOr<S3ListPage> ParseListPage(absl::string_view xml,
                                         absl::string_view url);

// "Code: Message" of an <Error> answer, or "" when the body is not one.
std::string ParseErrorSummary(absl::string_view xml);

// Replaces XML's five named entities and numeric character references.
std::string XmlUnescape(absl::string_view text);

// An ETag header or element value without its quotes (and a W/ prefix).
std::string TrimETag(absl::string_view etag);

}  // namespace shardq

#endif  // SHARDQ_IO_S3_S3_XML_H_
