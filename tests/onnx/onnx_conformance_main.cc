// Runs ONNX's node conformance tests (Debian libonnx-testdata: one model.onnx per case, with
// input_N.pb and output_N.pb data sets) through kiln::onnx::import_model, compiled and
// interpreted, and compares with ONNX's expected outputs.
//
//   onnx_conformance DATA_DIR EXPECTED_FAILURES [--results=FILE] [--filter=SUBSTRING]
//                    [--write-expected]
//
// Every case not listed in EXPECTED_FAILURES (lines "case<TAB>reason") must pass; a listed case
// that now passes is also an error, so the list only shrinks. --write-expected rewrites the list
// from this run (each reason is the first line of what failed). Exit status: 0 when every case
// is as expected, 1 otherwise, 77 when DATA_DIR does not exist (the test skips).
//
// How a case is imported: graph inputs take the shapes of the case's data, and when the import
// needs the value of an input (the shape of a Reshape, the axes of a ReduceSum at opset 18, the
// starts of a Slice, the scales of a Resize), the case is imported again with the inputs the
// error names bound as ImportOptions::static_inputs, as a user would fix them (or, when it names
// a value computed from inputs, with its scalar and integer-vector inputs bound).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/onnx.h"
#include "onnx/onnx_pb.h"

namespace fs = std::filesystem;
using kiln::Tensor;

namespace {

// ONNX's own backend tests compare with these (onnx/backend/test/case/node: rtol 1e-3, atol 1e-7).
constexpr double kRtol = 1e-3;
constexpr double kAtol = 1e-7;

struct Outcome {
  std::string status;  // pass, fail, unsupported, error
  std::string detail;
};

std::string first_line(const std::string& s) {
  std::string line = s.substr(0, s.find('\n'));
  // The importer's multi-node message names the count on its first line; the nodes follow.
  if (!line.empty() && line.back() == ':' && s.find('\n') != std::string::npos) {
    std::string next = s.substr(s.find('\n') + 1);
    next = next.substr(0, next.find('\n'));
    next.erase(0, next.find_first_not_of(' '));
    line += " " + next;
  }
  for (char& c : line) {
    if (c == '\t') c = ' ';
  }
  return line.size() > 300 ? line.substr(0, 300) + "..." : line;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The graph inputs that are not initializers, in order: the order of input_N.pb.
std::vector<std::string> model_inputs(const ::onnx::ModelProto& model) {
  std::vector<std::string> names;
  for (const auto& in : model.graph().input()) {
    bool init = false;
    for (const auto& t : model.graph().initializer()) init = init || t.name() == in.name();
    if (!init) names.push_back(in.name());
  }
  return names;
}

std::vector<Tensor> read_set(const fs::path& dir, const std::string& prefix) {
  std::vector<Tensor> tensors;
  for (int i = 0;; ++i) {
    const fs::path p = dir / (prefix + std::to_string(i) + ".pb");
    if (!fs::exists(p)) break;
    tensors.push_back(kiln::onnx::read_tensor_proto(p.string()));
  }
  return tensors;
}

// Empty when `got` matches `want`; otherwise what differs.
std::string compare(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype())
    return std::string("dtype ") + kiln::dtype_name(got.dtype()) + ", want " +
           kiln::dtype_name(want.dtype());
  if (got.shape() != want.shape())
    return "shape " + kiln::shape_str(got.shape()) + ", want " + kiln::shape_str(want.shape());
  if (!kiln::is_floating(want.dtype())) {
    const auto g = got.to(kiln::i64).to_vector<int64_t>();
    const auto w = want.to(kiln::i64).to_vector<int64_t>();
    for (size_t i = 0; i < g.size(); ++i) {
      if (g[i] != w[i])
        return "element " + std::to_string(i) + " is " + std::to_string(g[i]) + ", want " +
               std::to_string(w[i]);
    }
    return "";
  }
  const auto g = got.to(kiln::f64).to_vector<double>();
  const auto w = want.to(kiln::f64).to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    const bool both_nan = std::isnan(g[i]) && std::isnan(w[i]);
    const bool close = g[i] == w[i] || std::abs(g[i] - w[i]) <= kAtol + kRtol * std::abs(w[i]);
    if (!both_nan && !close) {
      std::ostringstream s;
      s << "element " << i << " is " << g[i] << ", want " << w[i];
      return s.str();
    }
  }
  return "";
}

Outcome run_case(const fs::path& dir) {
  const std::string bytes = read_bytes(dir / "model.onnx");
  ::onnx::ModelProto proto;
  if (!proto.ParseFromString(bytes)) return {"error", "model.onnx does not parse"};
  const std::vector<std::string> names = model_inputs(proto);
  for (const auto* values : {&proto.graph().input(), &proto.graph().output()}) {
    for (const auto& v : *values) {
      if (!v.type().has_tensor_type())
        return {"unsupported", "'" + v.name() + "' is not a tensor (a sequence, map or optional)"};
    }
  }
  try {
    std::vector<fs::path> sets;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0)
        sets.push_back(e.path());
    }
    std::sort(sets.begin(), sets.end());
    if (sets.empty()) return {"error", "no test_data_set_N"};
    for (const fs::path& set : sets) {
      std::vector<Tensor> inputs = read_set(set, "input_");
      const std::vector<Tensor> expected = read_set(set, "output_");
      if (inputs.size() > names.size())
        return {"error", "more input_N.pb files than graph inputs"};
      kiln::onnx::ImportOptions options;
      for (size_t i = 0; i < inputs.size(); ++i) options.input_shapes[names[i]] = inputs[i].shape();
      std::optional<kiln::onnx::Model> model;
      // Imports; when a value is needed while importing, binds the inputs the error names
      // and tries again (every problem is listed at once, so a second round rarely adds any).
      for (int round = 0; !model; ++round) {
        try {
          model = kiln::onnx::import_model((dir / "model.onnx").string(), options);
        } catch (const kiln::Error& e) {
          if (e.code() != kiln::ErrorCode::kUnimplemented || round == 8) throw;
          const std::string what = e.what();
          bool bound = false;
          for (size_t i = 0; i < inputs.size(); ++i) {
            if (!options.static_inputs.count(names[i]) &&
                what.find("('" + names[i] + "'") != std::string::npos) {
              options.static_inputs[names[i]] = inputs[i];
              bound = true;
            }
          }
          // A value computed from inputs (a window's length from its size input): bind the
          // inputs that can be such values, scalars and integer vectors.
          for (size_t i = 0; !bound && i < inputs.size(); ++i) {
            const bool shape_like = inputs[i].rank() == 0 ||
                                    (!kiln::is_floating(inputs[i].dtype()) && inputs[i].rank() == 1);
            if (shape_like && !options.static_inputs.count(names[i])) {
              options.static_inputs[names[i]] = inputs[i];
              bound = true;
            }
          }
          if (!bound) throw;
        }
      }
      std::map<std::string, Tensor> feeds;
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (!options.static_inputs.count(names[i])) feeds[names[i]] = inputs[i];
      }
      for (kiln::ExecutionMode mode :
           {kiln::ExecutionMode::kCompiled, kiln::ExecutionMode::kInterpreted}) {
        model->set_execution_mode(mode);
        const std::map<std::string, Tensor> got = model->run(feeds);
        const std::vector<std::string> outs = model->output_names();
        if (outs.size() != expected.size())
          return {"fail", std::to_string(outs.size()) + " outputs, the data has " +
                              std::to_string(expected.size())};
        for (size_t i = 0; i < outs.size(); ++i) {
          const std::string diff = compare(got.at(outs[i]), expected[i]);
          if (!diff.empty()) {
            return {"fail", std::string(mode == kiln::ExecutionMode::kCompiled ? "compiled"
                                                                                : "interpreted") +
                                ": output '" + outs[i] + "': " + diff};
          }
        }
      }
    }
    return {"pass", ""};
  } catch (const kiln::Error& e) {
    const bool unsupported = e.code() == kiln::ErrorCode::kUnimplemented;
    return {unsupported ? "unsupported" : "error", first_line(e.what())};
  } catch (const std::exception& e) {
    return {"error", std::string("std::exception: ") + first_line(e.what())};
  }
}

std::map<std::string, std::string> read_expected(const std::string& path) {
  std::map<std::string, std::string> expected;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t tab = line.find('\t');
    expected[line.substr(0, tab)] = tab == std::string::npos ? "" : line.substr(tab + 1);
  }
  return expected;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: onnx_conformance DATA_DIR EXPECTED_FAILURES [--results=FILE] "
                 "[--filter=SUBSTRING] [--write-expected]\n";
    return 2;
  }
  const fs::path data = argv[1];
  const std::string expected_path = argv[2];
  std::string results_path, filter;
  bool write_expected = false;
  for (int i = 3; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--results=", 0) == 0) results_path = a.substr(10);
    else if (a.rfind("--filter=", 0) == 0) filter = a.substr(9);
    else if (a == "--write-expected") write_expected = true;
    else {
      std::cerr << "onnx_conformance: unknown flag " << a << "\n";
      return 2;
    }
  }
  if (!fs::is_directory(data)) {
    std::cout << "SKIPPED: no ONNX test data at " << data << " (Debian libonnx-testdata)\n";
    return 77;
  }
  const std::map<std::string, std::string> expected = read_expected(expected_path);
  std::vector<std::string> cases;
  for (const auto& e : fs::directory_iterator(data)) {
    const std::string name = e.path().filename().string();
    if (fs::exists(e.path() / "model.onnx") && name.find(filter) != std::string::npos)
      cases.push_back(name);
  }
  std::sort(cases.begin(), cases.end());

  std::map<std::string, int> counts;
  std::vector<std::string> surprises;
  std::ostringstream results, listing;
  results << "case\tstatus\tdetail\n";
  listing << "# ONNX node conformance cases Kiln does not pass yet, with why (the first line of\n"
             "# what failed). tests/onnx/onnx_conformance_main.cc reads it: a case not listed\n"
             "# must pass, and a listed case that passes must be removed.\n";
  for (const std::string& name : cases) {
    Outcome o = run_case(data / name);
    // Paths relative to DATA_DIR, so the list reads the same wherever the data lives.
    const std::string prefix = (data / "").string();
    for (size_t at; (at = o.detail.find(prefix)) != std::string::npos;)
      o.detail.erase(at, prefix.size());
    ++counts[o.status];
    results << name << "\t" << o.status << "\t" << o.detail << "\n";
    const bool listed = expected.count(name) > 0;
    if (o.status != "pass") listing << name << "\t" << o.status << ": " << o.detail << "\n";
    if (o.status != "pass" && !listed)
      surprises.push_back(name + ": " + o.status + ": " + o.detail);
    if (o.status == "pass" && listed)
      surprises.push_back(name + ": passes now; remove it from " + expected_path);
  }
  if (!results_path.empty()) std::ofstream(results_path) << results.str();
  if (write_expected) std::ofstream(expected_path) << listing.str();

  std::printf("ONNX node conformance: %zu cases: %d pass, %d fail, %d unsupported, %d error "
              "(%.1f%% pass)\n",
              cases.size(), counts["pass"], counts["fail"], counts["unsupported"],
              counts["error"], cases.empty() ? 0.0 : 100.0 * counts["pass"] / cases.size());
  if (write_expected) {
    std::printf("wrote %s\n", expected_path.c_str());
    return 0;
  }
  for (const std::string& s : surprises) std::printf("UNEXPECTED %s\n", s.c_str());
  return surprises.empty() ? 0 : 1;
}
