// Turns the works a user names into the slice plan of a queue: prefixes the
// names, measures each work (bytes of a file) and cuts slices. This is the
// I/O half of planning; the arithmetic is PlanSlices in src/core.
#ifndef SHARDQ_CLIENT_PLANNER_H_
#define SHARDQ_CLIENT_PLANNER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace shardq {

// The works with `prefix` before each path (after the "sqlite:" scheme of a
// table work), and patterns expanded: a directory becomes the regular files
// directly in it, and a path with * ? or [ that names no existing file
// becomes the files the glob matches (an item string with a range, such as
// "f.txt?start=0&end=9", is not a pattern); each expansion sorted by name.
// An s3://bucket/... work is expanded by listing the bucket
// (ListObjectsV2): a key pattern becomes the objects it matches (* and ?
// do not cross '/'), a name ending in '/' the objects directly under it.
// NOT_FOUND names a pattern that matches nothing or a directory with no
// files; INVALID_ARGUMENT an empty work name.
absl::StatusOr<std::vector<std::string>> ExpandWorks(const std::vector<std::string>& works,
                                                     const std::string& prefix);

// Expands the works (ExpandWorks), then every work must exist and be readable (NOT_FOUND / PERMISSION_DENIED name
// the path). INVALID_ARGUMENT for empty works or num_slices < 1, and for two
// works that read the same data (a name listed twice, two names of one file
// such as "f" and "./f" or a link, a pattern that also matches a file listed
// on its own, one object or table named twice): their records would be
// handed out twice in every epoch; and for a file or object whose name
// reads as an item of another work ("x?y=1.txt": work "x", parameter y).
// When every
// work is empty and slices were asked for, INVALID_ARGUMENT says so (a queue
// with nothing to hand out is a mistake, not an empty epoch). A GZIP/ZLIB
// compressed file (judged from its first bytes, see DetectCompression) is
// one whole item, its path with no range, and counts as one of num_slices;
// the other works share the rest by size (PlanSlices). An s3:// object is
// measured by its listing or a HEAD, and its items carry the ETag seen
// ("s3://b/k?etag=E&start=S&end=E"), so that readers refuse an object
// replaced after planning. Its first bytes are asked for (one request per
// object) only when num_slices is given: without it every work is one
// whole item, and a listed object that cannot be read is reported by its
// reader, not here.
absl::StatusOr<std::vector<std::string>> PlanWorks(
    const std::vector<std::string>& works, const std::string& prefix,
    std::optional<int64_t> num_slices);

}  // namespace shardq

#endif  // SHARDQ_CLIENT_PLANNER_H_
