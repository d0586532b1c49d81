// check_writable: the directory a callback writes to, created and proven writable when fit
// begins, so that a path that cannot be written stops fit before its first step.
#pragma once

#include <string>

namespace kiln::nn::detail {

// Creates `dir` (and its parents) and proves it writable by creating and removing a file in
// it; otherwise throws kFailedPrecondition "<who>: cannot write to <dir>: <why> (...)".
void check_writable(const std::string& dir, const char* who);

}  // namespace kiln::nn::detail
