// safetensors reading and writing (frontend/train/safetensors.h): round trips of every dtype,
// PyTorch-written files (tests/frontend/fixtures/make_torch_safetensors.py), the regression
// corpus of malformed files (tests/frontend/safetensors_corpus/, made by
// fixtures/make_safetensors_corpus.py), and atomic writes.
#include "frontend/train/safetensors.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace kiln::train {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::span<const std::byte> Bytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

// A fresh directory under the test's temporary directory.
std::string TempDir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) /
                       ("kiln_safetensors_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

// Random values representable in `dtype` (set through SetDouble, which rounds like the IR).
ir::TensorData RandomTensor(ir::DType dtype, ir::Shape shape, uint32_t seed) {
  ir::TensorData t(dtype, std::move(shape));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-100, 100);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const double v = dist(gen);
    if (dtype == ir::DType::kBool) {
      t.SetDouble(i, v > 0 ? 1 : 0);
    } else if (dtype == ir::DType::kU8) {
      t.SetDouble(i, std::abs(v) * 2.5);
    } else {
      t.SetDouble(i, v);
    }
  }
  return t;
}

SafetensorsFile EveryDType() {
  SafetensorsFile file;
  uint32_t seed = 1;
  for (ir::DType dtype : ir::kAllDTypes) {
    const std::string name = std::string("t_") + ir::DTypeName(dtype);
    file.tensors.emplace(name, RandomTensor(dtype, {3, 5}, seed++));
    file.tensors.emplace(name + ".scalar", RandomTensor(dtype, {}, seed++));
    file.tensors.emplace(name + ".empty", RandomTensor(dtype, {0, 4}, seed++));
  }
  file.metadata["format"] = "pt";
  file.metadata["note"] = "quotes \" and unicode \xc3\xa9";
  return file;
}

TEST(Safetensors, DTypeNamesRoundTrip) {
  for (ir::DType dtype : ir::kAllDTypes) {
    EXPECT_EQ(ParseSafetensorsDType(SafetensorsDTypeName(dtype)), dtype);
  }
  EXPECT_FALSE(ParseSafetensorsDType("F8_E4M3").has_value());
}

TEST(Safetensors, RoundTripEveryDTypeInMemory) {
  const SafetensorsFile file = EveryDType();
  absl::StatusOr<std::string> bytes = SerializeSafetensors(file);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  // The header is padded so the data starts 8-byte aligned.
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes->data(), 8);
  EXPECT_EQ((8 + header_len) % 8, 0u);
  absl::StatusOr<SafetensorsFile> back = ParseSafetensors(Bytes(*bytes));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->metadata, file.metadata);
  ASSERT_EQ(back->tensors.size(), file.tensors.size());
  for (const auto& [name, data] : file.tensors) {
    ASSERT_TRUE(back->tensors.count(name)) << name;
    EXPECT_TRUE(back->tensors.at(name) == data) << name;
  }
  // Same content, same bytes.
  EXPECT_EQ(*SerializeSafetensors(*back), *bytes);
}

TEST(Safetensors, RoundTripThroughFile) {
  const std::string dir = TempDir("file");
  const std::string path = dir + "/all.safetensors";
  const SafetensorsFile file = EveryDType();
  ASSERT_TRUE(WriteSafetensors(path, file).ok());
  absl::StatusOr<SafetensorsFile> back = ReadSafetensors(path);
  ASSERT_TRUE(back.ok()) << back.status();
  for (const auto& [name, data] : file.tensors) EXPECT_TRUE(back->tensors.at(name) == data) << name;
  EXPECT_FALSE(ReadSafetensors(dir + "/missing.safetensors").ok());
}

// ReadSafetensors maps the file: the cases mmap itself cannot take (an empty file, a directory)
// are errors, not crashes.
TEST(Safetensors, ReadRejectsEmptyFilesAndDirectories) {
  const std::string dir = TempDir("mapped");
  const std::string empty = dir + "/empty.safetensors";
  std::ofstream(empty).close();
  absl::StatusOr<SafetensorsFile> file = ReadSafetensors(empty);
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("file is 0 bytes, shorter than the 8-byte header length"),
            std::string::npos)
      << file.status();
  file = ReadSafetensors(dir);
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("not a regular file"), std::string::npos) << file.status();
}

TEST(Safetensors, RejectsReservedNames) {
  SafetensorsFile file;
  file.tensors.emplace("__metadata__", ir::TensorData(ir::DType::kF32, {1}));
  EXPECT_FALSE(SerializeSafetensors(file).ok());
  SafetensorsFile empty_name;
  empty_name.tensors.emplace("", ir::TensorData(ir::DType::kF32, {1}));
  EXPECT_FALSE(SerializeSafetensors(empty_name).ok());
}

// Files written by PyTorch's bytes: each dtype's tensor read by kiln equals torch's own values
// (stored alongside as F64).
TEST(Safetensors, ReadsTorchWrittenDTypes) {
  absl::StatusOr<SafetensorsFile> file =
      ReadSafetensors("tests/frontend/fixtures/dtypes.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  int checked = 0;
  // torch 1.13 has no uint16/32/64 tensors (RoundTripEveryDTypeInMemory covers those).
  for (ir::DType dtype :
       {ir::DType::kF32, ir::DType::kF64, ir::DType::kF16, ir::DType::kBF16, ir::DType::kI32,
        ir::DType::kI64, ir::DType::kU8, ir::DType::kBool, ir::DType::kI8, ir::DType::kI16}) {
    std::string name = SafetensorsDTypeName(dtype);
    for (char& c : name) c = static_cast<char>(std::tolower(c));
    ASSERT_TRUE(file->tensors.count(name)) << name;
    const ir::TensorData& t = file->tensors.at(name);
    const ir::TensorData& ref = file->tensors.at(name + "_f64");
    EXPECT_EQ(t.dtype(), dtype);
    ASSERT_EQ(t.shape(), ref.shape());
    EXPECT_EQ(t.ToDoubles(), ref.ToDoubles()) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 10);
}

// Every malformed file of the corpus fails with its expected message, naming the file and a
// byte offset.
TEST(Safetensors, CorpusOfMalformedFiles) {
  const std::string dir = "tests/frontend/safetensors_corpus";
  std::ifstream expected(dir + "/EXPECTED.txt");
  ASSERT_TRUE(expected) << "missing " << dir << "/EXPECTED.txt";
  std::string line;
  int cases = 0;
  while (std::getline(expected, line)) {
    if (line.empty()) continue;
    const size_t tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos) << line;
    const std::string path = dir + "/" + line.substr(0, tab);
    const std::string message = line.substr(tab + 1);
    ASSERT_TRUE(fs::exists(path)) << path;
    absl::StatusOr<SafetensorsFile> file = ReadSafetensors(path);
    ASSERT_FALSE(file.ok()) << path << " parsed";
    const std::string error(file.status().message());
    EXPECT_NE(error.find(message), std::string::npos) << path << ": " << error;
    EXPECT_NE(error.find(path), std::string::npos) << error;
    EXPECT_NE(error.find("(at byte "), std::string::npos) << error;
    ++cases;
  }
  // Every file in the folder is a listed case.
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == ".safetensors") ++files;
  }
  EXPECT_EQ(files, cases);
  EXPECT_GT(cases, 20);
}

// Every truncation and many single-byte corruptions of a valid file return (OK or an error)
// without crashing; truncations always fail.
TEST(Safetensors, TruncatedAndCorruptedFilesNeverCrash) {
  SafetensorsFile file;
  file.tensors.emplace("w", RandomTensor(ir::DType::kF32, {2, 3}, 7));
  file.tensors.emplace("m", RandomTensor(ir::DType::kBool, {4}, 8));
  file.metadata["k"] = "v";
  const std::string bytes = *SerializeSafetensors(file);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(ParseSafetensors(Bytes(bytes.substr(0, n))).ok()) << n;
  }
  std::mt19937 gen(3);
  int failures = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string corrupt = bytes;
    corrupt[gen() % corrupt.size()] = static_cast<char>(gen() & 0xff);
    if (!ParseSafetensors(Bytes(corrupt)).ok()) ++failures;
  }
  EXPECT_GT(failures, 0);
}

class AtomicWrite : public ::testing::Test {
 protected:
  void TearDown() override { SetAtomicWriteFailureHookForTesting(nullptr); }
};

// A failure at any step before the rename leaves the old file as it was and no temporary file.
TEST_F(AtomicWrite, FailureLeavesOldFileIntact) {
  const std::string dir = TempDir("atomic");
  const std::string path = dir + "/ckpt.safetensors";
  SafetensorsFile old_file;
  old_file.tensors.emplace("w", RandomTensor(ir::DType::kF32, {4}, 1));
  ASSERT_TRUE(WriteSafetensors(path, old_file).ok());
  const std::string old_bytes = ReadAll(path);

  SafetensorsFile new_file;
  new_file.tensors.emplace("w", RandomTensor(ir::DType::kF32, {4}, 2));
  for (const char* step : {"open", "write", "fsync", "rename"}) {
    SetAtomicWriteFailureHookForTesting([step](std::string_view s) {
      return s == step ? absl::InternalError(std::string("injected failure at ") + step)
                       : absl::OkStatus();
    });
    const absl::Status status = WriteSafetensors(path, new_file);
    EXPECT_FALSE(status.ok()) << step;
    EXPECT_NE(std::string(status.message()).find(step), std::string::npos) << status;
    EXPECT_EQ(ReadAll(path), old_bytes) << step;
    int entries = 0;
    for (const auto& entry : fs::directory_iterator(dir)) {
      EXPECT_EQ(entry.path().filename(), "ckpt.safetensors") << "left behind: " << entry.path();
      ++entries;
    }
    EXPECT_EQ(entries, 1) << step;
  }
  SetAtomicWriteFailureHookForTesting(nullptr);
  ASSERT_TRUE(WriteSafetensors(path, new_file).ok());
  EXPECT_TRUE(ReadSafetensors(path)->tensors.at("w") == new_file.tensors.at("w"));
}

// The same with a real system error: a directory without write permission (skipped as root,
// which ignores permissions).
TEST_F(AtomicWrite, ReadOnlyDirectoryLeavesOldFileIntact) {
  if (geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  const std::string dir = TempDir("readonly");
  const std::string path = dir + "/ckpt.safetensors";
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  ASSERT_EQ(::chmod(dir.c_str(), 0555), 0);
  const absl::Status status = WriteFileAtomically(path, "new");
  ::chmod(dir.c_str(), 0755);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(std::string(status.message()).find("cannot create temporary file"), std::string::npos)
      << status;
  EXPECT_EQ(ReadAll(path), "old");
}

// A real system error at the rename: the target is a non-empty directory. The temporary file is
// removed and the directory is untouched.
TEST_F(AtomicWrite, RenameOntoDirectoryFailsCleanly) {
  const std::string dir = TempDir("rename");
  const std::string target = dir + "/ckpt.safetensors";
  fs::create_directories(target);
  ASSERT_TRUE(WriteFileAtomically(target + "/inside", "keep").ok());
  const absl::Status status = WriteFileAtomically(target, "new");
  EXPECT_FALSE(status.ok());
  EXPECT_NE(std::string(status.message()).find("cannot rename"), std::string::npos) << status;
  EXPECT_TRUE(fs::is_directory(target));
  EXPECT_EQ(ReadAll(target + "/inside"), "keep");
  int entries = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    EXPECT_EQ(entry.path().filename(), "ckpt.safetensors") << "left behind: " << entry.path();
    ++entries;
  }
  EXPECT_EQ(entries, 1);
}

TEST_F(AtomicWrite, MissingDirectoryFails) {
  const absl::Status status =
      WriteFileAtomically(TempDir("missing") + "/no/such/dir/file.safetensors", "x");
  EXPECT_FALSE(status.ok());
}

}  // namespace
}  // namespace kiln::train
