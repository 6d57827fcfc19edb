#include "codegen/cpu/object_cache.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "xxhash.h"

namespace kiln::codegen::cpu {
namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'O', 'B', 'J', '1'};
constexpr size_t kHeaderSize = 24;

void PutU64(uint64_t value, char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

uint64_t GetU64(const char* in) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i)
    value |= static_cast<uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  return value;
}

}  // namespace

ObjectDiskCache::ObjectDiskCache(std::string dir) : dir_(std::move(dir)) {}

std::string ObjectDiskCache::PathFor(std::string_view key) const {
  return absl::StrCat(dir_, "/", std::string(key), ".kobj");
}

std::optional<std::string> ObjectDiskCache::Load(std::string_view key) const {
  std::ifstream file(PathFor(key), std::ios::binary);
  if (!file) return std::nullopt;
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (bytes.size() < kHeaderSize || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return std::nullopt;
  }
  const uint64_t size = GetU64(bytes.data() + 8);
  const uint64_t checksum = GetU64(bytes.data() + 16);
  if (size != bytes.size() - kHeaderSize) return std::nullopt;
  if (XXH64(bytes.data() + kHeaderSize, size, 0) != checksum) return std::nullopt;
  return bytes.substr(kHeaderSize);
}

absl::Status ObjectDiskCache::Store(std::string_view key, std::string_view object) const {
  std::error_code error;
  std::filesystem::create_directories(dir_, error);
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("kernel cache: cannot create ", dir_, " (", error.message(), ")"));
  }
  char header[kHeaderSize];
  std::memcpy(header, kMagic, sizeof(kMagic));
  PutU64(object.size(), header + 8);
  PutU64(XXH64(object.data(), object.size(), 0), header + 16);

  // A name unique across processes and threads, in the same folder so rename is atomic.
  static std::atomic<uint64_t> counter{0};
  const std::string final_path = PathFor(key);
  const std::string temp_path =
      absl::StrCat(final_path, ".tmp.", static_cast<int64_t>(getpid()), ".", counter.fetch_add(1));
  {
    std::ofstream file(temp_path, std::ios::binary | std::ios::trunc);
    file.write(header, kHeaderSize);
    file.write(object.data(), static_cast<std::streamsize>(object.size()));
    file.close();
    if (!file) {
      std::filesystem::remove(temp_path, error);
      return absl::UnavailableError(absl::StrCat("kernel cache: cannot write ", temp_path));
    }
  }
  if (std::rename(temp_path.c_str(), final_path.c_str()) != 0) {
    const int saved_errno = errno;
    std::filesystem::remove(temp_path, error);
    return absl::UnavailableError(absl::StrCat("kernel cache: cannot rename ", temp_path, " to ",
                                               final_path, " (", std::strerror(saved_errno), ")"));
  }
  return absl::OkStatus();
}

}  // namespace kiln::codegen::cpu
