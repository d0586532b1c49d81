// Split reductions for devices (compiler/split_reduction.h).
#include "compiler/split_reduction.h"

#include <algorithm>
#include <utility>

#include "kiln/error.h"

namespace kiln::compiler {
namespace {

// Below this many elements a chunk is not worth its own thread.
constexpr int64_t kMinPerChunk = 256;

bool is_narrow(DType t) { return t == DType::bf16 || t == DType::f16; }

// `s` with element j replaced by x, y.
std::vector<int64_t> split_at(const std::vector<int64_t>& s, int j, int64_t x, int64_t y) {
  std::vector<int64_t> out(s.begin(), s.begin() + j);
  out.push_back(x);
  out.push_back(y);
  out.insert(out.end(), s.begin() + j + 1, s.end());
  return out;
}

// The largest divisor of `d` in [2, most], or 0.
int64_t largest_divisor(int64_t d, int64_t most) {
  for (int64_t s = std::min(d, most); s >= 2; --s)
    if (d % s == 0) return s;
  return 0;
}

// A split reduction's phases launched in turn (split_reduction.h).
class SplitReductionKernel final : public DeviceKernel {
 public:
  SplitReductionKernel(FusedSubgraph sg, SplitReduction split,
                       std::shared_ptr<const DeviceBackend> device,
                       std::shared_ptr<const DeviceKernel> partial,
                       std::shared_ptr<const DeviceKernel> combine,
                       std::shared_ptr<const DeviceKernel> round)
      : sg_(std::move(sg)), shape_(sg_.iteration_shape()), split_(std::move(split)),
        device_(std::move(device)), partial_(std::move(partial)), combine_(std::move(combine)),
        round_(std::move(round)) {
    for (size_t o = 0; o < split_.reduction_of.size(); ++o)
      if (split_.reduction_of[o] >= 0) output_of_.push_back(static_cast<int>(o));
  }

  const FusedSubgraph& subgraph() const override { return sg_; }
  const Shape& shape() const override { return shape_; }
  bool in_place_safe() const override { return false; }

  void launch(void* const* inputs, void* const* outputs) const override {
    DeviceScratch scratch(*device_);
    const size_t reductions = output_of_.size();
    std::vector<void*> partials(reductions), combined(reductions);
    for (size_t r = 0; r < reductions; ++r) {
      partials[r] = scratch.take(bytes_of(split_.partial.output_type(output_of_[r])),
                                 "partial results of " + sg_.name);
      if (split_.rounded_as[r] >= 0)
        combined[r] = scratch.take(bytes_of(split_.combine.output_type(static_cast<int>(r))),
                                   "combined results of " + sg_.name);
    }
    std::vector<void*> outs(sg_.outputs.size());
    for (size_t o = 0; o < outs.size(); ++o) {
      const int r = split_.reduction_of[o];
      outs[o] = r >= 0 ? partials[static_cast<size_t>(r)] : outputs[o];
    }
    partial_->launch(inputs, outs.data());
    std::vector<void*> folded(reductions);
    for (size_t r = 0; r < reductions; ++r)
      folded[r] = split_.rounded_as[r] >= 0 ? combined[r] : outputs[output_of_[r]];
    combine_->launch(partials.data(), folded.data());
    if (round_) {
      std::vector<void*> ins, rounded;
      for (size_t r = 0; r < reductions; ++r) {
        if (split_.rounded_as[r] < 0) continue;
        ins.push_back(combined[r]);
        rounded.push_back(outputs[output_of_[r]]);
      }
      round_->launch(ins.data(), rounded.data());
    }
  }

  // Host tensors, staged through device memory.
  void run(const std::vector<Tensor>& inputs, std::vector<Tensor>* outputs) const override {
    if (inputs.size() != sg_.inputs.size())
      throw Error(ErrorCode::kInvalidArgument, sg_.name + ": run: expected " +
                                                   std::to_string(sg_.inputs.size()) +
                                                   " inputs, got " + std::to_string(inputs.size()));
    DeviceScratch buffers(*device_);
    std::vector<void*> ins, outs;
    for (size_t k = 0; k < inputs.size(); ++k) {
      const FusedSubgraph::Input& want = sg_.inputs[k];
      const Tensor& t = inputs[k];
      if (!t.defined() || t.dtype() != want.buffer_dtype() || t.shape() != want.buffer_shape())
        throw Error(ErrorCode::kInvalidArgument,
                    sg_.name + ": run: input " + std::to_string(k) + " is not " +
                        TensorType{want.buffer_dtype(), want.buffer_shape()}.str());
      const int64_t bytes = static_cast<int64_t>(t.nbytes());
      ins.push_back(buffers.take(bytes, "input of " + sg_.name));
      if (bytes > 0) device_->upload(ins.back(), t.raw_data(), bytes);
    }
    outputs->resize(sg_.outputs.size());
    for (size_t o = 0; o < sg_.outputs.size(); ++o)
      outs.push_back(buffers.take(bytes_of(sg_.output_type(static_cast<int>(o))),
                                  "output of " + sg_.name));
    launch(ins.data(), outs.data());
    for (size_t o = 0; o < sg_.outputs.size(); ++o) {
      const TensorType type = sg_.output_type(static_cast<int>(o));
      Tensor& t = (*outputs)[o];
      if (!t.defined() || t.dtype() != type.dtype || t.shape() != type.shape)
        t = Tensor::empty(type.dtype, type.shape);
      if (t.nbytes() > 0) device_->download(t.raw_mutable_data(), outs[o], bytes_of(type));
    }
  }

 private:
  FusedSubgraph sg_;
  Shape shape_;
  SplitReduction split_;
  std::shared_ptr<const DeviceBackend> device_;
  std::shared_ptr<const DeviceKernel> partial_, combine_, round_;
  std::vector<int> output_of_;  // per reduction: its output of sg_
};

}  // namespace

std::optional<SplitReduction> split_reduction(const FusedSubgraph& sg, int64_t target_items) {
  if (!sg.has_reductions() || sg.has_pieces()) return std::nullopt;
  const Shape shape = sg.iteration_shape();
  const int64_t n = num_elements(sg.reduced_shape()), total = num_elements(shape);
  if (n <= 0 || total <= 0) return std::nullopt;
  const int64_t most = std::min(target_items / n, total / n / kMinPerChunk);
  if (most < 2) return std::nullopt;
  // The first reduced dimension longer than 1, when it has a divisor giving enough chunks (a
  // later one would leave S between reduced axes, a layout the loops do not fold).
  int d = -1;
  for (int64_t a : sg.reduce_axes)
    if (shape[a] > 1) {
      d = static_cast<int>(a);
      break;
    }
  if (d < 0) return std::nullopt;
  const int64_t chunks = largest_divisor(shape[d], most);
  if (chunks < 2) return std::nullopt;
  const int64_t dim = shape[d], per = dim / chunks;
  const int rank = static_cast<int>(shape.size());

  SplitReduction out;
  out.chunks = chunks;
  FusedSubgraph& p = out.partial;
  p.name = sg.name + "_partial";
  p.excess_precision = sg.excess_precision;
  for (const FusedSubgraph::Input& in : sg.inputs) {
    FusedSubgraph::Input q = in;
    const int j = d - (rank - static_cast<int>(in.shape.size()));
    if (j >= 0) {  // it reaches dimension d: split it there, or pad its broadcast 1 to two
      const bool whole = in.shape[j] == dim;
      q.shape = split_at(in.shape, j, whole ? chunks : 1, whole ? per : 1);
      if (in.map) {
        const int64_t st = in.map->strides[j];
        q.map->strides = split_at(in.map->strides, j, whole ? st * per : 0, whole ? st : 0);
      }
    }
    p.inputs.push_back(std::move(q));
  }
  std::vector<int64_t> axes;
  for (int64_t a : sg.reduce_axes) axes.push_back(a < d ? a : a + 1);
  const int n_in = static_cast<int>(sg.inputs.size());
  std::vector<int> value(static_cast<size_t>(n_in));
  for (int k = 0; k < n_in; ++k) value[static_cast<size_t>(k)] = k;
  for (const FusedSubgraph::Node& node : sg.nodes) {
    std::vector<int> args;
    for (int a : node.args) args.push_back(value[static_cast<size_t>(a)]);
    if (node.reduce) {
      // (With excess precision the unsplit loop folds a 16-bit term unrounded; the convert
      // rounds it to its dtype first, as the op-by-op reference does.)
      int v = args[0];
      const DType acc = accumulator_dtype(*node.reduce, node.dtype);
      if (acc != node.dtype) v = p.add(EltOp::kConvert, {v}, acc);
      value.push_back(p.add_reduce(*node.reduce, v, axes));
    } else {
      value.push_back(p.add(node.op, args, node.dtype));
    }
  }
  // Where S lies among the partial results' dimensions: after the kept dimensions before d.
  int s_axis = 0;
  for (int a = 0; a < d; ++a)
    s_axis += !std::binary_search(sg.reduce_axes.begin(), sg.reduce_axes.end(), int64_t{a});
  const Shape partial_shape = p.reduced_shape();

  FusedSubgraph& c = out.combine;
  c.name = sg.name + "_combine";
  std::vector<ReduceKind> kinds;
  std::vector<DType> out_dtypes;
  for (int o : sg.outputs) {
    const int v = value[static_cast<size_t>(o)];
    p.add_output(v);
    if (!sg.is_reduction(o)) {
      out.reduction_of.push_back(-1);
      continue;
    }
    out.reduction_of.push_back(static_cast<int>(kinds.size()));
    kinds.push_back(*sg.nodes[static_cast<size_t>(o - n_in)].reduce);
    out_dtypes.push_back(sg.dtype(o));
    c.add_input(p.dtype(v), partial_shape);
  }
  for (size_t r = 0; r < kinds.size(); ++r)
    c.add_output(c.add_reduce(kinds[r], static_cast<int>(r), {s_axis}));

  FusedSubgraph round;
  round.name = sg.name + "_round";
  for (size_t r = 0; r < kinds.size(); ++r) {
    const DType acc = c.dtype(c.outputs[r]), want = out_dtypes[r];
    if (acc == want) {
      out.rounded_as.push_back(-1);
      continue;
    }
    out.rounded_as.push_back(static_cast<int>(round.inputs.size()));
    round.add_input(acc, sg.reduced_shape());
  }
  for (size_t r = 0, k = 0; r < kinds.size(); ++r) {
    if (out.rounded_as[r] < 0) continue;
    int v = static_cast<int>(k++);
    const DType acc = round.dtype(v), want = out_dtypes[r];
    // As the CPU's split kernels round: an f64 accumulator to f32, then to 16 bits.
    if (is_narrow(want) && acc == f64) v = round.add(EltOp::kConvert, {v}, f32);
    round.add_output(round.add(EltOp::kConvert, {v}, want));
  }
  if (!round.inputs.empty()) out.round = std::move(round);
  return out;
}

namespace {

// `split`'s phases, appended to `out` in launch order.
void append_phases(const SplitReduction& split, std::vector<FusedSubgraph>& out) {
  out.push_back(split.partial);
  out.push_back(split.combine);
  if (split.round) out.push_back(*split.round);
}

}  // namespace

std::vector<FusedSubgraph> expand_split_reductions(const std::vector<FusedSubgraph>& subgraphs) {
  std::vector<FusedSubgraph> out;
  for (const FusedSubgraph& sg : subgraphs) {
    if (std::optional<SplitReduction> split = split_reduction(sg, kSplitTargetItems)) {
      append_phases(*split, out);
    } else {
      out.push_back(sg);
    }
  }
  return out;
}

std::vector<std::shared_ptr<const DeviceKernel>> compile_device_kernels(
    const std::shared_ptr<const DeviceBackend>& device, const std::vector<FusedSubgraph>& subgraphs,
    std::vector<std::string>* errors) {
  // Every subgraph, or its phases, compiled together.
  std::vector<FusedSubgraph> all;
  std::vector<std::optional<SplitReduction>> splits;
  std::vector<size_t> first;
  for (const FusedSubgraph& sg : subgraphs) {
    first.push_back(all.size());
    splits.push_back(split_reduction(sg, kSplitTargetItems));
    if (splits.back()) {
      append_phases(*splits.back(), all);
    } else {
      all.push_back(sg);
    }
  }
  std::vector<std::string> errs;
  std::vector<std::shared_ptr<const DeviceKernel>> compiled = device->compile(all, &errs);
  std::vector<std::shared_ptr<const DeviceKernel>> kernels(subgraphs.size());
  errors->assign(subgraphs.size(), "");
  std::vector<FusedSubgraph> unsplit;  // whose phases failed: compiled whole instead
  std::vector<size_t> unsplit_of;
  for (size_t i = 0; i < subgraphs.size(); ++i) {
    const size_t f = first[i];
    if (!splits[i]) {
      kernels[i] = compiled[f];
      (*errors)[i] = errs[f];
      continue;
    }
    const size_t phases = splits[i]->round ? 3 : 2;
    bool ok = true;
    for (size_t k = f; k < f + phases; ++k) ok = ok && errs[k].empty() && compiled[k];
    if (!ok) {
      unsplit.push_back(subgraphs[i]);
      unsplit_of.push_back(i);
      continue;
    }
    kernels[i] = std::make_shared<SplitReductionKernel>(
        subgraphs[i], std::move(*splits[i]), device, compiled[f], compiled[f + 1],
        phases == 3 ? compiled[f + 2] : nullptr);
  }
  if (!unsplit.empty()) {
    std::vector<std::string> whole_errs;
    std::vector<std::shared_ptr<const DeviceKernel>> whole = device->compile(unsplit, &whole_errs);
    for (size_t k = 0; k < unsplit.size(); ++k) {
      kernels[unsplit_of[k]] = whole[k];
      (*errors)[unsplit_of[k]] = whole_errs[k];
    }
  }
  return kernels;
}

}  // namespace kiln::compiler
