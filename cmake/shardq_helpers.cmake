# One helper per target kind (STYLE.md rule 9). Every target gets the same
# warning flags, treated as errors.
#
# Include rule (issue 16): a library exposes include/ only
# ($<BUILD_INTERFACE:include/> here, <prefix>/include once installed); the
# repo root (src/...) and the build tree (proto/...) are PRIVATE to each
# target. Code inside the project (libraries, binaries, tests) sees them;
# anything that merely links a shardq library, such as an outside project
# after find_package(shardq), sees the public headers and nothing else.
set(SHARDQ_WARNINGS -Wall -Wextra -Werror -Wno-unused-parameter)

# Gives a target of this project the repo root and the build tree, privately.
function(shardq_private_includes target)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
endfunction()

# shardq_cc_library(NAME name SRCS ... [HDRS ...] [DEPS ...] [ALIAS short])
# Also defines the alias shardq::<short> (default: the name without
# "shardq_"), its name once installed (see cmake/shardq_install.cmake).
function(shardq_cc_library)
  cmake_parse_arguments(ARG "" "NAME;ALIAS" "SRCS;HDRS;DEPS" ${ARGN})
  add_library(${ARG_NAME} STATIC ${ARG_SRCS} ${ARG_HDRS})
  target_include_directories(${ARG_NAME} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:include>)
  shardq_private_includes(${ARG_NAME})
  target_compile_options(${ARG_NAME} PRIVATE ${SHARDQ_WARNINGS})
  target_link_libraries(${ARG_NAME} PUBLIC ${ARG_DEPS})
  shardq_alias(${ARG_NAME} ${ARG_ALIAS})
endfunction()

# shardq_cc_objects(NAME name SRCS ... [DEPS ...]): sources compiled once
# into an OBJECT library, for static libraries that differ only in what
# they link (SRCS $<TARGET_OBJECTS:name> of shardq_cc_library). DEPS give
# the compile-time usage requirements; each library links its own.
function(shardq_cc_objects)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS" ${ARGN})
  add_library(${ARG_NAME} OBJECT ${ARG_SRCS})
  target_include_directories(${ARG_NAME} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>)
  shardq_private_includes(${ARG_NAME})
  target_compile_options(${ARG_NAME} PRIVATE ${SHARDQ_WARNINGS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS})
endfunction()

# shardq_alias(target [short]): shardq::<short> for `target`, and <short> as
# its export name; short defaults to the target's name without "shardq_".
function(shardq_alias target)
  string(REGEX REPLACE "^shardq_" "" short ${target})
  if(ARGC GREATER 1)
    set(short ${ARGV1})
  endif()
  add_library(shardq::${short} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${short})
endfunction()

# shardq_cc_binary(NAME name SRCS ... [DEPS ...])
function(shardq_cc_binary)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  shardq_private_includes(${ARG_NAME})
  target_compile_options(${ARG_NAME} PRIVATE ${SHARDQ_WARNINGS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS})
endfunction()

# shardq_cc_test(NAME name SRCS ... [DEPS ...] [LABELS ...] [TIMEOUT s])
# Builds a GoogleTest binary (main: src/testing/test_main.cc, which gives the
# tests a temporary directory of their own) and registers it with ctest.
function(shardq_cc_test)
  if(NOT SHARDQ_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  shardq_private_includes(${ARG_NAME})
  target_compile_options(${ARG_NAME} PRIVATE ${SHARDQ_WARNINGS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} shardq_test_main GTest::gtest GTest::gmock)
  set_target_properties(${ARG_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME ${ARG_NAME} COMMAND ${ARG_NAME})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  set_tests_properties(${ARG_NAME} PROPERTIES TIMEOUT ${ARG_TIMEOUT}
    ENVIRONMENT "SHARDQ_BIN=${CMAKE_BINARY_DIR}/bin;SHARDQ_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
  if(ARG_LABELS)
    set_tests_properties(${ARG_NAME} PROPERTIES LABELS "${ARG_LABELS}")
  endif()
  # Debian's abseil is not built for ThreadSanitizer: the shim makes
  # absl::Mutex visible to it (see src/pipeline/tsan_absl_mutex_shim.cc).
  if(SHARDQ_TSAN AND absl_VERSION VERSION_EQUAL 20220623
     AND NOT ${ARG_NAME} MATCHES "^pipeline_")
    target_sources(${ARG_NAME} PRIVATE
      ${PROJECT_SOURCE_DIR}/src/pipeline/tsan_absl_mutex_shim.cc)
    target_link_libraries(${ARG_NAME} PRIVATE ${CMAKE_DL_LIBS} absl::synchronization)
  endif()
endfunction()
