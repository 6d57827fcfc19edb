// libFuzzer target: kiln's CSV parser on arbitrary text, with and without a header. Any input
// must give a dataset or an error naming the file: no crash, no out-of-bounds access.
// Seeds: tests/frontend/data_corpus/*.csv. Build and run: docs/training.md, section "Data".
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "frontend/data/csv.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (bool header : {true, false}) {
    auto parsed = kiln::data::CsvConfig().with_header(header).parse(text, "fuzz.csv");
    if (parsed.ok()) {
      // Every row has the features and one label.
      const auto& ds = **parsed;
      if (ds.inputs().shape()[0] != ds.targets().shape()[0]) __builtin_trap();
    } else if (parsed.status().message().find("fuzz.csv") == std::string_view::npos) {
      __builtin_trap();
    }
  }
  return 0;
}
