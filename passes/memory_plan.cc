#include "passes/memory_plan.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln::passes {
namespace {

int64_t AlignUp(int64_t bytes) {
  return (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
}

std::string BufferLabel(std::span<const PlanBuffer> buffers, BufferId id) {
  const std::string& name = buffers[static_cast<size_t>(id)].name;
  return name.empty() ? absl::StrCat("b", id) : absl::StrCat("b", id, " \"", name, "\"");
}

// A set of buffers that share one block of memory one after another: a buffer and the chain of
// outputs written over it in place. Its live range is the union of theirs, which is contiguous
// because each member starts at the step where the previous one dies.
struct Block {
  int64_t size = 0;  // Aligned size of the first member; later members fit in it.
  int32_t first_step = 0;
  int32_t last_step = 0;
  int64_t offset = 0;
};

absl::Status CheckProgram(std::span<const PlanBuffer> buffers, std::span<const PlanStep> steps) {
  const auto valid = [&](BufferId id) {
    return id >= 0 && static_cast<size_t>(id) < buffers.size();
  };
  for (size_t b = 0; b < buffers.size(); ++b) {
    if (buffers[b].size_bytes < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("memory plan: ", BufferLabel(buffers, static_cast<BufferId>(b)),
                       " has negative size ", buffers[b].size_bytes));
    }
  }
  for (size_t s = 0; s < steps.size(); ++s) {
    const PlanStep& step = steps[s];
    const std::string where = absl::StrCat("memory plan: step ", s, " \"", step.name, "\"");
    for (BufferId id : step.inputs) {
      if (!valid(id))
        return absl::InvalidArgumentError(
            absl::StrCat(where, " reads b", id, ", which does not exist"));
    }
    for (BufferId id : step.outputs) {
      if (!valid(id))
        return absl::InvalidArgumentError(
            absl::StrCat(where, " writes b", id, ", which does not exist"));
    }
    if (!step.in_place.empty() && step.in_place.size() != step.outputs.size()) {
      return absl::InvalidArgumentError(absl::StrCat(where, " has ", step.in_place.size(),
                                                     " in_place entries for ", step.outputs.size(),
                                                     " outputs"));
    }
    for (int k : step.in_place) {
      if (k < -1 || k >= static_cast<int>(step.inputs.size())) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": in_place index ", k, " is not an input"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MemoryPlan> PlanMemory(std::span<const PlanBuffer> buffers,
                                      std::span<const PlanStep> steps) {
  if (absl::Status status = CheckProgram(buffers, steps); !status.ok()) return status;
  const auto num_steps = static_cast<int32_t>(steps.size());
  MemoryPlan plan;
  plan.num_steps = num_steps;
  plan.buffers.resize(buffers.size());
  for (size_t b = 0; b < buffers.size(); ++b) {
    BufferPlacement& p = plan.buffers[b];
    p.size_bytes = buffers[b].size_bytes;
    p.graph_input = buffers[b].graph_input;
    p.graph_output = buffers[b].graph_output;
    p.name = buffers[b].name;
  }

  // Liveness.
  for (int32_t s = 0; s < num_steps; ++s) {
    const PlanStep& step = steps[static_cast<size_t>(s)];
    for (BufferId id : step.inputs) {
      BufferPlacement& p = plan.buffers[static_cast<size_t>(id)];
      if (p.graph_input) continue;
      if (p.first_step < 0) {
        return absl::InvalidArgumentError(absl::StrCat("memory plan: step ", s, " \"", step.name,
                                                       "\" reads ", BufferLabel(buffers, id),
                                                       " before any step writes it"));
      }
      p.last_step = s;
    }
    for (BufferId id : step.outputs) {
      BufferPlacement& p = plan.buffers[static_cast<size_t>(id)];
      if (p.graph_input || p.first_step >= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "memory plan: step ", s, " \"", step.name, "\" writes ", BufferLabel(buffers, id),
            p.graph_input ? ", a graph input" : ", which an earlier write already defined"));
      }
      p.first_step = s;
      p.last_step = s;
    }
  }
  for (size_t b = 0; b < buffers.size(); ++b) {
    BufferPlacement& p = plan.buffers[b];
    if (!p.graph_output || p.graph_input) continue;
    if (p.first_step < 0) {
      return absl::InvalidArgumentError(absl::StrCat("memory plan: graph output ",
                                                     BufferLabel(buffers, static_cast<BufferId>(b)),
                                                     " is never written"));
    }
    p.last_step = num_steps;
  }

  // In-place writes, in step order, merging each output into the block of the input it
  // overwrites.
  std::vector<int32_t> block_of(buffers.size(), -1);
  std::vector<Block> blocks;
  for (int32_t s = 0; s < num_steps; ++s) {
    const PlanStep& step = steps[static_cast<size_t>(s)];
    std::vector<int32_t> taken;  // Blocks an output of this step already went into.
    for (size_t j = 0; j < step.outputs.size(); ++j) {
      const BufferId out = step.outputs[j];
      BufferPlacement& o = plan.buffers[static_cast<size_t>(out)];
      const int k = step.in_place.empty() ? -1 : step.in_place[j];
      if (k >= 0) {
        const BufferId in = step.inputs[static_cast<size_t>(k)];
        const BufferPlacement& i = plan.buffers[static_cast<size_t>(in)];
        const int32_t block = block_of[static_cast<size_t>(in)];
        const bool legal = !i.graph_input && !i.graph_output && i.last_step == s && block >= 0 &&
                           AlignUp(o.size_bytes) <= blocks[block].size &&
                           std::find(taken.begin(), taken.end(), block) == taken.end();
        if (legal) {
          o.in_place_of = in;
          block_of[static_cast<size_t>(out)] = block;
          blocks[static_cast<size_t>(block)].last_step = o.last_step;
          taken.push_back(block);
          continue;
        }
      }
      block_of[static_cast<size_t>(out)] = static_cast<int32_t>(blocks.size());
      blocks.push_back(Block{AlignUp(o.size_bytes), o.first_step, o.last_step, 0});
      plan.unshared_size += AlignUp(o.size_bytes);
    }
  }
  for (size_t b = 0; b < buffers.size(); ++b) {
    if (block_of[b] >= 0 && plan.buffers[b].in_place_of >= 0) {
      plan.unshared_size += AlignUp(plan.buffers[b].size_bytes);
    }
  }

  // Offsets: largest block first, each at the lowest offset that does not overlap a placed block
  // whose live range meets its own.
  std::vector<int32_t> order(blocks.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return blocks[static_cast<size_t>(a)].size > blocks[static_cast<size_t>(b)].size;
  });
  std::vector<int32_t> placed;
  for (int32_t index : order) {
    Block& block = blocks[static_cast<size_t>(index)];
    if (block.size == 0) continue;                  // Occupies nothing; offset 0.
    std::vector<std::pair<int64_t, int64_t>> busy;  // [offset, end) of conflicting blocks.
    for (int32_t other_index : placed) {
      const Block& other = blocks[static_cast<size_t>(other_index)];
      if (other.first_step <= block.last_step && block.first_step <= other.last_step) {
        busy.emplace_back(other.offset, other.offset + other.size);
      }
    }
    std::sort(busy.begin(), busy.end());
    int64_t offset = 0;
    for (const auto& [begin, end] : busy) {
      if (begin >= offset + block.size) break;
      offset = std::max(offset, end);
    }
    block.offset = offset;
    plan.arena_size = std::max(plan.arena_size, offset + block.size);
    placed.push_back(index);
  }
  for (size_t b = 0; b < buffers.size(); ++b) {
    if (block_of[b] >= 0) plan.buffers[b].offset = blocks[static_cast<size_t>(block_of[b])].offset;
  }
  return plan;
}

std::string MemoryPlan::ToString() const {
  std::string text =
      absl::StrFormat("memory plan: arena %d bytes (%d without reuse), %d buffers, %d steps\n",
                      arena_size, unshared_size, buffers.size(), num_steps);
  for (size_t b = 0; b < buffers.size(); ++b) {
    const BufferPlacement& p = buffers[b];
    std::string label = absl::StrCat("b", b);
    if (!p.name.empty()) absl::StrAppend(&label, " \"", p.name, "\"");
    absl::StrAppendFormat(&text, "  %-20s %10d bytes", label, p.size_bytes);
    if (p.graph_input) {
      text += "  graph input\n";
      continue;
    }
    if (p.offset < 0) {
      text += "  unused\n";
      continue;
    }
    absl::StrAppendFormat(&text, "  offset %-10d live [%d, %s]", p.offset, p.first_step,
                          p.last_step == num_steps ? "end" : absl::StrCat(p.last_step));
    if (p.in_place_of >= 0) absl::StrAppend(&text, "  in place of b", p.in_place_of);
    if (p.graph_output) text += "  graph output";
    text += "\n";
  }
  return text;
}

}  // namespace kiln::passes
