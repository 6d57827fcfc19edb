// The CPU backend (codegen/cpu: LLVM JIT and the GEMM engine) as the conformance suite's backend
// under test (tests/conformance/backend_under_test.h).
#include "tests/conformance/backend_under_test.h"

#include <memory>

#include "codegen/cpu/graph_compiler.h"

namespace kiln::conformance {

const BackendUnderTest& Backend() {
  static const BackendUnderTest* const backend = [] {
    auto* b = new BackendUnderTest;
    b->name = "cpu";
    b->device = "cpu:0";
    b->run = [](const ir::Graph& graph,
                std::span<const std::shared_ptr<const ir::TensorData>> arguments) {
      return codegen::cpu::CompileAndRun(graph, arguments);
    };
    b->compile = [](const ir::Graph& graph) -> absl::StatusOr<CompileStats> {
      absl::StatusOr<std::shared_ptr<const codegen::cpu::CompiledGraph>> compiled =
          codegen::cpu::CompileGraph(graph);
      if (!compiled.ok()) return compiled.status();
      return CompileStats{(*compiled)->num_kernels, (*compiled)->num_gemm_steps,
                          (*compiled)->dump_directory};
    };
    b->graph_compiles = [] { return codegen::cpu::GetGraphCacheStats().compiles; };
    // The JIT rewrites f32 exp/log/tanh/erf (and the sigmoid pattern) into polynomial expansions
    // whose documented maximum error (codegen/math_expand.h, measured over every f32 input by
    // tests/codegen/cpu/math_expand_test.cc) against the correctly rounded result is 1.0 ulp
    // (exp, log), 1.5 ulp (tanh, erf) and 2.5 ulp (sigmoid), where the interpreter rounds once.
    // f16 and bf16 compute in f32 and round on store; their case tolerances (one unit of their
    // own last place) already cover a one-f32-ulp difference before that rounding. f64 keeps
    // libm: no widening.
    b->math.f32 = {{ir::Op::kExp, {1.0}},
                   {ir::Op::kLog, {1.0}},
                   {ir::Op::kTanh, {1.5}},
                   {ir::Op::kErf, {1.5}}};
    b->math.f32_sigmoid_ulps = 2.5;
    // Sum and product reductions may be reassociated by the vectoriser (codegen/kernel_ir.h: "in
    // an unspecified order"; codegen/cpu/emitter.h: `reassoc` on reductions).
    b->math.f64_reordered = {ir::Op::kReduceSum, ir::Op::kReduceProd};
    b->kernel_dump_files = {{"ll", {"define"}}, {"s", {"ret"}}};
    // The blob's host section is the JIT's code (same emitter, CPU, O3 pipeline, GEMM driver).
    b->blob.device = "cpu";
    b->blob.bit_exact_with_jit = true;
    return b;
  }();
  return *backend;
}

}  // namespace kiln::conformance
