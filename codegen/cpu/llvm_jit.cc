#include "codegen/cpu/llvm_jit.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/env_flag.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/IR/DataLayout.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Object/ObjectFile.h"
#include "llvm/Object/SymbolSize.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/CodeGen.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"
#include "llvm/Transforms/Utils/Cloning.h"

namespace kiln::codegen::cpu {
namespace {

std::string ErrorText(llvm::Error error) { return llvm::toString(std::move(error)); }

// Machine code for the JIT: the target's CPU and features (LevelMachineBuilder), full optimisation,
// position-independent code in the small code model (the linker adds stubs for far calls
// into libm).
llvm::orc::JITTargetMachineBuilder HostMachineBuilder(llvm::orc::JITTargetMachineBuilder jtmb) {
  jtmb.setCodeGenOptLevel(llvm::CodeGenOpt::Aggressive);
  jtmb.setRelocationModel(llvm::Reloc::PIC_);
  jtmb.setCodeModel(llvm::CodeModel::Small);
  return jtmb;
}

absl::Status InitializeNativeLlvm() {
  static const bool failed = llvm::InitializeNativeTarget() ||
                             llvm::InitializeNativeTargetAsmPrinter() ||
                             llvm::InitializeNativeTargetAsmParser();
  if (failed) {
    return absl::FailedPreconditionError(
        "cpu codegen: LLVM has no native target for this host (LLVM built without it?)");
  }
  return absl::OkStatus();
}

// The machine builder for `level` (before HostMachineBuilder's code generation settings).
absl::StatusOr<llvm::orc::JITTargetMachineBuilder> LevelMachineBuilder(
    runtime::cpu::CpuLevel level) {
  if (absl::Status status = InitializeNativeLlvm(); !status.ok()) return status;
  if (level == runtime::cpu::CpuLevel::kHost) {
    auto detected = llvm::orc::JITTargetMachineBuilder::detectHost();
    if (!detected) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cpu codegen: cannot detect the host target: ", ErrorText(detected.takeError())));
    }
    return std::move(*detected);
  }
  const char* cpu = runtime::cpu::CpuLevelName(level);
  const llvm::Triple triple(llvm::sys::getProcessTriple());
  if (triple.getArch() != llvm::Triple::x86_64) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cpu codegen: CPU level ", cpu, " needs an x86-64 host (this is ", triple.str(), ")"));
  }
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple.str(), error);
  if (target == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cpu codegen: LLVM has no target for ", triple.str(), ": ", error));
  }
  std::unique_ptr<llvm::MCSubtargetInfo> subtarget(
      target->createMCSubtargetInfo(triple.str(), cpu, ""));
  if (subtarget == nullptr || !subtarget->isCPUStringValid(cpu)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cpu codegen: this LLVM does not know the CPU ", cpu));
  }
  llvm::StringMap<bool> host_features;
  if (!llvm::sys::getHostCPUFeatures(host_features)) {
    return absl::FailedPreconditionError(
        "cpu codegen: LLVM cannot list the host's CPU features (the names a level is written in)");
  }
  // Every feature host detection knows, on or off as the level's CPU has it (with what its
  // features imply), in a fixed order: the same string on every x86-64 machine.
  std::vector<std::string> names;
  for (const auto& entry : host_features) names.push_back(entry.first().str());
  std::sort(names.begin(), names.end());
  std::vector<std::string> features;
  for (const std::string& name : names) {
    features.push_back(absl::StrCat(subtarget->checkFeatures("+" + name) ? "+" : "-", name));
  }
  llvm::orc::JITTargetMachineBuilder jtmb(triple);
  jtmb.setCPU(cpu);
  jtmb.addFeatures(features);
  return jtmb;
}

// KILN_PERF_MAP=1: every loaded kernel's functions go to /tmp/perf-<pid>.map (Linux perf's
// map of JIT code), so `perf report` names the kernels instead of raw addresses. Only the
// object's global functions: ORC looks addresses up by name, and local symbols have none it
// can find.
class PerfMap {
 public:
  static PerfMap* Get() {
    static PerfMap* const map = [] {
      if (!base::EnvFlag("KILN_PERF_MAP")) return static_cast<PerfMap*>(nullptr);
      const std::string path = absl::StrCat("/tmp/perf-", getpid(), ".map");
      std::FILE* file = std::fopen(path.c_str(), "a");
      if (file == nullptr) {
        std::fprintf(stderr, "kiln: KILN_PERF_MAP: cannot open %s\n", path.c_str());
        return static_cast<PerfMap*>(nullptr);
      }
      return new PerfMap(file);
    }();
    return map;
  }

  // Writes a line per global function of `object`, whose addresses `lookup` finds, named
  // "<symbol> <dylib>": kernels of different graphs share symbols (kiln_k0), not dylibs.
  void Add(std::string_view object, llvm::orc::LLJIT& jit, llvm::orc::JITDylib& dylib) {
    auto file = llvm::object::ObjectFile::createObjectFile(
        llvm::MemoryBufferRef(llvm::StringRef(object.data(), object.size()), "kernel"));
    if (!file) {
      llvm::consumeError(file.takeError());
      return;
    }
    for (const auto& [symbol, size] : llvm::object::computeSymbolSizes(**file)) {
      auto type = symbol.getType();
      auto flags = symbol.getFlags();
      auto name = symbol.getName();
      if (!type || !flags || !name || *type != llvm::object::SymbolRef::ST_Function ||
          !(*flags & llvm::object::BasicSymbolRef::SF_Global) || size == 0) {
        if (!type) llvm::consumeError(type.takeError());
        if (!flags) llvm::consumeError(flags.takeError());
        if (!name) llvm::consumeError(name.takeError());
        continue;
      }
      auto address = jit.lookup(dylib, *name);
      if (!address) {
        llvm::consumeError(address.takeError());
        continue;
      }
      std::lock_guard<std::mutex> lock(mutex_);
      std::fprintf(file_, "%llx %llx %s %s\n", static_cast<unsigned long long>(address->getValue()),
                   static_cast<unsigned long long>(size), name->str().c_str(),
                   dylib.getName().c_str());
      std::fflush(file_);
    }
  }

 private:
  explicit PerfMap(std::FILE* file) : file_(file) {}
  std::mutex mutex_;
  std::FILE* file_;
};

HostTarget DescribeTarget(const llvm::orc::JITTargetMachineBuilder& jtmb) {
  HostTarget target;
  target.triple = jtmb.getTargetTriple().str();
  target.cpu = jtmb.getCPU();
  target.features = jtmb.getFeatures().getString();
  return target;
}

}  // namespace

absl::StatusOr<HostTarget> TargetForLevel(runtime::cpu::CpuLevel level) {
  absl::StatusOr<llvm::orc::JITTargetMachineBuilder> jtmb = LevelMachineBuilder(level);
  if (!jtmb.ok()) return jtmb.status();
  return DescribeTarget(*jtmb);
}

struct LlvmJit::Impl {
  Impl(llvm::orc::JITTargetMachineBuilder machine_builder, std::unique_ptr<llvm::orc::LLJIT> lljit,
       llvm::DataLayout layout)
      : jtmb(std::move(machine_builder)), jit(std::move(lljit)), data_layout(std::move(layout)) {}

  llvm::orc::JITTargetMachineBuilder jtmb;
  std::unique_ptr<llvm::orc::LLJIT> jit;
  llvm::DataLayout data_layout;
  HostTarget host;
  std::atomic<uint64_t> next_dylib_id{0};
};

struct LoadedObject::DylibHandle {
  llvm::orc::LLJIT* jit;
  llvm::orc::JITDylib* dylib;
};

LoadedObject::LoadedObject(std::unique_ptr<DylibHandle> dylib, uint64_t address)
    : dylib_(std::move(dylib)), address_(address) {}

LoadedObject::~LoadedObject() {
  if (dylib_ == nullptr) return;
  if (llvm::Error error = dylib_->jit->getExecutionSession().removeJITDylib(*dylib_->dylib)) {
    // Nothing can be done about a failed release but leaking it; say so rather than hide it.
    std::fprintf(stderr, "kiln: releasing JIT code failed: %s\n",
                 ErrorText(std::move(error)).c_str());
  }
}

LlvmJit::LlvmJit(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

absl::StatusOr<LlvmJit*> LlvmJit::Get() {
  static absl::StatusOr<LlvmJit*>* const instance = [] {
    auto* result = new absl::StatusOr<LlvmJit*>(absl::InternalError("unset"));
    const absl::StatusOr<runtime::cpu::CpuLevel>& level = runtime::cpu::ProcessCpuLevel();
    if (!level.ok()) {
      *result = absl::Status(level.status().code(),
                             absl::StrCat("cpu codegen: ", level.status().message()));
      return result;
    }
    absl::StatusOr<llvm::orc::JITTargetMachineBuilder> builder = LevelMachineBuilder(*level);
    if (!builder.ok()) {
      *result = builder.status();
      return result;
    }
    llvm::orc::JITTargetMachineBuilder jtmb = HostMachineBuilder(*std::move(builder));
    auto layout = jtmb.getDefaultDataLayoutForTarget();
    if (!layout) {
      *result = absl::FailedPreconditionError(absl::StrCat(
          "cpu codegen: no data layout for the host: ", ErrorText(layout.takeError())));
      return result;
    }
    auto lljit = llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(jtmb).create();
    if (!lljit) {
      *result = absl::FailedPreconditionError(
          absl::StrCat("cpu codegen: cannot create the ORC JIT: ", ErrorText(lljit.takeError())));
      return result;
    }
    // Kernels call libm (sinf, powf, ...): resolve undefined symbols against the process.
    auto process_symbols =
        llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(layout->getGlobalPrefix());
    if (!process_symbols) {
      *result = absl::FailedPreconditionError(
          absl::StrCat("cpu codegen: cannot search the process's symbols: ",
                       ErrorText(process_symbols.takeError())));
      return result;
    }
    (*lljit)->getMainJITDylib().addGenerator(std::move(*process_symbols));

    auto impl = std::make_unique<Impl>(jtmb, std::move(*lljit), *layout);
    impl->host = DescribeTarget(jtmb);
    *result = new LlvmJit(std::move(impl));
    return result;
  }();
  return *instance;
}

const HostTarget& LlvmJit::host() const { return impl_->host; }

void LlvmJit::ConfigureModule(llvm::Module& module) const {
  module.setTargetTriple(impl_->host.triple);
  module.setDataLayout(impl_->data_layout);
  for (llvm::Function& function : module) {
    if (function.isDeclaration()) continue;
    function.addFnAttr("target-cpu", impl_->host.cpu);
    function.addFnAttr("target-features", impl_->host.features);
  }
}

absl::StatusOr<ObjectCode> LlvmJit::Codegen(llvm::Module& module, bool want_text,
                                            IrPipeline ir_pipeline) const {
  ConfigureModule(module);
  {
    std::string problems;
    llvm::raw_string_ostream stream(problems);
    if (llvm::verifyModule(module, &stream)) {
      stream.flush();
      return absl::InternalError(absl::StrCat("cpu codegen: the emitted LLVM module '",
                                              module.getName().str(), "' is invalid: ", problems));
    }
  }
  // A target machine per call: TargetMachine is not safe to share between threads compiling.
  auto machine = impl_->jtmb.createTargetMachine();
  if (!machine) {
    return absl::InternalError(absl::StrCat("cpu codegen: cannot create a target machine: ",
                                            ErrorText(machine.takeError())));
  }
  llvm::TargetMachine& target = **machine;

  if (ir_pipeline == IrPipeline::kO3) {
    llvm::LoopAnalysisManager loop_analyses;
    llvm::FunctionAnalysisManager function_analyses;
    llvm::CGSCCAnalysisManager cgscc_analyses;
    llvm::ModuleAnalysisManager module_analyses;
    llvm::PipelineTuningOptions tuning;
    tuning.LoopVectorization = true;
    tuning.SLPVectorization = true;
    tuning.LoopUnrolling = true;
    llvm::PassBuilder builder(&target, tuning);
    builder.registerModuleAnalyses(module_analyses);
    builder.registerCGSCCAnalyses(cgscc_analyses);
    builder.registerFunctionAnalyses(function_analyses);
    builder.registerLoopAnalyses(loop_analyses);
    builder.crossRegisterProxies(loop_analyses, function_analyses, cgscc_analyses, module_analyses);
    llvm::ModulePassManager pipeline =
        builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
    pipeline.run(module, module_analyses);
  }

  ObjectCode code;
  auto emit = [&](llvm::Module& input, llvm::CodeGenFileType type,
                  std::string& out) -> absl::Status {
    llvm::SmallVector<char, 0> buffer;
    llvm::raw_svector_ostream stream(buffer);
    llvm::legacy::PassManager passes;
    if (target.addPassesToEmitFile(passes, stream, nullptr, type)) {
      return absl::InternalError(
          absl::StrCat("cpu codegen: target ", impl_->host.triple, " cannot emit this file type"));
    }
    passes.run(input);
    out.assign(buffer.data(), buffer.size());
    return absl::OkStatus();
  };
  if (want_text) {
    llvm::raw_string_ostream stream(code.llvm_ir);
    module.print(stream, nullptr);
    stream.flush();
    // Code generation mutates the module: the assembly comes from a copy.
    std::unique_ptr<llvm::Module> copy = llvm::CloneModule(module);
    if (absl::Status status = emit(*copy, llvm::CGFT_AssemblyFile, code.assembly); !status.ok()) {
      return status;
    }
  }
  if (absl::Status status = emit(module, llvm::CGFT_ObjectFile, code.object); !status.ok()) {
    return status;
  }
  return code;
}

absl::StatusOr<std::unique_ptr<LoadedObject>> LlvmJit::Load(std::string_view object,
                                                            const std::string& symbol) {
  llvm::orc::LLJIT& jit = *impl_->jit;
  const std::string name = absl::StrCat("kiln_kernel_", impl_->next_dylib_id.fetch_add(1));
  auto dylib = jit.createJITDylib(name);
  if (!dylib) {
    return absl::InternalError(absl::StrCat("cpu codegen: cannot create JITDylib ", name, ": ",
                                            ErrorText(dylib.takeError())));
  }
  dylib->addToLinkOrder(jit.getMainJITDylib());
  // From here on the handle owns the dylib: every error path below releases it.
  auto handle =
      std::unique_ptr<LoadedObject::DylibHandle>(new LoadedObject::DylibHandle{&jit, &*dylib});
  auto loaded = std::unique_ptr<LoadedObject>(new LoadedObject(std::move(handle), 0));

  std::unique_ptr<llvm::MemoryBuffer> buffer =
      llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(object.data(), object.size()), name);
  if (llvm::Error error = jit.addObjectFile(*dylib, std::move(buffer))) {
    return absl::InternalError(absl::StrCat("cpu codegen: cannot add the object of ", symbol,
                                            " to the JIT: ", ErrorText(std::move(error))));
  }
  auto address = jit.lookup(*dylib, symbol);
  if (!address) {
    return absl::InternalError(
        absl::StrCat("cpu codegen: cannot link ", symbol, ": ", ErrorText(address.takeError())));
  }
  loaded->address_ = address->getValue();
  if (PerfMap* perf_map = PerfMap::Get()) perf_map->Add(object, jit, *dylib);
  return loaded;
}

}  // namespace kiln::codegen::cpu
