#include "passes/cse.h"

#include <bit>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "ir/hash.h"
#include "passes/rewriter.h"

namespace kiln::passes {

absl::StatusOr<ir::Graph> CommonSubexpressionElimination::Run(ir::Graph graph) {
  const std::vector<uint64_t> hashes = ir::NodeHashes(graph);
  // Source hash -> the new-graph nodes that carry it (more than one only on a collision).
  absl::flat_hash_map<uint64_t, std::vector<ir::NodeId>> seen;
  GraphRewriter rw(graph);
  for (ir::NodeId id = 0; id < graph.num_nodes(); ++id) {
    const ir::Node& node = graph.node(id);
    const std::vector<ir::NodeId> inputs = rw.Inputs(id);
    std::vector<ir::NodeId>& candidates = seen[hashes[static_cast<size_t>(id)]];
    ir::NodeId match = ir::kInvalidNode;
    if (node.op != ir::Op::kParameter) {
      for (ir::NodeId candidate : candidates) {
        if (candidate == ir::kInvalidNode) continue;  // The builder failed; Finish reports it.
        const ir::Node& other = rw.node(candidate);
        if (other.op == node.op && other.type == node.type && other.inputs == inputs &&
            other.attrs == node.attrs &&
            std::bit_cast<uint64_t>(other.attrs.value) ==
                std::bit_cast<uint64_t>(node.attrs.value)) {
          match = candidate;
          break;
        }
      }
    }
    if (match == ir::kInvalidNode) {
      match = rw.Copy(id);
      candidates.push_back(match);
    }
    rw.Map(id, match);
  }
  return std::move(rw).Finish();
}

}  // namespace kiln::passes
