// ONNX's recurrent layers (RNN, GRU, LSTM) unrolled over their static sequence length: the
// input projection of every step is one dot, then each step adds the recurrent product and
// applies its gates. sequence_lens masks the steps past a batch entry's length.
#include <algorithm>
#include <cctype>

#include "interop/onnx_converters.h"
#include "kiln/error.h"

namespace kiln::onnx::internal {
namespace {

using Vec = std::vector<Tensor>;
using Activation = Tensor (*)(const Tensor&);

enum class Cell { kRnn, kGru, kLstm };

int num_gates(Cell cell) { return cell == Cell::kRnn ? 1 : cell == Cell::kGru ? 3 : 4; }

// The activations each direction applies (f; f, g; f, g, h), by default and from the attribute.
std::vector<Activation> activations(const NodeContext& c, Cell cell, int64_t directions) {
  std::vector<std::string> names;
  for (const auto& a : c.node().attribute())
    if (a.name() == "activations") names.assign(a.strings().begin(), a.strings().end());
  const size_t per = cell == Cell::kRnn ? 1 : cell == Cell::kGru ? 2 : 3;
  if (names.empty()) {
    const std::vector<std::string> defaults = {"sigmoid", "tanh", "tanh"};
    for (int64_t d = 0; d < directions; ++d) {
      if (cell == Cell::kRnn)
        names.push_back("tanh");
      else
        names.insert(names.end(), defaults.begin(), defaults.begin() + per);
    }
  }
  if (names.size() != per * directions) {
    c.invalid("activations has " + std::to_string(names.size()) + " names, not " +
              std::to_string(per * directions) + " (" + std::to_string(per) + " per direction)");
  }
  std::vector<Activation> out;
  for (std::string n : names) {
    std::transform(n.begin(), n.end(), n.begin(),
                   [](unsigned char ch) { return std::tolower(ch); });
    if (n == "sigmoid")
      out.push_back(logistic);
    else if (n == "tanh")
      out.push_back(tanh);
    else if (n == "relu")
      out.push_back(relu);
    else
      c.unsupported("activation '" + n + "' (Kiln imports Sigmoid, Tanh and Relu)");
  }
  return out;
}

// Columns [from, to) of a 2-d x.
Tensor cols(const Tensor& x, int64_t from, int64_t to) {
  return slice(x, {0, from}, {x.dim(0), to});
}

// x's entry d along its first axis, without that axis.
Tensor entry(const Tensor& x, int64_t d) {
  Axes start(x.rank(), 0), limit(x.shape().begin(), x.shape().end());
  start[0] = d;
  limit[0] = d + 1;
  Shape rest(x.shape().begin() + 1, x.shape().end());
  return reshape(slice(x, start, limit), rest);
}

void expect_shape(const NodeContext& c, const Tensor& t, const char* name, const Shape& want) {
  if (static_shape(c, t) != want)
    c.invalid(std::string(name) + " is " + shape_str(t.shape()) + ", not " + shape_str(want));
}

struct Layer {
  Cell cell;
  int64_t steps, batch, hidden;
  std::vector<Activation> acts;  // per direction, `per` of them
  double clip = 0;               // 0: none
  bool linear_before_reset = false, input_forget = false;
  Tensor lens;  // [batch] i64, undefined when every sequence is full length
};

// Weights of one direction: W [G*H, I], R [G*H, H], biases [G*H] (Wb + Rb, except GRU's Rbh,
// kept apart in rbh), peepholes [3H].
struct Weights {
  Tensor w, r, bias, rbh, p;
};

Tensor clipped(const Layer& l, const Tensor& x) {
  return l.clip > 0 ? clamp(x, -l.clip, l.clip) : x;
}

// One direction over the sequence xs [T, B, I] from h0 (and c0) [B, H]: every step's H [B, H]
// in time order, and the last H and C.
struct Run {
  std::vector<Tensor> ys;
  Tensor h, c;
};

Run run_direction(const Layer& l, const Weights& wt, const Tensor& xs, Tensor h, Tensor cell,
                  const Activation* act, bool reverse) {
  const int64_t hs = l.hidden;
  const DType dt = xs.dtype();
  // Every step's input projection at once: [T, B, G*H].
  const Tensor xw = add(dot(xs, wt.w, {2}, {1}), wt.bias);
  const Tensor rt = transpose(wt.r);  // [H, G*H]
  Run out;
  out.ys.resize(l.steps);
  for (int64_t i = 0; i < l.steps; ++i) {
    const int64_t t = reverse ? l.steps - 1 - i : i;
    const Tensor xt = entry(xw, t);
    Tensor hn, cn;
    if (l.cell == Cell::kRnn) {
      hn = act[0](clipped(l, add(xt, matmul(h, rt))));
    } else if (l.cell == Cell::kGru) {
      const Tensor hr = matmul(h, cols(rt, 0, 2 * hs));
      const Tensor zr = act[0](clipped(l, add(cols(xt, 0, 2 * hs), hr)));
      const Tensor z = cols(zr, 0, hs), r = cols(zr, hs, 2 * hs);
      const Tensor rh = cols(rt, 2 * hs, 3 * hs);
      const Tensor rec = l.linear_before_reset ? mul(r, add(matmul(h, rh), wt.rbh))
                                               : add(matmul(mul(r, h), rh), wt.rbh);
      const Tensor cand = act[1](clipped(l, add(cols(xt, 2 * hs, 3 * hs), rec)));
      hn = add(mul(sub(scalar_of(1, dt), z), cand), mul(z, h));
    } else {
      // Gates in ONNX's order i, o, f, c; peepholes i, o, f.
      const Tensor g = add(xt, matmul(h, rt));
      Tensor pi = cols(g, 0, hs), po = cols(g, hs, 2 * hs), pf = cols(g, 2 * hs, 3 * hs);
      if (wt.p.defined()) {
        pi = add(pi, mul(slice(wt.p, {0}, {hs}), cell));
        pf = add(pf, mul(slice(wt.p, {2 * hs}, {3 * hs}), cell));
      }
      const Tensor ig = act[0](clipped(l, pi));
      const Tensor fg = l.input_forget ? sub(scalar_of(1, dt), ig) : act[0](clipped(l, pf));
      const Tensor cand = act[1](clipped(l, cols(g, 3 * hs, 4 * hs)));
      cn = add(mul(fg, cell), mul(ig, cand));
      if (wt.p.defined()) po = add(po, mul(slice(wt.p, {hs}, {2 * hs}), cn));
      hn = mul(act[0](clipped(l, po)), act[2](cn));
    }
    Tensor y = hn;
    if (l.lens.defined()) {
      // Past a sequence's end its state holds and its output is zero.
      const Tensor live = reshape(less(Tensor::scalar<int64_t>(t), l.lens), {l.batch, 1});
      hn = where(live, hn, h);
      if (cn.defined()) cn = where(live, cn, cell);
      y = where(live, y, scalar_of(0, dt));
    }
    h = hn;
    if (cn.defined()) cell = cn;
    out.ys[t] = reshape(y, {1, 1, l.batch, hs});
  }
  out.h = h;
  out.c = cell;
  return out;
}

Vec convert_recurrent(const NodeContext& c, Cell cell) {
  const int64_t gates = num_gates(cell);
  const std::string direction = c.attr_string("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    c.invalid("direction '" + direction + "'");
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  const int64_t layout = c.attr_int("layout", 0);
  if (layout != 0 && layout != 1) c.invalid("layout " + std::to_string(layout));

  Tensor x = c.input(0);
  if (static_shape(c, x).size() != 3) c.invalid("X must have rank 3, not " + shape_str(x.shape()));
  if (!is_floating(x.dtype())) c.unsupported(std::string("dtype ") + dtype_name(x.dtype()));
  if (layout == 1) x = transpose(x, {1, 0, 2});
  Layer l;
  l.cell = cell;
  l.steps = x.dim(0);
  l.batch = x.dim(1);
  const int64_t in = x.dim(2);
  if (l.steps == 0) c.unsupported("an empty sequence (X is " + shape_str(x.shape()) + ")");
  const Tensor& r = c.input(2);
  if (static_shape(c, r).size() != 3) c.invalid("R must have rank 3, not " + shape_str(r.shape()));
  l.hidden = c.attr_int("hidden_size", r.dim(2));
  const int64_t hs = l.hidden, gh = gates * hs;
  if (hs <= 0) c.invalid("hidden_size must be positive");
  expect_shape(c, c.input(1), "W", {dirs, gh, in});
  expect_shape(c, r, "R", {dirs, gh, hs});
  l.acts = activations(c, cell, dirs);
  if (c.has_attr("clip")) {
    l.clip = c.attr_float("clip", 0);
    if (l.clip <= 0) c.invalid("clip must be positive");
  }
  l.linear_before_reset = c.attr_int("linear_before_reset", 0) != 0;
  l.input_forget = c.attr_int("input_forget", 0) != 0;

  if (c.has_input(4)) {
    expect_shape(c, c.input(4), "sequence_lens", {l.batch});
    if (!is_integer(c.input(4).dtype())) c.invalid("sequence_lens must be integers");
    l.lens = convert(c.input(4), i64);
    if (!l.lens.is_symbolic()) {
      const std::vector<int64_t> v = l.lens.to_vector<int64_t>();
      for (int64_t n : v)
        if (n < 0 || n > l.steps)
          c.invalid("sequence length " + std::to_string(n) + " is outside [0, " +
                    std::to_string(l.steps) + "]");
      if (std::all_of(v.begin(), v.end(), [&](int64_t n) { return n == l.steps; }))
        l.lens = Tensor();
    }
  }
  // Initial states as [D, B, H].
  auto initial = [&](size_t i, const char* name) {
    if (!c.has_input(i)) return zeros(Shape{dirs, l.batch, hs}, x.dtype());
    const Tensor& t = c.input(i);
    expect_shape(c, t, name, layout == 0 ? Shape{dirs, l.batch, hs} : Shape{l.batch, dirs, hs});
    return layout == 0 ? t : transpose(t, {1, 0, 2});
  };
  const Tensor h0 = initial(5, "initial_h");
  const Tensor c0 = cell == Cell::kLstm ? initial(6, "initial_c") : Tensor();
  if (cell == Cell::kLstm && c.has_input(7)) expect_shape(c, c.input(7), "P", {dirs, 3 * hs});
  if (c.has_input(3)) expect_shape(c, c.input(3), "B", {dirs, 2 * gh});

  const size_t per = l.acts.size() / dirs;
  std::vector<Tensor> ys, hs_out, cs_out;
  for (int64_t d = 0; d < dirs; ++d) {
    Weights wt;
    wt.w = entry(c.input(1), d);
    wt.r = entry(r, d);
    wt.bias = zeros(Shape{gh}, x.dtype());
    if (c.has_input(3)) {
      const Tensor b = entry(c.input(3), d);
      const Tensor wb = slice(b, {0}, {gh}), rb = slice(b, {gh}, {2 * gh});
      if (cell == Cell::kGru) {
        // Rbh enters inside the reset gate's product; Wb and the other R biases add directly.
        wt.bias = add(wb, concatenate({slice(rb, {0}, {2 * hs}), zeros(Shape{hs}, x.dtype())}, 0));
        wt.rbh = slice(rb, {2 * hs}, {3 * hs});
      } else {
        wt.bias = add(wb, rb);
      }
    }
    if (cell == Cell::kGru && !wt.rbh.defined()) wt.rbh = zeros(Shape{hs}, x.dtype());
    if (cell == Cell::kLstm && c.has_input(7)) wt.p = entry(c.input(7), d);
    const bool reverse = direction == "reverse" || d == 1;
    Run run = run_direction(l, wt, x, entry(h0, d), c0.defined() ? entry(c0, d) : Tensor(),
                            l.acts.data() + d * per, reverse);
    if (c.wants_output(0)) ys.push_back(concatenate(run.ys, 0));  // [T, 1, B, H]
    hs_out.push_back(reshape(run.h, {1, l.batch, hs}));
    if (run.c.defined()) cs_out.push_back(reshape(run.c, {1, l.batch, hs}));
  }
  Vec out(cell == Cell::kLstm ? 3 : 2);
  if (c.wants_output(0)) {
    const Tensor y = concatenate(ys, 1);  // [T, D, B, H]
    out[0] = layout == 0 ? y : transpose(y, {2, 0, 1, 3});
  }
  auto state = [&](const std::vector<Tensor>& parts) {
    const Tensor s = concatenate(parts, 0);  // [D, B, H]
    return layout == 0 ? s : transpose(s, {1, 0, 2});
  };
  if (c.wants_output(1)) out[1] = state(hs_out);
  if (cell == Cell::kLstm && c.wants_output(2)) out[2] = state(cs_out);
  return out;
}

}  // namespace

Vec convert_RNN(const NodeContext& c) { return convert_recurrent(c, Cell::kRnn); }
Vec convert_GRU(const NodeContext& c) { return convert_recurrent(c, Cell::kGru); }
Vec convert_LSTM(const NodeContext& c) { return convert_recurrent(c, Cell::kLstm); }

}  // namespace kiln::onnx::internal
