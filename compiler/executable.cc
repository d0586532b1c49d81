// The compiled execution path: optimize, plan fusion for concrete shapes, JIT each group once,
// and order fused-kernel and reference-kernel thunks into one flat sequence; slots, the arena
// plan (memory_plan.cc), donations (donation.cc) and the run loop (run.cc) live beside it.
#include "compiler/executable.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <set>
#include <unordered_map>

#include <unistd.h>

#include "compiler/control_flow.h"
#include "compiler/cpu/emulated_device.h"
#include "compiler/cpu/fusion_target.h"
#include "compiler/cpu/kernel_cache.h"
#include "compiler/cuda/device_backend.h"
#include "compiler/cuda/ptx.h"
#include "compiler/dump.h"
#include "compiler/executable_impl.h"
#include "compiler/lowering.h"
#include "compiler/pipeline.h"
#include "compiler/schedule.h"
#include "compiler/split_reduction.h"
#include "ops/control_flow.h"
#include "runtime/execute.h"
#include "runtime/feeds.h"
#include "src/core/graph_walk.h"

namespace kiln::compiler {

namespace {

bool fully_known(const Shape& s) {
  for (int64_t d : s)
    if (d < 0) return false;
  return true;
}

// Maps feeds keyed by the original graph onto the optimized graph's node ids, checking each.
std::unordered_map<int, Tensor> map_feeds(const CompiledGraph& cg,
                                          const std::vector<detail::Node>& nodes,
                                          const FeedList& feeds, const char* what) {
  std::unordered_map<int, Tensor> fed;
  for (const auto& [key, value] : feeds) {
    int id = cg.placeholder(key).impl()->node;
    const detail::Node& node = nodes[id];
    runtime::check_feed(what, node.name, node.outputs[0], value);
    fed[id] = value;
  }
  return fed;
}

// Concrete types of every needed node; records the needed placeholders' node ids.
void infer_node_types(Impl& im, const std::vector<bool>& needed,
                      const std::unordered_map<int, Tensor>& fed, std::vector<int>& placeholders) {
  const auto& nodes = im.nodes;
  im.types.resize(nodes.size());
  for (size_t id = 0; id < nodes.size(); ++id) {
    if (!needed[id]) continue;
    const detail::Node& node = nodes[id];
    if (node.op == "placeholder") {
      placeholders.push_back(static_cast<int>(id));
      if (auto it = fed.find(static_cast<int>(id)); it != fed.end()) {
        im.types[id] = {TensorType{it->second.dtype(), it->second.shape()}};
      } else if (fully_known(node.outputs[0].shape)) {
        im.types[id] = node.outputs;
      } else {
        throw Error(ErrorCode::kInvalidArgument,
                    "compile: placeholder '" + node.name + "' (" + node.outputs[0].str() +
                        ") has unknown dimensions: feed an example value to compile for");
      }
      continue;
    }
    if (node.inputs.empty()) {
      im.types[id] = node.outputs;
      continue;
    }
    std::vector<TensorType> in_types;
    for (const ValueRef& in : node.inputs) in_types.push_back(im.types[in.node][in.output]);
    im.types[id] = runtime::infer_types(*node.def, node.name, in_types, node.attrs);
  }
}

}  // namespace

Executable compile(const Graph& graph, const std::vector<Tensor>& outputs, const FeedList& feeds) {
  return compile(graph, outputs, feeds, {});
}

// The host's backend is the CPU's: this file is the one in the compiler that names a backend
// (the passes ask the FusionTarget; lowering builds target-independent subgraphs).
const FusionTarget& host_fusion_target() { return cpu::fusion_target(); }

namespace {

// KILN_PTX_DIR=<dir>: every fusion a compile() JITs for the CPU is also compiled for CUDA
// (compiler/cuda/ptx.h) and its PTX written to <dir>/<pid>_<n>.ptx, or the compile's error to
// <pid>_<n>.err, so that ptxas checks the kernels a program's graphs produce on a machine
// without a GPU (scripts/check_ptx.sh runs the test suite's graphs so). Each file is written
// whole, then renamed into place.
void write_ptx_for_checking(const std::vector<FusedSubgraph>& subgraphs) {
  static const char* dir = std::getenv("KILN_PTX_DIR");
  if (dir == nullptr || *dir == '\0' || subgraphs.empty()) return;
  static std::atomic<int> counter{0};
  const std::string base = std::string(dir) + "/" + std::to_string(getpid()) + "_" +
                           std::to_string(counter++);
  std::string text, ext = ".ptx";
  try {
    DumpScope no_dump("");  // the CPU compile's dump stays the CPU's
    text = cuda::compile_ptx(subgraphs, {.sm = 90, .libdevice = "", .cache_dir = ""}).ptx;
  } catch (const Error& e) {
    text = std::string(e.what()) + "\n";
    ext = ".err";
  }
  const std::string tmp = base + ".tmp";
  bool written = false;
  {
    std::ofstream f(tmp, std::ios::binary);
    f << text;
    written = static_cast<bool>(f.flush());
  }
  if (!written || std::rename(tmp.c_str(), (base + ext).c_str()) != 0) std::remove(tmp.c_str());
}

// Runs the fusion pass for `target` over the optimized graph, now that its types are concrete;
// the pass's dump shows every node's group.
FusionPlan fuse(const FusionTarget& target, const CompiledGraph& cg,
                const std::vector<std::vector<TensorType>>& types, const std::vector<bool>& needed,
                const std::vector<ValueRef>& fetched) {
  Module module;
  module.graph = cg.graph;
  module.outputs = fetched;
  module.types = types;
  module.needed = needed;
  auto pass = std::make_unique<Fusion>(target);
  Fusion* fusion = pass.get();
  Pipeline pipeline("lower");
  pipeline.add(std::move(pass));
  pipeline.run(module);
  return fusion->plan();
}

// A dot a device runs: operands of a dtype it takes, each its batch axes (the same number, in
// order, leading) then two more, one of them contracted; no empty dimension
// (device_dot_geometry). A fused_dot also when its bias has n elements of the output's dtype and
// its activation is none or relu. Sets t.dot's batch count, shape, transposes and epilogue.
bool device_dot(const DeviceBackend& device, const detail::Node& node,
                const std::vector<TensorType>& in, Thunk& t) {
  const bool fused = node.op == kFusedDotOp;
  if ((node.op != "dot" && !fused) || in.size() < 2 || !device.dot_dtype(in[0].dtype))
    return false;
  std::optional<DeviceDot> d = device_dot_geometry(in[0], in[1], node.attrs);
  if (!d) return false;
  if (fused) {
    // The epilogue the device's fusion target let the pass fuse: a bias of n elements, relu.
    const std::string act = node.attrs.has("activation") ? node.attrs.get_string("activation")
                                                         : std::string("none");
    if (act != "none" && act != "relu") return false;
    if (in.size() > 2 && (in[2].dtype != d->dtype || num_elements(in[2].shape) != d->n))
      return false;
    d->relu = act == "relu";
  } else if (in.size() != 2) {
    return false;
  }
  t.dot = *d;
  return true;
}

// Entry i of a per-axis int attribute of `rank` entries: `fallback` when it is absent or
// empty, -1 (which no caller takes) when it has another length.
int64_t axis_attr(const Attrs& a, const char* name, size_t rank, size_t i, int64_t fallback) {
  if (!a.has(name)) return fallback;
  const std::vector<int64_t>& v = a.get_ints(name);
  return v.size() == rank ? v[i] : v.empty() ? fallback : -1;
}

// A convolution (or one of its gradients) a device runs: one or two spatial axes, each padded
// alike on both sides, no input dilation, no empty dimension, a dtype and geometry the device
// takes (DeviceBackend::conv_workspace, which may choose its algorithm here). Sets t.conv.
bool device_conv(const DeviceBackend& device, const detail::Node& node,
                 const std::vector<TensorType>& in, const TensorType& out, Thunk& t) {
  DeviceConv c;
  const Shape *x, *w, *y;
  if (node.op == "convolution") {
    c.pass = DeviceConv::kForward;
    x = &in[0].shape, w = &in[1].shape, y = &out.shape;
  } else if (node.op == "convolution_input_grad") {
    c.pass = DeviceConv::kInputGrad;
    y = &in[0].shape, w = &in[1].shape, x = &out.shape;
  } else if (node.op == "convolution_kernel_grad") {
    c.pass = DeviceConv::kKernelGrad;
    x = &in[0].shape, y = &in[1].shape, w = &out.shape;
  } else {
    return false;
  }
  if (in.size() != 2 || in[0].dtype != in[1].dtype || in[0].dtype != out.dtype) return false;
  if (w->size() < 3 || w->size() > 4 || x->size() != w->size() || y->size() != w->size())
    return false;
  const size_t d = w->size() - 2;
  const Attrs& a = node.attrs;
  auto spatial = [&](const char* name, size_t i, int64_t fallback) {
    return axis_attr(a, name, d, i, fallback);
  };
  for (size_t i = 0; i < d; ++i) {
    if (spatial("lhs_dilation", i, 1) != 1 ||
        spatial("padding_low", i, 0) != spatial("padding_high", i, 0))
      return false;
  }
  // Axis i of d as the 2-d convolution's axis 1 - (d - 1 - i): a 1-d convolution is the
  // second (width) axis of a 2-d one of height 1.
  const size_t o = 2 - d;
  int64_t in_sp[2] = {1, 1}, out_sp[2] = {1, 1}, k_sp[2] = {1, 1}, stride[2] = {1, 1},
          pad[2] = {0, 0}, dil[2] = {1, 1};
  for (size_t i = 0; i < d; ++i) {
    in_sp[o + i] = (*x)[1 + i];
    out_sp[o + i] = (*y)[1 + i];
    k_sp[o + i] = (*w)[i];
    stride[o + i] = spatial("strides", i, 1);
    pad[o + i] = spatial("padding_low", i, 0);
    dil[o + i] = spatial("dilation", i, 1);
  }
  c.dtype = out.dtype;
  c.batch = (*x)[0];
  c.in_h = in_sp[0], c.in_w = in_sp[1], c.c_in = x->back();
  c.out_h = out_sp[0], c.out_w = out_sp[1], c.c_out = w->back();
  c.k_h = k_sp[0], c.k_w = k_sp[1];
  c.stride_h = stride[0], c.stride_w = stride[1], c.pad_h = pad[0], c.pad_w = pad[1];
  c.dilation_h = dil[0], c.dilation_w = dil[1];
  c.groups = a.get_int("groups", 1);
  for (int64_t v : {c.batch, c.in_h, c.in_w, c.c_in, c.out_h, c.out_w, c.c_out, c.k_h, c.k_w,
                    c.stride_h, c.stride_w, c.dilation_h, c.dilation_w, c.groups})
    if (v <= 0) return false;
  if (c.pad_h < 0 || c.pad_w < 0 || c.c_in % c.groups != 0 || c.c_out % c.groups != 0 ||
      (*w)[d] != c.c_in / c.groups || (*y)[0] != c.batch || y->back() != c.c_out)
    return false;
  const int64_t workspace = device.conv_workspace(c);
  if (workspace < 0) return false;
  c.workspace_bytes = workspace;
  t.conv = c;
  return true;
}

// A scatter_add the device runs as its loop (DeviceScatterAdd: x viewed as [outer, dim,
// inner] around the axis): known shapes and a dtype its loop adds in. The loop's indices are
// checked before it runs, with the kernel's error.
bool device_scatter_add(const DeviceBackend& device, const detail::Node& node,
                        const std::vector<TensorType>& in, Thunk& t) {
  if (node.op != "scatter_add" || in.size() != 3 || !scatter_add_dtype(in[0].dtype) ||
      (in[1].dtype != i32 && in[1].dtype != i64))
    return false;
  for (const TensorType& v : in)
    if (!is_fully_defined(v.shape)) return false;
  const Shape& x = in[0].shape;
  const int64_t rank = static_cast<int64_t>(x.size());
  int64_t axis = node.attrs.get_int("axis", 0);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return false;
  DeviceScatterAdd s;
  s.dtype = in[0].dtype;
  for (int64_t d = 0; d < axis; ++d) s.outer *= x[d];
  s.dim = x[axis];
  for (int64_t d = axis + 1; d < rank; ++d) s.inner *= x[d];
  s.count = num_elements(in[1].shape);
  try {
    t.loop = device.compile_scatter_add(s);
  } catch (const Error&) {
    return false;  // its kernel on the host, as for a loop the device cannot compile
  }
  if (!t.loop) return false;
  t.scatter = s;
  t.index_checks.push_back({1, axis, in[0], "scatter_add", node.name});
  return true;
}

// A pooling op (or its gradient) a device runs: NHWC, windows and strides over the two spatial
// axes alone, each padded alike on both sides, no relu mask, a dtype and geometry the device
// takes (DeviceBackend::pool_workspace). Sets t.pool.
bool device_pool(const DeviceBackend& device, const detail::Node& node,
                 const std::vector<TensorType>& in, const TensorType& out, Thunk& t) {
  DevicePool p;
  const Shape *x, *y;
  if (node.op == "reduce_window_max" || node.op == "reduce_window_sum") {
    if (in.size() != 1) return false;
    p.kind = node.op == "reduce_window_max" ? DevicePool::kMax : DevicePool::kSum;
    x = &in[0].shape, y = &out.shape;
  } else if (node.op == "reduce_window_max_grad") {
    if (in.size() != 2 || in[0].dtype != in[1].dtype || node.attrs.get_bool("relu_mask", false))
      return false;
    p.kind = DevicePool::kMaxGrad;
    x = &in[0].shape, y = &in[1].shape;
  } else if (node.op == "reduce_window_sum_grad") {
    if (in.size() != 1) return false;
    p.kind = DevicePool::kSumGrad;
    y = &in[0].shape, x = &out.shape;
  } else {
    return false;
  }
  if (in[0].dtype != out.dtype || x->size() != 4 || y->size() != 4) return false;
  const Attrs& a = node.attrs;
  auto axis = [&](const char* name, size_t i, int64_t fallback) {
    return axis_attr(a, name, 4, i, fallback);
  };
  for (size_t i : {size_t{0}, size_t{3}}) {
    if (axis("window", i, -1) != 1 || axis("strides", i, 1) != 1 ||
        axis("padding_low", i, 0) != 0 || axis("padding_high", i, 0) != 0)
      return false;
  }
  for (size_t i : {size_t{1}, size_t{2}})
    if (axis("padding_low", i, 0) != axis("padding_high", i, 0)) return false;
  p.dtype = out.dtype;
  p.batch = (*x)[0], p.in_h = (*x)[1], p.in_w = (*x)[2], p.channels = (*x)[3];
  p.out_h = (*y)[1], p.out_w = (*y)[2];
  p.win_h = axis("window", 1, -1), p.win_w = axis("window", 2, -1);
  p.stride_h = axis("strides", 1, 1), p.stride_w = axis("strides", 2, 1);
  p.pad_h = axis("padding_low", 1, 0), p.pad_w = axis("padding_low", 2, 0);
  for (int64_t v : {p.batch, p.in_h, p.in_w, p.channels, p.out_h, p.out_w, p.win_h, p.win_w,
                    p.stride_h, p.stride_w})
    if (v <= 0) return false;
  if (p.pad_h < 0 || p.pad_w < 0 || (*y)[0] != p.batch || (*y)[3] != p.channels) return false;
  const int64_t workspace = device.pool_workspace(p);
  if (workspace < 0) return false;
  p.workspace_bytes = workspace;
  t.pool = p;
  return true;
}

// KILN_TEST_ONLY_DEVICE=emulated-gpu: every compile() without a device builds a device program
// for the emulated GPU (compiler/cpu/emulated_device.h), so that the compiled-graph tests check
// the device executable without a GPU; =cuda: for cuda:0 (scripts/gpu_check.sh runs the random
// graph tests so on a GPU machine; without a GPU every compile() throws, saying why). Nothing
// in Kiln sets it. Read once per process.
std::shared_ptr<const DeviceBackend> test_device() {
  static const std::string mode = [] {
    const char* v = std::getenv("KILN_TEST_ONLY_DEVICE");
    return std::string(v != nullptr ? v : "");
  }();
  if (mode == "emulated-gpu") return cpu::emulated_gpu();
  if (mode == "cuda") return cuda::device_backend(Device::cuda(0));
  return nullptr;
}

Executable compile_impl(const std::shared_ptr<const DeviceBackend>& device, const Graph& graph,
                        const std::vector<Tensor>& outputs, const FeedList& feeds,
                        const std::vector<Donation>& donations,
                        std::vector<char> fetched_on_device = {}) {
  DumpScope dump(new_dump_dir(graph.name(), dump_signature(feeds)));
  auto impl = std::make_shared<Executable::Impl>();
  Impl& im = *impl;
  im.name = graph.name();
  im.device = device;
  if (device != nullptr) im.fetched_on_device = std::move(fetched_on_device);
  im.fetched_on_device.resize(outputs.size(), 0);
  if (device) {
    im.device_constants = std::make_unique<Impl::DeviceConstants>();
    im.device_constants->device = device;
  }
  const FusionTarget& target = device ? device->fusion_target() : host_fusion_target();
  if (const char* env = std::getenv("KILN_PROFILE"); env && std::string(env) == "1") {
    im.report_profile = true;
    im.profiling = true;
  }
  Pipeline pipeline = default_pipeline(Rewrites::kAll, &target);  // epilogues ask the target
  im.cg = optimize(graph, outputs, pipeline);
  const CompiledGraph& cg = im.cg;
  im.nodes = nodes_of(cg.graph);
  const auto& nodes = im.nodes;
  const int n = static_cast<int>(nodes.size());
  std::unordered_map<int, Tensor> fed = map_feeds(cg, nodes, feeds, "compile");

  std::vector<ValueRef> fetched;
  std::vector<int> roots;
  for (const Tensor& t : cg.outputs) {
    fetched.push_back({t.impl()->node, t.impl()->output});
    roots.push_back(t.impl()->node);
  }
  const std::vector<bool> needed = detail::ancestors(nodes, roots);
  std::vector<int> placeholders;
  infer_node_types(im, needed, fed, placeholders);

  FusionPlan plan = fuse(target, cg, im.types, needed, fetched);
  im.fusion_log = plan.log();

  // One unit per group and per other needed non-placeholder node; JIT each group. Nodes without
  // inputs (constants) are computed here, once.
  std::vector<int> unit_of(n, -1);
  std::vector<Thunk> units;
  // Lower every group, then JIT all of them together (one LLVM module; cached kernels reused).
  std::vector<LoweredFusion> lowered(plan.groups.size());
  std::vector<FusedSubgraph> subgraphs;
  std::vector<int> lowered_groups;
  for (int gi = 0; gi < static_cast<int>(plan.groups.size()); ++gi) {
    try {
      lowered[gi] = lower_fusion_group(target, gi, plan, nodes, im.types);
      lowered[gi].subgraph.name = "fused_" + std::to_string(subgraphs.size());
      subgraphs.push_back(lowered[gi].subgraph);
      lowered_groups.push_back(gi);
    } catch (const Error& e) {
      im.fusion_log += "group of %" + std::to_string(plan.groups[gi].nodes[0]) +
                       " left to the reference kernels: " + e.what() + "\n";
    }
  }
  std::vector<std::string> errors;
  std::vector<cpu::FusedKernel> compiled;
  std::vector<std::shared_ptr<const DeviceKernel>> device_kernels;
  if (device)
    device_kernels = compile_device_kernels(device, subgraphs, &errors);
  else
    compiled = cached_kernels(subgraphs, &errors);
  if (!device && std::getenv("KILN_PTX_DIR") != nullptr) {
    std::vector<FusedSubgraph> ok;
    for (size_t k = 0; k < subgraphs.size(); ++k)
      if (errors[k].empty()) ok.push_back(subgraphs[k]);
    write_ptx_for_checking(expand_split_reductions(ok));  // what a device compiles
  }
  for (size_t k = 0; k < lowered_groups.size(); ++k) {
    const int gi = lowered_groups[k];
    if (!errors[k].empty()) {
      im.fusion_log += "group of %" + std::to_string(plan.groups[gi].nodes[0]) +
                       " left to the reference kernels: " + errors[k] + "\n";
      continue;  // its nodes get kernel thunks below
    }
    Thunk t;
    if (device) {
      im.kernels.push_back(device_kernels[k]);
      im.device_kernels.push_back(device_kernels[k]);
      t.on_device = Thunk::OnDevice::kFused;
    } else {
      im.kernels.push_back(std::make_shared<cpu::FusedKernel>(std::move(compiled[k])));
    }
    t.fused = static_cast<int>(im.kernels.size()) - 1;
    t.inputs = std::move(lowered[gi].inputs);
    t.outputs = std::move(lowered[gi].outputs);
    t.index_checks = std::move(lowered[gi].index_checks);
    t.description = "fused(" + lowered[gi].ops + ") -> " + std::to_string(t.outputs.size()) +
                    " output" + (t.outputs.size() == 1 ? "" : "s");
    for (int m : plan.groups[gi].nodes) unit_of[m] = static_cast<int>(units.size());
    units.push_back(std::move(t));
  }
  std::vector<std::pair<int, std::vector<Tensor>>> constants;
  for (int id = 0; id < n; ++id) {
    const detail::Node& node = nodes[id];
    if (!needed[id] || node.op == "placeholder" || unit_of[id] >= 0) continue;
    if (node.inputs.empty() && !node.def->stateful) {
      try {
        constants.push_back({id, runtime::run_kernel(*node.def, node.name, {}, node.attrs)});
        continue;
      } catch (const Error&) {
        // left to a thunk, which reports the error when the executable runs
      }
    }
    Thunk t;
    t.node = id;
    t.description = "kernel " + node.op;
    for (const ValueRef& in : node.inputs) t.inputs.push_back(in);
    std::vector<TensorType> in_types;
    for (const ValueRef& in : node.inputs) in_types.push_back(im.types[in.node][in.output]);
    if (ops::is_control_flow(node.op) && device) {
      // Its sub-graphs compiled for the device, its values kept there.
      t.control = device_control_flow(device, node, in_types, im.types[id], &t.description);
      t.on_device = Thunk::OnDevice::kControlFlow;
    } else if (ops::is_control_flow(node.op)) {
      t.kernel = control_flow_kernel(node, in_types, im.control_flow_kernels, &t.description);
    } else if (device && device_dot(*device, node, in_types, t)) {
      t.on_device = Thunk::OnDevice::kDot;
      t.description += " on " + device->name();
    } else if (device && im.types[id].size() == 1 &&
               device_conv(*device, node, in_types, im.types[id][0], t)) {
      t.on_device = Thunk::OnDevice::kConv;
      t.description += " on " + device->name();
    } else if (device && im.types[id].size() == 1 &&
               device_pool(*device, node, in_types, im.types[id][0], t)) {
      t.on_device = Thunk::OnDevice::kPool;
      t.description += " on " + device->name();
    } else if (device && device_scatter_add(*device, node, in_types, t)) {
      t.on_device = Thunk::OnDevice::kScatterAdd;
      t.description += " on " + device->name();
    } else {
      try {
        t.kernel = &runtime::find_cpu_kernel(*node.def, in_types, im.types[id]);
      } catch (const Error&) {
        // no kernel for these dtypes: the run reports it
      }
    }
    unit_of[id] = static_cast<int>(units.size());
    units.push_back(std::move(t));
  }
  // The thunk order (compiler/schedule.h) sets what buffer assignment can reuse.
  std::vector<ScheduleUnit> work(units.size());
  for (size_t k = 0; k < units.size(); ++k) {
    const Thunk& t = units[k];
    work[k].reads = t.inputs;
    for (int m : t.outputs) work[k].writes.push_back({m, 0});
    for (size_t o = 0; t.fused < 0 && o < im.types[t.node].size(); ++o)
      work[k].writes.push_back({t.node, static_cast<int>(o)});
    if (t.fused < 0) work[k].placement = placement_of_op(nodes[t.node].op);
  }
  order_donated_reads(work, cg, donations, fetched);
  for (int k : schedule_units(work, {im.types, fetched})) im.thunks.push_back(std::move(units[k]));

  assign_slots(im, placeholders, constants, fetched);
  im.slot_on_device.assign(im.slots.size(), 0);
  for (size_t i = 0; i < im.fetched.size(); ++i)
    if (im.fetched_on_device[i]) im.slot_on_device[im.fetched[i]] = 1;
  resolve_donations(im, graph, donations);
  plan_memory(im);
  if (const std::string& dir = current_dump_dir(); !dir.empty()) {
    std::ofstream(dir + "/fusion.txt") << im.fusion_log;
  }
  return Executable(std::move(impl));
}

}  // namespace

Executable compile(const Graph& graph, const std::vector<Tensor>& outputs, const FeedList& feeds,
                   const std::vector<Donation>& donations) {
  return compile_impl(test_device(), graph, outputs, feeds, donations);
}

namespace {

// The device's backend; null for the host. Under KILN_TEST_ONLY_DEVICE the emulated GPU, both
// for the host and for cuda:0 (so that device tensors are tested without a GPU).
std::shared_ptr<const DeviceBackend> backend_of(const Device& device) {
  if (device.type == DeviceType::kCpu) {
    if (device.index != 0)
      throw Error(ErrorCode::kInvalidArgument,
                  "compile: no device " + device.str() + " (the host is cpu:0)");
    return test_device();
  }
  if (device == Device::cuda(0)) {
    if (std::shared_ptr<const DeviceBackend> emulated = test_device()) return emulated;
  }
  return cuda::device_backend(device);
}

}  // namespace

void check_device(const Device& device) { backend_of(device); }

}  // namespace kiln::compiler

namespace kiln::detail {

std::shared_ptr<const DeviceMemory> device_memory(const Device& device) {
  if (device.type == DeviceType::kCpu)
    throw Error(ErrorCode::kInternal, "device_memory: " + device.str() + " is the host");
  return compiler::backend_of(device);
}

}  // namespace kiln::detail

namespace kiln::compiler {

Executable compile(const Graph& graph, const std::vector<Tensor>& outputs, const FeedList& feeds,
                   const std::vector<Donation>& donations, const CompileOptions& options) {
  const bool any = options.outputs_on_device ||
                   std::find(options.device_outputs.begin(), options.device_outputs.end(),
                             true) != options.device_outputs.end();
  if (any && options.device.type == DeviceType::kCpu)
    throw Error(ErrorCode::kInvalidArgument,
                "compile: outputs_on_device needs a device other than the host (device " +
                    options.device.str() + ")");
  if (!options.device_outputs.empty() && options.device_outputs.size() != outputs.size())
    throw Error(ErrorCode::kInvalidArgument,
                "compile: device_outputs has " + std::to_string(options.device_outputs.size()) +
                    " flags for " + std::to_string(outputs.size()) + " outputs");
  std::vector<char> on(outputs.size(), options.outputs_on_device ? 1 : 0);
  for (size_t i = 0; i < options.device_outputs.size(); ++i)
    if (options.device_outputs[i]) on[i] = 1;
  return compile_impl(backend_of(options.device), graph, outputs, feeds, donations,
                      std::move(on));
}

Executable compile_for_device(const std::shared_ptr<const DeviceBackend>& device,
                              const Graph& graph, const std::vector<Tensor>& outputs,
                              const FeedList& feeds, const std::vector<Donation>& donations,
                              bool outputs_on_device) {
  if (!device) throw Error(ErrorCode::kInvalidArgument, "compile_for_device: no device");
  return compile_impl(device, graph, outputs, feeds, donations,
                      std::vector<char>(outputs.size(), outputs_on_device ? 1 : 0));
}

std::vector<Tensor> Executable::run(const FeedList& feeds) const {
  return run_impl(*impl_, feeds, nullptr);
}

std::vector<Tensor> Executable::run_donating(FeedList&& feeds) const {
  return run_impl(*impl_, feeds, &feeds);
}

void Executable::set_profiling(bool on) const {
  std::lock_guard<std::mutex> lock(impl_->profile_mu);
  if (on) impl_->step_profile = StepProfile{};
  impl_->profiling = on;
}

namespace {

// The global profiler's state: whether it is on, the executables that ran under it, and the
// profiles of those destroyed since it started.
struct GlobalProfiler {
  std::atomic<bool> on{false};
  std::mutex mu;
  std::set<const Impl*> ran;
  std::vector<ProgramProfile> retired;
};

GlobalProfiler& global_profiler() {
  static GlobalProfiler* g = new GlobalProfiler;  // never destroyed: executables outlive statics
  return *g;
}

std::vector<std::string> descriptions_of(const Impl& im) {
  std::vector<std::string> d;
  for (const Thunk& t : im.thunks) d.push_back(t.description);
  return d;
}

}  // namespace

bool global_profiling() { return global_profiler().on.load(std::memory_order_relaxed); }

void note_globally_profiled(const Impl& im) {
  GlobalProfiler& g = global_profiler();
  std::lock_guard<std::mutex> lock(g.mu);
  g.ran.insert(&im);
}

void start_global_profiling() {
  GlobalProfiler& g = global_profiler();
  std::lock_guard<std::mutex> lock(g.mu);
  if (g.on) throw Error(ErrorCode::kFailedPrecondition, "profiler::start: already started");
  for (const Impl* im : g.ran) {  // runs that finished after the last stop()
    std::lock_guard<std::mutex> own(im->profile_mu);
    im->global_profile = StepProfile{};
  }
  g.ran.clear();
  g.retired.clear();
  g.on = true;
}

std::vector<ProgramProfile> stop_global_profiling() {
  GlobalProfiler& g = global_profiler();
  std::lock_guard<std::mutex> lock(g.mu);
  if (!g.on) throw Error(ErrorCode::kFailedPrecondition, "profiler::stop: not started");
  g.on = false;
  std::vector<ProgramProfile> out = std::move(g.retired);
  g.retired.clear();
  for (const Impl* im : g.ran) {
    std::lock_guard<std::mutex> own(im->profile_mu);
    out.push_back({im->name, im->global_profile, descriptions_of(*im)});
    im->global_profile = StepProfile{};
  }
  g.ran.clear();
  return out;
}

Executable::Impl::~Impl() {
  {
    GlobalProfiler& g = global_profiler();
    std::lock_guard<std::mutex> lock(g.mu);
    if (g.ran.erase(this) && g.on && global_profile.runs > 0) {
      g.retired.push_back({name, global_profile, descriptions_of(*this)});
    }
  }
  if (!report_profile || step_profile.runs == 0) return;
  std::fprintf(stderr, "kiln profile of '%s':\n%s", name.c_str(),
               format_profile(step_profile, descriptions_of(*this)).c_str());
}

std::string format_profile(const StepProfile& p, const std::vector<std::string>& thunks,
                           int top) {
  if (p.runs == 0) return "  no profiled runs\n";
  const double n = static_cast<double>(p.runs);
  const double step = p.total_us / n;
  auto share = [&](double us) { return step > 0 ? 100.0 * us / n / step : 0.0; };
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line,
                "  %lld runs, %.1f us a run: gemm/conv %.1f (%.0f%%), fused loops %.1f (%.0f%%), "
                "other kernels %.1f (%.0f%%), host %.1f (%.0f%%)\n",
                static_cast<long long>(p.runs), step, p.gemm_conv_us / n, share(p.gemm_conv_us),
                p.fused_loops_us / n, share(p.fused_loops_us), p.other_kernels_us / n,
                share(p.other_kernels_us), p.host_us() / n, share(p.host_us()));
  out += line;
  std::vector<size_t> order(p.thunk_us.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return p.thunk_us[a] > p.thunk_us[b]; });
  for (size_t k = 0; k < order.size() && k < static_cast<size_t>(top); ++k) {
    const size_t i = order[k];
    std::snprintf(line, sizeof line, "  %9.1f us %5.1f%%  #%zu %.300s\n", p.thunk_us[i] / n,
                  share(p.thunk_us[i]), i, i < thunks.size() ? thunks[i].c_str() : "?");
    out += line;
  }
  return out;
}

StepProfile Executable::profile() const {
  std::lock_guard<std::mutex> lock(impl_->profile_mu);
  return impl_->step_profile;
}

DonationStats Executable::donation_stats() const {
  return {impl_->donated_in_place.load(), impl_->donated_copied.load(),
          impl_->donations_refused.load()};
}

MemoryStats Executable::memory_stats() const { return impl_->stats; }

int Executable::num_thunks() const { return static_cast<int>(impl_->thunks.size()); }

int Executable::num_fused_thunks() const {
  int k = 0;
  for (const auto& t : impl_->thunks) k += t.fused >= 0;
  return k;
}

std::vector<std::string> Executable::thunk_descriptions() const {
  std::vector<std::string> d;
  for (const auto& t : impl_->thunks) d.push_back(t.description);
  return d;
}

const std::string& Executable::fusion_log() const { return impl_->fusion_log; }
const CompiledGraph& Executable::optimized() const { return impl_->cg; }

}  // namespace kiln::compiler
