// Loads libkiln_cuda.so (runtime/cuda/cuda_plugin.h) from libkiln's own directory, else the
// library path, only when a GPU is present.
#pragma once

#include <string>

#include "runtime/cuda/cuda_plugin.h"

namespace kiln::runtime::cuda {

// The plugin's table; throws kiln::Error (kUnavailable) from `function` when there is no GPU
// (saying why), the library does not load (dlerror's text), or its ABI is another.
const plugin::Api& cuda_plugin(const std::string& function);

// The path libkiln looks for the plugin at first (beside libkiln).
std::string cuda_plugin_path();

}  // namespace kiln::runtime::cuda
