// kiln::Error: the one exception type the public API throws for anything a user can cause.
#pragma once

#include <stdexcept>
#include <string>

namespace kiln {

enum class ErrorCode {
  kInvalidArgument,    // bad shapes, dtypes, attributes, axes
  kNotFound,           // unknown op, missing kernel, missing file
  kAlreadyExists,      // an op or kernel registered twice
  kFailedPrecondition, // a feed is missing, a value from another graph
  kOutOfRange,
  kUnimplemented,
  kDataLoss,           // corrupt or truncated file
  kInternal,
  kResourceExhausted,  // out of memory: an allocation the system refused
  kDeadlineExceeded,   // a collective's peers did not arrive before its deadline
  kUnavailable,        // a peer is known to be gone (died, left, or the group was aborted)
};

const char* error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace kiln
