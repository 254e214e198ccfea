#include "src/client/planner.h"

#include <dirent.h>
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <system_error>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "shardq/slice.h"
#include "src/core/slice_plan.h"
#include "src/io/compression.h"
#include "src/io/file.h"
#include "src/io/s3/s3_file.h"
#include "src/io/s3/s3_url.h"
#include "src/io/sqlite_table.h"
#include "src/log/log.h"

namespace shardq {
namespace {

// Rows of a table work, counted (planning cuts row ranges).
absl::StatusOr<int64_t> TableRows(const std::string& name) {
  absl::StatusOr<SliceSpec> spec = ParseItem(name);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<TableRef> ref = ParseTableRef(*spec);
  if (!ref.ok()) return ref.status();
  return CountTableRows(*ref);
}

// Objects named by an s3:// pattern, with the size and ETag their listing
// gave (so planning does not ask again), by name.
using ListedObjects = std::map<std::string, S3ObjectInfo>;

// Bytes of a file work, rows of a table work. A compressed file cannot be
// cut: it is one whole item (the path with no range) whatever num_slices
// is; its compression goes to *compression (kNone for the others). An
// object's ETag (from its listing, else a HEAD) is kept in *etag.
absl::StatusOr<SizedWork> MeasureWork(std::string name, const ListedObjects& listed,
                                      std::string* etag, FileCompression* compression) {
  *compression = FileCompression::kNone;
  SizedWork work;
  work.name = std::move(name);
  absl::StatusOr<int64_t> size;
  std::optional<S3ObjectInfo> object;
  if (IsS3Path(work.name)) {
    auto it = listed.find(work.name);
    absl::StatusOr<S3ObjectInfo> info =
        it != listed.end() ? it->second : S3Stat(work.name);
    if (!info.ok()) return info.status();
    size = info->size;
    *etag = info->etag;
    object = *std::move(info);
  } else {
    size = IsTableItem(work.name) ? TableRows(work.name) : FileSize(work.name);
  }
  if (!size.ok()) return size.status();
  work.size = *size;
  if (work.size == 0 && IsS3Path(work.name)) return work;  // nothing to sniff
  if (IsTableItem(work.name)) return work;
  // An object is sniffed as its listing described it: no request to open
  // it, and its first bytes are remembered for the readers of its slices.
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file =
      object.has_value() ? S3FileSystem::Default()->OpenListed(work.name, *object)
                         : FileSystem::Default()->Open(work.name);
  if (!file.ok()) return file.status();
  absl::StatusOr<FileCompression> detected = DetectCompression(**file);
  if (!detected.ok()) return detected.status();
  *compression = *detected;
  work.splittable = *compression == FileCompression::kNone;
  return work;
}

// How many works are measured at once. Measuring an object is a request
// (a sniff of its first bytes, a HEAD for a name that was not listed), so
// a queue over many objects would otherwise wait one round trip per
// object: 1,000 objects at 30 ms each is half a minute. Local files are
// measured at once too (a stat and a 12-byte read each).
constexpr size_t kMeasuredAtOnce = 16;

struct Measured {
  absl::StatusOr<SizedWork> work = absl::UnknownError("not measured");
  std::string etag;
  FileCompression compression = FileCompression::kNone;
};

// MeasureWork of every work, up to kMeasuredAtOnce at once; results in the
// order of `names`.
std::vector<Measured> MeasureWorks(const std::vector<std::string>& names,
                                   const ListedObjects& listed) {
  std::vector<Measured> out(names.size());
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  auto run = [&] {
    // After a failure the rest are left unmeasured: the first error in
    // the works' order is reported, and it lies before any unmeasured one.
    for (size_t i = next++; i < names.size() && !failed; i = next++) {
      Measured& m = out[i];
      m.work = MeasureWork(names[i], listed, &m.etag, &m.compression);
      if (!m.work.ok()) failed = true;
    }
  };
  const size_t threads = std::min(kMeasuredAtOnce, names.size());
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < threads; ++t) {
    try {
      helpers.emplace_back(run);
    } catch (const std::system_error&) {
      break;  // no more threads to be had: measure with those there are
    }
  }
  run();
  for (std::thread& t : helpers) t.join();
  return out;
}

// A pattern: * ? or [ in a path that is not an item string with a range or
// parameters ("f.txt?start=0&end=9" is a byte range, not a glob).
bool IsPattern(const std::string& path) {
  if (path.find_first_of("*?[") == std::string::npos) return false;
  absl::StatusOr<SliceSpec> spec = ParseItem(path);
  return !spec.ok() || (spec->whole() && spec->params.empty());
}

// The regular files directly in `dir` (not its subdirectories, not names
// starting with '.'), sorted. NOT_FOUND when there are none.
absl::StatusOr<std::vector<std::string>> FilesIn(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot list directory '", dir, "': ", std::strerror(errno)));
  }
  std::vector<std::string> files;
  const std::string base = absl::EndsWith(dir, "/") ? dir : dir + "/";
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string path = base + e->d_name;
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) files.push_back(std::move(path));
  }
  ::closedir(d);
  if (files.empty()) {
    return absl::NotFoundError(absl::StrCat("directory '", dir, "' holds no files to read"));
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The files a glob pattern matches, sorted. NOT_FOUND naming the pattern
// when it matches none.
absl::StatusOr<std::vector<std::string>> Glob(const std::string& pattern) {
  glob_t g;
  const int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> files;
  if (rc == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) {
      struct stat st;
      if (::stat(g.gl_pathv[i], &st) == 0 && S_ISREG(st.st_mode)) files.push_back(g.gl_pathv[i]);
    }
  }
  ::globfree(&g);
  if (rc == GLOB_ABORTED) {
    return absl::PermissionDeniedError(
        absl::StrCat("pattern '", pattern, "': a directory on its way cannot be read"));
  }
  if (files.empty()) {
    return absl::NotFoundError(absl::StrCat("pattern '", pattern, "' matches no file"));
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The objects an s3:// work names: a pattern's matches, a name ending in
// '/' the objects directly under it, else the name itself (a missing
// object is named by MeasureWork). Listed objects go to *listed.
absl::Status ExpandS3Work(const std::string& path, std::vector<std::string>* out,
                          ListedObjects* listed) {
  absl::StatusOr<SliceSpec> spec = ParseItem(path);
  const bool pattern = IsPattern(path);
  const bool directory = spec.ok() && spec->whole() && spec->params.empty() &&
                         absl::EndsWith(path, "/");
  if (!pattern && !directory) {
    out->push_back(path);
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<std::pair<std::string, S3ObjectInfo>>> objects =
      S3Glob(directory ? path + "*" : path);
  if (!objects.ok()) {
    // An empty listing says so in the directory's words; an HTTP answer
    // (no such bucket) keeps its URL and status.
    if (directory && absl::IsNotFound(objects.status()) &&
        !absl::StrContains(objects.status().message(), ": HTTP ")) {
      return absl::NotFoundError(
          absl::StrCat("'", path, "' holds no objects to read"));
    }
    return objects.status();
  }
  for (auto& [name, info] : *objects) {
    out->push_back(name);
    if (listed != nullptr) (*listed)[name] = std::move(info);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> Expand(const std::vector<std::string>& works,
                                                const std::string& prefix,
                                                ListedObjects* listed) {
  std::vector<std::string> out;
  for (const std::string& work : works) {
    if (work.empty()) {
      return absl::InvalidArgumentError("works contains an empty work name");
    }
    // The prefix goes before the path of a table work, not its scheme.
    constexpr absl::string_view kTable = "sqlite:";
    if (absl::StartsWith(work, kTable)) {
      out.push_back(absl::StrCat(kTable, prefix, work.substr(kTable.size())));
      continue;
    }
    const std::string path = prefix + work;
    if (IsS3Path(path)) {
      if (absl::Status st = ExpandS3Work(path, &out, listed); !st.ok()) return st;
      continue;
    }
    struct stat st;
    const bool exists = ::stat(path.c_str(), &st) == 0;
    absl::StatusOr<std::vector<std::string>> files;
    if (exists && S_ISDIR(st.st_mode)) {
      files = FilesIn(path);
    } else if (!exists && IsPattern(path)) {
      files = Glob(path);
    } else {
      out.push_back(path);  // a file, or a missing one MeasureWork names
      continue;
    }
    if (!files.ok()) return files.status();
    out.insert(out.end(), files->begin(), files->end());
  }
  return out;
}

// An s3:// work's items carry the ETag planning saw (etag=...), so that a
// reader refuses an object replaced since (CheckPlannedVersion).
absl::StatusOr<std::vector<std::string>> AddPlannedVersions(
    std::vector<std::string> items, const std::map<std::string, std::string>& etags) {
  if (etags.empty()) return items;
  for (std::string& item : items) {
    absl::StatusOr<SliceSpec> spec = ParseItem(item);
    if (!spec.ok()) return spec.status();
    auto it = etags.find(spec->work);
    if (it == etags.end() || it->second.empty()) continue;
    spec->params["etag"] = UriEncode(it->second, /*keep_slash=*/false);
    item = FormatItem(*spec);
  }
  return items;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandWorks(const std::vector<std::string>& works,
                                                     const std::string& prefix) {
  return Expand(works, prefix, nullptr);
}

absl::StatusOr<std::vector<std::string>> PlanWorks(
    const std::vector<std::string>& works, const std::string& prefix,
    std::optional<int64_t> num_slices) {
  if (works.empty()) {
    return absl::InvalidArgumentError("works is empty: give at least one work");
  }
  if (num_slices.has_value() && *num_slices < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_slices must be >= 1, got ", *num_slices));
  }
  ListedObjects listed;
  absl::StatusOr<std::vector<std::string>> expanded = Expand(works, prefix, &listed);
  if (!expanded.ok()) return expanded.status();
  std::vector<SizedWork> sized;
  sized.reserve(expanded->size());
  std::map<std::string, std::string> etags;
  int64_t total = 0;
  for (Measured& m : MeasureWorks(*expanded, listed)) {
    if (!m.work.ok()) return m.work.status();
    if (m.compression != FileCompression::kNone) {
      SHARDQ_LOG_WARN("'{}' is {}-compressed and cannot be cut: it is planned as one whole item",
                      m.work->name, std::string(CompressionName(m.compression)));
    }
    if (!m.etag.empty()) etags[m.work->name] = m.etag;
    total += m.work->size;
    sized.push_back(*std::move(m.work));
  }
  if (num_slices.has_value() && total == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "all ", expanded->size(), " works are empty: nothing to slice"));
  }
  absl::StatusOr<std::vector<std::string>> items = PlanSlices(sized, num_slices);
  if (!items.ok()) return items.status();
  return AddPlannedVersions(*std::move(items), etags);
}

}  // namespace shardq
