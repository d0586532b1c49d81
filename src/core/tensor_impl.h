// Internal representation of tensors and graphs shared by core, runtime and ops.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/graph.h"
#include "kiln/op_registry.h"
#include "kiln/tensor.h"

namespace kiln::detail {

class DeviceMemory;  // src/core/device_memory.h

// Host memory aligned for the widest vector unit (64 bytes, AVX-512).
inline constexpr size_t kAlignment = 64;

struct Storage {
  explicit Storage(size_t nbytes);
  // A view of `nbytes` at `data`, inside memory that `owner` keeps alive (a compiled
  // executable's arena): not freed by this Storage.
  Storage(std::shared_ptr<void> owner, void* data, size_t nbytes)
      : data(data), nbytes(nbytes), owner(std::move(owner)) {}
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data = nullptr;
  size_t nbytes = 0;
  Device device = Device::cpu();
  std::shared_ptr<void> owner;  // set for views
  // A device tensor's: the memory its bytes are in (src/core/device_memory.h); null on the host.
  std::shared_ptr<const DeviceMemory> memory;
};

struct TensorImpl {
  DType dtype = f32;
  Shape shape;
  // Concrete tensors.
  std::shared_ptr<Storage> storage;
  // Symbolic tensors.
  std::shared_ptr<GraphImpl> graph;
  int node = -1;
  int output = 0;
};

struct Node {
  std::string name;
  std::string op;
  const OpDef* def = nullptr;
  std::vector<ValueRef> inputs;
  Attrs attrs;
  std::vector<TensorType> outputs;
};

struct GraphImpl {
  explicit GraphImpl(std::string n) : name(std::move(n)) {}
  std::string name;
  std::vector<Node> nodes;
  std::unordered_map<std::string, int> by_name;
  std::vector<std::string> scopes;
  mutable std::mutex mu;
  // While a function is traced into this graph as a sub-graph (kiln/control_flow.h): the graph
  // its node will be recorded in, and the values of enclosing graphs used so far, each with the
  // placeholder standing for it here (see capture()).
  std::shared_ptr<GraphImpl> parent;
  std::vector<std::pair<Tensor, Tensor>> captures;  // (value of parent, placeholder here)

  // "<scopes>/<base>", made unique by a numeric suffix ("dot", "dot_1", ...).
  std::string unique_name(const std::string& base);
  int add_node(Node node);
  Tensor value(int node, int output);
};

// The graph that op functions on concrete inputs record into on this thread, if any.
std::shared_ptr<GraphImpl>& default_graph();

// Whether `ancestor` encloses `g` (is its parent, or its parent's, ...) while `g` is traced.
bool encloses(const GraphImpl* ancestor, const GraphImpl* g);
// The placeholder of `g` standing for `outer`, a value of a graph enclosing `g`: made on first
// use (and, through every graph in between, captured there too), then reused.
Tensor capture(const std::shared_ptr<GraphImpl>& g, const Tensor& outer);


}  // namespace kiln::detail
