// libFuzzer target for the safetensors parser (frontend/train/safetensors.h). Built with
// -DKILN_BUILD_FUZZERS=ON under clang (see tests/frontend/CMakeLists.txt and docs/training.md):
//
//   CC=clang CXX=clang++ cmake -S . -B build/fuzz -G Ninja -DKILN_BUILD_FUZZERS=ON
//   cmake --build build/fuzz --target safetensors_fuzzer
//   build/fuzz/tests/frontend/safetensors_fuzzer -max_total_time=60 \
//       tests/frontend/safetensors_corpus tests/frontend/fixtures
//
// Any input must give either a file or an error status: no crash, no sanitizer report. A parsed
// file must serialize and parse back to the same tensors (the writer accepts all the reader does).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "frontend/train/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  absl::StatusOr<kiln::train::SafetensorsFile> file = kiln::train::ParseSafetensors(bytes, "fuzz");
  if (!file.ok()) return 0;
  absl::StatusOr<std::string> again = kiln::train::SerializeSafetensors(*file);
  if (!again.ok()) std::abort();
  absl::StatusOr<kiln::train::SafetensorsFile> back = kiln::train::ParseSafetensors(
      std::as_bytes(std::span(again->data(), again->size())), "fuzz-roundtrip");
  if (!back.ok() || back->tensors.size() != file->tensors.size() ||
      back->metadata != file->metadata) {
    std::abort();
  }
  for (const auto& [name, tensor] : file->tensors) {
    const auto it = back->tensors.find(name);
    if (it == back->tensors.end() || !(it->second == tensor)) std::abort();
  }
  return 0;
}
