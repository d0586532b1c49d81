// README example: a model with two inputs and two outputs, trained, saved whole, loaded back
// and trained further from where it stopped.
#include <cstdio>
#include <iostream>

#include "kiln/kiln.h"
#include "kiln/nn.h"

int main() {
  using namespace kiln::nn;
  kiln::Tensor age = Input({1}, kiln::f32, "age");
  kiln::Tensor text = Input({8}, kiln::i32, "text");  // token ids
  kiln::Tensor words = GlobalAveragePooling1D()(Embedding(100, 16)(text));
  kiln::Tensor joined = Concatenate()({Dense(8, "relu")(age), words});
  kiln::Tensor price = Dense(1)(joined);
  kiln::Tensor label = Dense(3)(joined);
  Model model({age, text}, {price, label}, "listing");
  std::vector<std::string> out = model.output_names();  // {"dense_1", "dense_2"}
  model.compile(kiln::optim::Adam(0.01), {MeanSquaredError(), SparseCategoricalCrossentropy(true)},
                {{out[1], {"accuracy"}}}, /*loss_weights=*/{1.0, 0.5});  // metrics per output

  kiln::Tensor x_age = kiln::random_uniform({256, 1}, 1);
  kiln::Tensor x_text = kiln::convert(kiln::random_uniform({256, 8}, 2, 0, 100), kiln::i32);
  kiln::Tensor y_price = x_age * 2.0;
  kiln::Tensor y_label = kiln::convert(kiln::random_uniform({256}, 3, 0, 3), kiln::i32);
  FitOptions options{.epochs = 2, .batch_size = 32, .seed = 7, .verbose = 0};
  model.fit({x_age, x_text}, {y_price, y_label}, options);  // logs loss, price's, label's

  model.save("listing.kiln");  // architecture, weights, optimizer state, compile settings
  std::unique_ptr<Model> loaded = load_model("listing.kiln");
  std::cout << loaded->summary();

  options.initial_epoch = 2;  // continue as if never stopped
  options.epochs = 4;
  model.fit({x_age, x_text}, {y_price, y_label}, options);
  loaded->fit({x_age, x_text}, {y_price, y_label}, options);
  std::vector<kiln::Tensor> a = model.predict({x_age, x_text}), b = loaded->predict({x_age, x_text});
  std::remove("listing.kiln");
  bool same = kiln::all(kiln::equal(a[0], b[0])).item<bool>() &&
              kiln::all(kiln::equal(a[1], b[1])).item<bool>();
  std::cout << (same ? "identical" : "DIFFERENT") << " after continuing\n";
  return same ? 0 : 1;
}
