// Walks over a graph's nodes (detail::Node, src/core/tensor_impl.h).
#pragma once

#include <vector>

#include "src/core/tensor_impl.h"

namespace kiln::detail {

// Per node: whether it is one of `roots` or an input of one, transitively (the nodes computing
// the roots needs). Node ids index `nodes`.
std::vector<bool> ancestors(const std::vector<Node>& nodes, const std::vector<int>& roots);

}  // namespace kiln::detail
