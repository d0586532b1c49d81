// kiln-lite-run: runs a lite model file (kiln::lite::convert's) on IDX images (gzipped or not,
// scaled to [0, 1]) or raw little-endian float32 input, prints predictions, timing, and the
// accuracy when labels are given. Linked to libkiln_lite only.
//
//   kiln-lite-run MODEL INPUT [--labels=IDX] [--batch=N] [--threads=N] [--limit=N] [--show=N]
//                 [--profile=1]   (each op's share of the time)
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "kiln/lite.h"

namespace {

using kiln::Error;
using kiln::ErrorCode;

std::string read_file(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files too
  if (f == nullptr) throw Error(ErrorCode::kNotFound, "cannot open " + path);
  std::string bytes;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) bytes.append(buf, n);
  const bool failed = n < 0;
  gzclose(f);
  if (failed) throw Error(ErrorCode::kDataLoss, path + ": damaged gzip data");
  return bytes;
}

uint32_t big_endian(const std::string& b, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = v << 8 | static_cast<uint8_t>(b[at + i]);
  return v;
}

// An IDX file of unsigned bytes: its dimensions and the data's offset.
std::vector<uint32_t> idx_dims(const std::string& b, const std::string& path, size_t* offset) {
  if (b.size() < 4 || b[0] != 0 || b[1] != 0 || static_cast<uint8_t>(b[2]) != 0x08) {
    throw Error(ErrorCode::kInvalidArgument, path + " is not an IDX file of unsigned bytes");
  }
  const size_t rank = static_cast<uint8_t>(b[3]);
  if (b.size() < 4 + 4 * rank) throw Error(ErrorCode::kDataLoss, path + ": truncated header");
  std::vector<uint32_t> dims;
  uint64_t count = 1;
  for (size_t i = 0; i < rank; ++i) {
    dims.push_back(big_endian(b, 4 + 4 * i));
    count *= dims.back();
  }
  *offset = 4 + 4 * rank;
  if (b.size() - *offset < count) {
    throw Error(ErrorCode::kDataLoss, path + ": " + std::to_string(b.size() - *offset) +
                                          " bytes of data, the header says " +
                                          std::to_string(count));
  }
  return dims;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The input as floats, `example` values per example: IDX bytes / 255, or raw float32.
std::vector<float> read_input(const std::string& path, int64_t example) {
  const std::string b = read_file(path);
  std::vector<float> x;
  if (ends_with(path, ".f32") || ends_with(path, ".raw")) {
    if (b.size() % (4 * example) != 0) {
      throw Error(ErrorCode::kInvalidArgument, path + ": " + std::to_string(b.size()) +
                                                   " bytes are not whole examples of " +
                                                   std::to_string(example) + " floats");
    }
    x.resize(b.size() / 4);
    std::memcpy(x.data(), b.data(), b.size());  // the file is little-endian, as x86 is
    return x;
  }
  size_t offset;
  const std::vector<uint32_t> dims = idx_dims(b, path, &offset);
  int64_t per = 1;
  for (size_t i = 1; i < dims.size(); ++i) per *= dims[i];
  if (dims.empty() || per != example) {
    throw Error(ErrorCode::kInvalidArgument, path + ": examples of " + std::to_string(per) +
                                                 " values; the model takes " +
                                                 std::to_string(example));
  }
  x.resize(static_cast<size_t>(dims[0]) * per);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint8_t>(b[offset + i]) / 255.f;
  return x;
}

int64_t flag(const std::string& arg, const std::string& name, int64_t fallback) {
  const std::string prefix = "--" + name + "=";
  if (arg.rfind(prefix, 0) != 0) return fallback;
  const int64_t v = std::stoll(arg.substr(prefix.size()));
  if (v < 0) throw Error(ErrorCode::kInvalidArgument, "--" + name + " must not be negative");
  return v;
}

int run(int argc, char** argv) {
  std::vector<std::string> positional;
  std::string labels_path;
  int64_t batch = 1, threads = 1, limit = 0, show = 5, profile = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--labels=", 0) == 0) {
      labels_path = a.substr(9);
    } else if (a.rfind("--", 0) == 0) {
      const int64_t b = flag(a, "batch", -1), t = flag(a, "threads", -1), l = flag(a, "limit", -1),
                    s = flag(a, "show", -1), p = flag(a, "profile", -1);
      if (b < 0 && t < 0 && l < 0 && s < 0 && p < 0) {
        throw Error(ErrorCode::kInvalidArgument, "unknown flag " + a);
      }
      if (b == 0 || t == 0) {
        throw Error(ErrorCode::kInvalidArgument, a + ": batch and threads must be positive");
      }
      batch = b > 0 ? b : batch;
      threads = t > 0 ? t : threads;
      limit = l >= 0 ? l : limit;
      show = s >= 0 ? s : show;
      profile = p >= 0 ? p : profile;
    } else {
      positional.push_back(a);
    }
  }
  if (positional.size() != 2) {
    std::cerr << "usage: kiln-lite-run MODEL INPUT [--labels=IDX] [--batch=N] [--threads=N] "
                 "[--limit=N] [--show=N] [--profile=1]\n";
    return 2;
  }
  kiln::lite::Options options;
  options.num_threads = static_cast<int>(threads);
  options.profile = profile != 0;
  auto model = kiln::lite::Interpreter::load(positional[0], options);
  std::vector<float> x = read_input(positional[1], model->input_size());
  int64_t n = static_cast<int64_t>(x.size()) / model->input_size();
  if (limit > 0) n = std::min(n, limit);
  if (n == 0) throw Error(ErrorCode::kInvalidArgument, positional[1] + " holds no examples");
  std::vector<uint8_t> labels;
  if (!labels_path.empty()) {
    const std::string b = read_file(labels_path);
    size_t offset;
    const std::vector<uint32_t> dims = idx_dims(b, labels_path, &offset);
    if (dims.size() != 1 || dims[0] < n) {
      throw Error(ErrorCode::kInvalidArgument, labels_path + ": fewer labels than examples");
    }
    labels.assign(b.begin() + offset, b.begin() + offset + n);
  }
  const int64_t classes = model->output_size();
  std::vector<float> out(n * classes);
  std::vector<double> ms;
  for (int64_t start = 0; start < n; start += batch) {
    const int64_t b = std::min(batch, n - start);
    const auto t0 = std::chrono::steady_clock::now();
    model->run(x.data() + start * model->input_size(), b, out.data() + start * classes);
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = out.data() + i * classes;
    const int64_t best = std::max_element(row, row + classes) - row;
    if (!labels.empty() && best == labels[i]) ++correct;
    if (i < show) {
      std::cout << "example " << i << ": class " << best << " (" << row[best] << ")";
      if (!labels.empty()) std::cout << ", label " << int(labels[i]);
      std::cout << "\n";
    }
  }
  double total = 0;
  for (double m : ms) total += m;
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  std::cout << "model: " << positional[0] << " (" << model->file_size() << " bytes, "
            << model->ops().size() << " ops; kernels " << model->kernel_paths() << ", " << threads
            << " thread(s))\n"
            << "ran " << n << " examples in batches of " << batch << ": median "
            << sorted[sorted.size() / 2] << " ms per batch, " << n / (total / 1000.0)
            << " examples/s\n";
  if (profile != 0) {
    double ops_total = 0;
    for (double t : model->op_seconds()) ops_total += t;
    for (size_t i = 0; i < model->ops().size(); ++i) {
      const kiln::lite::OpInfo& op = model->ops()[i];
      if (op.fused) {
        std::printf("  %-20s %-16s (runs inside the op before it)\n", op.name.c_str(),
                    op.type.c_str());
        continue;
      }
      std::printf("  %-20s %-16s %6.1f%%  %8.2f us per batch\n", op.name.c_str(), op.type.c_str(),
                  100.0 * model->op_seconds()[i] / ops_total,
                  1e6 * model->op_seconds()[i] / static_cast<double>(ms.size()));
    }
  }
  if (!labels.empty()) {
    std::cout << "accuracy: " << static_cast<double>(correct) / n << " (" << correct << "/" << n
              << ")\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const kiln::Error& e) {
    std::cerr << "kiln-lite-run: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "kiln-lite-run: " << e.what() << "\n";
    return 1;
  }
}
