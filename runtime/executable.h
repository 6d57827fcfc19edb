// Executable: a compiled graph as the CPU runtime runs it — native kernels plus the launch plan
// that says which memory each kernel argument is and how each kernel is split over threads.
//
// The codegen fills an ExecutableSpec (slots and steps), Executable::Create checks it once and
// precomputes what Run needs, and Run then only binds pointers, takes one arena from the buffer
// pool and calls the kernels. Run is const and thread-safe: concurrent runs of one Executable each
// get their own arena and error flag.
//
// The kernel ABI (the contract with codegen/cpu):
//   using KernelFn = void (*)(void* const* args, int64_t begin, int64_t end);
// args[i] is the address of the step's i-th slot (buffers are dense, row-major and 64-byte
// aligned; a scalar slot points at its value). The runtime splits [0, parallel_extent) into
// ranges of at least `grain` outer iterations; the kernel does iterations [begin, end).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/buffer.h"
#include "runtime/device.h"
#include "runtime/thread_pool.h"

namespace kiln::runtime {

using KernelFn = void (*)(void* const* args, int64_t begin, int64_t end);

/// Codes a kernel stores into the error-flag slot (0 = no error). Kernels may run on several
/// threads at once, so they store with a relaxed atomic store; any nonzero code fails the run.
enum KernelErrorCode : int32_t {
  kKernelOk = 0,
  kKernelIndexOutOfRange = 1,  // gather / scatter_add index outside the indexed axis
};

/// The error flag a run gives its kernels: [0] = a KernelErrorCode, [1] = detail (for
/// kKernelIndexOutOfRange, the offending index). The run zeroes it before the first step.
using KernelErrorFlag = int64_t[2];

/// "an index is out of range", ... ; unknown codes give "unknown kernel error code N".
std::string KernelErrorMessage(int32_t code);

/// Where the memory behind a slot comes from.
enum class SlotKind {
  kInput,      // the run's inputs[index] (read-only)
  kOutput,     // the run's outputs[index]
  kScalar,     // the run's scalars[index]: a pointer to a value that may change between runs
               // (a learning rate) without a recompile; needs only its type's alignment
  kArena,      // bytes [offset, offset + size) of the arena each run takes from the buffer pool;
               // the memory planner chooses offsets, and slots whose lifetimes do not overlap
               // may share bytes
  kConstant,   // bytes owned by the Executable (folded weights, tables)
  kErrorFlag,  // the run's error flag (KernelErrorFlag: code, detail)
};

/// "input", "output", "scalar", "arena", "constant", "error flag".
const char* SlotKindName(SlotKind kind);

/// One memory binding of the launch plan.
struct Slot {
  SlotKind kind = SlotKind::kArena;
  int64_t size_bytes = 0;
  int64_t index = 0;                // kInput, kOutput, kScalar: which one
  int64_t offset = 0;               // kArena: a multiple of kBufferAlignment
  std::vector<std::byte> constant;  // kConstant: exactly size_bytes bytes (unless external)
  /// kConstant only: when set, the slot uses these bytes in place (64-byte aligned, size_bytes
  /// long, kept alive by ExecutableSpec::keep_alive) instead of copying `constant`: a blob's
  /// weights used straight from the mapped file.
  const void* external = nullptr;
  std::string label;  // optional, shown by ToString (e.g. "%7 f32[64,128]")

  static Slot Input(int64_t index, int64_t size_bytes);
  static Slot Output(int64_t index, int64_t size_bytes);
  static Slot Scalar(int64_t index, int64_t size_bytes);
  static Slot Arena(int64_t offset, int64_t size_bytes);
  static Slot Constant(std::vector<std::byte> bytes);
  static Slot ErrorFlag();
};

/// A slot as dumps show it: "input 0, 64 bytes (%3 f32[16])", "arena +128, 64 bytes".
std::string DescribeSlot(const Slot& slot);

/// One kernel launch.
struct Step {
  KernelFn fn = nullptr;
  std::vector<int> slot_args;   // args[i] of the kernel is slot slot_args[i]
  int64_t parallel_extent = 1;  // outer iterations; 0 skips the step
  int64_t grain = 1;            // fewest iterations worth a range of their own; extent <= grain
                                // runs as one call on the calling thread
  std::string name;             // names the step in errors and dumps
  std::string error_context;    // prefixes a kernel error: the op and user line it checks
};

/// Everything Executable::Create needs.
struct ExecutableSpec {
  std::string name = "executable";
  int num_inputs = 0;
  int num_outputs = 0;
  int num_scalars = 0;
  std::vector<Slot> slots;
  std::vector<Step> steps;  // run in order, each one finished before the next starts
  /// Keeps the code the KernelFns point into alive (the JIT's resource tracker, a dlopen handle).
  std::shared_ptr<const void> keep_alive;
};

/// A ready-to-run, immutable launch plan: the CPU driver's DeviceExecutable. Move-only.
class Executable final : public DeviceExecutable {
 public:
  /// Checks the spec: slot indices within the declared counts, arena offsets aligned, constants
  /// of their declared size, one error-flag size (4 bytes), steps with a kernel, valid slot
  /// numbers, extent >= 0 and grain >= 1, and every output bound by a slot. Errors are
  /// InvalidArgument and name the executable and the slot or step.
  static absl::StatusOr<Executable> Create(ExecutableSpec spec);

  Executable(Executable&&) noexcept = default;
  Executable& operator=(Executable&&) noexcept = default;

  /// Runs every step once. inputs/outputs/scalars must have exactly num_inputs()/num_outputs()/
  /// num_scalars() entries; pointers must address at least input_bytes(k) / output_bytes(k) bytes
  /// (null is accepted where that is 0). A pointer that is not 64-byte aligned still works: its
  /// data is staged through an aligned pool buffer (a copy; align the data to avoid it).
  /// Returns the first kernel error as an error naming the step (OutOfRange for
  /// kKernelIndexOutOfRange); outputs are then unspecified.
  absl::Status Run(std::span<const void* const> inputs, std::span<void* const> outputs,
                   ThreadPool& threads, std::span<const void* const> scalars = {},
                   BufferPool& buffers = DefaultBufferPool()) const;

  DeviceKind kind() const override { return DeviceKind::kCpu; }
  const std::string& name() const override { return name_; }
  int num_inputs() const override { return static_cast<int>(input_bytes_.size()); }
  int num_outputs() const override { return static_cast<int>(output_bytes_.size()); }
  int num_scalars() const override { return num_scalars_; }
  /// The largest slot bound to input k / output k (0 when no slot uses it).
  int64_t input_bytes(int k) const override { return input_bytes_[k]; }
  int64_t output_bytes(int k) const override { return output_bytes_[k]; }
  /// Bytes of the per-run arena (the end of the last arena slot).
  int64_t arena_bytes() const { return arena_bytes_; }
  /// The slots; constant slots keep their size but not their bytes (those moved into aligned
  /// storage).
  std::span<const Slot> slots() const { return slots_; }
  std::span<const Step> steps() const { return steps_; }
  /// The bytes of constant slot `slot` (64-byte aligned, slots()[slot].size_bytes of them), or
  /// null when `slot` is not a constant slot. For serialising a launch plan (codegen/aot).
  const std::byte* constant_data(int slot) const;

  /// A readable listing of the slots and steps for dumps:
  ///   executable "f": 1 input, 1 output, 0 scalars, arena 128 bytes, 2 steps
  ///     slot 0: input 0, 64 bytes
  ///     ...
  ///     step 0: exp(slot 0, slot 1) extent 16 grain 4
  /// Step `index` as the step profile (KILN_PROFILE) labels it: the executable's name, the
  /// kernel's and its arguments' labels, "cpu_graph k3(%12 matmul f32[4096,1536], ...)".
  std::string DescribeStep(size_t index) const;
  std::string ToString() const;

 private:
  Executable() = default;

  // Where each slot's pointer comes from at run time, without the bookkeeping of Slot.
  struct Binding {
    SlotKind kind;
    int64_t index_or_offset;
    void* constant;  // kConstant only
  };

  std::string name_;
  // Tells executables apart in the step profile (an address can be reused after a free).
  uint64_t profile_id_ = 0;
  int num_scalars_ = 0;
  std::vector<Slot> slots_;
  std::vector<Step> steps_;
  std::vector<Binding> bindings_;
  // Slot numbers of all steps' arguments, back to back; step s starts at arg_begin_[s].
  std::vector<int> flat_args_;
  std::vector<int> arg_begin_;
  std::vector<bool> step_sets_error_;  // the step takes the error-flag slot
  std::vector<int64_t> input_bytes_;
  std::vector<int64_t> output_bytes_;
  int64_t arena_bytes_ = 0;
  std::vector<Buffer> constants_;
  std::shared_ptr<const void> keep_alive_;
};

/// A runtime-provided kernel that copies bytes: args[0] = source, args[1] = destination,
/// args[2] = const int64_t* total byte count; iteration i copies bytes
/// [i * kCopyBlockBytes, min((i + 1) * kCopyBlockBytes, total)). For outputs that are plain
/// copies of an input or of another value, which no fused kernel writes.
inline constexpr int64_t kCopyBlockBytes = 16384;
void CopyBytesKernel(void* const* args, int64_t begin, int64_t end);

/// Appends to `spec` a step that copies `bytes` bytes from slot `source_slot` to slot
/// `destination_slot` with CopyBytesKernel, plus the constant slot holding the byte count.
void AppendCopyStep(ExecutableSpec& spec, int source_slot, int destination_slot, int64_t bytes,
                    std::string name = "copy");

}  // namespace kiln::runtime
