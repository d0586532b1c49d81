// What kind of file a path holds, judged by its name and first record: so that a loader given
// the wrong file says what it was given ("x.index is a checkpoint index, not a Kiln model
// (.kiln); restore it with ...") instead of failing on its contents or loading nonsense.
#pragma once

#include <string>
#include <string_view>

namespace kiln::io::internal {

enum class FileKind {
  kMissing,
  kDirectory,  // none of the directories below
  kEmpty,
  kGzip,
  kNotRecords,     // does not start with a TFRecord record
  kRecords,        // a TFRecord file whose first record is none of the kinds below
  kExamples,       // TFRecord of tf.train.Example records
  kEventFile,      // TensorBoard
  kWholeModel,     // nn::save_model's file
  kExportedModel,  // io::save_model's directory, or one version of it
  kExportedGraph,  // its saved_model.pb
  kCheckpointIndex,
  kCheckpointPrefix,  // a path P that does not exist, where P.index does
  kCheckpointData,
  kCheckpointDir,      // a directory holding checkpoints
  kCheckpointPointer,  // a CheckpointManager directory's "checkpoint" file
};

// Reads at most the file's first record. A first record that is damaged (its length is framed
// as TFRecord but the record is truncated or fails its CRC) throws the reader's kDataLoss.
FileKind file_kind(const std::string& path);
// The kind of a TFRecord file whose first record is `record`: kRecords when none is known.
FileKind record_kind(std::string_view record);

// Throws the kiln::Error for `who` given the file at `path`, of kind `kind`, where it wanted
// `expected` ("a Kiln model (.kiln)"): what the file is and how to read it. kNotFound for a
// missing file, kDataLoss for one that may be damaged (empty, not TFRecord framed),
// kInvalidArgument for any other.
[[noreturn]] void wrong_kind(const std::string& who, const std::string& path, FileKind kind,
                             const std::string& expected);

}  // namespace kiln::io::internal
