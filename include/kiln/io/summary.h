// TensorBoard event files: scalars, histograms and graphs, written as TFRecord-framed Event
// protos that `tensorboard --logdir` reads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kiln/graph.h"
#include "kiln/tensor.h"

namespace kiln::io {

// Writes one new event file in `logdir` (created with its parents if missing), named
// events.out.tfevents.<unix seconds, 10 digits>.<hostname>.<pid>, with ".<n>" appended if a
// file of that name exists. Its first event carries file_version "brain.Event:2".
// Events are buffered: they reach the file on flush(), close(), destruction, when 10 are
// pending, or when the last flush is over 120 s old. The file is appended to while it is being
// written (TensorBoard reads it live), so unlike RecordWriter it is not written atomically.
// Thread-safe. Errors throw kiln::Error naming the file. Movable; a moved-from writer may only
// be destroyed or assigned to.
class EventWriter {
 public:
  explicit EventWriter(const std::string& logdir);
  ~EventWriter();  // flushes and closes; errors are dropped (call close() to see them)
  EventWriter(EventWriter&&) noexcept;
  EventWriter& operator=(EventWriter&&) noexcept;

  // A scalar (Summary.Value.simple_value, a float).
  void add_scalar(const std::string& tag, double value, int64_t step);
  // A histogram of all elements of `values` (any real dtype), with TensorFlow's buckets: limits
  // growing by 10% from +-1e-12 to +-1e20, plus 0 and +-DBL_MAX; runs of empty buckets merge
  // into one. Bucket i counts the values in (bucket_limit[i-1], bucket_limit[i]]. Throws
  // kInvalidArgument for NaN or infinite values, naming the tag and the element index.
  void add_histogram(const std::string& tag, const Tensor& values, int64_t step);
  // The graph as a GraphDef: each node's name, op, inputs ("name" for output 0, "name:k"),
  // attributes, and its output shapes as "_output_shapes".
  void add_graph(const Graph& graph);
  void flush();
  void close();

  const std::string& path() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace kiln::io
