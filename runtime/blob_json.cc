#include "runtime/blob_json.h"

namespace kiln::runtime::blob::internal {

absl::StatusOr<int64_t> CheckedProduct(const std::vector<int64_t>& dims, int64_t element_size) {
  int64_t n = element_size;
  for (int64_t d : dims) {
    if (d != 0 && n > (int64_t{1} << 62) / d) return absl::InvalidArgumentError("size overflows");
    n *= d;
  }
  return n;
}

absl::StatusOr<json> ParseJson(std::span<const std::byte> bytes, const std::string& where) {
  json j = json::parse(reinterpret_cast<const char*>(bytes.data()),
                       reinterpret_cast<const char*>(bytes.data()) + bytes.size(), nullptr,
                       /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad(where, ": not valid JSON");
  if (!j.is_object()) return Bad(where, ": not a JSON object");
  return j;
}

}  // namespace kiln::runtime::blob::internal
