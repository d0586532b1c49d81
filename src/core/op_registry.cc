// The op and kernel registries and the builders behind KILN_REGISTER_OP / _KERNEL / _GRADIENT.
#include "kiln/op_registry.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

namespace kiln {
namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string with_node(const std::string& op, const std::string& node, const std::string& msg) {
  std::string s = op + ": " + msg;
  if (!node.empty() && node != op) s += " (in " + node + ")";
  return s;
}

}  // namespace

void InferContext::fail(const std::string& message, ErrorCode code) const {
  throw Error(code, with_node(op_, node_, message));
}

void KernelContext::fail(const std::string& message, ErrorCode code) const {
  throw Error(code, with_node(op_, node_, message));
}

Tensor& KernelContext::allocate_output(int i) {
  const TensorType& t = output_types_.at(i);
  Tensor& out = outputs_.at(i);
  if (out.defined() && !out.is_symbolic() && out.dtype() == t.dtype && out.shape() == t.shape)
    return out;  // preallocated
  out = Tensor::empty(t.dtype, t.shape);
  return out;
}

void KernelContext::set_output(int i, Tensor value) { outputs_.at(i) = std::move(value); }

// ---- OpRegistry -------------------------------------------------------------------------

// Lookups happen on every eager op, from many threads: they share the lock.
struct OpRegistry::Impl {
  std::shared_mutex mu;
  std::map<std::string, std::unique_ptr<OpDef>> ops;  // stable addresses
  std::map<std::string, std::pair<GradientFn, bool>> pending_gradients;
  std::map<std::string, Error> deferred;
};

OpRegistry::OpRegistry() : impl_(std::make_unique<Impl>()) {}
OpRegistry::~OpRegistry() = default;

OpRegistry& OpRegistry::global() {
  static OpRegistry* registry = new OpRegistry();  // never destroyed: used during exit
  return *registry;
}

void OpRegistry::add(OpDef def) {
  std::lock_guard lock(impl_->mu);
  if (def.name.empty()) throw Error(ErrorCode::kInvalidArgument, "register op: empty op name");
  auto it = impl_->ops.find(def.name);
  if (it != impl_->ops.end()) {
    throw Error(ErrorCode::kAlreadyExists,
                "op '" + def.name + "' is registered twice: first at " + it->second->source +
                    ", again at " + (def.source.empty() ? "<unknown>" : def.source));
  }
  if (!def.shape_fn) {
    throw Error(ErrorCode::kInvalidArgument,
                "register op '" + def.name + "': a shape function is required");
  }
  auto pending = impl_->pending_gradients.find(def.name);
  if (pending != impl_->pending_gradients.end()) {
    def.gradient = pending->second.first;
    def.differentiable = pending->second.second;
    impl_->pending_gradients.erase(pending);
  }
  std::string name = def.name;
  impl_->ops.emplace(name, std::make_unique<OpDef>(std::move(def)));
}

const OpDef& OpRegistry::find(const std::string& name) const {
  // Every eager op looks its op up, from many threads: the global registry's hits are cached
  // per thread (ops are never removed, and an OpDef never moves), so they take no lock.
  const bool global_registry = this == &OpRegistry::global();
  thread_local std::unordered_map<std::string, const OpDef*> hits;
  if (global_registry) {
    if (auto it = hits.find(name); it != hits.end()) return *it->second;
  }
  const OpDef& def = find_locked(name);
  if (global_registry) hits.emplace(name, &def);
  return def;
}

const OpDef& OpRegistry::find_locked(const std::string& name) const {
  std::shared_lock lock(impl_->mu);
  auto deferred = impl_->deferred.find(name);
  if (deferred != impl_->deferred.end()) throw deferred->second;
  auto it = impl_->ops.find(name);
  if (it != impl_->ops.end()) return *it->second;
  std::string hint;
  for (const auto& [other, _] : impl_->ops) {
    if (edit_distance(name, other) <= 2) hint += (hint.empty() ? "" : ", ") + other;
  }
  throw Error(ErrorCode::kNotFound, "unknown op '" + name + "'" +
                                        (hint.empty() ? "" : " (did you mean: " + hint + "?)"));
}

bool OpRegistry::contains(const std::string& name) const {
  std::shared_lock lock(impl_->mu);
  return impl_->ops.count(name) != 0;
}

std::vector<std::string> OpRegistry::names() const {
  std::shared_lock lock(impl_->mu);
  std::vector<std::string> out;
  for (const auto& [name, _] : impl_->ops) out.push_back(name);
  return out;
}

void OpRegistry::set_gradient(const std::string& op, GradientFn fn, bool differentiable) {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->ops.find(op);
  if (it == impl_->ops.end()) {
    impl_->pending_gradients[op] = {std::move(fn), differentiable};
    return;
  }
  it->second->gradient = std::move(fn);
  it->second->differentiable = differentiable;
}

void OpRegistry::defer_error(const std::string& op, const Error& error) {
  std::lock_guard lock(impl_->mu);
  impl_->deferred.emplace(op, error);
}

// ---- KernelRegistry ---------------------------------------------------------------------

struct KernelRegistry::Impl {
  std::shared_mutex mu;
  std::map<std::pair<std::string, DeviceType>, std::vector<std::unique_ptr<KernelDef>>> kernels;
};

KernelRegistry::KernelRegistry() : impl_(std::make_unique<Impl>()) {}
KernelRegistry::~KernelRegistry() = default;

KernelRegistry& KernelRegistry::global() {
  static KernelRegistry* registry = new KernelRegistry();
  return *registry;
}

namespace {
bool claims(const KernelDef& k, DType t) {
  return k.dtypes.empty() || std::find(k.dtypes.begin(), k.dtypes.end(), t) != k.dtypes.end();
}
const char* device_name(DeviceType d) { return d == DeviceType::kCpu ? "cpu" : "cuda"; }
}  // namespace

void KernelRegistry::add(KernelDef def) {
  if (!def.fn) {
    throw Error(ErrorCode::kInvalidArgument,
                "register kernel for op '" + def.op + "': no kernel function given");
  }
  std::lock_guard lock(impl_->mu);
  auto& list = impl_->kernels[{def.op, def.device}];
  for (const auto& k : list) {
    bool overlap = k->dtypes.empty() || def.dtypes.empty();
    for (DType t : def.dtypes) overlap = overlap || claims(*k, t);
    if (overlap) {
      throw Error(ErrorCode::kAlreadyExists,
                  "a " + std::string(device_name(def.device)) + " kernel for op '" + def.op +
                      "' is registered twice for the same dtypes: first at " + k->source +
                      ", again at " + def.source);
    }
  }
  list.push_back(std::make_unique<KernelDef>(std::move(def)));
}

const KernelDef& KernelRegistry::find(const std::string& op, DeviceType device,
                                      DType dtype) const {
  // Cached per thread like OpRegistry::find: a kernel found stays the one found (kernels are
  // never removed, and a second kernel claiming the same dtype is refused).
  // Per op name, one slot per (device, dtype): a hit builds no key.
  constexpr size_t kDtypes = 16;
  using Slots = std::array<const KernelDef*, 2 * kDtypes>;
  const bool global_registry = this == &KernelRegistry::global();
  thread_local std::unordered_map<std::string, Slots> hits;
  const size_t slot = static_cast<size_t>(device) * kDtypes + static_cast<size_t>(dtype);
  const bool cacheable = global_registry && static_cast<size_t>(dtype) < kDtypes &&
                         static_cast<size_t>(device) < 2;
  if (cacheable) {
    if (auto it = hits.find(op); it != hits.end() && it->second[slot]) return *it->second[slot];
  }
  const KernelDef& kernel = find_locked(op, device, dtype);
  if (cacheable) hits.try_emplace(op, Slots{}).first->second[slot] = &kernel;
  return kernel;
}

const KernelDef& KernelRegistry::find_locked(const std::string& op, DeviceType device,
                                             DType dtype) const {
  std::shared_lock lock(impl_->mu);
  auto it = impl_->kernels.find({op, device});
  std::string have;
  if (it != impl_->kernels.end()) {
    for (const auto& k : it->second) {
      if (claims(*k, dtype)) return *k;
      for (DType t : k->dtypes) have += (have.empty() ? "" : ", ") + std::string(dtype_name(t));
    }
  }
  throw Error(ErrorCode::kNotFound,
              op + ": no " + device_name(device) + " kernel for dtype " + dtype_name(dtype) +
                  (have.empty() ? " (the op has no kernels on this device)"
                                : " (kernels exist for: " + have + ")"));
}

bool KernelRegistry::contains(const std::string& op, DeviceType device, DType dtype) const {
  std::shared_lock lock(impl_->mu);
  auto it = impl_->kernels.find({op, device});
  if (it == impl_->kernels.end()) return false;
  for (const auto& k : it->second)
    if (claims(*k, dtype)) return true;
  return false;
}

// ---- builders and registrars ------------------------------------------------------------

OpBuilder::OpBuilder(std::string name, std::string source) {
  def_.name = std::move(name);
  def_.source = std::move(source);
}
OpBuilder& OpBuilder::input(std::string name) {
  def_.inputs.push_back(std::move(name));
  return *this;
}
OpBuilder& OpBuilder::variadic_input(std::string name) {
  def_.inputs.push_back(std::move(name));
  def_.variadic = true;
  return *this;
}
OpBuilder& OpBuilder::optional_input(std::string name) {
  def_.inputs.push_back(std::move(name));
  ++def_.optional_inputs;
  return *this;
}
OpBuilder& OpBuilder::shape_only(std::string name) {
  if (std::find(def_.inputs.begin(), def_.inputs.end(), name) == def_.inputs.end()) {
    throw Error(ErrorCode::kInvalidArgument, "op '" + def_.name + "': shape_only(\"" + name +
                                                 "\") names no input declared before it");
  }
  def_.shape_only_inputs.push_back(std::move(name));
  return *this;
}
OpBuilder& OpBuilder::outputs(int n) {
  def_.num_outputs = n;
  return *this;
}
OpBuilder& OpBuilder::kind(OpKind kind) {
  def_.kind = kind;
  return *this;
}
OpBuilder& OpBuilder::elemental(Prim prim) {
  return elemental([prim](ElementalBuilder& b, const std::vector<int>& args, const Attrs&) {
    return b.apply(prim, args);
  });
}
OpBuilder& OpBuilder::elemental(ElementalFn fn) {
  def_.elemental = std::move(fn);
  def_.kind = OpKind::kCodegen;
  return *this;
}
OpBuilder& OpBuilder::reduction(ReduceKind kind) {
  def_.reduction = kind;
  def_.kind = OpKind::kCodegen;
  return *this;
}
OpBuilder& OpBuilder::index_map(IndexMapFn map) {
  def_.index_map = std::move(map);
  def_.kind = OpKind::kCodegen;
  return *this;
}
OpBuilder& OpBuilder::pieces(PiecesFn fn) {
  def_.pieces = std::move(fn);
  def_.kind = OpKind::kCodegen;
  return *this;
}
OpBuilder& OpBuilder::shape_fn(ShapeFn fn) {
  def_.shape_fn = std::move(fn);
  return *this;
}
OpBuilder& OpBuilder::gradient(GradientFn fn) {
  def_.gradient = std::move(fn);
  return *this;
}
OpBuilder& OpBuilder::non_differentiable() {
  def_.differentiable = false;
  return *this;
}
OpBuilder& OpBuilder::stateful() {
  def_.stateful = true;
  return *this;
}

KernelBuilder::KernelBuilder(std::string op, std::string source) {
  def_.op = std::move(op);
  def_.source = std::move(source);
}
KernelBuilder& KernelBuilder::device(DeviceType device) {
  def_.device = device;
  return *this;
}
KernelBuilder& KernelBuilder::dtypes(std::vector<DType> dtypes) {
  def_.dtypes = std::move(dtypes);
  return *this;
}
KernelBuilder& KernelBuilder::fn(KernelFn fn) {
  def_.fn = std::move(fn);
  return *this;
}

// Static registrars must not throw (that would abort before main): errors are deferred to
// the first use of the op, and reported on stderr now.
OpRegistrar::OpRegistrar(const OpBuilder& builder) {
  try {
    OpRegistry::global().add(builder.def());
  } catch (const Error& e) {
    std::fprintf(stderr, "kiln: %s\n", e.what());
    OpRegistry::global().defer_error(builder.def().name, e);
  }
}

KernelRegistrar::KernelRegistrar(const KernelBuilder& builder) {
  try {
    KernelRegistry::global().add(builder.def());
  } catch (const Error& e) {
    std::fprintf(stderr, "kiln: %s\n", e.what());
    OpRegistry::global().defer_error(builder.def().op, e);
  }
}

GradientRegistrar::GradientRegistrar(const std::string& op, GradientFn fn) {
  OpRegistry::global().set_gradient(op, std::move(fn));
}

}  // namespace kiln
