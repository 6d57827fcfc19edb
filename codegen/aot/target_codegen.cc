#include "codegen/aot/target_codegen.h"

#include <memory>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "codegen/cpu/emitter.h"
#include "codegen/cpu/gemm_kernel.h"
#include "codegen/cpu/jit.h"
#include "codegen/cpu/llvm_jit.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/CodeGen.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Triple.h"

namespace kiln::aot {
namespace {

void InitializeTargets() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeAllTargetInfos();
    llvm::InitializeAllTargets();
    llvm::InitializeAllTargetMCs();
    llvm::InitializeAllAsmPrinters();
  });
}

}  // namespace

absl::StatusOr<TargetInfo> HostTargetInfo() {
  absl::StatusOr<codegen::cpu::HostTarget> host = codegen::cpu::CpuCompiler::Host();
  if (!host.ok()) return host.status();
  absl::StatusOr<runtime::cpu::gemm_internal::TargetVectors> vectors =
      codegen::cpu::gemm_internal::HostVectors();
  if (!vectors.ok()) return vectors.status();
  return TargetInfo{host->triple, host->cpu, host->features, *vectors};
}

absl::StatusOr<TargetInfo> LevelTargetInfo(runtime::cpu::CpuLevel level) {
  absl::StatusOr<codegen::cpu::HostTarget> target = codegen::cpu::TargetForLevel(level);
  if (!target.ok()) return target.status();
  return TargetInfo{target->triple, target->cpu, target->features,
                    codegen::cpu::gemm_internal::VectorsFor(*target)};
}

absl::StatusOr<TargetInfo> GenericTargetInfo(const std::string& name) {
  const llvm::Triple triple(llvm::Triple::normalize(name));
  TargetInfo info;
  info.triple = triple.str();
  info.cpu = "generic";
  switch (triple.getArch()) {
    case llvm::Triple::aarch64:
      // NEON is part of the AArch64 baseline: 32 x 128-bit registers with fused multiply-add.
      info.features = "+neon,+fp-armv8";
      info.vectors = {128, 32, true};
      break;
    case llvm::Triple::x86_64:
      info.cpu = "x86-64";
      info.features = "+sse2";
      info.vectors = {128, 16, false};
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "aot: triple ", name, " is not supported (x86_64 and aarch64 Linux triples are)"));
  }
  if (!triple.isOSLinux()) {
    return absl::InvalidArgumentError(
        absl::StrCat("aot: triple ", name, ": only Linux targets are supported (ELF, dlopen)"));
  }
  return info;
}

absl::StatusOr<std::string> CompileObject(
    const TargetInfo& target, const std::vector<std::pair<std::string, codegen::Kernel>>& kernels,
    const std::vector<MicroKernelRequest>& micro_kernels) {
  InitializeTargets();
  std::string error;
  const llvm::Target* llvm_target = llvm::TargetRegistry::lookupTarget(target.triple, error);
  if (llvm_target == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("aot: LLVM has no target for ", target.triple, ": ", error));
  }
  llvm::TargetOptions target_options;
  std::unique_ptr<llvm::TargetMachine> machine(llvm_target->createTargetMachine(
      target.triple, target.cpu, target.features, target_options, llvm::Reloc::PIC_,
      llvm::CodeModel::Small, llvm::CodeGenOpt::Aggressive));
  if (machine == nullptr) {
    return absl::InternalError(
        absl::StrCat("aot: cannot create a target machine for ", target.triple));
  }
  llvm::LLVMContext context;
  llvm::Module module("kiln_blob", context);
  module.setTargetTriple(target.triple);
  module.setDataLayout(machine->createDataLayout());
  for (const auto& [symbol, kernel] : kernels) {
    absl::StatusOr<llvm::Function*> function =
        codegen::cpu::EmitKernel(codegen::cpu::PrepareKernel(kernel), symbol, module);
    if (!function.ok()) {
      return absl::Status(function.status().code(),
                          absl::StrCat("aot: ", target.triple, ": kernel ", kernel.name, ": ",
                                       function.status().message()));
    }
  }
  for (const MicroKernelRequest& request : micro_kernels) {
    if (request.int8.has_value()) {
      codegen::cpu::gemm_internal::EmitInt8MicroKernel(module, request.shape, *request.int8,
                                                       target.features);
    } else {
      codegen::cpu::gemm_internal::EmitMicroKernel(module, request.dtype, request.shape,
                                                   request.variant);
    }
  }
  for (llvm::Function& function : module) {
    if (function.isDeclaration()) continue;
    function.addFnAttr("target-cpu", target.cpu);
    function.addFnAttr("target-features", target.features);
  }
  {
    std::string problems;
    llvm::raw_string_ostream stream(problems);
    if (llvm::verifyModule(module, &stream)) {
      stream.flush();
      return absl::InternalError(absl::StrCat("aot: invalid LLVM module: ", problems));
    }
  }
  {
    llvm::LoopAnalysisManager loop_analyses;
    llvm::FunctionAnalysisManager function_analyses;
    llvm::CGSCCAnalysisManager cgscc_analyses;
    llvm::ModuleAnalysisManager module_analyses;
    llvm::PipelineTuningOptions tuning;
    tuning.LoopVectorization = true;
    tuning.SLPVectorization = true;
    tuning.LoopUnrolling = true;
    llvm::PassBuilder builder(machine.get(), tuning);
    builder.registerModuleAnalyses(module_analyses);
    builder.registerCGSCCAnalyses(cgscc_analyses);
    builder.registerFunctionAnalyses(function_analyses);
    builder.registerLoopAnalyses(loop_analyses);
    builder.crossRegisterProxies(loop_analyses, function_analyses, cgscc_analyses, module_analyses);
    builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(module, module_analyses);
  }
  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream stream(buffer);
  llvm::legacy::PassManager passes;
  if (machine->addPassesToEmitFile(passes, stream, nullptr, llvm::CGFT_ObjectFile)) {
    return absl::InternalError(
        absl::StrCat("aot: target ", target.triple, " cannot emit object files"));
  }
  passes.run(module);
  return std::string(buffer.data(), buffer.size());
}

}  // namespace kiln::aot
