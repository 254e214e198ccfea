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

# shardq::remote_client: the same for workers of a coordinator elsewhere,
# without the embedded coordinator, its state store or gRPC server (a queue
# without an address is FAILED_PRECONDITION).
add_library(shardq_remote_client_api INTERFACE)
target_link_libraries(shardq_remote_client_api INTERFACE
  shardq_remote_client shardq_io shardq_io_formats shardq_pipeline shardq_remote_dataset)
shardq_alias(shardq_remote_client_api remote_client)

# A wheel build (scikit-build, python/CMakeLists.txt) installs the Python
# package only, not the C++ SDK.
if(SKBUILD)
  return()
endif()

include(CMakePackageConfigHelpers)
set(SHARDQ_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/shardq)

# shardq::client and every shardq library it links (static libraries: a
# consumer links them all). The generated protobuf headers and src/ stay
# private: no installed header includes them.
set(SHARDQ_EXPORTED_TARGETS
  shardq_client_api shardq_client shardq_embedded shardq_rpc shardq_grpc_fork shardq_grpc_proto
  shardq_remote_client_api shardq_remote_client shardq_remote_dataset
  shardq_coordinator shardq_store shardq_core shardq_types shardq_proto shardq_log
  shardq_io shardq_io_formats shardq_pipeline shardq_dataset)
list(APPEND SHARDQ_EXPORTED_TARGETS shardq_s3)  # s3:// works (issue 21)
# etcd://HOST:PORT/JOB addresses (issue 18): the client reads the leader.
list(APPEND SHARDQ_EXPORTED_TARGETS shardq_etcd_leader shardq_etcd_client shardq_etcd_proto)
install(TARGETS ${SHARDQ_EXPORTED_TARGETS} EXPORT shardqTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/shardq
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h")
if(TARGET shardq)
  install(TARGETS shardq RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

install(EXPORT shardqTargets
  NAMESPACE shardq::
  FILE shardqTargets.cmake
  DESTINATION ${SHARDQ_CMAKE_DIR})
configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/shardqConfig.cmake.in
  ${PROJECT_BINARY_DIR}/shardqConfig.cmake
  INSTALL_DESTINATION ${SHARDQ_CMAKE_DIR})
# 0.x: a minor version may change the API.
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/shardqConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/shardqConfig.cmake
  ${PROJECT_BINARY_DIR}/shardqConfigVersion.cmake
  DESTINATION ${SHARDQ_CMAKE_DIR})
