#include "codegen/cpu/jit.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "codegen/cpu/emitter.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "xxhash.h"

namespace kiln::codegen::cpu {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// "kiln_" + the kernel name with every byte outside [A-Za-z0-9_] replaced by '_'.
std::string SymbolFor(const Kernel& kernel) {
  std::string symbol = "kiln_";
  for (char c : kernel.name) {
    const bool plain =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    symbol.push_back(plain ? c : '_');
  }
  return symbol;
}

// Everything besides the kernel that decides the emitted code.
std::string SettingsText(const CompileOptions& options) {
  return absl::StrCat("expand_math=", options.expand_math ? 1 : 0,
                      " alignment=", EmitOptions().assume_alignment);
}

void WriteDump(const CompileOptions& options, const char* extension, const std::string& text) {
  absl::Status status = options.dump->Write(absl::StrCat(options.dump_name, extension), text);
  if (!status.ok()) {
    // A broken dump folder must not fail the compile (passes/dump.h).
    std::fprintf(stderr, "kiln: KILN_DUMP: %s\n", std::string(status.message()).c_str());
  }
}

}  // namespace

const char* CodeSourceName(CodeSource source) {
  switch (source) {
    case CodeSource::kCompiled:
      return "compiled";
    case CodeSource::kMemoryCache:
      return "memory cache";
    case CodeSource::kDiskCache:
      return "disk cache";
  }
  return "?";
}

struct CpuCompiler::Loaded {
  std::unique_ptr<LoadedObject> object;
  std::string symbol;
  std::string key;
  runtime::KernelFn fn = nullptr;
};

CpuCompiler::CpuCompiler() : CpuCompiler(Options{}) {}

CpuCompiler::CpuCompiler(Options options) {
  std::string dir;
  if (options.cache_dir.has_value()) {
    dir = *options.cache_dir;
  } else if (const char* env = std::getenv("KILN_CACHE_DIR"); env != nullptr) {
    dir = env;
  }
  if (!dir.empty()) disk_ = std::make_unique<ObjectDiskCache>(std::move(dir));
}

CpuCompiler::~CpuCompiler() = default;

absl::StatusOr<HostTarget> CpuCompiler::Host() {
  absl::StatusOr<LlvmJit*> jit = LlvmJit::Get();
  if (!jit.ok()) return jit.status();
  return (*jit)->host();
}

absl::StatusOr<std::string> CpuCompiler::KeyFor(std::string_view key_text) {
  absl::StatusOr<LlvmJit*> jit = LlvmJit::Get();
  if (!jit.ok()) return jit.status();
  const HostTarget& host = (*jit)->host();
  const std::string header = absl::StrCat("kiln-cpu-codegen ", kCodegenVersion, "\n", host.triple,
                                          "\n", host.cpu, "\n", host.features, "\n");
  XXH3_state_t* state = XXH3_createState();
  XXH3_128bits_reset(state);
  XXH3_128bits_update(state, header.data(), header.size());
  XXH3_128bits_update(state, key_text.data(), key_text.size());
  const XXH128_hash_t hash = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  return absl::StrFormat("%016x%016x", hash.high64, hash.low64);
}

absl::StatusOr<std::string> CpuCompiler::CacheKey(const Kernel& kernel,
                                                  const CompileOptions& options) {
  return KeyFor(absl::StrCat(SettingsText(options), "\n", PrintKernel(kernel)));
}

absl::StatusOr<CompiledKernel> CpuCompiler::Compile(const Kernel& kernel,
                                                    const CompileOptions& options) {
  if (absl::Status status = VerifyKernel(kernel); !status.ok()) return status;
  absl::StatusOr<LlvmJit*> jit = LlvmJit::Get();
  if (!jit.ok()) return jit.status();
  const std::string symbol = SymbolFor(kernel);
  auto generate = [&](bool want_text) -> absl::StatusOr<ObjectCode> {
    const Kernel prepared = PrepareKernel(kernel, options.expand_math);
    llvm::LLVMContext context;
    llvm::Module module(symbol, context);
    (*jit)->ConfigureModule(module);
    absl::StatusOr<llvm::Function*> function = EmitKernel(prepared, symbol, module);
    if (!function.ok()) return function.status();
    return (*jit)->Codegen(module, want_text);
  };
  return CompileObject(absl::StrCat(SettingsText(options), "\n", PrintKernel(kernel)), symbol,
                       generate, options);
}

absl::StatusOr<CompiledKernel> CpuCompiler::CompileObject(
    std::string_view key_text, const std::string& symbol,
    const std::function<absl::StatusOr<ObjectCode>(bool want_text)>& generate,
    const CompileOptions& options) {
  absl::StatusOr<LlvmJit*> jit = LlvmJit::Get();
  if (!jit.ok()) return jit.status();
  absl::StatusOr<std::string> key = KeyFor(key_text);
  if (!key.ok()) return key.status();
  const bool dumping = options.dump != nullptr && options.dump->enabled();

  auto result = [&](const std::shared_ptr<Loaded>& loaded, CodeSource source) {
    CompiledKernel kernel;
    kernel.fn = loaded->fn;
    kernel.keep_alive = loaded;
    kernel.cache_key = loaded->key;
    kernel.symbol = loaded->symbol;
    kernel.source = source;
    return kernel;
  };
  // Loads an object into the JIT and publishes it in the memory cache (keeping an entry another
  // thread published meanwhile, so every caller shares one copy).
  auto load = [&](const std::string& object) -> absl::StatusOr<std::shared_ptr<Loaded>> {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::unique_ptr<LoadedObject>> code = (*jit)->Load(object, symbol);
    if (!code.ok()) return code.status();
    auto loaded = std::make_shared<Loaded>();
    loaded->fn = reinterpret_cast<runtime::KernelFn>((*code)->address());
    loaded->object = std::move(*code);
    loaded->symbol = symbol;
    loaded->key = *key;
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.load_seconds += SecondsSince(start);
    auto [it, inserted] = memory_.try_emplace(*key, loaded);
    return it->second;
  };

  if (!dumping) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (auto it = memory_.find(*key); it != memory_.end()) {
        ++stats_.memory_hits;
        return result(it->second, CodeSource::kMemoryCache);
      }
    }
    if (disk_ != nullptr) {
      if (std::optional<std::string> object = disk_->Load(*key)) {
        absl::StatusOr<std::shared_ptr<Loaded>> loaded = load(*object);
        if (loaded.ok()) {
          std::lock_guard<std::mutex> lock(mutex_);
          ++stats_.disk_hits;
          return result(*loaded, CodeSource::kDiskCache);
        }
        // An entry that does not link (another LLVM, a damaged file that kept its checksum) is
        // recompiled and overwritten below.
        std::fprintf(stderr, "kiln: ignoring kernel cache entry %s: %s\n",
                     disk_->PathFor(*key).c_str(), std::string(loaded.status().message()).c_str());
      }
    }
  }

  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<ObjectCode> code = generate(dumping);
  if (!code.ok()) return code.status();
  const double llvm_seconds = SecondsSince(start);
  if (dumping) {
    WriteDump(options, ".ll", code->llvm_ir);
    WriteDump(options, ".s", code->assembly);
  }
  bool stored = false, store_failed = false;
  if (disk_ != nullptr) {
    absl::Status status = disk_->Store(*key, code->object);
    stored = status.ok();
    store_failed = !stored;
    if (store_failed) {
      std::fprintf(stderr, "kiln: kernel cache: %s\n", std::string(status.message()).c_str());
    }
  }
  absl::StatusOr<std::shared_ptr<Loaded>> loaded = load(code->object);
  if (!loaded.ok()) return loaded.status();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.compiles;
    stats_.llvm_seconds += llvm_seconds;
    stats_.disk_writes += stored ? 1 : 0;
    stats_.disk_errors += store_failed ? 1 : 0;
  }
  CompiledKernel kernel = result(*loaded, CodeSource::kCompiled);
  if (dumping) {
    kernel.llvm_ir = std::move(code->llvm_ir);
    kernel.assembly = std::move(code->assembly);
  }
  return kernel;
}

CompileStats CpuCompiler::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

std::string CpuCompiler::cache_dir() const { return disk_ != nullptr ? disk_->dir() : ""; }

}  // namespace kiln::codegen::cpu
