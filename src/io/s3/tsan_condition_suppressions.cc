// Test-only, linked into s3_stream_test: in ThreadSanitizer builds, leaves
// out the reports that src/pipeline/tsan_absl_mutex_shim.cc says it cannot
// model, and only those: an access made inside an absl::Condition
// predicate (or to the Condition object itself). Abseil evaluates a
// waiter's predicate with the mutex held, sometimes on the thread that
// unlocks it, after the shim has told TSan the mutex was released, so TSan
// sees such an access as unordered with the next holder's. S3RangeStream
// waits with Mutex::Await(Condition) throughout; every other access (the
// buffer copied outside the lock, the fields changed under it) is still
// checked. Not needed with an abseil built with -fsanitize=thread.
#if defined(__SANITIZE_THREAD__)
extern "C" const char* __tsan_default_suppressions() {
  return "race:CastAndCallMethod\n"
         "race:absl::*Condition::Condition\n";
}
#endif
