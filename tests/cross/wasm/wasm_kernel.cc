// Stretch of the cross-target proof: a fused kernel compiled by LLVM's WebAssembly target and run
// by node (run_wasm_test.sh, CTest cross.wasm32_node).
//   wasm_kernel <graph.kir> <dir>
// The graph must fuse into one kernel (an elementwise or reduction group: the GEMM and the
// launch-plan runtime are not ported to wasm). Writes <dir>/kernel.ll: the kernel through
// ExpandMath and the CPU emitter (codegen/cpu/emitter.h, as for the JIT and the blobs) into a
// module for wasm32-unknown-unknown, not optimised (run_wasm_test.sh runs opt-16 -O3 and llc-16);
// <dir>/plan.txt (the parallel extent, then one line per kernel argument: role, file, bytes,
// dtype); arg_<k>.bin: the inputs (seeded random) and the reference interpreter's outputs (raw
// little-endian).
#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "codegen/cpu/emitter.h"
#include "codegen/lower.h"
#include "codegen/math_expand.h"
#include "ir/interpreter.h"
#include "ir/parser.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/IR/Intrinsics.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "passes/fusion.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "wasm_kernel: %s\n", message.c_str());
  return 1;
}

bool WriteBytes(const std::string& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kiln;
  if (argc != 3) return Fail("usage: wasm_kernel <graph.kir> <dir>");
  const std::string dir = argv[2];
  std::ifstream in(argv[1]);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  absl::StatusOr<ir::Graph> graph = ir::ParseGraph(text);
  if (!graph.ok()) return Fail(std::string(argv[1]) + ":" + std::string(graph.status().message()));

  const passes::FusionPlan plan = passes::Fuse(*graph);
  if (plan.groups.size() != 1 || plan.groups[0].kind == passes::FusionKind::kContraction) {
    return Fail("the graph must fuse into one non-contraction kernel");
  }
  absl::StatusOr<codegen::Kernel> kernel = codegen::LowerGroup(*graph, plan.groups[0], "kernel_0");
  if (!kernel.ok()) return Fail(std::string(kernel.status().message()));

  constexpr char kTriple[] = "wasm32-unknown-unknown";
  LLVMInitializeWebAssemblyTargetInfo();
  LLVMInitializeWebAssemblyTarget();
  LLVMInitializeWebAssemblyTargetMC();
  std::string error;
  const llvm::Target* llvm_target = llvm::TargetRegistry::lookupTarget(kTriple, error);
  if (llvm_target == nullptr) return Fail("LLVM has no wasm32 target: " + error);
  std::unique_ptr<llvm::TargetMachine> machine(llvm_target->createTargetMachine(
      kTriple, "generic", "+simd128", llvm::TargetOptions(), llvm::Reloc::Static));
  llvm::LLVMContext context;
  llvm::Module module("kiln_wasm", context);
  module.setTargetTriple(kTriple);
  module.setDataLayout(machine->createDataLayout());
  absl::StatusOr<llvm::Function*> function =
      codegen::cpu::EmitKernel(codegen::ExpandMath(*kernel), "kernel_0", module);
  if (!function.ok()) return Fail(std::string(function.status().message()));
  for (llvm::Function& f : module) {
    if (f.isDeclaration()) continue;
    f.addFnAttr("target-cpu", "generic");
    f.addFnAttr("target-features", "+simd128");
  }
  // LLVM 16's wasm32 backend has no lowering for llvm.roundeven (it becomes a libcall whose
  // signature the asm printer does not know, and llc crashes). nearbyint under the default
  // rounding mode is the same function (round half to even) and lowers to f32.nearest.
  for (llvm::Function& f : llvm::make_early_inc_range(module)) {
    if (f.getIntrinsicID() != llvm::Intrinsic::roundeven) continue;
    f.replaceAllUsesWith(
        llvm::Intrinsic::getDeclaration(&module, llvm::Intrinsic::nearbyint, {f.getReturnType()}));
    f.eraseFromParent();
  }
  std::string ir_text;
  llvm::raw_string_ostream ir_stream(ir_text);
  if (llvm::verifyModule(module, &ir_stream))
    return Fail("invalid LLVM module: " + ir_stream.str());
  module.print(ir_stream, nullptr);
  ir_stream.flush();
  if (!WriteBytes(dir + "/kernel.ll", ir_text.data(), ir_text.size())) return Fail("cannot write");

  // Inputs and the interpreter's outputs.
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> uniform(-2.0, 2.0);
  const std::vector<ir::NodeId> params = graph->Parameters();
  std::vector<ir::TensorData> args;
  for (ir::NodeId p : params) {
    const ir::TensorType& type = graph->node(p).type;
    ir::TensorData t(type.dtype, type.shape);
    for (int64_t k = 0; k < t.num_elements(); ++k) t.SetDouble(k, uniform(rng));
    args.push_back(std::move(t));
  }
  absl::StatusOr<std::vector<ir::TensorData>> expected = ir::Interpret(*graph, args);
  if (!expected.ok()) return Fail(std::string(expected.status().message()));

  std::ofstream plan_out(dir + "/plan.txt");
  plan_out << kernel->parallel_extent << "\n";
  for (size_t a = 0; a < kernel->args.size(); ++a) {
    const codegen::KernelArg& arg = kernel->args[a];
    const size_t bytes = static_cast<size_t>(arg.num_elements * ir::DTypeSize(arg.dtype));
    const std::string file = dir + "/arg_" + std::to_string(a) + ".bin";
    const ir::TensorData* value = nullptr;
    std::string role;
    if (arg.role == codegen::ArgRole::kInput) {
      for (size_t p = 0; p < params.size(); ++p) {
        if (params[p] == arg.node) value = &args[p];
      }
      role = "in";
    } else if (arg.role == codegen::ArgRole::kOutput) {
      for (size_t o = 0; o < graph->outputs().size(); ++o) {
        if (graph->outputs()[o].node == arg.node) value = &(*expected)[o];
      }
      role = "out";
    } else {
      role = "flag";
    }
    if (role != "flag" && value == nullptr) {
      return Fail("kernel argument " + std::to_string(a) + " is no parameter or graph output");
    }
    if (value != nullptr && !WriteBytes(file, value->data(), bytes)) return Fail("cannot write");
    plan_out << role << " " << file << " " << bytes << " " << ir::DTypeName(arg.dtype) << "\n";
  }
  std::printf("wasm_kernel: %s: one %s kernel, %zu args, parallel extent %lld\n", argv[1],
              plan.groups[0].kind == passes::FusionKind::kReduction ? "reduction" : "elementwise",
              kernel->args.size(), static_cast<long long>(kernel->parallel_extent));
  return 0;
}
