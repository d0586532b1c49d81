// How graphs run: compiled (fused JIT kernels over the compiler's thunk sequence) or with the
// reference interpreter. Below the runtime layer, so eager dispatch can read the default.
#pragma once

namespace kiln {

enum class ExecutionMode { kCompiled, kInterpreted };

// The mode used where none is given: kInterpreted when the environment variable KILN_INTERPRET
// is set to a value other than "" or "0" at the first call, else kCompiled;
// set_default_execution_mode overrides that for the whole process.
ExecutionMode default_execution_mode();
void set_default_execution_mode(ExecutionMode mode);
const char* execution_mode_name(ExecutionMode mode);  // "compiled", "interpreted"

}  // namespace kiln
