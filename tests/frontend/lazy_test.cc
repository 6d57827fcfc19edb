// The lazy engine: nothing runs until realization; realization builds one graph in which
// realized values are parameters, keeps values user tensors still hold, frees the DAG behind it;
// long op chains run in bounded memory.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/interpreter.h"
#include "tests/frontend/graph_recorder.h"
#include "tests/frontend/test_util.h"

namespace kiln::testing {
namespace {

using ::testing::ElementsAre;

int64_t GraphsExecuted() { return detail::GetEngineStats().graphs_executed; }
int64_t LiveNodes() { return detail::GetEngineStats().live_nodes; }

int Count(const ir::Graph& graph, ir::Op op) {
  int n = 0;
  for (const ir::Node& node : graph.nodes()) n += node.op == op;
  return n;
}

TEST(LazyTest, NothingRunsUntilRealization) {
  B::Device device;
  const int64_t before = GraphsExecuted();
  auto x = TF<2>::from_data({{1.f, 2.f}, {3.f, 4.f}}, device);
  auto y = (x * 2 + 1).exp().sum(1);
  auto z = activation::softmax(x.matmul(x.transpose()), -1);
  EXPECT_EQ(GraphsExecuted(), before);
  EXPECT_EQ(y.shape()[0], 2);  // types are known without running
  y.to_vector();
  EXPECT_EQ(GraphsExecuted(), before + 1);
  y.to_vector();  // already realized
  EXPECT_EQ(GraphsExecuted(), before + 1);
  (void)z;
}

TEST(LazyTest, RealizedValuesEnterAsParametersNotConstants) {
  B::Device device;
  GraphRecorder recorder;
  auto x = TF<1>::from_data({1.f, 2.f}, device);
  auto w = TF<1>::from_data({3.f, 4.f}, device);
  auto y = x * w + 1;
  EXPECT_THAT(y.to_vector(), ElementsAre(4, 9));
  ASSERT_EQ(recorder.graphs.size(), 1u);
  const ir::Graph& graph = recorder.graphs[0];
  EXPECT_EQ(graph.Parameters().size(), 2u);
  EXPECT_EQ(Count(graph, ir::Op::kConstant), 0);
  EXPECT_EQ(Count(graph, ir::Op::kMul), 1);
  EXPECT_EQ(Count(graph, ir::Op::kAdd), 1);
  // The realized y is now a parameter of the next graph.
  auto z = y - 1;
  z.to_vector();
  ASSERT_EQ(recorder.graphs.size(), 2u);
  EXPECT_EQ(recorder.graphs[1].Parameters().size(), 1u);
  EXPECT_EQ(Count(recorder.graphs[1], ir::Op::kMul), 0);
}

TEST(LazyTest, HeldIntermediatesAreKeptNotRecomputed) {
  B::Device device;
  GraphRecorder recorder;
  auto x = TF<1>::from_data({1.f, 2.f}, device);
  auto a = x.exp();  // held by the user
  auto b = a + 1;
  auto c = a * 2;
  b.to_vector();
  ASSERT_EQ(recorder.graphs.size(), 1u);
  EXPECT_EQ(recorder.graphs[0].outputs().size(), 2u);  // b and a
  c.to_vector();
  ASSERT_EQ(recorder.graphs.size(), 2u);
  EXPECT_EQ(Count(recorder.graphs[1], ir::Op::kExp), 0);  // a came in as a parameter
  std::vector<float> expected = {static_cast<float>(std::exp(1.0)) * 2,
                                 static_cast<float>(std::exp(2.0)) * 2};
  EXPECT_EQ(c.to_vector(), expected);
}

TEST(LazyTest, RealizeManyRunsOneGraph) {
  B::Device device;
  GraphRecorder recorder;
  auto x = TF<1>::from_data({1.f, 2.f}, device);
  auto shared = x * 3;
  auto p = shared + 1;
  auto q = shared - 1;
  realize(p, q);
  ASSERT_EQ(recorder.graphs.size(), 1u);
  EXPECT_EQ(Count(recorder.graphs[0], ir::Op::kMul), 1);
  EXPECT_THAT(p.to_vector(), ElementsAre(4, 7));
  EXPECT_THAT(q.to_vector(), ElementsAre(2, 5));
  EXPECT_EQ(recorder.graphs.size(), 1u);
}

TEST(LazyTest, RealizationFreesTheDagBehind) {
  B::Device device;
  const int64_t baseline = LiveNodes();
  {
    auto x = TF<1>::from_data({1.f, 2.f}, device);
    auto y = ((x + 1) * 2 - 3).abs();
    EXPECT_GT(LiveNodes(), baseline + 5);  // x, fills, add, mul, sub, abs
    y.realize();
    EXPECT_EQ(LiveNodes(), baseline + 2);  // x and y
    EXPECT_THAT(y.to_vector(), ElementsAre(1, 3));
  }
  EXPECT_EQ(LiveNodes(), baseline);
}

// Resident set size in bytes, from /proc/self/statm.
int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

TEST(LazyTest, LongChainsRunInBoundedMemory) {
  B::Device device;
  const int64_t baseline_nodes = LiveNodes();
  auto x = TF<1>::zeros({4}, device);
  for (int i = 0; i < 10000; ++i) x = x + 1.f;  // warm up allocator pools
  EXPECT_EQ(x.to_vector()[0], 10000);
  const int64_t rss_before = ResidentBytes();
  int64_t max_live = 0;
  for (int i = 0; i < 100000; ++i) {
    x = x + 1.f;
    max_live = std::max(max_live, LiveNodes() - baseline_nodes);
  }
  EXPECT_THAT(x.to_vector(), ElementsAre(110000, 110000, 110000, 110000));
  const int64_t growth = ResidentBytes() - rss_before;
  // Each step adds a fill and an add; realization every kMaxPendingDepth steps bounds the rest.
  EXPECT_LE(max_live, 2 * detail::kMaxPendingDepth + 4);
#ifndef __SANITIZE_ADDRESS__  // ASan's quarantine keeps freed memory resident on purpose
  EXPECT_LT(growth, 4 << 20) << "RSS grew by " << growth << " bytes";
#else
  (void)growth;
#endif
}

// Operands used twice (a residual, a LayerNorm's x - mean(x)) make diamonds; the pending-size
// estimate must not count the DAG behind each once per path, which doubled it per diamond and
// cut a transformer's layers at arbitrary points (a 40-deep chain of these estimated 2^40 nodes).
TEST(LazyTest, SharedOperandsDoNotCutTheGraphEarly) {
  B::Device device;
  GraphRecorder recorder;
  auto x = TF<1>::from_data({0.5f, -0.25f}, device);
  std::vector<float> expected = {0.5f, -0.25f};
  for (int i = 0; i < 40; ++i) {
    x = (x + x * x) * 0.5f;  // x is read three times
    for (float& v : expected) v = (v + v * v) * 0.5f;
  }
  EXPECT_TRUE(recorder.graphs.empty()) << "nothing realized before the result is read";
  EXPECT_EQ(x.to_vector(), expected);
  EXPECT_EQ(recorder.graphs.size(), size_t{1});
}

// A DAG can be wide and shallow: a pairwise sum of many pending values is 14 deep here, so only
// the estimate of its size bounds the pending nodes.
TEST(LazyTest, WideDagsRealizeInBoundedMemory) {
  B::Device device;
  const int64_t baseline_nodes = LiveNodes();
  int64_t max_live = 0;
  std::vector<std::pair<int, TF<1>>> stack;  // (level, sum of 2^level leaves), a binary counter
  constexpr int kLeaves = 1 << 14;
  for (int i = 0; i < kLeaves; ++i) {
    stack.emplace_back(0, TF<1>::ones({2}, device));
    while (stack.size() >= 2 && stack[stack.size() - 1].first == stack[stack.size() - 2].first) {
      auto [level, right] = std::move(stack.back());
      stack.pop_back();
      stack.back() = {level + 1, stack.back().second + right};
    }
    max_live = std::max(max_live, LiveNodes() - baseline_nodes);
  }
  ASSERT_EQ(stack.size(), size_t{1});
  EXPECT_THAT(stack[0].second.to_vector(), ElementsAre(kLeaves, kLeaves));
  EXPECT_LE(max_live, 2 * detail::kMaxPendingNodes + 64);
}

TEST(LazyTest, MixedOpChainsMatchAFloatLoop) {
  B::Device device;
  auto x = TF<1>::from_data({0.25f, -3.f}, device);
  std::vector<float> expected = {0.25f, -3.f};
  const int64_t baseline_nodes = LiveNodes();
  int64_t max_live = 0;
  for (int i = 0; i < 100000; ++i) {
    switch (i % 4) {
      case 0:
        x = x * 0.5f + 1.f;
        for (float& v : expected) v = v * 0.5f + 1.f;
        break;
      case 1:
        x = (x - 3.f).abs();
        for (float& v : expected) v = std::fabs(v - 3.f);
        break;
      case 2:
        x = x.maximum(ones_like(x)) / 2.f;
        for (float& v : expected) v = std::max(v, 1.f) / 2.f;
        break;
      default:
        x = -x.clamp(-4, 4);
        for (float& v : expected) v = -std::clamp(v, -4.f, 4.f);
        break;
    }
    max_live = std::max(max_live, LiveNodes() - baseline_nodes);
  }
  EXPECT_EQ(x.to_vector(), expected);
  EXPECT_LE(max_live, 4 * detail::kMaxPendingDepth);
}

}  // namespace
}  // namespace kiln::testing
