// Uses the installed Kiln package: a small eager computation, the same one recorded into a
// graph and run, and a check of both against values computed by hand. Exits 1 on a mismatch.
#include <cmath>
#include <cstdio>
#include <vector>

#include "kiln/kiln.h"

namespace {

kiln::Tensor model(const kiln::Tensor& x, const kiln::Tensor& b) { return (x * 3.0 - b) / 2.0; }

bool check(const char* what, const kiln::Tensor& t, const std::vector<float>& want) {
  std::vector<float> got = t.to_vector<float>();
  bool ok = got.size() == want.size();
  for (size_t i = 0; ok && i < got.size(); ++i) ok = std::fabs(got[i] - want[i]) < 1e-6f;
  std::printf("%s: %s %s\n", what, t.str().c_str(), ok ? "ok" : "WRONG");
  return ok;
}

}  // namespace

int main() {
  try {
    kiln::Tensor x = kiln::Tensor::from_list<float>({1, 2, 3, 4}, {2, 2});
    kiln::Tensor b = kiln::Tensor::from_list<float>({1, -1});  // broadcast over rows
    const std::vector<float> want = {1, 3.5, 4, 6.5};          // (3x - b) / 2

    bool ok = check("eager", model(x, b), want);

    kiln::Graph g("consumer");
    kiln::Tensor px = g.placeholder(kiln::f32, {kiln::kUnknownDim, 2}, "x");
    kiln::Tensor out = g.run({{px, x}}, model(px, b));
    ok = check("graph", out, want) && ok;

    std::printf("%s\n", kiln::build_info().c_str());
    return ok ? 0 : 1;
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln error (%s): %s\n", kiln::error_code_name(e.code()), e.what());
    return 1;
  }
}
