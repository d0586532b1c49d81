// Split reductions for devices. A device's loop folds each reduced output in one thread
// (llvm_ir/grid_kernel.h), so a reduction with few outputs over many elements (a loss summed
// over the batch, a bias gradient over batch and pixels, a norm) would run on a handful of
// threads. Such a loop is split, like XLA's tree reduction rewriter, into loops that each fill
// a GPU's threads:
//   1. partial: the loop over the iteration shape with its first long reduced dimension D cut
//      into (S, D/S), folding the reduced axes but S: S partial results per output, each
//      reduction's values converted first to its accumulator dtype (exactly), so that the
//      partials are unrounded;
//   2. combine: the partials folded over S, in order, in the accumulator dtype;
//   3. round: the accumulator values rounded to the outputs' dtypes (as the CPU's split kernels
//      round: f64 to f32, then to bf16/f16), where they differ.
// Each is a FusedSubgraph any backend compiles; SplitReductionKernel launches them in turn
// over scratch it takes from the device's memory. A sum's terms are added in another order
// than the unsplit loop's (chunk by chunk, then the chunks in order), with the same one
// rounding at the end; under excess precision (FusedSubgraph::excess_precision) a 16-bit term
// is rounded to its dtype before it is folded, as the op-by-op reference rounds it, where the
// unsplit loop folds it unrounded.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/device_backend.h"
#include "compiler/fused_subgraph.h"

namespace kiln::compiler {

struct SplitReduction {
  int64_t chunks = 0;  // S
  FusedSubgraph partial, combine;
  std::optional<FusedSubgraph> round;
  // Per output of the original subgraph: its reduction's index among the partial outputs (and
  // the combine's inputs and outputs), or -1 for an iteration-shaped output, which the partial
  // loop writes directly.
  std::vector<int> reduction_of;
  // Per reduction: its index among round's inputs and outputs, or -1 when the combine writes
  // the output itself (its dtype is the accumulator's).
  std::vector<int> rounded_as;
};

// The split of `sg` for a device that runs `target_items` threads at once, or nullopt when it
// needs none (many outputs already, or a short reduced range) or has none (no reduced
// dimension with a divisor that gives enough chunks; pieces of a concatenate).
std::optional<SplitReduction> split_reduction(const FusedSubgraph& sg, int64_t target_items);

// The threads a device's split reductions aim to fill.
inline constexpr int64_t kSplitTargetItems = 16384;

// Compiles `subgraphs` with `device`, each reduction split_reduction splits as its phases
// (one SplitReductionKernel): DeviceBackend::compile's contract.
std::vector<std::shared_ptr<const DeviceKernel>> compile_device_kernels(
    const std::shared_ptr<const DeviceBackend>& device, const std::vector<FusedSubgraph>& subgraphs,
    std::vector<std::string>* errors);

// `subgraphs` with every split reduction replaced by its phases (for the PTX check).
std::vector<FusedSubgraph> expand_split_reductions(const std::vector<FusedSubgraph>& subgraphs);

}  // namespace kiln::compiler
