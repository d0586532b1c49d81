// Running one op: shape inference then the registered kernel. Shared by eager dispatch and
// the reference interpreter.
#pragma once

#include <string>
#include <vector>

#include "kiln/op_registry.h"

namespace kiln::runtime {

// Checks the input count and runs the op's shape function.
std::vector<TensorType> infer_types(const OpDef& def, const std::string& node_name,
                                    const std::vector<TensorType>& inputs, const Attrs& attrs);

// Infers output types from the concrete inputs, finds the CPU kernel for the key dtype
// (the first input's, or the first output's for ops without inputs) and runs it.
std::vector<Tensor> run_kernel(const OpDef& def, const std::string& node_name,
                               const std::vector<Tensor>& inputs, const Attrs& attrs);

// The CPU kernel run_kernel would pick for these input and output types.
const KernelDef& find_cpu_kernel(const OpDef& def, const std::vector<TensorType>& inputs,
                                 const std::vector<TensorType>& outputs);

// Runs `kernel` with output types inferred beforehand (a compiled executable: no shape
// inference or registry lookup per run). `outputs` holds one tensor per output: undefined, or a
// preallocated buffer of that output's type that allocate_output hands to the kernel. On
// return it holds the kernel's outputs, checked against `out_types`.
void run_prepared_kernel(const KernelDef& kernel, const OpDef& def, const std::string& node_name,
                         const std::vector<Tensor>& inputs, const Attrs& attrs,
                         const std::vector<TensorType>& out_types, std::vector<Tensor>* outputs);

// A second way to run an op eagerly: returns true and sets `outputs` when it ran the op, false
// to leave it to run_kernel. The compiler installs one (compiler/cpu/eager.cc) that runs large
// elementwise ops through its JIT'd kernel cache; call_op consults it in compiled mode only.
using EagerRunner = bool (*)(const OpDef& def, const std::vector<Tensor>& inputs,
                             const Attrs& attrs, std::vector<Tensor>* outputs);
void set_eager_runner(EagerRunner runner);

// How an eager op whose inputs include tensors on a device (a GPU's, Tensor::to) runs: on that
// device, its outputs left there. The compiler installs one (compiler/device_eager.cc); call_op
// consults it whenever an input is on a device, in either execution mode.
using DeviceRunner = std::vector<Tensor> (*)(const OpDef& def, const std::vector<Tensor>& inputs,
                                             const Attrs& attrs, const Device& device);
void set_device_runner(DeviceRunner runner);

}  // namespace kiln::runtime
