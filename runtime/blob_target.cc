#include "runtime/blob_target.h"

#include <map>
#include <mutex>
#include <utility>

#include "runtime/cpu/blob_cpu.h"

namespace kiln::runtime::blob {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<const TargetDriver>, std::less<>> drivers;
};

// The CPU driver is part of kiln_runtime, so the registry starts with it; every other driver
// lives in its own library and registers itself.
Registry& GetRegistry() {
  static Registry* const registry = [] {
    auto* r = new Registry;
    r->drivers.emplace("cpu", cpu::MakeCpuTargetDriver());
    return r;
  }();
  return *registry;
}

}  // namespace

void RegisterTargetDriver(const std::string& name, std::shared_ptr<const TargetDriver> driver) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.drivers[name] = std::move(driver);
}

std::shared_ptr<const TargetDriver> FindTargetDriver(std::string_view name) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.drivers.find(name);
  return it == r.drivers.end() ? nullptr : it->second;
}

std::vector<std::string> TargetDriverNames() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [name, driver] : r.drivers) names.push_back(name);
  return names;
}

}  // namespace kiln::runtime::blob
