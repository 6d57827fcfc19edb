// Linked into the backend suites (frontend_backend_test, every <backend>_conformance_test). With
// KILN_TEST_SKIP_WITHOUT_DEVICE=<device> ("cuda:0") in the environment, every test of the program
// is skipped, with the reason, when that device is not available (kiln::Device::is_available: no
// driver, no GPU), so the CUDA suites pass as skipped on machines without a GPU and run in full on
// one. Without the variable it does nothing: a missing device is then a failure (Vulkan's suites
// on lavapipe must fail, not skip, when it is gone).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "frontend/backend.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

class SkipWithoutDevice : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* name = std::getenv("KILN_TEST_SKIP_WITHOUT_DEVICE");
    if (name == nullptr || *name == '\0') return;
    std::string reason;
    if (!Device::Parse(name).is_available(&reason)) {
      // gtest then runs no test and still reports them passed: the line in gtest's own form lets
      // CTest (its skip regular expression) and a reader see that they were skipped.
      std::printf("[  SKIPPED ] every test: no %s device here: %s\n", name, reason.c_str());
      std::fflush(stdout);
      GTEST_SKIP() << "no " << name << " device here (KILN_TEST_SKIP_WITHOUT_DEVICE): " << reason;
    }
  }
};

[[maybe_unused]] const bool kRegistered =
    (::testing::AddGlobalTestEnvironment(new SkipWithoutDevice), true);

}  // namespace
}  // namespace kiln
