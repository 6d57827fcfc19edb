#include "pass_test_util.h"

#include <cctype>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "ir/interpreter.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/simplify.h"

namespace kiln::passes::testing {

std::string NormalizeWhitespace(std::string_view text) {
  std::string out;
  bool pending_space = false;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      while (i < text.size() && text[i] != '\n') ++i;
      pending_space = true;
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(text[i]))) {
      pending_space = true;
      continue;
    }
    if (pending_space && !out.empty()) out += ' ';
    pending_space = false;
    out += text[i];
  }
  return out;
}

PassManagerOptions QuietOptions() {
  PassManagerOptions options;
  options.time_passes = false;
  return options;
}

ir::Graph Parse(std::string_view text) {
  absl::StatusOr<ir::Graph> graph = ir::ParseGraph(text);
  EXPECT_TRUE(graph.ok()) << graph.status() << "\n" << text;
  return graph.ok() ? *std::move(graph) : ir::Graph();
}

absl::StatusOr<ir::Graph> RunPasses(std::string_view names, ir::Graph graph) {
  std::vector<std::string> parts = absl::StrSplit(std::string(names), ',');
  for (std::string& name : parts) {
    absl::StripAsciiWhitespace(&name);
    absl::StatusOr<std::unique_ptr<Pass>> pass = MakeSimplifyPass(name);
    if (!pass.ok()) return pass.status();
    absl::StatusOr<ir::Graph> result = (*pass)->Run(std::move(graph));
    if (!result.ok()) return result.status();
    if (absl::Status status = ir::Verify(*result); !status.ok()) return status;
    graph = *std::move(result);
  }
  return graph;
}

ir::TensorData RandomTensor(const ir::TensorType& type, std::mt19937_64& rng) {
  ir::TensorData data(type.dtype, type.shape);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const double specials[] = {
      0.0, -0.0, 1.0, -1.0, kInf, -kInf, std::numeric_limits<double>::quiet_NaN()};
  for (int64_t i = 0; i < data.num_elements(); ++i) {
    if (ir::IsFloat(type.dtype)) {
      if (rng() % 4 == 0) {
        data.SetDouble(i, specials[rng() % std::size(specials)]);
      } else {
        data.SetDouble(i, std::uniform_real_distribution<double>(-4, 4)(rng));
      }
    } else if (ir::IsBool(type.dtype)) {
      data.SetInt64(i, static_cast<int64_t>(rng() % 2));
    } else {
      data.SetInt64(i, std::uniform_int_distribution<int64_t>(-9, 9)(rng));
    }
  }
  return data;
}

void ExpectSameOutputs(const ir::Graph& original, const ir::Graph& rewritten, uint64_t seed,
                       int trials, std::source_location loc) {
  const std::string where = absl::StrCat(loc.file_name(), ":", loc.line());
  std::mt19937_64 rng(seed);
  const std::vector<ir::NodeId> parameters = original.Parameters();
  const std::vector<ir::NodeId> rewritten_parameters = rewritten.Parameters();
  ASSERT_EQ(parameters.size(), rewritten_parameters.size()) << where;
  for (size_t i = 0; i < parameters.size(); ++i) {
    ASSERT_EQ(original.node(parameters[i]).type, rewritten.node(rewritten_parameters[i]).type)
        << where;
    ASSERT_EQ(original.node(parameters[i]).attrs.name,
              rewritten.node(rewritten_parameters[i]).attrs.name)
        << where;
  }
  for (int trial = 0; trial < trials; ++trial) {
    std::vector<ir::TensorData> arguments;
    for (ir::NodeId id : parameters) arguments.push_back(RandomTensor(original.node(id).type, rng));
    absl::StatusOr<std::vector<ir::TensorData>> expected = ir::Interpret(original, arguments);
    absl::StatusOr<std::vector<ir::TensorData>> actual = ir::Interpret(rewritten, arguments);
    ASSERT_TRUE(expected.ok()) << where << ": " << expected.status();
    ASSERT_TRUE(actual.ok()) << where << ": " << actual.status();
    ASSERT_EQ(expected->size(), actual->size()) << where;
    for (size_t k = 0; k < expected->size(); ++k) {
      const ir::TensorData& e = (*expected)[k];
      const ir::TensorData& a = (*actual)[k];
      ASSERT_EQ(e.dtype(), a.dtype()) << where << ": output " << k;
      ASSERT_EQ(e.shape(), a.shape()) << where << ": output " << k;
      for (int64_t i = 0; i < e.num_elements(); ++i) {
        // Bit for bit: the rewrites claim exactness, signed zeros included.
        ASSERT_TRUE(std::memcmp(e.data() + i * ir::DTypeSize(e.dtype()),
                                a.data() + i * ir::DTypeSize(a.dtype()),
                                static_cast<size_t>(ir::DTypeSize(e.dtype()))) == 0)
            << where << ": output " << k << " element " << i << ": expected " << e.GetDouble(i)
            << ", got " << a.GetDouble(i) << "\noriginal:\n"
            << ir::PrintGraph(original) << "rewritten:\n"
            << ir::PrintGraph(rewritten);
      }
    }
  }
}

namespace {

void CheckResult(const absl::StatusOr<ir::Graph>& result, const ir::Graph& input,
                 std::string_view expected, const std::source_location& loc) {
  const std::string where = absl::StrCat(loc.file_name(), ":", loc.line());
  ASSERT_TRUE(result.ok()) << where << ": " << result.status();
  const std::string printed = ir::PrintGraph(*result);
  EXPECT_EQ(NormalizeWhitespace(printed), NormalizeWhitespace(expected)) << where << "\nactual:\n"
                                                                         << printed << "expected:\n"
                                                                         << expected;
  // The hand-written expectation must itself be valid IR.
  EXPECT_TRUE(ir::ParseGraph(expected).ok()) << where << ": " << ir::ParseGraph(expected).status();
  ExpectSameOutputs(input, *result, /*seed=*/loc.line(), /*trials=*/3, loc);
}

}  // namespace

void ExpectRewrite(std::string_view names, std::string_view input, std::string_view expected,
                   std::source_location loc) {
  const ir::Graph graph = Parse(input);
  CheckResult(RunPasses(names, graph), graph, expected, loc);
}

void ExpectRewriteWith(Pass& pass, std::string_view input, std::string_view expected,
                       std::source_location loc) {
  const ir::Graph graph = Parse(input);
  CheckResult(pass.Run(graph), graph, expected, loc);
}

}  // namespace kiln::passes::testing
