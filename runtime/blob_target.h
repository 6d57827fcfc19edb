// The blob loader's driver registry: a driver registers one TargetDriver per target name, and
// runtime/blob.cc reaches a target's sections only through it, so a new driver (CUDA) adds its
// own files and edits nothing in the loader. The CPU driver (runtime/cpu/blob_cpu.h) is built
// into the registry; the Vulkan driver registers through runtime::vulkan::EnableVulkanBlobs().
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/blob.h"

namespace kiln::runtime::blob {

/// What a driver does with its target's sections. Implementations are stateless (or
/// thread-safe): ParseBlob and Model::Load may call them from several threads at once.
class TargetDriver {
 public:
  virtual ~TargetDriver() = default;

  /// Validates `target`'s plan and payload sections: everything that needs no device, so that a
  /// damaged blob is refused in ParseBlob whichever device it is loaded on. `view` has the
  /// sections, the signature and the weights section already checked; `bytes` is the whole
  /// blob. Errors are InvalidArgument "blob: section K (plan \"<target>\"): <path>: <what>".
  virtual absl::StatusOr<std::shared_ptr<const TargetPlan>> Parse(
      const BlobView& view, const TargetEntry& target, std::span<const std::byte> bytes) const = 0;

  /// Loads the plan Parse made (target.plan) on the device `selector` names ("" = the driver's
  /// default device). `bytes` is the whole blob, kept alive by `keep` for the runner's life.
  /// A device that cannot run the plan is FailedPrecondition saying what it lacks.
  virtual absl::StatusOr<std::unique_ptr<DeviceRunner>> Load(const BlobView& view,
                                                             const TargetEntry& target,
                                                             std::span<const std::byte> bytes,
                                                             std::shared_ptr<const void> keep,
                                                             const std::string& selector) const = 0;

  /// How to get a blob with this target, for the error when one lacks it: e.g. "compile it with
  /// `kiln compile --target vulkan`, aot::CompileOptions::vulkan".
  virtual std::string HowToCompile() const = 0;
};

/// Makes `driver` the one for target `name` (replacing an earlier one: registering is
/// idempotent). Thread-safe; drivers are never unregistered.
void RegisterTargetDriver(const std::string& name, std::shared_ptr<const TargetDriver> driver);

/// The driver for target `name`, or nullptr. The CPU driver ("cpu") is always registered.
std::shared_ptr<const TargetDriver> FindTargetDriver(std::string_view name);

/// The registered target names, sorted: "cpu", "vulkan", ...
std::vector<std::string> TargetDriverNames();

}  // namespace kiln::runtime::blob
