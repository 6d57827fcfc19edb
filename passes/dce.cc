#include "passes/dce.h"

#include <vector>

#include "passes/rewriter.h"

namespace kiln::passes {

absl::StatusOr<ir::Graph> DeadCodeElimination::Run(ir::Graph graph) {
  const ir::NodeId n = graph.num_nodes();
  std::vector<char> live(static_cast<size_t>(n), 0);
  for (const ir::Output& output : graph.outputs()) live[static_cast<size_t>(output.node)] = 1;
  // Topological order: one backward sweep reaches everything the outputs use.
  for (ir::NodeId id = n - 1; id >= 0; --id) {
    const ir::Node& node = graph.node(id);
    if (node.op == ir::Op::kParameter) live[static_cast<size_t>(id)] = 1;
    if (!live[static_cast<size_t>(id)]) continue;
    for (ir::NodeId input : node.inputs) live[static_cast<size_t>(input)] = 1;
  }
  GraphRewriter rw(graph);
  for (ir::NodeId id = 0; id < n; ++id) {
    if (live[static_cast<size_t>(id)]) rw.Map(id, rw.Copy(id));
  }
  return std::move(rw).Finish();
}

}  // namespace kiln::passes
