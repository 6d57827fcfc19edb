// GraphRecorder: every graph the reference backend runs while it is alive, for tests that check
// how the lazy engine cuts work into graphs. Restores the plain interpreter on destruction (also
// when an assertion returns early).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "frontend/engine.h"
#include "ir/graph.h"

namespace kiln::testing {

class GraphRecorder {
 public:
  GraphRecorder() {
    detail::RegisterExecutor(
        runtime::DeviceKind::kReference,
        [this](const ir::Graph& graph, std::span<const std::shared_ptr<const ir::TensorData>> args,
               runtime::DeviceId device) {
          graphs.push_back(graph);
          return detail::InterpretOnHost(graph, args, device);
        });
  }
  ~GraphRecorder() {
    detail::RegisterExecutor(runtime::DeviceKind::kReference, detail::InterpretOnHost);
  }
  GraphRecorder(const GraphRecorder&) = delete;
  GraphRecorder& operator=(const GraphRecorder&) = delete;

  std::vector<ir::Graph> graphs;
};

}  // namespace kiln::testing
