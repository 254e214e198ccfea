# One helper per target kind (STYLE.md rule 9). Every target gets the same
# warning flags, treated as errors, and sees include/ and src/.
set(SHARDQ_WARNINGS -Wall -Wextra -Werror -Wno-unused-parameter)

# shardq_cc_library(NAME name SRCS ... [HDRS ...] [DEPS ...])
function(shardq_cc_library)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;HDRS;DEPS" ${ARGN})
  add_library(${ARG_NAME} STATIC ${ARG_SRCS} ${ARG_HDRS})
  target_include_directories(${ARG_NAME} PUBLIC
    ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_compile_options(${ARG_NAME} PRIVATE ${SHARDQ_WARNINGS})
  target_link_libraries(${ARG_NAME} PUBLIC ${ARG_DEPS})
endfunction()

# shardq_cc_binary(NAME name SRCS ... [DEPS ...])
function(shardq_cc_binary)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_compile_options(${ARG_NAME} PRIVATE ${SHARDQ_WARNINGS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS})
endfunction()

# shardq_cc_test(NAME name SRCS ... [DEPS ...] [LABELS ...] [TIMEOUT s])
# Builds a GoogleTest binary and registers it with ctest.
function(shardq_cc_test)
  if(NOT SHARDQ_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_compile_options(${ARG_NAME} PRIVATE ${SHARDQ_WARNINGS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main GTest::gmock)
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
    target_link_libraries(${ARG_NAME} PRIVATE ${CMAKE_DL_LIBS})
  endif()
endfunction()
