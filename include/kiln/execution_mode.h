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

// Whether compiled programs may keep bf16 and f16 intermediates at f32 precision inside a fused
// loop, as XLA does by default (--xla_allow_excess_precision): a chain such as a mixed-precision
// layer's bias add and activation then rounds once, where its result is stored (or read by an op
// of another dtype: a convert, a comparison), instead of after every op. Results are then at
// least as accurate but no longer bit-identical to the interpreter's or to eager ops', which
// round every op's result. On by default; off when the environment variable
// KILN_EXCESS_PRECISION is "0" at the first call, or after set_allow_excess_precision(false).
// Read when a program is compiled: programs compiled before a change keep their rounding.
bool allow_excess_precision();
void set_allow_excess_precision(bool allow);

}  // namespace kiln
