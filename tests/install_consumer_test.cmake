# `make test` builds an outside project against an installed shardq
# (issue 16, "Install for C++ users"). Run with `cmake -P`:
#
#   -DBUILD_DIR=<shardq build tree> -DSOURCE_DIR=<shardq source tree>
#   -DWORK_DIR=<scratch dir> -DGENERATOR=<generator> -DCXX=<compiler>
#   [-DLAUNCHER=<compiler launcher>] [-DBUILD_TYPE=<type>] [-DLINK_FLAGS=<flags>]
#   [-DWITH_COMMAND=1 when the build has the shardq command]
#
# 1. cmake --install BUILD_DIR --prefix WORK_DIR/prefix;
# 2. extracts README.md's C++ example (tests/readme_example_test.cmake);
# 3. configures tests/install_consumer with CMAKE_PREFIX_PATH=the prefix
#    (find_package(shardq), shardq::client), builds it;
# 4. runs it as readme_example_test does (expects "read 200 lines"), and
#    the consumer's pipeline example (tests/install_consumer/) likewise.
# Any step failing fails the test, with that step's output.
foreach(var BUILD_DIR SOURCE_DIR WORK_DIR GENERATOR CXX)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install_consumer_test.cmake: -D${var}=... is required")
  endif()
endforeach()
if(NOT BUILD_TYPE)
  set(BUILD_TYPE Release)
endif()

function(step name)
  execute_process(COMMAND ${ARGN}
                  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE errors)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${name} failed ('${result}'):\n${output}${errors}")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
step("cmake --install" ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")
set(expected include/shardq/work_queue.h include/shardq/pipeline/dataset.h
    lib/cmake/shardq/shardqConfig.cmake lib/cmake/shardq/shardqConfigVersion.cmake)
if(WITH_COMMAND)
  list(APPEND expected bin/shardq)
endif()
foreach(installed ${expected})
  if(NOT EXISTS "${prefix}/${installed}")
    message(FATAL_ERROR "cmake --install did not install ${installed}")
  endif()
endforeach()
if(EXISTS "${prefix}/include/src" OR EXISTS "${prefix}/include/proto")
  message(FATAL_ERROR "cmake --install installed private headers (src/ or proto/)")
endif()

set(example "${WORK_DIR}/readme_example.cc")
step("extracting README.md's example" ${CMAKE_COMMAND} -DMODE=extract
     -DREADME=${SOURCE_DIR}/README.md -DOUT=${example}
     -P ${SOURCE_DIR}/tests/readme_example_test.cmake)

set(configure_args -S "${SOURCE_DIR}/tests/install_consumer" -B "${WORK_DIR}/build"
    -G "${GENERATOR}" -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=${BUILD_TYPE}
    -DCMAKE_PREFIX_PATH=${prefix} -DEXAMPLE_SOURCE=${example})
if(LAUNCHER)
  list(APPEND configure_args -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()
if(LINK_FLAGS)
  list(APPEND configure_args "-DCMAKE_CXX_FLAGS=${LINK_FLAGS}"
       "-DCMAKE_EXE_LINKER_FLAGS=${LINK_FLAGS}")
endif()
step("configuring the consumer" ${CMAKE_COMMAND} ${configure_args})
step("building the consumer" ${CMAKE_COMMAND} --build "${WORK_DIR}/build")

# Both print "read 200 lines" over the README's data set.
foreach(example readme_example pipeline_example)
  step("running the consumer's ${example}" ${CMAKE_COMMAND} -DMODE=run
       -DEXAMPLE=${WORK_DIR}/build/${example} -DWORK_DIR=${WORK_DIR}/run
       -P ${SOURCE_DIR}/tests/readme_example_test.cmake)
endforeach()
# Without an address, shardq::remote_client refuses (it has no coordinator).
step("running the consumer's remote_example" "${WORK_DIR}/build/remote_example")
message("an outside project built and ran README.md's example against ${prefix}")
file(REMOVE_RECURSE "${WORK_DIR}")
