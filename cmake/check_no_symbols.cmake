# cmake -DBINARY=path -P check_no_symbols.cmake
# Fails when BINARY defines any symbol of the coordinator, its state store
# or the gRPC server: what shardq::remote_work_queue must not link.
execute_process(COMMAND nm -C --defined-only ${BINARY}
  OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm ${BINARY} failed (${rc})")
endif()
string(REGEX MATCHALL "shardq::(CoordinatorImpl|Journal|state_db|CommitMark|CoordinatorServer|CoordinatorService)::[A-Za-z_]+"
       found "${symbols}")
if(found)
  list(REMOVE_DUPLICATES found)
  message(FATAL_ERROR "${BINARY} links coordinator code: ${found}")
endif()
string(LENGTH "${symbols}" size)
if(size LESS 1000)
  message(FATAL_ERROR "${BINARY}: nm listed almost nothing; the check would pass vacuously")
endif()
message(STATUS "${BINARY}: no coordinator, state store or server symbols")
