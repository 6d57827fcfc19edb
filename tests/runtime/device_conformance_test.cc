// The Device conformance suite (device_conformance.h) on the CPU driver.
#include "tests/runtime/device_conformance.h"

#include <memory>
#include <utility>

#include "runtime/cpu_device.h"
#include "runtime/executable.h"
#include "tests/runtime/test_kernels.h"

namespace kiln::runtime::conformance {
namespace {

DeviceUnderTest CpuUnderTest() {
  DeviceUnderTest cpu;
  cpu.name = "cpu";
  cpu.kind = DeviceKind::kCpu;
  cpu.device = [] { return &CpuDevice::Default(); };
  cpu.other = [] {
    static CpuDevice* const other = new CpuDevice(CpuDevice::Options{.index = 1});
    return other;
  };
  cpu.make_add = [](Device&, int64_t n) -> absl::StatusOr<std::shared_ptr<const DeviceExecutable>> {
    ExecutableSpec spec;
    spec.name = "add";
    spec.num_inputs = 2;
    spec.num_outputs = 1;
    spec.slots = {Slot::Input(0, n * 4), Slot::Input(1, n * 4), Slot::Output(0, n * 4)};
    spec.steps = {Step{runtime::testing::AddKernel, {0, 1, 2}, n, 256, "add", ""}};
    absl::StatusOr<Executable> exe = Executable::Create(std::move(spec));
    if (!exe.ok()) return exe.status();
    return std::make_shared<const Executable>(*std::move(exe));
  };
  return cpu;
}

INSTANTIATE_TEST_SUITE_P(Cpu, DeviceConformance, ::testing::Values(CpuUnderTest()), Name);

}  // namespace
}  // namespace kiln::runtime::conformance
