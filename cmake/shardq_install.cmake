# The public C++ target and `cmake --install` (issue 16).
#
#   cmake --install build --prefix P
#
# installs include/shardq/ (the public headers: what the library targets
# expose, see cmake/shardq_helpers.cmake), the static libraries behind
# shardq::client with their link dependencies, the `shardq` command, and
# P/lib/cmake/shardq/shardqConfig.cmake, so that an outside project does
#
#   find_package(shardq REQUIRED)
#   target_link_libraries(app PRIVATE shardq::client)
#
# (tests/install_consumer/ is such a project, built and run by ctest).

# shardq::client: everything a C++ user links: WorkQueue and its item
# shapes (shardq::work_queue), the record readers (shardq::io_formats) and
# the pipeline (shardq::pipeline, shardq::dataset).
add_library(shardq_client_api INTERFACE)
target_link_libraries(shardq_client_api INTERFACE
  shardq_client shardq_io shardq_io_formats shardq_pipeline shardq_dataset)
shardq_alias(shardq_client_api client)
