// Helpers for compiler tests: run one pass on a graph, feed a module through its original
// placeholders, and compare results bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "compiler/pipeline.h"
#include "kiln/kiln.h"

namespace kiln::compiler::testing {

// Feeds keyed by original placeholders, re-keyed for the module's graph.
inline FeedList remap_feeds(const Module& m, const FeedList& feeds) {
  FeedList out;
  for (const auto& [key, value] : feeds) {
    for (const Module::Placeholder& p : m.placeholders) {
      if (p.original == key.impl()->node) out.push_back({m.graph.value(p.current), value});
    }
  }
  return out;
}

inline std::vector<Tensor> run_module(const Module& m, const FeedList& feeds) {
  std::vector<Tensor> fetches;
  for (ValueRef v : m.outputs) fetches.push_back(m.graph.value(v.node, v.output));
  return m.graph.run(remap_feeds(m, feeds), fetches);
}

// The ops of a module's graph, in order ("placeholder constant add ...").
inline std::string ops_of(const Module& m) {
  std::string s;
  for (const auto& n : nodes_of(m.graph)) s += (s.empty() ? "" : " ") + n.op;
  return s;
}

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

inline void expect_bitwise_equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(bitwise_equal(a[i], b[i])) << "output " << i << ": " << a[i] << " vs " << b[i];
  }
}

// f32 results within `tol` relative, NaN where expected (by default the emitter's documented
// error: transcendentals below 1e-6 relative; FMA contraction and reassociated accumulations
// earn a small absolute slack); other dtypes bit for bit.
inline void expect_close(const std::vector<Tensor>& got, const std::vector<Tensor>& want,
                         double tol = 1e-5) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].dtype(), want[i].dtype()) << "output " << i;
    ASSERT_EQ(got[i].shape(), want[i].shape()) << "output " << i;
    if (got[i].dtype() != f32) {
      EXPECT_TRUE(bitwise_equal(got[i], want[i])) << "output " << i;
      continue;
    }
    std::vector<float> a = got[i].to_vector<float>(), b = want[i].to_vector<float>();
    for (size_t k = 0; k < a.size(); ++k) {
      if (std::isnan(b[k])) {
        EXPECT_TRUE(std::isnan(a[k])) << "output " << i << " element " << k;
        continue;
      }
      EXPECT_NEAR(a[k], b[k], tol * (1 + std::fabs(b[k]))) << "output " << i << " element " << k;
    }
  }
}

// A pass's notes (what it did or declined, and why), one per line.
inline std::string notes_of(const Pass& p) {
  std::string s;
  for (const std::string& n : p.notes()) s += n + "\n";
  return s;
}

}  // namespace kiln::compiler::testing
