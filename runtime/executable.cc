#include "runtime/executable.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/step_profile.h"

namespace kiln::runtime {
namespace {

constexpr int64_t kMaxSlotBytes = int64_t{1} << 62;

bool IsAligned(const void* pointer) {
  return reinterpret_cast<uintptr_t>(pointer) % kBufferAlignment == 0;
}

std::string Plural(int64_t count, const char* noun) {
  return absl::StrCat(count, " ", noun, count == 1 ? "" : "s");
}

}  // namespace

std::string KernelErrorMessage(int32_t code) {
  switch (code) {
    case kKernelOk:
      return "no error";
    case kKernelIndexOutOfRange:
      return "an index is out of range";
  }
  return absl::StrCat("unknown kernel error code ", code);
}

const char* SlotKindName(SlotKind kind) {
  switch (kind) {
    case SlotKind::kInput:
      return "input";
    case SlotKind::kOutput:
      return "output";
    case SlotKind::kScalar:
      return "scalar";
    case SlotKind::kArena:
      return "arena";
    case SlotKind::kConstant:
      return "constant";
    case SlotKind::kErrorFlag:
      return "error flag";
  }
  return "?";
}

std::string DescribeSlot(const Slot& slot) {
  std::string text;
  switch (slot.kind) {
    case SlotKind::kInput:
    case SlotKind::kOutput:
    case SlotKind::kScalar:
      text = absl::StrCat(SlotKindName(slot.kind), " ", slot.index);
      break;
    case SlotKind::kArena:
      text = absl::StrCat("arena +", slot.offset);
      break;
    case SlotKind::kConstant:
    case SlotKind::kErrorFlag:
      text = SlotKindName(slot.kind);
      break;
  }
  absl::StrAppend(&text, ", ", slot.size_bytes, " bytes");
  if (!slot.label.empty()) absl::StrAppend(&text, " (", slot.label, ")");
  return text;
}

namespace {

Slot MakeSlot(SlotKind kind, int64_t size_bytes, int64_t index, int64_t offset) {
  Slot slot;
  slot.kind = kind;
  slot.size_bytes = size_bytes;
  slot.index = index;
  slot.offset = offset;
  return slot;
}

}  // namespace

Slot Slot::Input(int64_t index, int64_t size_bytes) {
  return MakeSlot(SlotKind::kInput, size_bytes, index, 0);
}
Slot Slot::Output(int64_t index, int64_t size_bytes) {
  return MakeSlot(SlotKind::kOutput, size_bytes, index, 0);
}
Slot Slot::Scalar(int64_t index, int64_t size_bytes) {
  return MakeSlot(SlotKind::kScalar, size_bytes, index, 0);
}
Slot Slot::Arena(int64_t offset, int64_t size_bytes) {
  return MakeSlot(SlotKind::kArena, size_bytes, 0, offset);
}
Slot Slot::Constant(std::vector<std::byte> bytes) {
  Slot slot = MakeSlot(SlotKind::kConstant, static_cast<int64_t>(bytes.size()), 0, 0);
  slot.constant = std::move(bytes);
  return slot;
}
Slot Slot::ErrorFlag() { return MakeSlot(SlotKind::kErrorFlag, sizeof(KernelErrorFlag), 0, 0); }

absl::StatusOr<Executable> Executable::Create(ExecutableSpec spec) {
  const std::string where = absl::StrCat("executable \"", spec.name, "\": ");
  auto invalid = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(where, parts...));
  };
  if (spec.num_inputs < 0 || spec.num_outputs < 0 || spec.num_scalars < 0) {
    return invalid("negative input, output or scalar count (", spec.num_inputs, ", ",
                   spec.num_outputs, ", ", spec.num_scalars, ")");
  }

  Executable exe;
  exe.name_ = std::move(spec.name);
  exe.profile_id_ = NewExecutableId();
  exe.num_scalars_ = spec.num_scalars;
  exe.input_bytes_.assign(spec.num_inputs, 0);
  exe.output_bytes_.assign(spec.num_outputs, 0);
  std::vector<bool> output_bound(spec.num_outputs, false);
  const int num_slots = static_cast<int>(spec.slots.size());

  for (int i = 0; i < num_slots; ++i) {
    Slot& slot = spec.slots[i];
    const std::string slot_name = absl::StrCat("slot ", i, " (", DescribeSlot(slot), ")");
    if (slot.size_bytes < 0 || slot.size_bytes > kMaxSlotBytes) {
      return invalid(slot_name, ": size must be in [0, 2^62]");
    }
    Binding binding{slot.kind, 0, nullptr};
    auto check_index = [&](int64_t count) { return slot.index >= 0 && slot.index < count; };
    switch (slot.kind) {
      case SlotKind::kInput:
        if (!check_index(spec.num_inputs)) {
          return invalid(slot_name, ": the executable has ", Plural(spec.num_inputs, "input"));
        }
        exe.input_bytes_[slot.index] = std::max(exe.input_bytes_[slot.index], slot.size_bytes);
        binding.index_or_offset = slot.index;
        break;
      case SlotKind::kOutput:
        if (!check_index(spec.num_outputs)) {
          return invalid(slot_name, ": the executable has ", Plural(spec.num_outputs, "output"));
        }
        exe.output_bytes_[slot.index] = std::max(exe.output_bytes_[slot.index], slot.size_bytes);
        output_bound[slot.index] = true;
        binding.index_or_offset = slot.index;
        break;
      case SlotKind::kScalar:
        if (!check_index(spec.num_scalars)) {
          return invalid(slot_name, ": the executable has ", Plural(spec.num_scalars, "scalar"));
        }
        binding.index_or_offset = slot.index;
        break;
      case SlotKind::kArena:
        if (slot.offset < 0 || slot.offset % kBufferAlignment != 0 ||
            slot.offset > kMaxSlotBytes - slot.size_bytes) {
          return invalid(slot_name, ": arena offsets must be multiples of ", kBufferAlignment,
                         " in [0, 2^62 - size]");
        }
        exe.arena_bytes_ = std::max(exe.arena_bytes_, slot.offset + slot.size_bytes);
        binding.index_or_offset = slot.offset;
        break;
      case SlotKind::kConstant: {
        if (slot.external != nullptr) {
          if (!IsAligned(slot.external)) {
            return invalid(slot_name, ": external constant bytes are not ", kBufferAlignment,
                           "-byte aligned");
          }
          binding.constant = const_cast<void*>(slot.external);
          break;
        }
        if (static_cast<int64_t>(slot.constant.size()) != slot.size_bytes) {
          return invalid(slot_name, ": holds ", slot.constant.size(), " bytes");
        }
        absl::StatusOr<Buffer> storage = AllocateAlignedBuffer(slot.size_bytes);
        if (!storage.ok()) return storage.status();
        if (slot.size_bytes > 0) {
          std::memcpy(storage->data(), slot.constant.data(), slot.constant.size());
        }
        binding.constant = storage->data();
        exe.constants_.push_back(*std::move(storage));
        std::vector<std::byte>().swap(slot.constant);  // the aligned copy is the one kept
        break;
      }
      case SlotKind::kErrorFlag:
        if (slot.size_bytes != static_cast<int64_t>(sizeof(KernelErrorFlag))) {
          return invalid(slot_name, ": the error flag is two int64 (16 bytes)");
        }
        break;
    }
    exe.bindings_.push_back(binding);
  }
  for (int k = 0; k < spec.num_outputs; ++k) {
    if (!output_bound[k]) {
      return invalid("output ", k, " is bound to no slot, so no kernel would write it");
    }
  }

  for (int s = 0; s < static_cast<int>(spec.steps.size()); ++s) {
    const Step& step = spec.steps[s];
    const std::string step_name = absl::StrCat("step ", s, " (", step.name, ")");
    if (step.fn == nullptr) return invalid(step_name, ": no kernel function");
    if (step.parallel_extent < 0) {
      return invalid(step_name, ": parallel extent ", step.parallel_extent, " is negative");
    }
    if (step.grain < 1) return invalid(step_name, ": grain ", step.grain, " is below 1");
    exe.arg_begin_.push_back(static_cast<int>(exe.flat_args_.size()));
    bool sets_error = false;
    for (int slot : step.slot_args) {
      if (slot < 0 || slot >= num_slots) {
        return invalid(step_name, ": argument slot ", slot, " does not exist (",
                       Plural(num_slots, "slot"), ")");
      }
      sets_error = sets_error || spec.slots[slot].kind == SlotKind::kErrorFlag;
      exe.flat_args_.push_back(slot);
    }
    exe.step_sets_error_.push_back(sets_error);
  }

  exe.slots_ = std::move(spec.slots);
  exe.steps_ = std::move(spec.steps);
  exe.keep_alive_ = std::move(spec.keep_alive);
  return exe;
}

absl::Status Executable::Run(std::span<const void* const> inputs, std::span<void* const> outputs,
                             ThreadPool& threads, std::span<const void* const> scalars,
                             BufferPool& buffers) const {
  auto count_error = [&](const char* what, size_t expected, size_t got) {
    return absl::InvalidArgumentError(
        absl::StrCat("executable \"", name_, "\": expected ", expected, " ", what, ", got ", got));
  };
  if (inputs.size() != input_bytes_.size()) {
    return count_error("inputs", input_bytes_.size(), inputs.size());
  }
  if (outputs.size() != output_bytes_.size()) {
    return count_error("outputs", output_bytes_.size(), outputs.size());
  }
  if (scalars.size() != static_cast<size_t>(num_scalars_)) {
    return count_error("scalars", num_scalars_, scalars.size());
  }
  for (size_t k = 0; k < scalars.size(); ++k) {
    if (scalars[k] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("executable \"", name_, "\": scalar ", k, " is null"));
    }
  }

  // Unaligned inputs and outputs are staged through aligned pool buffers.
  absl::InlinedVector<const void*, 8> input_ptrs(inputs.begin(), inputs.end());
  absl::InlinedVector<void*, 8> output_ptrs(outputs.begin(), outputs.end());
  absl::InlinedVector<Buffer, 2> staging;
  absl::InlinedVector<int, 2> staged_outputs;  // output k is staged in staging[...]
  auto stage = [&](const char* what, int k, int64_t bytes, const void* pointer,
                   bool copy_in) -> absl::StatusOr<void*> {
    if (bytes == 0) return const_cast<void*>(pointer);
    if (pointer == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("executable \"", name_, "\": ", what, " ", k,
                                                     " is null but needs ", bytes, " bytes"));
    }
    if (IsAligned(pointer)) return const_cast<void*>(pointer);
    absl::StatusOr<Buffer> aligned = buffers.Allocate(bytes);
    if (!aligned.ok()) return aligned.status();
    if (copy_in) std::memcpy(aligned->data(), pointer, bytes);
    staging.push_back(*std::move(aligned));
    return static_cast<void*>(staging.back().data());
  };
  for (int k = 0; k < num_inputs(); ++k) {
    absl::StatusOr<void*> pointer = stage("input", k, input_bytes_[k], input_ptrs[k], true);
    if (!pointer.ok()) return pointer.status();
    input_ptrs[k] = *pointer;
  }
  for (int k = 0; k < num_outputs(); ++k) {
    absl::StatusOr<void*> pointer = stage("output", k, output_bytes_[k], output_ptrs[k], false);
    if (!pointer.ok()) return pointer.status();
    if (*pointer != output_ptrs[k]) staged_outputs.push_back(k);
    output_ptrs[k] = *pointer;
  }

  Buffer arena;
  if (arena_bytes_ > 0) {
    absl::StatusOr<Buffer> allocated = buffers.Allocate(arena_bytes_);
    if (!allocated.ok()) return allocated.status();
    arena = *std::move(allocated);
  }
  alignas(kBufferAlignment) KernelErrorFlag error_flag = {kKernelOk, 0};

  absl::InlinedVector<void*, 32> slot_ptrs(bindings_.size());
  for (size_t i = 0; i < bindings_.size(); ++i) {
    const Binding& binding = bindings_[i];
    switch (binding.kind) {
      case SlotKind::kInput:
        slot_ptrs[i] = const_cast<void*>(input_ptrs[binding.index_or_offset]);
        break;
      case SlotKind::kOutput:
        slot_ptrs[i] = output_ptrs[binding.index_or_offset];
        break;
      case SlotKind::kScalar:
        slot_ptrs[i] = const_cast<void*>(scalars[binding.index_or_offset]);
        break;
      case SlotKind::kArena:
        slot_ptrs[i] = arena.data() + binding.index_or_offset;
        break;
      case SlotKind::kConstant:
        slot_ptrs[i] = binding.constant;
        break;
      case SlotKind::kErrorFlag:
        slot_ptrs[i] = error_flag;
        break;
    }
  }
  absl::InlinedVector<void*, 64> args(flat_args_.size());
  for (size_t i = 0; i < flat_args_.size(); ++i) args[i] = slot_ptrs[flat_args_[i]];

  const bool profiling = StepProfilingEnabled();
  for (size_t s = 0; s < steps_.size(); ++s) {
    const Step& step = steps_[s];
    const KernelFn fn = step.fn;
    const auto step_start =
        profiling ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    void* const* step_args = args.data() + arg_begin_[s];
    auto step_error = [&](absl::StatusCode code, const std::string& message) {
      return absl::Status(code, absl::StrCat("executable \"", name_, "\": step ", s, " (",
                                             step.name, "): ", message));
    };
    try {
      threads.ParallelFor(
          step.parallel_extent, step.grain,
          [fn, step_args](int64_t begin, int64_t end) { fn(step_args, begin, end); });
    } catch (const std::exception& error) {
      return step_error(absl::StatusCode::kInternal,
                        absl::StrCat("the kernel threw: ", error.what()));
    } catch (...) {
      return step_error(absl::StatusCode::kInternal, "the kernel threw an unknown exception");
    }
    if (profiling) {
      RecordStepTime(
          profile_id_, s,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count(),
          [&] { return DescribeStep(s); });
    }
    if (step_sets_error_[s]) {
      const int64_t code = std::atomic_ref<int64_t>(error_flag[0]).load(std::memory_order_relaxed);
      if (code != kKernelOk) {
        const int64_t detail =
            std::atomic_ref<int64_t>(error_flag[1]).load(std::memory_order_relaxed);
        return step_error(
            code == kKernelIndexOutOfRange ? absl::StatusCode::kOutOfRange
                                           : absl::StatusCode::kInternal,
            absl::StrCat(step.error_context.empty() ? "" : step.error_context + ": ",
                         KernelErrorMessage(static_cast<int32_t>(code)), " (kernel error code ",
                         code, code == kKernelIndexOutOfRange ? ", index " : ", detail ", detail,
                         ")"));
      }
    }
  }

  for (int k : staged_outputs) std::memcpy(outputs[k], output_ptrs[k], output_bytes_[k]);
  return absl::OkStatus();
}

const std::byte* Executable::constant_data(int slot) const {
  if (slot < 0 || slot >= static_cast<int>(bindings_.size()) ||
      bindings_[slot].kind != SlotKind::kConstant) {
    return nullptr;
  }
  return static_cast<const std::byte*>(bindings_[slot].constant);
}

std::string Executable::DescribeStep(size_t index) const {
  const Step& step = steps_[index];
  std::string text = absl::StrCat(name_, " ", step.name, "(");
  for (size_t i = 0; i < step.slot_args.size(); ++i) {
    const Slot& slot = slots_[static_cast<size_t>(step.slot_args[i])];
    absl::StrAppend(&text, i == 0 ? "" : ", ",
                    slot.label.empty() ? SlotKindName(slot.kind) : slot.label);
  }
  absl::StrAppend(&text, ")");
  return text;
}

std::string Executable::ToString() const {
  std::string text = absl::StrCat(
      "executable \"", name_, "\": ", Plural(num_inputs(), "input"), ", ",
      Plural(num_outputs(), "output"), ", ", Plural(num_scalars_, "scalar"), ", arena ",
      arena_bytes_, " bytes, ", Plural(static_cast<int64_t>(steps_.size()), "step"), "\n");
  for (size_t i = 0; i < slots_.size(); ++i) {
    absl::StrAppend(&text, "  slot ", i, ": ", DescribeSlot(slots_[i]), "\n");
  }
  for (size_t s = 0; s < steps_.size(); ++s) {
    const Step& step = steps_[s];
    absl::StrAppend(&text, "  step ", s, ": ", step.name, "(");
    for (size_t i = 0; i < step.slot_args.size(); ++i) {
      absl::StrAppend(&text, i == 0 ? "" : ", ", "slot ", step.slot_args[i]);
    }
    absl::StrAppend(&text, ") extent ", step.parallel_extent, " grain ", step.grain, "\n");
  }
  return text;
}

void CopyBytesKernel(void* const* args, int64_t begin, int64_t end) {
  const auto* source = static_cast<const std::byte*>(args[0]);
  auto* destination = static_cast<std::byte*>(args[1]);
  const int64_t total = *static_cast<const int64_t*>(args[2]);
  const int64_t first = begin * kCopyBlockBytes;
  const int64_t last = std::min(end * kCopyBlockBytes, total);
  if (last > first) std::memcpy(destination + first, source + first, last - first);
}

void AppendCopyStep(ExecutableSpec& spec, int source_slot, int destination_slot, int64_t bytes,
                    std::string name) {
  std::vector<std::byte> count(sizeof(int64_t));
  std::memcpy(count.data(), &bytes, sizeof(int64_t));
  const int count_slot = static_cast<int>(spec.slots.size());
  spec.slots.push_back(Slot::Constant(std::move(count)));
  // 16 blocks (256 KiB) per range: smaller copies are not worth waking a thread for.
  spec.steps.push_back(
      Step{.fn = CopyBytesKernel,
           .slot_args = {source_slot, destination_slot, count_slot},
           .parallel_extent = bytes / kCopyBlockBytes + (bytes % kCopyBlockBytes != 0 ? 1 : 0),
           .grain = 16,
           .name = std::move(name),
           .error_context = {}});
}

}  // namespace kiln::runtime
