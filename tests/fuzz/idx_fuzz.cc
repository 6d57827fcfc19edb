// libFuzzer target: kiln's IDX parser (and the gzip inflater in front of it) on arbitrary
// bytes. Any input must give a TensorData or an error status: no crash, no out-of-bounds
// access (AddressSanitizer), no unbounded allocation. Seeds: tests/frontend/data_corpus/.
// Build and run: docs/training.md, section "Data".
#include <cstddef>
#include <cstdint>
#include <span>

#include "frontend/data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  // A small inflate limit keeps zip bombs from exhausting the fuzzer's memory limit.
  kiln::data::IdxLimits limits;
  limits.max_decompressed_bytes = int64_t{64} << 20;
  absl::StatusOr<kiln::ir::TensorData> parsed =
      kiln::data::ParseIdxMaybeGzip(bytes, "fuzz.idx", limits);
  if (parsed.ok()) {
    // A parsed tensor re-encodes to the same bytes (for the dtypes stored unwidened).
    const kiln::ir::DType dtype = parsed->dtype();
    if (!kiln::data::IsGzip(bytes) && dtype != kiln::ir::DType::kI32) {
      absl::StatusOr<std::vector<std::byte>> again = kiln::data::EncodeIdx(*parsed);
      if (!again.ok() || again->size() != size ||
          !std::equal(again->begin(), again->end(), bytes.begin())) {
        __builtin_trap();
      }
    }
  } else if (parsed.status().message().find("fuzz.idx") == std::string::npos) {
    __builtin_trap();  // every error names the file
  }
  return 0;
}
