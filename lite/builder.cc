// ModelBuilder: lays out the file's sections and fills in the checksum.
#include "lite/builder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace kiln::lite {

using format::get;
using format::put;

int ModelBuilder::add_tensor(TensorInfo info) {
  info.constant = false;
  tensors_.push_back({std::move(info), {}});
  return static_cast<int>(tensors_.size()) - 1;
}

int ModelBuilder::add_constant(TensorInfo info, const void* data, size_t bytes) {
  info.constant = true;
  tensors_.push_back({std::move(info), std::string(static_cast<const char*>(data), bytes)});
  return static_cast<int>(tensors_.size()) - 1;
}

void ModelBuilder::add_op(format::OpCode code, std::string name, std::vector<int> inputs,
                          int output, kernels::Activation activation, Params params) {
  if (inputs.size() > static_cast<size_t>(format::kMaxOpInputs)) {
    throw Error(ErrorCode::kInvalidArgument,
                "lite::ModelBuilder: op " + name + " has " + std::to_string(inputs.size()) +
                    " inputs; the file holds at most " + std::to_string(format::kMaxOpInputs));
  }
  ops_.push_back({code, std::move(name), std::move(inputs), output, activation, params});
}

ModelBuilder::Params ModelBuilder::window_params(const kernels::Window& w) {
  return {static_cast<int32_t>(w.kh),         static_cast<int32_t>(w.kw),
          static_cast<int32_t>(w.stride_h),   static_cast<int32_t>(w.stride_w),
          static_cast<int32_t>(w.pad_top),    static_cast<int32_t>(w.pad_left),
          static_cast<int32_t>(w.pad_bottom), static_cast<int32_t>(w.pad_right)};
}

kernels::Window ModelBuilder::window_of(const Params& p) {
  return {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]};
}

namespace {

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

std::string ModelBuilder::serialize() const {
  if (input_ < 0 || output_ < 0) {
    throw Error(ErrorCode::kFailedPrecondition,
                "lite::ModelBuilder: set_input and set_output before serialize");
  }
  std::string names;
  std::vector<std::pair<uint32_t, uint32_t>> tensor_names, op_names;
  for (const Tensor& t : tensors_) {
    tensor_names.emplace_back(names.size(), t.info.name.size());
    names += t.info.name;
  }
  for (const Op& op : ops_) {
    op_names.emplace_back(names.size(), op.name.size());
    names += op.name;
  }
  const uint64_t names_at = format::kHeaderSize + tensors_.size() * format::kTensorRecordSize +
                            ops_.size() * format::kOpRecordSize;
  const uint64_t data_offset = align_up(names_at + names.size(), format::kDataAlignment);
  uint64_t end = data_offset;
  std::vector<uint64_t> data_at(tensors_.size(), 0);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (!tensors_[i].info.constant) continue;
    data_at[i] = end;
    end = align_up(end + tensors_[i].data.size(), format::kDataAlignment);
  }
  std::string file(end, '\0');
  auto* bytes = reinterpret_cast<uint8_t*>(file.data());

  std::memcpy(bytes, format::kMagic, 8);
  put(bytes + 8, format::kVersion, 4);
  put(bytes + 12, format::kHeaderSize, 4);
  put(bytes + 16, end, 8);
  put(bytes + 28, tensors_.size(), 4);
  put(bytes + 32, ops_.size(), 4);
  put(bytes + 36, static_cast<uint32_t>(input_), 4);
  put(bytes + 40, static_cast<uint32_t>(output_), 4);
  put(bytes + 44, names.size(), 4);
  put(bytes + 48, data_offset, 8);

  uint8_t* rec = bytes + format::kHeaderSize;
  for (size_t i = 0; i < tensors_.size(); ++i, rec += format::kTensorRecordSize) {
    const TensorInfo& info = tensors_[i].info;
    if (info.shape.size() > static_cast<size_t>(format::kMaxRank)) {
      throw Error(ErrorCode::kInvalidArgument,
                  "lite::ModelBuilder: tensor " + info.name + " has rank " +
                      std::to_string(info.shape.size()) + "; the file holds at most " +
                      std::to_string(format::kMaxRank));
    }
    put(rec, tensor_names[i].first, 4);
    put(rec + 4, tensor_names[i].second, 4);
    rec[8] = static_cast<uint8_t>(info.dtype);
    rec[9] = static_cast<uint8_t>(info.shape.size());
    rec[10] = info.constant ? 1 : 0;
    format::put_f32(rec + 12, info.scale);
    put(rec + 16, static_cast<uint32_t>(info.zero_point), 4);
    for (size_t d = 0; d < info.shape.size(); ++d) {
      put(rec + 24 + 8 * d, static_cast<uint64_t>(info.shape[d]), 8);
    }
    if (info.constant) {
      put(rec + 72, data_at[i], 8);
      put(rec + 80, tensors_[i].data.size(), 8);
      std::memcpy(bytes + data_at[i], tensors_[i].data.data(), tensors_[i].data.size());
    }
  }
  for (size_t i = 0; i < ops_.size(); ++i, rec += format::kOpRecordSize) {
    const Op& op = ops_[i];
    put(rec, static_cast<uint16_t>(op.code), 2);
    rec[2] = static_cast<uint8_t>(op.activation);
    rec[3] = static_cast<uint8_t>(op.inputs.size());
    put(rec + 4, op_names[i].first, 4);
    put(rec + 8, op_names[i].second, 4);
    for (int j = 0; j < format::kMaxOpInputs; ++j) {
      const int in = j < static_cast<int>(op.inputs.size()) ? op.inputs[j] : -1;
      put(rec + 12 + 4 * j, static_cast<uint32_t>(in), 4);
    }
    put(rec + 28, static_cast<uint32_t>(op.output), 4);
    for (int j = 0; j < format::kNumParams; ++j) {
      put(rec + 32 + 4 * j, static_cast<uint32_t>(op.params[j]), 4);
    }
  }
  std::memcpy(bytes + names_at, names.data(), names.size());
  put(bytes + 24, format::file_checksum(bytes, end), 4);
  return file;
}

void write_file(const std::string& path, const std::string& bytes) {
  // A unique temporary beside the target (mkstemp), written, synced, renamed over it; then the
  // directory synced so the rename outlives a crash.
  std::string temp = path + ".tmp.XXXXXX";
  auto fail = [&](const char* what, int err, bool remove) {
    if (remove) ::unlink(temp.c_str());
    throw Error(ErrorCode::kInvalidArgument,
                std::string("kiln::lite: cannot ") + what + " " + path + ": " + std::strerror(err));
  };
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) fail("create a temporary file for", errno, false);
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      fail("write", err, true);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    fail("write", err, true);
  }
  if (::fchmod(fd, 0644) != 0 || ::close(fd) != 0) fail("write", errno, true);
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    fail("rename a temporary file over", errno, true);
  }
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

}  // namespace kiln::lite
