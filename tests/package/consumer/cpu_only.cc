// A program that picks its backend: kiln::kiln_frontend plus kiln::kiln_backend_cpu, no Vulkan.
// The Cpu backend registered itself by being linked; Vulkan is reported missing.
#include <kiln/kiln.h>

#include <iostream>

#include "runtime/device.h"

int main() {
  try {
    if (!kiln::runtime::IsBackendAvailable(kiln::runtime::DeviceKind::kCpu) ||
        kiln::runtime::IsBackendAvailable(kiln::runtime::DeviceKind::kVulkan)) {
      std::cerr << "cpu_only: wrong backends available\n";
      return 1;
    }
    kiln::Cpu::Device cpu;
    auto x = kiln::Tensor<kiln::Cpu, 2>::ones({4, 5}, cpu);
    const float sum = (x * 3.0f).sum().item();
    if (sum != 60.0f) {
      std::cerr << "cpu_only: sum " << sum << ", expected 60\n";
      return 1;
    }
  } catch (const kiln::Error& e) {
    std::cerr << "cpu_only: " << e.what() << "\n";
    return 1;
  }
  std::cout << "kiln cpu-only consumer ok\n";
  return 0;
}
