#include "frontend/data/mnist.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "frontend/data/idx.h"
#include "frontend/error.h"

namespace kiln::data {
namespace {

[[noreturn]] void Fail(absl::Status status, const std::source_location& loc) {
  kiln::detail::ThrowStatus(status, loc);
}

// `<dir>/<name>.gz` if it exists, else `<dir>/<name>`; a NotFound naming both otherwise.
std::string FindFile(const std::string& dir, const std::string& name, const std::string& hint,
                     const std::source_location& loc) {
  const std::filesystem::path base = std::filesystem::path(dir) / name;
  const std::string gz = base.string() + ".gz";
  std::error_code ec;
  if (std::filesystem::is_regular_file(gz, ec)) return gz;
  if (std::filesystem::is_regular_file(base, ec)) return base.string();
  Fail(absl::NotFoundError(absl::StrCat("data: MNIST: file not found: '", gz, "' (or '",
                                        base.string(), "')",
                                        hint.empty() ? "" : absl::StrCat("; ", hint))),
       loc);
}

ir::TensorData Load(const std::string& path, const std::source_location& loc) {
  absl::StatusOr<std::vector<std::byte>> bytes = ReadFileBytes(path);
  if (!bytes.ok()) Fail(bytes.status(), loc);
  absl::StatusOr<ir::TensorData> data = ParseIdxMaybeGzip(*bytes, path);
  if (!data.ok()) Fail(data.status(), loc);
  return *std::move(data);
}

constexpr const char* kFashionHint =
    "install Debian's package: apt-get install dataset-fashion-mnist";

}  // namespace

std::shared_ptr<InMemoryDataset> Mnist::load(const std::string& dir, const std::string& prefix,
                                             const std::string& install_hint,
                                             std::source_location loc) {
  const std::string images_path = FindFile(dir, prefix + "-images-idx3-ubyte", install_hint, loc);
  const std::string labels_path = FindFile(dir, prefix + "-labels-idx1-ubyte", install_hint, loc);
  ir::TensorData images = Load(images_path, loc);
  ir::TensorData labels = Load(labels_path, loc);
  if (images.dtype() != ir::DType::kU8 || images.rank() != 3) {
    Fail(absl::InvalidArgumentError(
             absl::StrCat(images_path, ": MNIST images must be u8 [N, H, W]; the file holds ",
                          ir::DTypeName(images.dtype()), ir::ShapeToString(images.shape()))),
         loc);
  }
  if (labels.dtype() != ir::DType::kU8 || labels.rank() != 1) {
    Fail(absl::InvalidArgumentError(
             absl::StrCat(labels_path, ": MNIST labels must be u8 [N]; the file holds ",
                          ir::DTypeName(labels.dtype()), ir::ShapeToString(labels.shape()))),
         loc);
  }
  if (images.shape()[0] != labels.shape()[0]) {
    Fail(absl::InvalidArgumentError(absl::StrCat("MNIST: ", images_path, " has ", images.shape()[0],
                                                 " images but ", labels_path, " has ",
                                                 labels.shape()[0], " labels")),
         loc);
  }
  // Labels become i64 (kiln's Int default, what cross-entropy takes).
  const int64_t n = labels.shape()[0];
  ir::TensorData targets = ir::TensorData::Uninitialized(ir::DType::kI64, {n});
  const auto* src = reinterpret_cast<const uint8_t*>(labels.data());
  auto* dst = reinterpret_cast<int64_t*>(targets.data());
  for (int64_t i = 0; i < n; ++i) {
    if (src[i] > 9) {
      Fail(absl::InvalidArgumentError(absl::StrCat(labels_path, ": label ", int{src[i]},
                                                   " of example ", i, " (byte ", 8 + i,
                                                   " of the decompressed file) is not in 0..9")),
           loc);
    }
    dst[i] = src[i];
  }
  return std::make_shared<InMemoryDataset>(std::move(images), std::move(targets), loc);
}

std::shared_ptr<InMemoryDataset> Mnist::train(const std::string& dir,
                                              const std::string& install_hint,
                                              std::source_location loc) {
  return load(dir, "train", install_hint, loc);
}

std::shared_ptr<InMemoryDataset> Mnist::test(const std::string& dir,
                                             const std::string& install_hint,
                                             std::source_location loc) {
  return load(dir, "t10k", install_hint, loc);
}

std::shared_ptr<InMemoryDataset> FashionMnist::train(const std::string& dir,
                                                     std::source_location loc) {
  return Mnist::load(dir, "train", kFashionHint, loc);
}

std::shared_ptr<InMemoryDataset> FashionMnist::test(const std::string& dir,
                                                    std::source_location loc) {
  return Mnist::load(dir, "t10k", kFashionHint, loc);
}

}  // namespace kiln::data
