// Shared helpers of the passes tests: running passes by name on IR text, comparing printed IR,
// and checking that two graphs compute the same outputs under the reference interpreter.
#pragma once

#include <cstdint>
#include <random>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/tensor_data.h"
#include "passes/pass.h"
#include "passes/pass_manager.h"

namespace kiln::passes::testing {

/// `text` with `// comments` removed and every run of white space turned into one space (none at
/// the ends), so hand-written IR compares with printed IR regardless of layout.
std::string NormalizeWhitespace(std::string_view text);

/// Pass manager options without timing lines (whatever KILN_TIME_PASSES says) and no dumps.
PassManagerOptions QuietOptions();

/// Parses `text`, failing the current test on a parse error.
ir::Graph Parse(std::string_view text);

/// Runs the passes named in `names` ("algebraic,dce"; see MakeSimplifyPass) in order, verifying
/// after each.
absl::StatusOr<ir::Graph> RunPasses(std::string_view names, ir::Graph graph);

/// A random value of `type`: floats mix small numbers with 0, -0, 1, inf, -inf and NaN; integers
/// are small (negative too); bools are random.
ir::TensorData RandomTensor(const ir::TensorType& type, std::mt19937_64& rng);

/// Interprets both graphs on the same random arguments (`trials` draws) and expects their
/// outputs to be equal bit for bit. The graphs must have the same parameters.
void ExpectSameOutputs(const ir::Graph& original, const ir::Graph& rewritten, uint64_t seed,
                       int trials = 3, std::source_location loc = std::source_location::current());

/// The LLVM-style check: parses `input`, runs the passes `names`, and expects the printed result
/// to equal `expected` (hand-written IR, compared after NormalizeWhitespace), and the result to
/// compute what the input computes (ExpectSameOutputs).
void ExpectRewrite(std::string_view names, std::string_view input, std::string_view expected,
                   std::source_location loc = std::source_location::current());

/// ExpectRewrite with a pass object (for passes with options).
void ExpectRewriteWith(Pass& pass, std::string_view input, std::string_view expected,
                       std::source_location loc = std::source_location::current());

}  // namespace kiln::passes::testing
