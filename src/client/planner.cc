#include "src/client/planner.h"

#include <dirent.h>
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
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
// object's ETag (from its listing, else a HEAD) is kept in *etag. A local
// file is sniffed for its compression here (a 12-byte read); an object
// by SniffObject, when slices are asked for (*sniffed says which).
absl::StatusOr<SizedWork> MeasureWork(std::string name, const ListedObjects& listed,
                                      std::string* etag, FileCompression* compression,
                                      std::optional<S3ObjectInfo>* object, bool* sniffed) {
  *compression = FileCompression::kNone;
  *sniffed = false;
  SizedWork work;
  work.name = std::move(name);
  absl::StatusOr<int64_t> size;
  if (IsS3Path(work.name)) {
    auto it = listed.find(work.name);
    absl::StatusOr<S3ObjectInfo> info =
        it != listed.end() ? it->second : S3Stat(work.name);
    if (!info.ok()) return info.status();
    work.size = info->size;
    *etag = info->etag;
    *object = *std::move(info);
    return work;
  }
  size = IsTableItem(work.name) ? TableRows(work.name) : FileSize(work.name);
  if (!size.ok()) return size.status();
  work.size = *size;
  if (IsTableItem(work.name)) return work;
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file =
      FileSystem::Default()->Open(work.name);
  if (!file.ok()) return file.status();
  absl::StatusOr<FileCompression> detected = DetectCompression(**file);
  if (!detected.ok()) return detected.status();
  *compression = *detected;
  *sniffed = true;
  work.splittable = *compression == FileCompression::kNone;
  return work;
}

// The compression of an object to be sliced, from its first bytes
// (one request: a sniff). It is opened as its listing or HEAD described
// it, and the bytes are remembered for the readers of its slices.
absl::StatusOr<FileCompression> SniffObject(const std::string& name,
                                            const S3ObjectInfo& object) {
  if (object.size == 0) return FileCompression::kNone;  // nothing to sniff
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file =
      S3FileSystem::Default()->OpenListed(name, object);
  if (!file.ok()) return file.status();
  return DetectCompression(**file);
}

// How many works are measured (or objects sniffed) at once. Measuring an
// object is a request (a HEAD for a name that was not listed, a sniff of
// its first bytes), so a queue over many objects would otherwise wait one
// round trip per object: 1,000 objects at 30 ms each is half a minute.
// Local files are measured at once too (a stat and a 12-byte read each).
constexpr size_t kMeasuredAtOnce = 16;

// Runs run_one(i) for i in [0, n), up to kMeasuredAtOnce at once; once one
// returns false, the indices not yet started are left (the first failure
// in index order lies before any of them).
void ForEachAtOnce(size_t n, const std::function<bool(size_t)>& run_one) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  auto run = [&] {
    for (size_t i = next++; i < n && !failed; i = next++) {
      if (!run_one(i)) failed = true;
    }
  };
  const size_t threads = std::min(kMeasuredAtOnce, n);
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < threads; ++t) {
    try {
      helpers.emplace_back(run);
    } catch (const std::system_error&) {
      break;  // no more threads to be had: go on with those there are
    }
  }
  run();
  for (std::thread& t : helpers) t.join();
}

// What a work reads, the same for every name of it: a local file by its
// device and inode (so "a.txt", "./a.txt", a link to it and a pattern that
// matches it are one), an object by its bucket and key, a table by its
// database file and table name. A work that cannot be looked at is its own
// name (measuring it reports what is wrong).
std::string WorkIdentity(const std::string& name) {
  if (IsS3Path(name)) {
    absl::StatusOr<S3Url> url = ParseS3Url(name);
    return url.ok() ? url->ToString() : name;
  }
  std::string path = name;
  std::string table;
  if (IsTableItem(name)) {
    absl::StatusOr<SliceSpec> spec = ParseItem(name);
    if (!spec.ok()) return name;
    absl::StatusOr<TableRef> ref = ParseTableRef(*spec);
    if (!ref.ok()) return name;
    path = ref->db_path;
    table = ref->table;
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return name;
  return absl::StrCat("file ", st.st_dev, ":", st.st_ino, table.empty() ? "" : " table ", table);
}

struct Measured {
  absl::StatusOr<SizedWork> work = absl::UnknownError("not measured");
  std::string etag;
  FileCompression compression = FileCompression::kNone;
  std::optional<S3ObjectInfo> object;  // for an s3:// work
  bool sniffed = false;                // compression known
  std::string identity;                // WorkIdentity, once measured
};

// MeasureWork of every work, up to kMeasuredAtOnce at once; results in the
// order of `names`.
std::vector<Measured> MeasureWorks(const std::vector<std::string>& names,
                                   const ListedObjects& listed) {
  std::vector<Measured> out(names.size());
  ForEachAtOnce(names.size(), [&](size_t i) {
    Measured& m = out[i];
    m.work = MeasureWork(names[i], listed, &m.etag, &m.compression, &m.object, &m.sniffed);
    if (m.work.ok()) m.identity = WorkIdentity(names[i]);  // a stat: here, in parallel
    return m.work.ok();
  });
  return out;
}

// Sniffs every object not sniffed yet, up to kMeasuredAtOnce at once: a
// compressed one cannot be cut, and becomes one whole item. Errors: the
// first sniff's, in work order.
absl::Status SniffObjects(std::vector<Measured>* measured, std::vector<SizedWork>* sized) {
  std::vector<size_t> todo;
  for (size_t i = 0; i < measured->size(); ++i) {
    if (!(*measured)[i].sniffed) todo.push_back(i);
  }
  std::vector<absl::StatusOr<FileCompression>> found(todo.size(),
                                                     absl::UnknownError("not sniffed"));
  ForEachAtOnce(todo.size(), [&](size_t k) {
    found[k] = SniffObject((*sized)[todo[k]].name, *(*measured)[todo[k]].object);
    return found[k].ok();
  });
  for (size_t k = 0; k < todo.size(); ++k) {
    if (!found[k].ok()) return found[k].status();
    Measured& m = (*measured)[todo[k]];
    m.sniffed = true;
    m.compression = *found[k];
    (*sized)[todo[k]].splittable = m.compression == FileCompression::kNone;
  }
  return absl::OkStatus();
}

// INVALID_ARGUMENT when two of the (expanded) works read the same data: a
// queue holding both would hand out its records twice in every epoch with
// nothing to say so (a name listed twice, "f" and "./f", a pattern that
// also matches a file listed on its own).
absl::Status RefuseRepeatedWorks(const std::vector<Measured>& measured,
                                 const std::vector<SizedWork>& works) {
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < works.size(); ++i) {
    const auto [it, first] = seen.emplace(measured[i].identity, i);
    if (first) continue;
    const std::string& earlier = works[it->second].name;
    const std::string what =
        earlier == works[i].name
            ? absl::StrCat("work '", earlier, "' is listed twice")
            : absl::StrCat("works '", earlier, "' and '", works[i].name,
                           "' are the same ", IsS3Path(earlier) ? "object"
                                              : IsTableItem(earlier) ? "table"
                                                                     : "file");
    return absl::InvalidArgumentError(absl::StrCat(
        what, " (after patterns and directories are expanded and the prefix "
              "is added): a queue would hand out its records twice in every "
              "epoch; name each work once (num_epochs repeats the data)"));
  }
  return absl::OkStatus();
}

// INVALID_ARGUMENT for a file or object whose name reads as an item string
// of another work: "x?y=1.txt" is work "x" with the parameter y, and
// "f?start=0&end=9" a range of "f", so every reader would read that other
// work instead. (A table's "sqlite:DB?table=T" carries its own parameters.)
absl::Status RefuseNamesThatReadAsItems(const std::vector<SizedWork>& works) {
  for (const SizedWork& w : works) {
    if (IsTableItem(w.name)) continue;
    absl::StatusOr<SliceSpec> spec = ParseItem(w.name);
    if (!spec.ok() || (spec->work == w.name && spec->whole() && spec->params.empty())) {
      continue;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "work '", w.name, "' reads as an item of work '", spec->work,
        "' (the '?' after it starts parameters): every reader would read '",
        spec->work, "' instead; rename it so that no '?' is followed by key=value pairs"));
  }
  return absl::OkStatus();
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
  std::vector<Measured> measured = MeasureWorks(*expanded, listed);
  for (Measured& m : measured) {
    if (!m.work.ok()) return m.work.status();
    if (!m.etag.empty()) etags[m.work->name] = m.etag;
    total += m.work->size;
    sized.push_back(*m.work);
  }
  if (absl::Status s = RefuseNamesThatReadAsItems(sized); !s.ok()) return s;
  if (absl::Status s = RefuseRepeatedWorks(measured, sized); !s.ok()) return s;
  if (num_slices.has_value() && total == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "all ", expanded->size(), " works are empty: nothing to slice"));
  }
  // Without num_slices every work is one whole item, whatever its
  // compression: an object's first bytes are then not asked for (one
  // request per object); its reader judges them at the item's start.
  if (num_slices.has_value()) {
    if (absl::Status s = SniffObjects(&measured, &sized); !s.ok()) return s;
  }
  // Said only when slices were asked for: without num_slices every work
  // is one whole item anyway.
  for (size_t i = 0; num_slices.has_value() && i < measured.size(); ++i) {
    const FileCompression compression = measured[i].compression;
    if (compression == FileCompression::kNone) continue;
    SHARDQ_LOG_WARN("'{}' is {}-compressed and cannot be cut: it is planned as one whole item",
                    sized[i].name, std::string(CompressionName(compression)));
  }
  absl::StatusOr<std::vector<std::string>> items = PlanSlices(sized, num_slices);
  if (!items.ok()) return items.status();
  return AddPlannedVersions(*std::move(items), etags);
}

}  // namespace shardq
