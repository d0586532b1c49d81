// Model export and load: the inference graph as a SavedModel protobuf plus a checkpoint of the
// variables, in <dir>/<version>/; loading rebuilds the graph op by op with call_op, and runs it
// compiled.
#include "kiln/io/saved_model.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <type_traits>

#include "compiler/compile_cache.h"
#include "kiln/io/checkpoint.h"
#include "kiln/io/tfrecord.h"
#include "kiln/op_registry.h"
#include "kiln/version.h"
#include "src/api/io/file_io.h"
#include "src/api/io/file_kind.h"
#include "src/api/io/proto/saved_model.pb.h"
#include "src/api/io/proto_codec.h"
#include "src/api/io/tensor_codec.h"
#include "src/core/graph_walk.h"
#include "src/core/tensor_impl.h"

namespace kiln::io {
namespace fs = std::filesystem;
namespace saved = proto::saved;
using internal::attrs_from;
using internal::set_attr;
using internal::set_type;
using internal::Source;
using internal::type_from;
namespace {

constexpr uint32_t kFormatVersion = 1;
constexpr const char* kGraphFile = "saved_model.pb";
constexpr const char* kVariables = "variables/variables";
constexpr const char* kServing = "serving_default";
constexpr int kMaxVersionTries = 100;
constexpr size_t kCompiledPrograms = 8;  // per loaded model: signatures x input shapes

[[noreturn]] void fail(ErrorCode code, const std::string& message) { throw Error(code, message); }

// The version directories in `dir`: numeric names, ascending.
std::vector<int64_t> versions_in(const std::string& dir) {
  std::vector<int64_t> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.size() > 18 || name[0] == '0' ||
        !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    std::error_code e2;
    if (fs::is_directory(it->path(), e2)) out.push_back(std::stoll(name));
  }
  std::sort(out.begin(), out.end());
  return out;
}

struct VersionDir {
  std::string path;
  int64_t version = 0;
};

VersionDir find_version(const std::string& dir, int64_t version, const char* who) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    internal::wrong_kind(who, dir, internal::file_kind(dir), "an exported model directory");
  }
  if (version == 0 && fs::exists(fs::path(dir) / kGraphFile, ec)) {  // a version directory
    const std::string name = fs::path(dir).lexically_normal().filename().string();
    const bool numeric =
        !name.empty() && name.size() <= 18 &&
        std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; });
    return {dir, numeric ? std::stoll(name) : 0};
  }
  std::vector<int64_t> versions = versions_in(dir);
  if (versions.empty()) {
    const bool checkpoints = internal::file_kind(dir) == internal::FileKind::kCheckpointDir;
    fail(ErrorCode::kNotFound,
         std::string(who) + ": no saved model in " + dir +
             " (no numbered version directories, no " + kGraphFile + ")" +
             (checkpoints
                  ? "; it is a checkpoint directory: restore it with io::load_checkpoint(\"" + dir +
                        "\")"
                  : ""));
  }
  if (version == 0) version = versions.back();
  if (!std::binary_search(versions.begin(), versions.end(), version)) {
    std::string have;
    for (int64_t v : versions) have += (have.empty() ? "" : ", ") + std::to_string(v);
    fail(ErrorCode::kNotFound, std::string(who) + ": " + dir + " has no version " +
                                   std::to_string(version) + " (it has " + have + ")");
  }
  return {(fs::path(dir) / std::to_string(version)).string(), version};
}

// The nodes signature `s`'s outputs need, up to its inputs (which are fed), in search order.
// The node references must have been checked.
std::vector<int> nodes_needed(const saved::SavedModel& m, const saved::SignatureDef& s) {
  std::set<int> fed;
  for (const saved::TensorBinding& b : s.inputs()) fed.insert(b.value().node());
  std::vector<bool> seen(m.nodes_size(), false);
  std::vector<int> stack, needed;
  for (const saved::TensorBinding& b : s.outputs()) stack.push_back(b.value().node());
  while (!stack.empty()) {
    const int id = stack.back();
    stack.pop_back();
    if (seen[id] || fed.count(id)) continue;
    seen[id] = true;
    needed.push_back(id);
    for (const saved::NodeInput& in : m.nodes(id).inputs()) stack.push_back(in.node());
  }
  return needed;
}

struct ParsedModel {
  VersionDir where;
  saved::SavedModel model;
};

ParsedModel read_saved_model(const std::string& dir, int64_t version, const char* who) {
  ParsedModel out;
  out.where = find_version(dir, version, who);
  const std::string file = (fs::path(out.where.path) / kGraphFile).string();
  std::error_code ec;
  if (!fs::exists(file, ec)) {
    fail(ErrorCode::kNotFound, std::string(who) + ": " + out.where.path + " has no " + kGraphFile);
  }
  const Source src{file};
  std::vector<std::string> records = read_records(file);
  if (records.size() != 1) {
    src.corrupt("expected one SavedModel record, found " + std::to_string(records.size()));
  }
  if (!out.model.ParseFromString(records[0])) src.corrupt("the record is not a SavedModel");
  if (out.model.format_version() != kFormatVersion) {
    src.corrupt("unsupported format version " + std::to_string(out.model.format_version()) +
                " (this Kiln reads version " + std::to_string(kFormatVersion) + ")");
  }
  // Structure: inputs refer to earlier nodes' existing outputs; bindings to existing values.
  const auto& nodes = out.model.nodes();
  auto check_value = [&](const saved::NodeInput& v, int limit, const std::string& where) {
    if (v.node() < 0 || v.node() >= limit) {
      src.corrupt(where + " refers to node " + std::to_string(v.node()) +
                  (limit < nodes.size() ? " (not an earlier node)"
                                        : " (there are " + std::to_string(limit) + ")"));
    }
    if (v.output() < 0 || v.output() >= nodes[v.node()].outputs_size()) {
      src.corrupt(where + " refers to output " + std::to_string(v.output()) + " of node '" +
                  nodes[v.node()].name() + "', which has " +
                  std::to_string(nodes[v.node()].outputs_size()));
    }
  };
  for (int i = 0; i < nodes.size(); ++i) {
    for (const saved::NodeInput& in : nodes[i].inputs()) {
      check_value(in, i, "node " + std::to_string(i) + " ('" + nodes[i].name() + "')");
    }
  }
  std::set<std::string> signature_names;
  for (const saved::SignatureDef& s : out.model.signatures()) {
    if (!signature_names.insert(s.name()).second) {
      src.corrupt("signature '" + s.name() + "' appears twice");
    }
    for (const auto* list : {&s.inputs(), &s.outputs()}) {
      std::set<std::string> names;
      for (const saved::TensorBinding& b : *list) {
        const std::string where = "signature '" + s.name() + "', tensor '" + b.name() + "'";
        if (!names.insert(b.name()).second) src.corrupt(where + " appears twice");
        check_value(b.value(), nodes.size(), where);
      }
    }
    for (const saved::TensorBinding& b : s.inputs()) {
      if (nodes[b.value().node()].op() != "placeholder") {
        src.corrupt("signature '" + s.name() + "': input '" + b.name() + "' is not a placeholder");
      }
    }
  }
  std::set<int> bound;
  for (const saved::VariableBinding& v : out.model.variables()) {
    if (v.node() < 0 || v.node() >= nodes.size() || nodes[v.node()].op() != "placeholder" ||
        nodes[v.node()].outputs_size() != 1) {
      src.corrupt("variable '" + v.key() + "' is bound to node " + std::to_string(v.node()) +
                  ", which is not a placeholder of the graph");
    }
    if (!bound.insert(v.node()).second) {
      src.corrupt("node " + std::to_string(v.node()) + " is bound to two variables");
    }
  }
  // Running a signature feeds its inputs and its variables only: its outputs may need no other
  // placeholder, and an input cannot be a variable.
  for (const saved::SignatureDef& s : out.model.signatures()) {
    for (const saved::TensorBinding& b : s.inputs()) {
      if (bound.count(b.value().node())) {
        src.corrupt("signature '" + s.name() + "': input '" + b.name() +
                    "' is bound to a variable");
      }
    }
    for (int id : nodes_needed(out.model, s)) {
      if (nodes[id].op() == "placeholder" && !bound.count(id)) {
        src.corrupt("signature '" + s.name() + "' needs placeholder node " + std::to_string(id) +
                    " ('" + nodes[id].name() + "'), which is neither its input nor a variable");
      }
    }
  }
  return out;
}

// Each signature tensor's declared type is the type the file gives its node's output (which
// load_model checks against the rebuilt graph), so the info describes what running gives.
void check_signature_types(const saved::SavedModel& m, const Source& src) {
  for (const saved::SignatureDef& s : m.signatures()) {
    for (const auto* list : {&s.inputs(), &s.outputs()}) {
      for (const saved::TensorBinding& b : *list) {
        const std::string where = "signature '" + s.name() + "', tensor '" + b.name() + "'";
        const saved::NodeDef& node = m.nodes(b.value().node());
        const TensorType declared = type_from(b.type(), src, where);
        const TensorType actual =
            type_from(node.outputs(b.value().output()), src, "node '" + node.name() + "'");
        if (declared != actual) {
          src.corrupt(where + " is declared " + declared.str() + ", but output " +
                      std::to_string(b.value().output()) + " of its node '" + node.name() +
                      "' is " + actual.str());
        }
      }
    }
  }
}

std::string variables_prefix(const std::string& version_dir) {
  return (fs::path(version_dir) / kVariables).string();
}

// Reads the model's variables with `read`. A variables file of another kind (a Kiln model or a
// graph written over the index) is the export being damaged, as any other corrupt file in it is:
// kDataLoss, not the kInvalidArgument that load_checkpoint gives a user who passed it the wrong
// file.
template <typename Read>
auto read_variables(const char* who, Read&& read) {
  try {
    return read();
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kInvalidArgument) throw;
    fail(ErrorCode::kDataLoss,
         std::string(who) + ": the model's variables are damaged: " + e.what());
  }
}

SavedModelInfo info_from(const ParsedModel& parsed, const char* who) {
  const saved::SavedModel& m = parsed.model;
  const Source src{(fs::path(parsed.where.path) / kGraphFile).string()};
  SavedModelInfo info;
  info.path = parsed.where.path;
  info.version = parsed.where.version;
  info.model_name = m.model_name();
  info.kiln_version = m.kiln_version();
  info.num_nodes = m.nodes_size();
  for (const saved::NodeDef& n : m.nodes()) ++info.op_counts[n.op()];
  for (const saved::SignatureDef& s : m.signatures()) {
    SignatureInfo& sig = info.signatures[s.name()];
    for (const saved::TensorBinding& b : s.inputs())
      sig.inputs[b.name()] = type_from(b.type(), src, "signature '" + s.name() + "'");
    for (const saved::TensorBinding& b : s.outputs())
      sig.outputs[b.name()] = type_from(b.type(), src, "signature '" + s.name() + "'");
  }
  CheckpointIndex vars = read_variables(
      who, [&] { return read_checkpoint_index(variables_prefix(parsed.where.path)); });
  for (const CheckpointEntry& e : vars.entries) {
    info.variables.push_back({e.name, e.dtype, e.shape});
    info.num_parameters += num_elements(e.shape);
  }
  return info;
}

std::string random_suffix() {
  std::random_device rd;
  char s[20];
  std::snprintf(s, sizeof s, "%08x%08x", rd(), static_cast<unsigned>(getpid()));
  return s;
}

void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  fsync(fd);
  ::close(fd);
}

// Whether a value of `value`'s dtype and shape may be fed to a placeholder of type `expected`.
bool fits(const TensorType& expected, const Tensor& value) {
  if (value.dtype() != expected.dtype || value.shape().size() != expected.shape.size())
    return false;
  for (size_t d = 0; d < expected.shape.size(); ++d)
    if (expected.shape[d] != kUnknownDim && expected.shape[d] != value.shape()[d]) return false;
  return true;
}

// Opens a name scope for each "/"-separated part of `name` but the last, which it returns:
// rebuilt nodes keep their scopes ("dense/dot").
std::string enter_scopes(const Graph& g, const std::string& name,
                         std::vector<std::unique_ptr<Graph::NameScope>>& scopes) {
  size_t start = 0;
  for (size_t slash; (slash = name.find('/', start)) != std::string::npos; start = slash + 1) {
    if (slash > start) {
      scopes.push_back(std::make_unique<Graph::NameScope>(g, name.substr(start, slash - start)));
    }
  }
  std::string last = name.substr(start);
  return last.empty() ? "node" : last;
}

}  // namespace

// ---- save -----------------------------------------------------------------------------------

std::string save_graph(const ExportedGraph& ig, const std::string& dir) {
  if (dir.empty()) fail(ErrorCode::kInvalidArgument, "save_model: the directory is empty");
  if (ig.inputs.empty() || ig.outputs.empty()) {
    fail(ErrorCode::kInvalidArgument, "save_model: the signature needs inputs and outputs");
  }
  const Graph& g = ig.graph;
  std::set<int> input_nodes;
  for (const auto& [name, t] : ig.inputs) input_nodes.insert(t.impl()->node);

  // The nodes the outputs need, in recording (topological) order.
  std::vector<int> roots;
  for (const auto& [name, t] : ig.outputs) roots.push_back(t.impl()->node);
  std::vector<bool> needed;
  {
    std::lock_guard lock(g.impl()->mu);
    needed = detail::ancestors(g.impl()->nodes, roots);
  }
  std::map<int, std::string> variable_keys;  // placeholder node -> checkpoint key
  std::map<std::string, Tensor> values;
  for (const auto& [var, placeholder] : ig.variables) {
    const int id = placeholder.impl()->node;
    if (!needed[id]) continue;
    std::string key = var.name();
    for (int i = 1; values.count(key); ++i) key = var.name() + "#" + std::to_string(i);
    values[key] = var.value();
    variable_keys[id] = key;
  }

  saved::SavedModel m;
  m.set_format_version(kFormatVersion);
  m.set_kiln_version(kiln::version());
  m.set_model_name(ig.model_name);
  std::vector<int> new_id(g.num_nodes(), -1);
  for (int id = 0; id < g.num_nodes(); ++id) {
    if (!needed[id]) continue;
    const NodeInfo node = g.node(id);
    if (node.op == "placeholder" && !input_nodes.count(id) && !variable_keys.count(id)) {
      fail(ErrorCode::kUnimplemented, "save_model: the inference graph of '" + ig.model_name +
                                          "' needs placeholder '" + node.name +
                                          "', which is neither an input nor a variable");
    }
    new_id[id] = m.nodes_size();
    saved::NodeDef* out = m.add_nodes();
    out->set_name(node.name);
    out->set_op(node.op);
    for (const ValueRef& in : node.inputs) {
      saved::NodeInput* ref = out->add_inputs();
      ref->set_node(new_id[in.node]);
      ref->set_output(in.output);
    }
    for (const auto& [name, value] : node.attrs.values()) {
      set_attr(out->add_attrs(), name, value, node.name);
    }
    for (const TensorType& t : node.outputs) set_type(out->add_outputs(), t);
  }
  for (const auto& [id, key] : variable_keys) {
    saved::VariableBinding* b = m.add_variables();
    b->set_node(new_id[id]);
    b->set_key(key);
  }
  saved::SignatureDef* sig = m.add_signatures();
  sig->set_name(kServing);
  for (const auto& [name, t] : ig.inputs) {
    if (new_id[t.impl()->node] < 0) {
      fail(ErrorCode::kInvalidArgument,
           "save_model: no output of '" + ig.model_name + "' depends on input '" + name + "'");
    }
    saved::TensorBinding* in = sig->add_inputs();
    in->set_name(name);
    in->mutable_value()->set_node(new_id[t.impl()->node]);
    set_type(in->mutable_type(), {t.dtype(), t.shape()});
  }
  for (const auto& [name, t] : ig.outputs) {
    saved::TensorBinding* out = sig->add_outputs();
    out->set_name(name);
    out->mutable_value()->set_node(new_id[t.impl()->node]);
    out->mutable_value()->set_output(t.impl()->output);
    set_type(out->mutable_type(), {t.dtype(), t.shape()});
  }

  // Write everything into a temporary directory, then rename it to the next free version.
  internal::make_directories(dir, "save_model");
  const std::string temp = (fs::path(dir) / (".tmp-saved_model-" + random_suffix())).string();
  try {
    internal::make_directories(temp, "save_model");
    save_checkpoint(variables_prefix(temp), values);
    internal::OutputFile file((fs::path(temp) / kGraphFile).string(),
                              internal::OutputFile::Mode::kAtomic, Compression::kNone,
                              "save_model");
    internal::write_record(file, m.SerializeAsString());
    file.close();
    sync_directory(temp);
    std::vector<int64_t> versions = versions_in(dir);
    int64_t version = versions.empty() ? 1 : versions.back() + 1;
    for (int tries = 0;; ++tries, ++version) {
      const std::string target = (fs::path(dir) / std::to_string(version)).string();
      if (std::rename(temp.c_str(), target.c_str()) == 0) {
        sync_directory(dir);
        return target;
      }
      // Another writer took this version (rename fails on a non-empty directory): next one.
      if ((errno != EEXIST && errno != ENOTEMPTY) || tries >= kMaxVersionTries) {
        fail(ErrorCode::kFailedPrecondition,
             "save_model: cannot rename " + temp + " to " + target + ": " + std::strerror(errno));
      }
    }
  } catch (...) {
    std::error_code ec;
    fs::remove_all(temp, ec);
    throw;
  }
}

// ---- load -----------------------------------------------------------------------------------

struct LoadedModel::Impl {
  SavedModelInfo info;
  Graph graph;
  struct Signature {
    std::map<std::string, Tensor> inputs, outputs;
    FeedList variables;  // the variables' placeholders its outputs need, with their values
  };
  std::map<std::string, Signature> signatures;
  mutable compiler::CompileCache programs{kCompiledPrograms};
};

ExportedGraph LoadedModel::exported(const std::string& signature) const {
  auto it = impl_->signatures.find(signature);
  if (it == impl_->signatures.end()) {
    std::string known;
    for (const auto& [name, sig] : impl_->signatures) known += (known.empty() ? "" : ", ") + name;
    fail(ErrorCode::kNotFound, "LoadedModel::exported: " + impl_->info.path +
                                   " has no signature '" + signature + "' (it has: " + known + ")");
  }
  const Impl::Signature& sig = it->second;
  ExportedGraph e{impl_->info.model_name, impl_->graph, {}, {}, {}};
  for (const auto& [name, t] : sig.inputs) e.inputs.push_back({name, t});
  for (const auto& [name, t] : sig.outputs) e.outputs.push_back({name, t});
  for (const auto& [placeholder, value] : sig.variables)
    e.variables.push_back({Variable(value, placeholder.name()), placeholder});
  return e;
}

SavedModelInfo describe_saved_model(const std::string& dir, int64_t version) {
  ParsedModel parsed = read_saved_model(dir, version, "describe_saved_model");
  SavedModelInfo info = info_from(parsed, "describe_saved_model");
  check_signature_types(parsed.model, Source{(fs::path(info.path) / kGraphFile).string()});
  return info;
}

LoadedModel load_model(const std::string& dir, int64_t version) {
  ParsedModel parsed = read_saved_model(dir, version, "load_model");
  const saved::SavedModel& m = parsed.model;
  const Source src{(fs::path(parsed.where.path) / kGraphFile).string()};
  auto impl = std::make_shared<LoadedModel::Impl>();
  impl->info = info_from(parsed, "load_model");
  Checkpoint vars = read_variables(
      "load_model", [&] { return load_checkpoint(variables_prefix(parsed.where.path)); });
  std::map<int, const Tensor*> variable_values;  // by node
  for (const saved::VariableBinding& b : m.variables()) {
    auto it = vars.tensors.find(b.key());
    if (it == vars.tensors.end()) {
      src.corrupt("variable '" + b.key() + "' is not in " + vars.prefix);
    }
    variable_values[b.node()] = &it->second;
  }

  impl->graph = Graph(m.model_name().empty() ? "saved_model" : m.model_name());
  Graph g = impl->graph;  // a handle: the same graph
  auto guard = g.as_default();
  std::vector<std::vector<Tensor>> values(m.nodes_size());
  for (int i = 0; i < m.nodes_size(); ++i) {
    const saved::NodeDef& node = m.nodes(i);
    const std::string where =
        "node " + std::to_string(i) + " ('" + node.name() + "', op " + node.op() + ")";
    std::vector<TensorType> saved;
    for (const saved::TensorTypeDef& t : node.outputs()) saved.push_back(type_from(t, src, where));
    Attrs attrs = attrs_from(node.attrs(), src, where);
    std::vector<Tensor> inputs;
    for (const saved::NodeInput& in : node.inputs())
      inputs.push_back(values[in.node()][in.output()]);
    std::vector<std::unique_ptr<Graph::NameScope>> scopes;
    const std::string base = enter_scopes(g, node.name(), scopes);
    try {
      if (node.op() == "placeholder" || node.op() == "constant") {
        if (!inputs.empty() || saved.size() != 1) src.corrupt(where + ": malformed " + node.op());
        if (auto v = variable_values.find(i); v != variable_values.end()) {
          const Tensor& value = *v->second;
          if (value.dtype() != saved[0].dtype || value.shape() != saved[0].shape) {
            src.corrupt(where + ": the variable is " +
                        TensorType{value.dtype(), value.shape()}.str() + ", the graph expects " +
                        saved[0].str());
          }
          values[i] = {g.placeholder(value.dtype(), value.shape(), base)};
        } else if (node.op() == "placeholder") {
          values[i] = {g.placeholder(saved[0].dtype, saved[0].shape, base)};
        } else {
          values[i] = {g.constant(attrs.get_tensor("value"), base)};
        }
      } else {
        values[i] = call_op(node.op(), inputs, attrs);
      }
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kDataLoss) throw;
      const bool ours = node.op() == "placeholder" || node.op() == "constant";
      fail(ours ? ErrorCode::kDataLoss : e.code(),
           "load_model: " + src.file + ": " + where + ": " + e.what());
    }
    std::vector<TensorType> got;
    for (const Tensor& t : values[i]) got.push_back({t.dtype(), t.shape()});
    if (got != saved) {
      auto list = [](const std::vector<TensorType>& ts) {
        std::string s;
        for (const TensorType& t : ts) s += (s.empty() ? "" : ", ") + t.str();
        return "(" + s + ")";
      };
      src.corrupt(where + ": the op now gives " + list(got) + ", the file says " + list(saved));
    }
  }
  check_signature_types(m, src);  // after the nodes' own types: those errors say more
  for (const saved::SignatureDef& s : m.signatures()) {
    LoadedModel::Impl::Signature& sig = impl->signatures[s.name()];
    for (const saved::TensorBinding& b : s.inputs())
      sig.inputs[b.name()] = values[b.value().node()][b.value().output()];
    for (const saved::TensorBinding& b : s.outputs())
      sig.outputs[b.name()] = values[b.value().node()][b.value().output()];
    for (int id : nodes_needed(m, s)) {
      if (auto v = variable_values.find(id); v != variable_values.end())
        sig.variables.push_back({values[id][0], *v->second});
    }
  }
  return LoadedModel(std::move(impl));
}

const SavedModelInfo& LoadedModel::info() const { return impl_->info; }
const Graph& LoadedModel::graph() const { return impl_->graph; }

ExecutionMode LoadedModel::execution_mode() const {
  return mode_.value_or(default_execution_mode());
}

LoadedModel::CompileStats LoadedModel::compile_stats() const {
  const compiler::CompileCache::Stats s = impl_->programs.stats();
  return {s.misses, s.hits};
}

std::map<std::string, Tensor> LoadedModel::run(const std::string& signature,
                                               const std::map<std::string, Tensor>& inputs) const {
  auto it = impl_->signatures.find(signature);
  if (it == impl_->signatures.end()) {
    std::string have;
    for (const auto& [name, s] : impl_->signatures) have += (have.empty() ? "" : ", ") + name;
    fail(ErrorCode::kNotFound, "LoadedModel::run: " + impl_->info.path + " has no signature '" +
                                   signature + "' (it has: " + have + ")");
  }
  const Impl::Signature& sig = it->second;
  FeedList feeds;
  for (const auto& [name, placeholder] : sig.inputs) {
    const TensorType expected{placeholder.dtype(), placeholder.shape()};
    auto in = inputs.find(name);
    if (in == inputs.end()) {
      fail(ErrorCode::kInvalidArgument, "LoadedModel::run: signature '" + signature +
                                            "' needs input '" + name + "' (" + expected.str() +
                                            ")");
    }
    const Tensor& value = in->second;
    if (!value.defined() || value.is_symbolic() || !fits(expected, value)) {
      const std::string got = !value.defined() ? "an undefined tensor"
                              : value.is_symbolic()
                                  ? "a symbolic tensor"
                                  : TensorType{value.dtype(), value.shape()}.str();
      fail(ErrorCode::kInvalidArgument, "LoadedModel::run: signature '" + signature + "', input '" +
                                            name + "' is " + expected.str() + ", got " + got);
    }
    feeds.push_back({placeholder, value});
  }
  for (const auto& [name, value] : inputs) {
    if (!sig.inputs.count(name)) {
      fail(ErrorCode::kInvalidArgument,
           "LoadedModel::run: signature '" + signature + "' has no input '" + name + "'");
    }
  }
  std::vector<std::string> names;
  std::vector<Tensor> fetches;
  for (const auto& [name, value] : sig.outputs) {
    names.push_back(name);
    fetches.push_back(value);
  }
  feeds.insert(feeds.end(), sig.variables.begin(), sig.variables.end());
  std::vector<Tensor> results = execution_mode() == ExecutionMode::kInterpreted
                                    ? impl_->graph.run(feeds, fetches)
                                    : impl_->programs.get(impl_->graph, fetches, feeds)->run(feeds);
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < names.size(); ++i) out[names[i]] = results[i];
  return out;
}

Tensor LoadedModel::predict(const Tensor& x) const {
  auto it = impl_->signatures.find(kServing);
  if (it == impl_->signatures.end() || it->second.inputs.size() != 1 ||
      it->second.outputs.size() != 1) {
    fail(ErrorCode::kFailedPrecondition,
         "LoadedModel::predict: " + impl_->info.path +
             " has no 'serving_default' signature with one input and one output; use run()");
  }
  return run(kServing, {{it->second.inputs.begin()->first, x}}).begin()->second;
}

}  // namespace kiln::io
