// libFuzzer target: kiln's NumPy .npy reader (ir/npy.h) on arbitrary bytes. Any input must give a
// tensor or an error naming the file: no crash, no out-of-bounds access (AddressSanitizer), no
// undefined behaviour (UBSan), no allocation beyond the input's size. A file that parses also
// round-trips: EncodeNpy of the tensor parses back to the same tensor. Seeds:
// tests/ir/npy_golden/ and tests/ir/npy_corpus/. Commands and results: docs/fuzzing.md.
#include <cstddef>
#include <cstdint>
#include <span>

#include "ir/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  absl::StatusOr<kiln::ir::TensorData> parsed = kiln::ir::ParseNpy(bytes, "fuzz.npy");
  if (!parsed.ok()) {
    if (parsed.status().message().find("fuzz.npy: npy: byte ") != 0) __builtin_trap();
    return 0;
  }
  absl::StatusOr<std::vector<std::byte>> encoded = kiln::ir::EncodeNpy(*parsed);
  if (!encoded.ok()) __builtin_trap();
  absl::StatusOr<kiln::ir::TensorData> again = kiln::ir::ParseNpy(*encoded, "again.npy");
  if (!again.ok() || !(*again == *parsed)) __builtin_trap();
  return 0;
}
