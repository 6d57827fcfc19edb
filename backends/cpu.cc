// The kiln::Cpu backend's registration: linking this object (library kiln_backend_cpu, linked
// whole) makes the frontend's engine run kiln::Cpu graphs through the CPU graph compiler
// (codegen/cpu/graph_compiler.h) and marks the backend available (runtime::IsBackendAvailable,
// KILN_DEVICE=cpu). A program that does not link it carries no LLVM.
#include <memory>
#include <span>
#include <vector>

#include "codegen/cpu/graph_compiler.h"
#include "frontend/engine.h"
#include "runtime/device.h"

namespace kiln::backends {
namespace {

// Runs during static initialisation; the engine's registry is constructed on first use.
[[maybe_unused]] const bool kRegistered = [] {
  detail::RegisterDonatingExecutor(
      runtime::DeviceKind::kCpu,
      [](const ir::Graph& graph, std::span<const std::shared_ptr<const ir::TensorData>> arguments,
         std::span<const bool> donated,
         runtime::DeviceId) { return codegen::cpu::CompileAndRun(graph, arguments, donated); });
  // kiln::jit's replay runs the compiled graph without looking it up again.
  detail::RegisterPreparer(
      runtime::DeviceKind::kCpu,
      [](const ir::Graph& graph, std::span<const bool> donatable,
         runtime::DeviceId) -> absl::StatusOr<detail::PreparedGraph::Program> {
        absl::StatusOr<std::shared_ptr<const codegen::cpu::CompiledGraph>> compiled =
            codegen::cpu::CompileCached(graph, donatable);
        if (!compiled.ok()) return compiled.status();
        return [compiled = *std::move(compiled)](
                   std::span<const std::shared_ptr<const ir::TensorData>> arguments,
                   std::span<const bool> donated) {
          return codegen::cpu::RunCompiledGraph(*compiled, arguments, donated);
        };
      });
  detail::RegisterCompileCounter(runtime::DeviceKind::kCpu,
                                 [] { return codegen::cpu::GetGraphCacheStats().compiles; });
  return true;
}();

}  // namespace
}  // namespace kiln::backends
