// The memory planner: liveness, reuse of dead buffers, in-place writes only where legal, graph
// inputs and outputs never clobbered (checked exhaustively on random programs by simulating
// them on a tagged arena), malformed programs rejected, and the printout.
#include "passes/memory_plan.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::passes {
namespace {

using ::testing::HasSubstr;

PlanBuffer Input(int64_t size, std::string name = "") {
  return PlanBuffer{.size_bytes = size, .graph_input = true, .name = std::move(name)};
}
PlanBuffer Temp(int64_t size, std::string name = "") {
  return PlanBuffer{.size_bytes = size, .name = std::move(name)};
}
PlanBuffer Output(int64_t size, std::string name = "") {
  return PlanBuffer{.size_bytes = size, .graph_output = true, .name = std::move(name)};
}
PlanStep Step(std::vector<BufferId> inputs, std::vector<BufferId> outputs,
              std::vector<int> in_place = {}) {
  return PlanStep{.name = "k",
                  .inputs = std::move(inputs),
                  .outputs = std::move(outputs),
                  .in_place = std::move(in_place)};
}

MemoryPlan Plan(const std::vector<PlanBuffer>& buffers, const std::vector<PlanStep>& steps) {
  absl::StatusOr<MemoryPlan> plan = PlanMemory(buffers, steps);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *std::move(plan) : MemoryPlan();
}

// x -> t1 -> t2 -> t3 -> y, 1000 bytes each (1024 aligned).
std::vector<PlanBuffer> ChainBuffers() {
  return {Input(1000, "x"), Temp(1000, "t1"), Temp(1000, "t2"), Temp(1000, "t3"),
          Output(1000, "y")};
}

TEST(MemoryPlan, ChainReusesDeadBuffers) {
  const MemoryPlan plan =
      Plan(ChainBuffers(), {Step({0}, {1}), Step({1}, {2}), Step({2}, {3}), Step({3}, {4})});
  // Neighbours are live together at the step between them, so two blocks suffice and are needed.
  EXPECT_EQ(plan.unshared_size, 4 * 1024);
  EXPECT_EQ(plan.arena_size, 2 * 1024);
  EXPECT_EQ(plan.buffers[0].offset, -1);  // The graph input is not in the arena.
  EXPECT_NE(plan.buffers[1].offset, plan.buffers[2].offset);
  EXPECT_NE(plan.buffers[2].offset, plan.buffers[3].offset);
  EXPECT_NE(plan.buffers[3].offset, plan.buffers[4].offset);
  for (const BufferPlacement& p : plan.buffers) EXPECT_EQ(p.in_place_of, -1);
}

TEST(MemoryPlan, ChainInPlaceUsesOneBlock) {
  const MemoryPlan plan = Plan(ChainBuffers(), {Step({0}, {1}, {0}), Step({1}, {2}, {0}),
                                                Step({2}, {3}, {0}), Step({3}, {4}, {0})});
  EXPECT_EQ(plan.arena_size, 1024);
  EXPECT_EQ(plan.buffers[1].in_place_of, -1);  // Over the graph input: never.
  EXPECT_EQ(plan.buffers[2].in_place_of, 1);
  EXPECT_EQ(plan.buffers[3].in_place_of, 2);
  EXPECT_EQ(plan.buffers[4].in_place_of, 3);  // An output may be written over a dying temp.
  for (BufferId b = 1; b <= 4; ++b) EXPECT_EQ(plan.buffers[b].offset, 0);
}

TEST(MemoryPlan, HeaderExample) {
  const std::vector<PlanBuffer> buffers = {{.size_bytes = 4096, .graph_input = true, .name = "x"},
                                           {.size_bytes = 4096, .name = "t"},
                                           {.size_bytes = 4096, .graph_output = true, .name = "y"}};
  const std::vector<PlanStep> steps = {
      {.name = "exp", .inputs = {0}, .outputs = {1}, .in_place = {-1}},
      {.name = "neg", .inputs = {1}, .outputs = {2}, .in_place = {0}}};
  const MemoryPlan plan = Plan(buffers, steps);
  EXPECT_EQ(plan.buffers[1].offset, 0);
  EXPECT_EQ(plan.buffers[2].offset, 0);
  EXPECT_EQ(plan.buffers[2].in_place_of, 1);
  EXPECT_EQ(plan.arena_size, 4096);
}

TEST(MemoryPlan, Liveness) {
  // a = f(x); b = g(a); c = h(a, b); y = k(c); d = m(x) (never read).
  const std::vector<PlanBuffer> buffers = {Input(64), Temp(64),   Temp(64),
                                           Temp(64),  Output(64), Temp(64)};
  const MemoryPlan plan = Plan(
      buffers, {Step({0}, {1}), Step({1}, {2}), Step({1, 2}, {3}), Step({3}, {4}), Step({0}, {5})});
  const std::vector<std::pair<int, int>> expected = {{-1, -1}, {0, 2}, {1, 2},
                                                     {2, 3},   {3, 5}, {4, 4}};
  for (size_t b = 0; b < buffers.size(); ++b) {
    EXPECT_EQ(plan.buffers[b].first_step, expected[b].first) << b;
    EXPECT_EQ(plan.buffers[b].last_step, expected[b].second) << b;
  }
}

TEST(MemoryPlan, NoInPlaceWhenTheInputIsReadLater) {
  // b = g(a) may go over a, but c reads a afterwards.
  const MemoryPlan plan = Plan({Input(256), Temp(256), Temp(256), Output(256)},
                               {Step({0}, {1}), Step({1}, {2}, {0}), Step({1, 2}, {3})});
  EXPECT_EQ(plan.buffers[2].in_place_of, -1);
  EXPECT_NE(plan.buffers[1].offset, plan.buffers[2].offset);
}

TEST(MemoryPlan, NoInPlaceOverGraphInputsOrOutputs) {
  // y1 = f(x) over the graph input x; y2 = g(y1) over the graph output y1.
  const MemoryPlan plan =
      Plan({Input(128), Output(128), Output(128)}, {Step({0}, {1}, {0}), Step({1}, {2}, {0})});
  EXPECT_EQ(plan.buffers[1].in_place_of, -1);
  EXPECT_EQ(plan.buffers[2].in_place_of, -1);
  EXPECT_NE(plan.buffers[1].offset, plan.buffers[2].offset);
  EXPECT_EQ(plan.arena_size, 256);
}

TEST(MemoryPlan, NoInPlaceIntoASmallerBuffer) {
  const MemoryPlan plan =
      Plan({Input(64), Temp(64), Output(128)}, {Step({0}, {1}), Step({1}, {2}, {0})});
  EXPECT_EQ(plan.buffers[2].in_place_of, -1);
  EXPECT_EQ(plan.arena_size, 192);
}

TEST(MemoryPlan, OneInputGoesToAtMostOneOutputOfAStep) {
  // Two outputs of one step both allowed over input a: the first takes it, the second cannot.
  const MemoryPlan plan = Plan({Input(64), Temp(64), Output(64), Output(64)},
                               {Step({0}, {1}), Step({1}, {2, 3}, {0, 0})});
  EXPECT_EQ(plan.buffers[2].in_place_of, 1);
  EXPECT_EQ(plan.buffers[3].in_place_of, -1);
  EXPECT_EQ(plan.buffers[2].offset, plan.buffers[1].offset);
  EXPECT_NE(plan.buffers[3].offset, plan.buffers[1].offset);
}

TEST(MemoryPlan, OffsetsAreAlignedAndZeroSizesTakeNoSpace) {
  const MemoryPlan plan = Plan({Input(3), Temp(1), Temp(0), Temp(65), Output(7)},
                               {Step({0}, {1, 2}), Step({1, 2}, {3}), Step({3, 0}, {4})});
  for (const BufferPlacement& p : plan.buffers) {
    if (p.graph_input) continue;
    EXPECT_EQ(p.offset % kBufferAlignment, 0);
  }
  // t1 (64) and t3 (128) are live together at step 1; y (64) is live with t3 at step 2.
  EXPECT_EQ(plan.arena_size, 192);
}

TEST(MemoryPlan, GraphInputThatIsAnOutputNeedsNoSpace) {
  const MemoryPlan plan = Plan(
      {PlanBuffer{.size_bytes = 64, .graph_input = true, .graph_output = true, .name = "xy"}}, {});
  EXPECT_EQ(plan.buffers[0].offset, -1);
  EXPECT_EQ(plan.arena_size, 0);
}

TEST(MemoryPlan, RejectsMalformedPrograms) {
  struct Case {
    std::vector<PlanBuffer> buffers;
    std::vector<PlanStep> steps;
    const char* error;
  };
  const std::vector<Case> cases = {
      {{Input(8), Temp(8)}, {Step({0}, {2})}, "writes b2, which does not exist"},
      {{Input(8), Temp(8)}, {Step({-1}, {1})}, "reads b-1, which does not exist"},
      {{Input(8), Temp(-8)}, {Step({0}, {1})}, "negative size"},
      {{Input(8), Temp(8)}, {Step({1}, {0})}, "before any step writes it"},
      {{Input(8), Temp(8)}, {Step({0}, {0})}, "a graph input"},
      {{Input(8), Temp(8)}, {Step({0}, {1}), Step({0}, {1})}, "already defined"},
      {{Input(8), Temp(8)}, {Step({0}, {1, 1})}, "already defined"},
      {{Input(8), Output(8)}, {}, "graph output b1 is never written"},
      {{Input(8), Temp(8)}, {Step({0}, {1}, {0, 0})}, "2 in_place entries for 1 outputs"},
      {{Input(8), Temp(8)}, {Step({0}, {1}, {1})}, "in_place index 1 is not an input"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<MemoryPlan> plan = PlanMemory(c.buffers, c.steps);
    ASSERT_FALSE(plan.ok()) << c.error;
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(plan.status().message(), HasSubstr(c.error));
  }
}

TEST(MemoryPlan, ToStringListsEveryBuffer) {
  const MemoryPlan plan =
      Plan(ChainBuffers(), {Step({0}, {1}), Step({1}, {2}, {0}), Step({2}, {3}), Step({3}, {4})});
  const std::string text = plan.ToString();
  EXPECT_THAT(text, HasSubstr("memory plan: arena 2048 bytes (4096 without reuse), 5 buffers, "
                              "4 steps\n"));
  EXPECT_THAT(text, HasSubstr("b0 \"x\""));
  EXPECT_THAT(text, HasSubstr("graph input\n"));
  EXPECT_THAT(text, HasSubstr("live [1, 2]  in place of b1\n"));
  EXPECT_THAT(text, HasSubstr("live [3, end]  graph output\n"));
}

// ---- Random programs ----------------------------------------------------------------------------

struct Program {
  std::vector<PlanBuffer> buffers;
  std::vector<PlanStep> steps;
};

Program RandomProgram(std::mt19937_64& rng) {
  Program p;
  const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  const auto size = [&] {
    const int64_t sizes[] = {0, 1, 63, 64, 65, 100, 128, 500, 1024, 4000};
    return sizes[pick(std::size(sizes))];
  };
  std::vector<BufferId> defined;
  const int inputs = 1 + pick(3);
  for (int i = 0; i < inputs; ++i) {
    p.buffers.push_back(Input(size()));
    defined.push_back(static_cast<BufferId>(i));
  }
  const int steps = 1 + pick(12);
  for (int s = 0; s < steps; ++s) {
    PlanStep step;
    step.name = absl::StrCat("s", s);
    const int reads = 1 + pick(3);
    for (int r = 0; r < reads; ++r) {
      // Mostly recent buffers, so that chains and reuse both happen.
      const int window = std::min<int>(static_cast<int>(defined.size()), 4);
      step.inputs.push_back(pick(3) == 0 ? defined[pick(static_cast<int>(defined.size()))]
                                         : defined[defined.size() - 1 - pick(window)]);
    }
    const int writes = 1 + (pick(4) == 0 ? 1 : 0);
    const bool flags = pick(2) == 0;
    for (int w = 0; w < writes; ++w) {
      const BufferId id = static_cast<BufferId>(p.buffers.size());
      const int k = pick(static_cast<int>(step.inputs.size()));
      // In-place candidates usually have their input's size, as elementwise kernels do.
      const int64_t bytes = pick(4) != 0 ? p.buffers[step.inputs[k]].size_bytes : size();
      p.buffers.push_back(pick(5) == 0 ? Output(bytes) : Temp(bytes));
      step.outputs.push_back(id);
      if (flags) step.in_place.push_back(pick(3) == 0 ? -1 : k);
    }
    for (BufferId id : step.outputs) defined.push_back(id);
    p.steps.push_back(std::move(step));
  }
  // The last step's outputs are graph outputs (something must be).
  for (BufferId id : p.steps.back().outputs) p.buffers[id].graph_output = true;
  return p;
}

// Runs the program on an arena whose bytes are tagged with the buffer that last wrote them:
// every read must find its buffer's tag on all of its bytes, and every graph output must still
// carry its tag at the end. A step reads all its inputs before writing its outputs, which is
// what an in-place elementwise kernel guarantees per element.
void Simulate(const Program& p, const MemoryPlan& plan, const std::string& context) {
  std::vector<int32_t> arena(static_cast<size_t>(plan.arena_size), -1);
  const auto check = [&](BufferId id, const std::string& when) {
    const BufferPlacement& b = plan.buffers[id];
    if (b.graph_input) return;
    for (int64_t i = 0; i < b.size_bytes; ++i) {
      ASSERT_EQ(arena[static_cast<size_t>(b.offset + i)], id)
          << context << when << ": b" << id << " byte " << i << " was overwritten";
    }
  };
  for (size_t s = 0; s < p.steps.size(); ++s) {
    for (BufferId id : p.steps[s].inputs) check(id, absl::StrCat(" at step ", s));
    for (BufferId id : p.steps[s].outputs) {
      const BufferPlacement& b = plan.buffers[id];
      for (int64_t i = 0; i < b.size_bytes; ++i) arena[static_cast<size_t>(b.offset + i)] = id;
    }
  }
  for (BufferId id = 0; id < static_cast<BufferId>(p.buffers.size()); ++id) {
    if (p.buffers[id].graph_output) check(id, " at the end");
  }
}

TEST(MemoryPlan, RandomProgramsNeverClobberLiveBuffers) {
  std::mt19937_64 rng(20240611);
  int64_t arena_total = 0, unshared_total = 0;
  int in_place_count = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const Program p = RandomProgram(rng);
    absl::StatusOr<MemoryPlan> result = PlanMemory(p.buffers, p.steps);
    ASSERT_TRUE(result.ok()) << result.status();
    const MemoryPlan& plan = *result;
    const std::string context = absl::StrCat("trial ", trial, "\n", plan.ToString());
    arena_total += plan.arena_size;
    unshared_total += plan.unshared_size;
    ASSERT_EQ(plan.arena_size % kBufferAlignment, 0) << context;
    ASSERT_LE(plan.arena_size, plan.unshared_size) << context;

    // Liveness computed independently.
    std::vector<int> first(p.buffers.size(), -1), last(p.buffers.size(), -1);
    for (size_t s = 0; s < p.steps.size(); ++s) {
      for (BufferId id : p.steps[s].outputs) first[id] = last[id] = static_cast<int>(s);
      for (BufferId id : p.steps[s].inputs) {
        if (!p.buffers[id].graph_input) last[id] = static_cast<int>(s);
      }
    }
    for (size_t b = 0; b < p.buffers.size(); ++b) {
      const BufferPlacement& placed = plan.buffers[b];
      if (p.buffers[b].graph_input) {
        ASSERT_EQ(placed.offset, -1) << context;
        continue;
      }
      if (p.buffers[b].graph_output) last[b] = static_cast<int>(p.steps.size());
      ASSERT_EQ(placed.first_step, first[b]) << context << "b" << b;
      ASSERT_EQ(placed.last_step, last[b]) << context << "b" << b;
      ASSERT_GE(placed.offset, 0) << context;
      ASSERT_EQ(placed.offset % kBufferAlignment, 0) << context;
      ASSERT_LE(placed.offset + placed.size_bytes, plan.arena_size) << context;
      // In place only where legal.
      if (placed.in_place_of >= 0) {
        ++in_place_count;
        const BufferId in = placed.in_place_of;
        const PlanStep& step = p.steps[static_cast<size_t>(first[b])];
        const size_t j =
            std::find(step.outputs.begin(), step.outputs.end(), static_cast<BufferId>(b)) -
            step.outputs.begin();
        ASSERT_FALSE(step.in_place.empty()) << context;
        ASSERT_GE(step.in_place[j], 0) << context;
        ASSERT_EQ(step.inputs[static_cast<size_t>(step.in_place[j])], in) << context;
        ASSERT_FALSE(p.buffers[in].graph_input || p.buffers[in].graph_output) << context;
        ASSERT_EQ(last[in], first[b]) << context << "b" << in << " is read after step " << first[b];
        ASSERT_EQ(placed.offset, plan.buffers[in].offset) << context;
      }
    }
    // Exhaustive pairwise check: buffers whose bytes overlap are never live at once, except an
    // in-place output and the input it replaces, which meet at exactly one step.
    for (size_t a = 0; a < p.buffers.size(); ++a) {
      for (size_t b = a + 1; b < p.buffers.size(); ++b) {
        const BufferPlacement& x = plan.buffers[a];
        const BufferPlacement& y = plan.buffers[b];
        if (x.offset < 0 || y.offset < 0 || x.size_bytes == 0 || y.size_bytes == 0) continue;
        const bool bytes_overlap =
            x.offset < y.offset + y.size_bytes && y.offset < x.offset + x.size_bytes;
        const bool live_together = x.first_step <= y.last_step && y.first_step <= x.last_step;
        if (!bytes_overlap || !live_together) continue;
        const bool handover =
            y.in_place_of == static_cast<BufferId>(a) && x.last_step == y.first_step;
        ASSERT_TRUE(handover) << context << "b" << a << " and b" << b << " overlap";
      }
    }
    Simulate(p, plan, context);
  }
  // Reuse and in-place writes really happen on these programs.
  EXPECT_LT(arena_total, unshared_total * 3 / 4);
  EXPECT_GT(in_place_count, 1000);
}

}  // namespace
}  // namespace kiln::passes
