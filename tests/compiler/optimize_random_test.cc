// Differential test of the whole pipeline: random small graphs, run by the interpreter before
// and after optimize, must give bit-identical results (every rewrite the pipeline makes keeps
// the kernels and their inputs, so not even the evaluation order changes).
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "tests/compiler/compiler_test_util.h"

namespace kiln::compiler {
namespace {

using testing::bitwise_equal;

class RandomGraph {
 public:
  explicit RandomGraph(uint32_t seed) : rng_(seed) {
    dtype_ = pick(4) == 0 ? i32 : f32;
    int inputs = 1 + pick(3);
    for (int i = 0; i < inputs; ++i) {
      Tensor p = g_.placeholder(dtype_, random_shape(), "p" + std::to_string(i));
      feeds_.push_back({p, random_value(p.shape())});
      pool_.push_back(p);
    }
    int steps = 6 + pick(12);
    for (int i = 0; i < steps; ++i) step();
    outputs_.push_back(pool_.back());
    for (int i = pick(3); i > 0; --i) outputs_.push_back(any());
  }

  Graph& graph() { return g_; }
  const FeedList& feeds() const { return feeds_; }
  const std::vector<Tensor>& outputs() const { return outputs_; }

 private:
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  const Tensor& any() { return pool_[pick(static_cast<int>(pool_.size()))]; }
  bool fp() const { return dtype_ == f32; }

  Shape random_shape() {
    Shape s(pick(4));
    for (int64_t& d : s) d = pick(12) == 0 ? 0 : 1 + pick(4);
    return s;
  }

  Tensor random_value(const Shape& shape) {
    std::vector<float> v(num_elements(shape));
    // Quarters are exact in f32; -0.0 is there to catch rules that are exact only up to its sign.
    for (float& x : v) x = fp() ? static_cast<float>(pick(18) - 9) * 0.25f : pick(7) - 3;
    if (fp()) {
      for (float& x : v) x = x == -2.25f ? -0.0f : x;
    }
    Tensor t = Tensor::from_vector(v, shape);
    return fp() ? t : t.to(i32);
  }

  // A constant of this shape: random, or all of one special value (0, -0.0, 1).
  Tensor constant(const Shape& shape) {
    int kind = pick(5);
    if (kind < 2) return g_.constant(random_value(shape));
    float special[] = {0.0f, -0.0f, 1.0f};
    Tensor t =
        Tensor::from_vector(std::vector<float>(num_elements(shape), special[kind - 2]), shape);
    return g_.constant(fp() ? t : t.to(i32));
  }

  // A partner for a binary op on x: another value of its shape, a constant of its shape, or
  // a scalar constant (which broadcasts).
  Tensor partner(const Tensor& x) {
    if (pick(3) == 0) {
      for (int tries = 0; tries < 4; ++tries) {
        const Tensor& y = any();
        if (y.shape() == x.shape()) return y;
      }
    }
    return constant(pick(2) == 0 ? Shape{} : x.shape());
  }

  void step() {
    Tensor x = any();
    std::function<Tensor()> make = recipe(x);
    pool_.push_back(make());
    if (pick(5) == 0) pool_.push_back(make());  // the same computation again: CSE's target
  }

  std::function<Tensor()> recipe(const Tensor& x) {
    const Shape& s = x.shape();
    const int64_t r = static_cast<int64_t>(s.size());
    switch (pick(12)) {
      case 0: {
        int op = pick(fp() ? 5 : 3);
        return [=] {
          switch (op) {
            case 0:
              return neg(x);
            case 1:
              return abs(x);
            case 2:
              return neg(neg(x));
            case 3:
              return exp(x);
            default:
              return tanh(x);
          }
        };
      }
      case 1:
      case 2: {
        Tensor y = partner(x);
        bool swap = pick(2) == 0;
        int op = pick(fp() ? 5 : 4);
        Tensor divisor = g_.constant(Tensor::scalar<float>(pick(2) ? 1.0f : 2.0f));
        return [=] {
          const Tensor& a = swap ? y : x;
          const Tensor& b = swap ? x : y;
          switch (op) {
            case 0:
              return add(a, b);
            case 1:
              return sub(a, b);
            case 2:
              return mul(a, b);
            case 3:
              return maximum(a, b);
            default:
              return div(x, divisor);
          }
        };
      }
      case 3: {
        int64_t n = num_elements(s);
        Shape reversed(s.rbegin(), s.rend());
        bool twice = pick(2) == 0;
        return [=] { return twice ? reshape(reshape(x, {n}), reversed) : reshape(x, reversed); };
      }
      case 4: {
        std::vector<int64_t> p1(r), p2(r);
        for (int64_t i = 0; i < r; ++i) p1[i] = p2[i] = i;
        std::shuffle(p1.begin(), p1.end(), rng_);
        std::shuffle(p2.begin(), p2.end(), rng_);
        bool twice = pick(2) == 0;
        return [=] { return twice ? transpose(transpose(x, p1), p2) : transpose(x, p1); };
      }
      case 5: {
        Axes start(r), limit(r), strides(r);
        bool identity = pick(2) == 0;
        for (int64_t d = 0; d < r; ++d) {
          start[d] = identity || s[d] == 0 ? 0 : pick(static_cast<int>(s[d]));
          limit[d] = identity ? s[d] : start[d] + pick(static_cast<int>(s[d] - start[d]) + 1);
          strides[d] = identity ? 1 : 1 + pick(2);
        }
        return [=] { return slice(x, start, limit, strides); };
      }
      case 6: {
        Axes dims(r);
        for (int64_t d = 0; d < r; ++d) dims[d] = d;
        bool grow = pick(2) == 0;
        Shape out = s;
        if (grow) {
          out.insert(out.begin(), 2);
          for (int64_t& d : dims) ++d;
        }
        return [=] { return broadcast_in_dim(x, out, dims); };
      }
      case 7: {
        Axes axes;
        for (int64_t d = 0; d < r; ++d) {
          if (pick(2)) axes.push_back(d);
        }
        bool keep = pick(2) == 0;
        return [=] { return sum(x, axes, keep); };
      }
      case 8: {
        if (r == 0 || r > 2) return [=] { return neg(x); };
        Tensor b = pick(2) ? constant({s[r - 1], 2}) : g_.placeholder(dtype_, {s[r - 1], 2}, "w");
        if (b.impl()->graph && nodes_of(g_)[b.impl()->node].op == "placeholder") {
          feeds_.push_back({b, random_value(b.shape())});
        }
        return [=] { return matmul(x, b); };
      }
      case 9: {
        DType same = dtype_, wide = fp() ? f64 : i64;
        bool round_trip = pick(2) == 0;
        return [=] { return round_trip ? convert(convert(x, wide), same) : convert(x, same); };
      }
      case 10: {
        // A subgraph of constants only: constant folding's target.
        Tensor a = constant(s), b = constant(s);
        return [=] { return add(x, mul(a, neg(b))); };
      }
      default: {
        if (!fp()) return [=] { return abs(x); };
        Tensor seed = g_.constant(Tensor::scalar<int64_t>(pick(3)));
        return [=] { return x + random_uniform(s, seed); };
      }
    }
  }

  std::mt19937 rng_;
  DType dtype_;
  Graph g_{"random"};
  FeedList feeds_;
  std::vector<Tensor> pool_;
  std::vector<Tensor> outputs_;
};

TEST(OptimizeRandomTest, OptimizedGraphsGiveBitIdenticalResults) {
  int before = 0, after = 0;
  for (uint32_t seed = 0; seed < 300; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    RandomGraph rg(seed);
    std::vector<Tensor> want = rg.graph().run(rg.feeds(), rg.outputs());
    CompiledGraph c = optimize(rg.graph(), rg.outputs());
    std::vector<Tensor> got = c.run(rg.feeds());
    before += c.nodes_before;
    after += c.graph.num_nodes();
    EXPECT_LE(c.graph.num_nodes(), c.nodes_before);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(bitwise_equal(got[i], want[i])) << "output " << i << "\n"
                                                  << rg.graph().to_text() << "\noptimized:\n"
                                                  << c.graph.to_text();
    }
    // Optimizing an optimized graph finds nothing more to do.
    CompiledGraph again = optimize(c.graph, c.outputs);
    EXPECT_EQ(again.graph.num_nodes(), c.graph.num_nodes()) << c.graph.to_text();
  }
  std::printf("[ random graphs ] %d nodes before, %d after optimize\n", before, after);
  EXPECT_LT(after, before);
}

}  // namespace
}  // namespace kiln::compiler
