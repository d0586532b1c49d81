// KILN_DUMP=<dir>: where the compiler writes what it did, for inspection. Each compile writes
// in a subdirectory of its own, <dir>/<graph>_<signature>_<n>, so that no compile overwrites
// another's dump: its pass dumps, fusion and memory plans, and its kernels' IR and assembly.
#pragma once

#include <string>
#include <string_view>

#include "kiln/graph.h"

namespace kiln::compiler {

// The dump directory of the compile running on this thread (the innermost DumpScope's), or ""
// outside one.
const std::string& current_dump_dir();

// A new, empty subdirectory of $KILN_DUMP named "<name>_<signature>_<n>" ("<name>_<n>" without
// a signature), n counting up per process past names already taken, every character but
// letters, digits and "_-.[]," replaced by '_'. "" when KILN_DUMP is unset or empty. Throws
// kiln::Error if it cannot be created.
std::string new_dump_dir(std::string_view name, std::string_view signature = "");

// The current dump directory, or outside a compile a new one named `name` (see new_dump_dir).
std::string dump_dir_for(std::string_view name);

// Makes `dir` this thread's dump directory until destroyed ("": none).
class DumpScope {
 public:
  explicit DumpScope(std::string dir);
  ~DumpScope();
  DumpScope(const DumpScope&) = delete;
  DumpScope& operator=(const DumpScope&) = delete;

 private:
  std::string saved_;
};

// The short signature naming a compile's dump: the types of the feeds whose placeholder leaves a
// dimension unknown (the batch: "f32[64,784]_i32[64]"), in feed order, or of every feed when
// none does; at most four, then "_+<how many more>".
std::string dump_signature(const FeedList& feeds);

}  // namespace kiln::compiler
