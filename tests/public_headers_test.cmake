# Public headers include only public headers (issue 16): every quoted
# #include in a header under include/ names another public header
# ("shardq/...") or a third-party one an installed shardq depends on
# ("absl/..."), never a file of src/, proto/ or the build tree.
#
#   cmake -DINCLUDE_DIR=<repo>/include -P public_headers_test.cmake
#
# Fails listing every offending header, line and include. (The build also
# compiles each public header alone against include/ only; see
# tests/CMakeLists.txt, target public_headers_check.)
file(GLOB_RECURSE headers RELATIVE "${INCLUDE_DIR}" "${INCLUDE_DIR}/*.h")
if(NOT headers)
  message(FATAL_ERROR "no headers found under ${INCLUDE_DIR}")
endif()
set(bad "")
foreach(header ${headers})
  file(STRINGS "${INCLUDE_DIR}/${header}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  foreach(line ${lines})
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]*)\".*$" "\\1" included "${line}")
    if(included MATCHES "^absl/")
      continue()
    endif()
    if(included MATCHES "^shardq/" AND EXISTS "${INCLUDE_DIR}/${included}")
      continue()
    endif()
    string(APPEND bad "  include/${header}: #include \"${included}\"\n")
  endforeach()
endforeach()
if(bad)
  message(FATAL_ERROR "public headers include non-public headers (move the "
                      "dependency under include/shardq/ or out of the header):\n${bad}")
endif()
list(LENGTH headers count)
message("${count} public headers include only public headers")
