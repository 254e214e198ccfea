// The one place where an absl::Status becomes a Python exception (a class of
// shardq.errors chosen by the status code, carrying the same message).
#ifndef SHARDQ_PYTHON_ERRORS_H_
#define SHARDQ_PYTHON_ERRORS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shardq::python {

// Raises the Python exception for a non-OK status (needs the GIL).
[[noreturn]] void ThrowStatus(const absl::Status& status);

inline void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) ThrowStatus(status);
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> value) {
  if (!value.ok()) ThrowStatus(value.status());
  return *std::move(value);
}

}  // namespace shardq::python

#endif  // SHARDQ_PYTHON_ERRORS_H_
