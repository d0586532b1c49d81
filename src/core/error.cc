// Names of error codes.
#include "kiln/error.h"

namespace kiln {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid argument";
    case ErrorCode::kNotFound:
      return "not found";
    case ErrorCode::kAlreadyExists:
      return "already exists";
    case ErrorCode::kFailedPrecondition:
      return "failed precondition";
    case ErrorCode::kOutOfRange:
      return "out of range";
    case ErrorCode::kUnimplemented:
      return "unimplemented";
    case ErrorCode::kDataLoss:
      return "data loss";
    case ErrorCode::kInternal:
      return "internal";
    case ErrorCode::kResourceExhausted:
      return "resource exhausted";
    case ErrorCode::kDeadlineExceeded:
      return "deadline exceeded";
    case ErrorCode::kUnavailable:
      return "unavailable";
  }
  return "unknown";
}

}  // namespace kiln
