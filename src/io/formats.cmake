# Record formats (issue 5): CRC32C and TFRecord files and byte-range slices.
# Included from src/io/CMakeLists.txt.
shardq_cc_library(
  NAME shardq_io_formats
  SRCS crc32c.cc tfrecord.cc
  DEPS shardq_core absl::status absl::statusor absl::strings
)

shardq_cc_test(NAME formats_test
  SRCS crc32c_test.cc tfrecord_test.cc
  DEPS shardq_io_formats)
