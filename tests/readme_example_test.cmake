# Keeps the C++ example of README.md true: it is compiled and run by the
# build, so a README edit that no longer compiles or runs fails `make test`.
#
# Two modes, run with `cmake -P`:
#   -DMODE=extract -DREADME=<README.md> -DOUT=<file.cc>
#       Copies the first ```cpp fenced block of README.md to OUT, behind a
#       #line directive so that compiler errors point into README.md.
#   -DMODE=run -DEXAMPLE=<binary> -DWORK_DIR=<dir>
#       Writes the data set the README describes (data/part-0.txt and
#       data/part-1.txt, 100 lines between them) into WORK_DIR, runs the
#       example there, and checks it exits 0 and prints "read 200 lines"
#       (2 epochs x 100 lines), as the README says.

if(MODE STREQUAL "extract")
  file(READ "${README}" text)
  set(fence_open "```cpp\n")
  string(FIND "${text}" "${fence_open}" open_at)
  if(open_at EQUAL -1)
    message(FATAL_ERROR "${README}: no ```cpp fenced block found; the README "
                        "must keep its C++ usage example")
  endif()
  string(LENGTH "${fence_open}" fence_length)
  math(EXPR body_at "${open_at} + ${fence_length}")
  string(SUBSTRING "${text}" ${body_at} -1 rest)
  string(FIND "${rest}" "\n```" close_at)
  if(close_at EQUAL -1)
    message(FATAL_ERROR "${README}: the ```cpp block is never closed")
  endif()
  string(SUBSTRING "${rest}" 0 ${close_at} body)
  # Line of README.md on which the code starts (1-based).
  string(SUBSTRING "${text}" 0 ${body_at} before)
  string(REGEX MATCHALL "\n" newlines "${before}")
  list(LENGTH newlines first_line)
  math(EXPR first_line "${first_line} + 1")
  set(generated "// Generated from ${README} by tests/readme_example_test.cmake.\n")
  string(APPEND generated "#line ${first_line} \"${README}\"\n${body}\n")
  # Rewrite only on change, so an unrelated README edit rebuilds nothing.
  if(EXISTS "${OUT}")
    file(READ "${OUT}" old)
    if(old STREQUAL generated)
      return()
    endif()
  endif()
  file(WRITE "${OUT}" "${generated}")

elseif(MODE STREQUAL "run")
  file(REMOVE_RECURSE "${WORK_DIR}")
  file(MAKE_DIRECTORY "${WORK_DIR}/data")
  # part-0: 60 lines, one of them empty; part-1: 40 lines, no final newline.
  set(part0 "")
  foreach(i RANGE 1 60)
    if(i EQUAL 30)
      string(APPEND part0 "\n")
    else()
      string(APPEND part0 "part-0 line ${i}\n")
    endif()
  endforeach()
  set(part1 "")
  foreach(i RANGE 1 40)
    if(i GREATER 1)
      string(APPEND part1 "\n")
    endif()
    string(APPEND part1 "part-1 line ${i}")
  endforeach()
  file(WRITE "${WORK_DIR}/data/part-0.txt" "${part0}")
  file(WRITE "${WORK_DIR}/data/part-1.txt" "${part1}")

  execute_process(COMMAND "${EXAMPLE}"
                  WORKING_DIRECTORY "${WORK_DIR}"
                  RESULT_VARIABLE result
                  OUTPUT_VARIABLE output
                  ERROR_VARIABLE errors
                  TIMEOUT 60)
  message("${output}${errors}")
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "README example exited with '${result}'")
  endif()
  if(NOT output MATCHES "read 200 lines")
    message(FATAL_ERROR "README example should print 'read 200 lines' "
                        "(2 epochs x 100 lines), as README.md says")
  endif()
  file(REMOVE_RECURSE "${WORK_DIR}")

else()
  message(FATAL_ERROR "readme_example_test.cmake: MODE must be extract or run, "
                      "got '${MODE}'")
endif()
