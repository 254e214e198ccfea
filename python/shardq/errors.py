"""shardq's exceptions. Every error from the C++ core arrives as one of
these, converted in one place (python/src/errors.cc) from its status code.
Each also derives from the matching built-in exception, so ordinary Python
handlers (``except ValueError``, ``except TimeoutError``) work."""

# absl::StatusCode values (google.rpc.Code).
CANCELLED = 1
UNKNOWN = 2
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
NOT_FOUND = 5
ALREADY_EXISTS = 6
PERMISSION_DENIED = 7
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
ABORTED = 10
OUT_OF_RANGE = 11
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14
DATA_LOSS = 15
UNAUTHENTICATED = 16

CODE_NAMES = {
    CANCELLED: "CANCELLED", UNKNOWN: "UNKNOWN", INVALID_ARGUMENT: "INVALID_ARGUMENT",
    DEADLINE_EXCEEDED: "DEADLINE_EXCEEDED", NOT_FOUND: "NOT_FOUND",
    ALREADY_EXISTS: "ALREADY_EXISTS", PERMISSION_DENIED: "PERMISSION_DENIED",
    RESOURCE_EXHAUSTED: "RESOURCE_EXHAUSTED", FAILED_PRECONDITION: "FAILED_PRECONDITION",
    ABORTED: "ABORTED", OUT_OF_RANGE: "OUT_OF_RANGE", UNIMPLEMENTED: "UNIMPLEMENTED",
    INTERNAL: "INTERNAL", UNAVAILABLE: "UNAVAILABLE", DATA_LOSS: "DATA_LOSS",
    UNAUTHENTICATED: "UNAUTHENTICATED",
}


class Error(Exception):
    """Any shardq error; ``code`` is the status code (an int, see CODE_NAMES)."""

    code = UNKNOWN

    def __init__(self, message, code=None):
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message

    def __str__(self):
        return self.message

    @property
    def code_name(self):
        return CODE_NAMES.get(self.code, str(self.code))


class InvalidArgumentError(Error, ValueError):
    code = INVALID_ARGUMENT


class NotFoundError(Error, KeyError):
    code = NOT_FOUND

    def __str__(self):  # KeyError would quote the message
        return self.message


class DeadlineExceededError(Error, TimeoutError):
    code = DEADLINE_EXCEEDED


class UnavailableError(Error, ConnectionError):
    code = UNAVAILABLE


class UnauthenticatedError(Error, ConnectionError):
    code = UNAUTHENTICATED


class PermissionDeniedError(Error, PermissionError):
    code = PERMISSION_DENIED


class OutOfRangeError(Error):
    """End of input: every item of every epoch is completed."""

    code = OUT_OF_RANGE


class FailedPreconditionError(Error):
    code = FAILED_PRECONDITION


class DataLossError(Error):
    code = DATA_LOSS


class CancelledError(Error):
    code = CANCELLED


class ResourceExhaustedError(Error):
    """Out of a resource: memory for a batch, disk space (ENOSPC), a limit."""

    code = RESOURCE_EXHAUSTED


_BY_CODE = {
    INVALID_ARGUMENT: InvalidArgumentError,
    NOT_FOUND: NotFoundError,
    DEADLINE_EXCEEDED: DeadlineExceededError,
    UNAVAILABLE: UnavailableError,
    UNAUTHENTICATED: UnauthenticatedError,
    PERMISSION_DENIED: PermissionDeniedError,
    OUT_OF_RANGE: OutOfRangeError,
    FAILED_PRECONDITION: FailedPreconditionError,
    DATA_LOSS: DataLossError,
    CANCELLED: CancelledError,
    RESOURCE_EXHAUSTED: ResourceExhaustedError,
}


def _from_code(code, message):
    """The exception for a status; called by the C++ conversion."""
    cls = _BY_CODE.get(code, Error)
    return cls(message, code)
