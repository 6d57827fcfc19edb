// ir/npy.h: golden files written by numpy (tests/ir/npy_golden/make_npy_golden.py), byte-exact
// encoding against np.save, round trips of every dtype, and the bad-file corpus
// (tests/ir/npy_corpus/make_npy_corpus.py).
#include "ir/npy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace kiln::ir {
namespace {

using ::testing::HasSubstr;

std::vector<std::byte> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}

std::string Hex(const TensorData& t) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  const size_t n = static_cast<size_t>(t.num_elements() * DTypeSize(t.dtype()));
  for (size_t i = 0; i < n; ++i) {
    const auto b = static_cast<uint8_t>(t.data()[i]);
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

TEST(Npy, GoldenFilesFromNumpy) {
  const std::string dir = "tests/ir/npy_golden/";
  std::ifstream manifest(dir + "MANIFEST.txt");
  ASSERT_TRUE(manifest.good()) << "missing " << dir << "MANIFEST.txt (run from the repo root)";
  std::string line;
  int files = 0, exact = 0;
  while (std::getline(manifest, line)) {
    std::istringstream fields(line);
    std::string name, dtype, shape, hex;
    std::getline(fields, name, '\t');
    std::getline(fields, dtype, '\t');
    std::getline(fields, shape, '\t');
    std::getline(fields, hex, '\t');
    SCOPED_TRACE(name);
    const std::vector<std::byte> bytes = ReadBytes(dir + name);
    absl::StatusOr<TensorData> t = ParseNpy(bytes, name);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(DTypeName(t->dtype()), dtype);
    EXPECT_EQ(ShapeToString(t->shape()), shape);
    EXPECT_EQ(Hex(*t), hex);
    // Little-endian version-1 files (what np.save writes) are reproduced byte for byte.
    const bool big = name.find("_big") != std::string::npos;
    if (!big && static_cast<int>(bytes[6]) == 1) {
      absl::StatusOr<std::vector<std::byte>> encoded = EncodeNpy(*t);
      ASSERT_TRUE(encoded.ok()) << encoded.status();
      EXPECT_TRUE(*encoded == bytes) << "EncodeNpy differs from np.save";
      ++exact;
    }
    ++files;
  }
  EXPECT_GE(files, 25);
  EXPECT_GE(exact, 15);
}

TEST(Npy, RoundTripEveryDTypeAndShape) {
  std::mt19937 rng(7);
  const std::vector<Shape> shapes = {{}, {0}, {1}, {5}, {3, 0, 2}, {2, 3, 4}, {1, 1, 1, 1, 7}};
  for (DType dtype : kAllDTypes) {
    if (dtype == DType::kBF16) continue;
    for (const Shape& shape : shapes) {
      TensorData t(dtype, shape);
      for (int64_t i = 0; i < t.num_elements(); ++i) {
        t.SetDouble(i, IsBool(dtype) ? static_cast<double>(rng() & 1)
                                     : static_cast<double>(rng() % 2001) / 8.0 - 125.0);
      }
      absl::StatusOr<std::vector<std::byte>> bytes = EncodeNpy(t);
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      EXPECT_EQ(bytes->size() % 64, static_cast<size_t>(t.num_elements() * DTypeSize(dtype)) % 64);
      absl::StatusOr<TensorData> back = ParseNpy(*bytes, "rt.npy");
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_TRUE(*back == t) << DTypeName(dtype) << ShapeToString(shape);
    }
  }
}

TEST(Npy, RankAboveNumpysLimitIsRefused) {
  absl::StatusOr<std::vector<std::byte>> bytes = EncodeNpy(TensorData(DType::kF32, Shape(65, 1)));
  ASSERT_FALSE(bytes.ok());
  EXPECT_THAT(bytes.status().message(), HasSubstr("rank 65"));
}

TEST(Npy, WriteAndReadFile) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("kiln_npy_test_" + std::to_string(getpid()) + ".npy"))
                               .string();
  absl::StatusOr<TensorData> t =
      TensorData::FromDoubles(DType::kF64, {3}, std::vector<double>{1, 2, 3});
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(WriteNpy(path, *t).ok());
  absl::StatusOr<TensorData> back = ReadNpy(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == *t);
  std::filesystem::remove(path);
  absl::StatusOr<TensorData> missing = ReadNpy(path);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr(path + ": npy: cannot open"));
  const std::string dir = std::filesystem::temp_directory_path().string();
  absl::StatusOr<TensorData> directory = ReadNpy(dir);
  ASSERT_FALSE(directory.ok());
  EXPECT_THAT(directory.status().message(), HasSubstr(dir + ": npy: is a directory"));
}

TEST(Npy, Bf16IsRefused) {
  absl::StatusOr<std::vector<std::byte>> bytes = EncodeNpy(TensorData(DType::kBF16, {2}));
  ASSERT_FALSE(bytes.ok());
  EXPECT_THAT(bytes.status().message(), HasSubstr("bfloat16"));
}

TEST(Npy, EveryBadFileGivesItsError) {
  const std::string dir = "tests/ir/npy_corpus/";
  std::ifstream manifest(dir + "expected.txt");
  ASSERT_TRUE(manifest.good()) << "missing " << dir << "expected.txt (run from the repo root)";
  std::string line;
  int cases = 0;
  while (std::getline(manifest, line)) {
    const size_t tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos) << line;
    const std::string path = dir + line.substr(0, tab);
    const std::string expect = line.substr(tab + 1);
    SCOPED_TRACE(path);
    absl::StatusOr<TensorData> t = ReadNpy(path);
    ASSERT_FALSE(t.ok()) << "no error";
    const std::string message(t.status().message());
    EXPECT_THAT(message, HasSubstr(path + ": npy: byte "));
    EXPECT_THAT(message, HasSubstr(expect));
    ++cases;
  }
  EXPECT_GE(cases, 25);
}

}  // namespace
}  // namespace kiln::ir
