// libFuzzer target for the blob loader's validation (runtime::blob::ParseBlob: header, section
// table, checksums, signature, and each target's plan through its driver: the CPU's, the CUDA
// plan with its PTX and, where kiln has Vulkan, the Vulkan plan with its SPIR-V). Checksums would
// stop almost every mutation at the first check, so when the first input byte is odd the harness
// repairs the section and table checksums of the rest before parsing: the fuzzer then reaches the
// JSON and plan checks too. Model::Load's remaining step (dlopen of the code section) runs machine
// code by design and is not fuzzed. Seeds: tests/aot/corpus. docs/deploy.md has the command.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "runtime/blob.h"
#include "runtime/cuda/blob_cuda.h"
#include "xxhash.h"
#if KILN_BLOB_FUZZ_VULKAN
#include "runtime/vulkan/blob_vulkan.h"
#endif

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kiln::runtime::cuda::EnableCudaBlobs();
#if KILN_BLOB_FUZZ_VULKAN
  kiln::runtime::vulkan::EnableVulkanBlobs();
#endif
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool repair = (data[0] & 1) != 0;
  std::string blob(reinterpret_cast<const char*>(data) + 1, size - 1);
  using namespace kiln::runtime::blob;
  if (repair && blob.size() >= kHeaderBytes) {
    uint32_t count;
    uint64_t table;
    std::memcpy(&count, blob.data() + 12, 4);
    std::memcpy(&table, blob.data() + 24, 8);
    if (count <= 64 && table <= blob.size() && count * kSectionEntryBytes <= blob.size() - table) {
      for (uint32_t i = 0; i < count; ++i) {
        char* e = blob.data() + table + i * kSectionEntryBytes;
        uint64_t offset, length;
        std::memcpy(&offset, e + 8, 8);
        std::memcpy(&length, e + 16, 8);
        if (offset <= blob.size() && length <= blob.size() - offset) {
          const uint64_t sum = XXH3_64bits(blob.data() + offset, length);
          std::memcpy(e + 24, &sum, 8);
        }
      }
      const uint64_t sum = XXH3_64bits(blob.data() + table, count * kSectionEntryBytes);
      std::memcpy(blob.data() + 32, &sum, 8);
    }
  }
  auto view = ParseBlob(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(blob.data()), blob.size()));
  if (view.ok()) (void)DescribeBlob(*view);
  return 0;
}
