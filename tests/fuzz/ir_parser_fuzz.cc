// libFuzzer target: kiln's IR text parser (ir/parser.h) on arbitrary bytes. Any input must give
// a graph or an error status: no crash, no out-of-bounds access (AddressSanitizer), no undefined
// behaviour (UBSan), no unbounded allocation. A graph that parses also round-trips: printing it
// and parsing the text again gives the same text. Seeds: tests/tools/corpus/ir/ (good graphs) and
// tests/tools/corpus/ir_bad/ (bad ones). Commands and results: docs/fuzzing.md.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ir/parser.h"
#include "ir/printer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<kiln::ir::Graph> graph = kiln::ir::ParseGraph(text);
  if (!graph.ok()) {
    if (graph.status().message().empty()) __builtin_trap();  // every error says what is wrong
    return 0;
  }
  const std::string printed = kiln::ir::PrintGraph(*graph);
  absl::StatusOr<kiln::ir::Graph> again = kiln::ir::ParseGraph(printed);
  if (!again.ok() || kiln::ir::PrintGraph(*again) != printed) __builtin_trap();
  return 0;
}
