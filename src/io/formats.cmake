# Record formats (issue 5): CRC32C, TFRecord files and byte-range slices,
# GZIP/ZLIB compressed TFRecord files, SQLite tables, and their readers.
# Included from src/io/CMakeLists.txt.
find_package(ZLIB REQUIRED)
find_package(SQLite3 REQUIRED)

shardq_cc_library(
  NAME shardq_io_formats
  SRCS tfrecord.cc tfrecord_writer.cc compression.cc compressed_tfrecord.cc
       item_readers.cc tfrecord_reader.cc sqlite_table.cc table_reader.cc
       download.cc
  DEPS shardq_io shardq_core absl::status absl::statusor absl::strings
       shardq_log ZLIB::ZLIB SQLite::SQLite3
)

shardq_cc_test(NAME formats_test
  SRCS crc32c_test.cc tfrecord_test.cc tfrecord_corrupt_test.cc largest_allocation_testing.cc
  DEPS shardq_io_formats)

# Separate binaries: each links largest_allocation_testing.cc, which
# replaces operator new to track the largest allocation.
shardq_cc_test(NAME compression_test
  SRCS compression_test.cc largest_allocation_testing.cc
  DEPS shardq_io_formats ZLIB::ZLIB)

shardq_cc_test(NAME tfrecord_reader_test
  SRCS tfrecord_reader_test.cc
  DEPS shardq_io_formats ZLIB::ZLIB)

shardq_cc_test(NAME table_reader_test
  SRCS table_reader_test.cc
  DEPS shardq_io_formats SQLite::SQLite3)

# Tail rebalancing: SplittableRange, and exact coverage of the readers under
# random (and concurrent) splits. Labelled so the TSan run picks it up.
shardq_cc_test(NAME split_coverage_test
  SRCS split_coverage_test.cc split_edge_test.cc splittable_range_test.cc
  DEPS shardq_io_formats SQLite::SQLite3 absl::synchronization
  LABELS concurrency)

# The file interface under injected faults (short reads, EIO, ENOSPC, a file
# cut shorter while read), through every reader of files; and reads out of
# a mapped file (a SIGBUS in them is an error, not a crash).
shardq_cc_test(NAME file_fault_test
  SRCS file_test.cc item_readers_test.cc mapped_read_test.cc
  DEPS shardq_io_formats ZLIB::ZLIB absl::cleanup)

# DownloadItem (issue 21's download_dir): whole works byte for byte, slices
# as their records.
shardq_cc_test(NAME download_test
  SRCS download_test.cc
  DEPS shardq_io_formats)
