// Checkpoints: named tensors plus metadata in Kiln's own format, written atomically and
// CRC-checked on load; CheckpointManager keeps the last N of a training run.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::io {

// Metadata values are strings or integers: {"epoch", 3}, {"model", "mlp"}.
using MetadataValue = std::variant<std::string, int64_t>;
using Metadata = std::map<std::string, MetadataValue>;

// A checkpoint <prefix> is two files:
//   <prefix>.index           a CheckpointIndex protobuf (one TFRecord-framed record, so it is
//                            CRC-checked too): per tensor its name, dtype, shape, offset,
//                            length and CRC-32C; the metadata; the data file's name and size
//   <prefix>.data-<16 hex>   the tensors' bytes back to back (64-byte aligned, little-endian)
// The save is atomic: the data goes to a new file (temp file, fsync, rename to a fresh name),
// then the index replaces the old one the same way (the commit point), then the directory is
// synced and files of earlier or interrupted saves of this prefix are removed. A crash at any
// point leaves the previous checkpoint of this prefix loadable, or the complete new one.
//
// `path` is a prefix ("run/model" writes run/model.index), or an existing directory or a path
// ending in '/' (writes <dir>/ckpt.index). Missing parent directories are created. Returns the
// prefix written. Symbolic or undefined tensors throw kInvalidArgument; I/O errors
// kFailedPrecondition, naming the file.
//
// Fault injection for tests: with the environment variable KILN_FAULT_KILL_DURING_SAVE=<n>, the
// n-th save this process makes while the variable is set (counting from 1) raises SIGKILL
// halfway through writing its data file (part of the temp file written, nothing renamed);
// KILN_FAULT_KILL_DURING_SAVE=<n>:<stage> kills it at another stage of the save (the stages,
// from data_partial to old_removed, are listed in src/api/io/checkpoint.cc).
std::string save_checkpoint(const std::string& path, const std::map<std::string, Tensor>& tensors,
                            const Metadata& metadata = {});

// One tensor as the index describes it.
struct CheckpointEntry {
  std::string name;
  DType dtype = f32;
  Shape shape;
  uint64_t offset = 0, length = 0;
  uint32_t crc32c = 0;
};

struct CheckpointIndex {
  std::string prefix;
  std::string data_path;
  uint64_t data_size = 0;
  std::vector<CheckpointEntry> entries;  // in the order stored
  Metadata metadata;
};

struct Checkpoint {
  std::string prefix;
  std::map<std::string, Tensor> tensors;
  Metadata metadata;

  // A metadata value; a missing or mistyped key throws kNotFound naming it.
  int64_t get_int(const std::string& key) const;
  const std::string& get_string(const std::string& key) const;
};

// `path` is a prefix, its .index file, or a directory: its latest checkpoint (see
// latest_checkpoint), else <dir>/ckpt. Everything the index says is checked before use: dtypes,
// shapes (lengths must equal elements * dtype size, without overflow), every offset and
// length against the data file's actual size; nothing is allocated from a size in the file
// before that check. Errors throw kiln::Error: kNotFound for a missing checkpoint, kDataLoss
// for a corrupt or truncated one, naming the file, and for a tensor its name and offset.
Checkpoint load_checkpoint(const std::string& path);
// Reads and checks the index only (what load_checkpoint checks before reading data).
CheckpointIndex read_checkpoint_index(const std::string& path);

// The prefix of the latest checkpoint in `dir`: the one its "checkpoint" pointer file names, if
// that checkpoint's index exists; otherwise the ckpt-<step> with the highest step; nullopt if
// there is none. A corrupt pointer file throws kDataLoss.
std::optional<std::string> latest_checkpoint(const std::string& dir);

// Saves numbered checkpoints <dir>/ckpt-<step> and keeps the last `max_to_keep` of them
// (max_to_keep <= 0 keeps all). After each save the pointer file <dir>/checkpoint (text:
// model_checkpoint_path / all_model_checkpoint_paths, as TensorFlow's) is replaced atomically,
// then older checkpoints beyond max_to_keep are deleted. On construction it picks up the
// ckpt-<step> checkpoints already in `dir` (created if missing).
class CheckpointManager {
 public:
  explicit CheckpointManager(std::string dir, int max_to_keep = 5);

  // Writes <dir>/ckpt-<step> (replacing one of that step) and returns its prefix.
  std::string save(const std::map<std::string, Tensor>& tensors, int64_t step,
                   const Metadata& metadata = {});
  std::optional<std::string> latest() const;
  // The kept checkpoints' prefixes, oldest first.
  const std::vector<std::string>& checkpoints() const { return checkpoints_; }
  const std::string& directory() const { return dir_; }
  // Deletes every checkpoint of this manager, the pointer file and leftovers of interrupted
  // saves.
  void remove_all();

 private:
  void write_pointer() const;
  void remove_interrupted_saves() const;
  std::string dir_;
  int max_to_keep_;
  std::vector<std::string> checkpoints_;
};

// Removes the files of the checkpoint at `prefix` (index, data files, leftovers of interrupted
// saves). Missing files are not an error.
void remove_checkpoint(const std::string& prefix);

}  // namespace kiln::io
