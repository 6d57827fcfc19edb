// Tests of the Vulkan driver on whatever Vulkan device the machine has (lavapipe in CI). The
// shaders are GLSL compiled ahead of time to SPIR-V headers by generate.sh (the runtime takes
// SPIR-V only). Expected values are computed here from the random inputs, in the same float
// operations the shaders do.
#include "runtime/vulkan/vulkan_device.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <random>
#include <thread>

#include "tests/runtime/vulkan/add.spv.h"
#include "tests/runtime/vulkan/axpy.spv.h"
#include "tests/runtime/vulkan/gather.spv.h"

namespace kiln::runtime::vulkan {
namespace {

using ::testing::HasSubstr;

template <size_t N>
std::vector<uint32_t> Spirv(const uint32_t (&words)[N]) {
  return std::vector<uint32_t>(words, words + N);
}

template <typename... T>
std::vector<std::byte> Push(T... values) {
  std::vector<std::byte> bytes((sizeof(T) + ...));
  size_t offset = 0;
  ((std::memcpy(bytes.data() + offset, &values, sizeof(T)), offset += sizeof(T)), ...);
  return bytes;
}

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 random(seed);
  std::uniform_real_distribution<float> uniform(-4.0f, 4.0f);
  std::vector<float> values(n);
  for (float& v : values) v = uniform(random);
  return values;
}

uint32_t Groups(size_t n) { return static_cast<uint32_t>((n + 63) / 64); }

ShaderSpec AddShader() {
  return {.name = "add", .spirv = Spirv(kaddSpirv), .num_buffers = 3, .push_constant_bytes = 4};
}
ShaderSpec AxpyShader() {
  return {.name = "axpy", .spirv = Spirv(kaxpySpirv), .num_buffers = 4, .push_constant_bytes = 4};
}
ShaderSpec GatherShader() {
  return {
      .name = "gather", .spirv = Spirv(kgatherSpirv), .num_buffers = 4, .push_constant_bytes = 8};
}

// out = a + b over n floats: inputs 0 and 1, output 0.
VulkanExecutableSpec AddSpec(uint32_t n, uint32_t groups = 0) {
  const int64_t bytes = int64_t{n} * 4;
  VulkanExecutableSpec spec;
  spec.name = "vector_add";
  spec.num_inputs = 2;
  spec.num_outputs = 1;
  spec.slots = {Slot::Input(0, bytes), Slot::Input(1, bytes), Slot::Output(0, bytes)};
  spec.shaders = {AddShader()};
  spec.dispatches = {{.shader = 0,
                      .buffer_slots = {0, 1, 2},
                      .push_constants = Push(n),
                      .groups = {groups == 0 ? Groups(n) : groups, 1, 1},
                      .name = "add",
                      .error_context = {}}};
  return spec;
}

// The device in one staging mode, opened once per process. Never destroyed: at exit, the
// validation layer (when a developer turns it on) is torn down before function-local statics.
std::shared_ptr<VulkanDevice> Device(int staging) {
  static std::mutex mutex;
  static auto* devices = new std::map<int, std::shared_ptr<VulkanDevice>>;
  std::lock_guard<std::mutex> lock(mutex);
  std::shared_ptr<VulkanDevice>& device = (*devices)[staging];
  if (device == nullptr) {
    absl::StatusOr<std::shared_ptr<VulkanDevice>> opened =
        VulkanDevice::Open("", {.loader = {}, .staging = staging});
    EXPECT_TRUE(opened.ok()) << opened.status();
    if (opened.ok()) device = *opened;
  }
  return device;
}

// ---- Devices -------------------------------------------------------------------------------

TEST(VulkanDevices, ListAndOpenByIndexAndName) {
  const std::vector<DeviceInfo> devices = ListDevices();
  ASSERT_FALSE(devices.empty()) << "no Vulkan device: install mesa-vulkan-drivers (lavapipe)";
  for (size_t i = 0; i < devices.size(); ++i) {
    EXPECT_EQ(devices[i].index, static_cast<int>(i));
    EXPECT_FALSE(devices[i].name.empty());
    EXPECT_GT(devices[i].max_workgroup_invocations, 0u);
    EXPECT_GT(devices[i].max_storage_buffer_range, 0u);
    EXPECT_GE(devices[i].max_storage_buffers, 4u);  // the Vulkan minimum
    EXPECT_THAT(devices[i].ToString(), HasSubstr(devices[i].name));
  }
  const DeviceInfo& last = devices.back();
  const std::string index = std::to_string(last.index);

  absl::StatusOr<std::shared_ptr<VulkanDevice>> by_index = VulkanDevice::Open(index);
  ASSERT_TRUE(by_index.ok()) << by_index.status();
  EXPECT_EQ((*by_index)->info().name, last.name);
  EXPECT_EQ((*by_index)->info().index, last.index);

  // A case-changed substring from the middle of the name.
  std::string part =
      last.name.substr(last.name.size() / 4, std::max<size_t>(3, last.name.size() / 3));
  for (char& c : part) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  absl::StatusOr<std::shared_ptr<VulkanDevice>> by_name = VulkanDevice::Open(part);
  ASSERT_TRUE(by_name.ok()) << by_name.status();
  EXPECT_THAT((*by_name)->info().name, HasSubstr(last.name.substr(last.name.size() / 4, 3)));

  setenv("KILN_VULKAN_DEVICE", index.c_str(), 1);
  absl::StatusOr<std::shared_ptr<VulkanDevice>> by_env = VulkanDevice::Open();
  unsetenv("KILN_VULKAN_DEVICE");
  ASSERT_TRUE(by_env.ok()) << by_env.status();
  EXPECT_EQ((*by_env)->info().index, last.index);
}

TEST(VulkanDevices, NoSuchDeviceListsTheDevices) {
  const std::vector<DeviceInfo> devices = ListDevices();
  ASSERT_FALSE(devices.empty());
  absl::StatusOr<std::shared_ptr<VulkanDevice>> missing =
      VulkanDevice::Open("no-such-vulkan-device-name");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("no-such-vulkan-device-name"));
  EXPECT_THAT(missing.status().message(), HasSubstr(devices[0].name));

  absl::StatusOr<std::shared_ptr<VulkanDevice>> out_of_range =
      VulkanDevice::Open(std::to_string(devices.size()));
  ASSERT_FALSE(out_of_range.ok());
  EXPECT_EQ(out_of_range.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(out_of_range.status().message(), HasSubstr(devices[0].name));

  setenv("KILN_VULKAN_DEVICE", "no-such-vulkan-device-name", 1);
  absl::StatusOr<std::shared_ptr<VulkanDevice>> by_env = VulkanDevice::Open();
  unsetenv("KILN_VULKAN_DEVICE");
  ASSERT_FALSE(by_env.ok());
  EXPECT_THAT(by_env.status().message(), HasSubstr("KILN_VULKAN_DEVICE"));
}

TEST(VulkanDevices, NoLoaderIsAClearError) {
  const OpenOptions options{.loader = "/nonexistent/libvulkan.so.1", .staging = -1};
  EXPECT_TRUE(ListDevices(options).empty());
  absl::StatusOr<std::shared_ptr<VulkanDevice>> device = VulkanDevice::Open("", options);
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(device.status().message(), HasSubstr("/nonexistent/libvulkan.so.1"));
  EXPECT_THAT(device.status().message(), HasSubstr("KILN_DEVICE=cpu"));
}

TEST(VulkanDevices, NoDriverIsAClearError) {
  // The loader reads the driver list at every vkCreateInstance: point it at nothing.
  const char* saved = std::getenv("VK_DRIVER_FILES");
  const std::string saved_value = saved != nullptr ? saved : "";
  setenv("VK_DRIVER_FILES", "/nonexistent/kiln_no_driver.json", 1);
  const std::vector<DeviceInfo> devices = ListDevices();
  absl::StatusOr<std::shared_ptr<VulkanDevice>> device = VulkanDevice::Open();
  if (saved != nullptr) {
    setenv("VK_DRIVER_FILES", saved_value.c_str(), 1);
  } else {
    unsetenv("VK_DRIVER_FILES");
  }
  EXPECT_TRUE(devices.empty());
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(device.status().message(), HasSubstr("no Vulkan device"));
  EXPECT_THAT(device.status().message(), HasSubstr("KILN_DEVICE=cpu"));
}

// ---- Executables, with and without staging buffers -------------------------------------------

class VulkanRun : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    device_ = Device(GetParam());
    ASSERT_NE(device_, nullptr);
    ASSERT_EQ(device_->uses_staging(), GetParam() == 1);
  }
  std::shared_ptr<const VulkanExecutable> Load(VulkanExecutableSpec spec) {
    absl::StatusOr<std::shared_ptr<const VulkanExecutable>> exe = device_->Load(std::move(spec));
    EXPECT_TRUE(exe.ok()) << exe.status();
    return exe.ok() ? *exe : nullptr;
  }
  // Arena offsets must be multiples of the device's binding alignment.
  int64_t ArenaStep() const {
    return std::max<int64_t>(256, device_->info().min_storage_buffer_offset_alignment);
  }
  std::shared_ptr<VulkanDevice> device_;
};

TEST_P(VulkanRun, VectorAdd) {
  constexpr uint32_t n = 1000;
  auto exe = Load(AddSpec(n));
  ASSERT_NE(exe, nullptr);
  const std::vector<float> a = RandomFloats(n, 1), b = RandomFloats(n, 2);
  std::vector<float> c(n, -1.0f);
  const void* inputs[] = {a.data(), b.data()};
  void* outputs[] = {c.data()};
  ASSERT_TRUE(device_->Run(*exe, inputs, outputs).ok());
  for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(c[i], a[i] + b[i]) << i;
  // Unaligned host pointers work: the runtime copies.
  std::vector<float> unaligned(n + 1);
  void* shifted[] = {reinterpret_cast<std::byte*>(unaligned.data()) + 2};
  ASSERT_TRUE(device_->Run(*exe, inputs, shifted).ok());
  std::memcpy(c.data(), shifted[0], n * 4);
  for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(c[i], a[i] + b[i]) << i;

  const std::string dump = exe->ToString();
  EXPECT_THAT(dump, HasSubstr("vulkan executable \"vector_add\": 2 inputs, 1 output"));
  EXPECT_THAT(dump, HasSubstr("shader 0: add (3 buffers, 4 push-constant bytes"));
  EXPECT_THAT(dump, HasSubstr("dispatch 0: add shader 0 groups [16, 1, 1] bindings [slot 0, "
                              "slot 1, slot 2] push e8030000"));
}

TEST_P(VulkanRun, ArenaSlotsAndBarriersBetweenDispatches) {
  // t1 = a + b, t2 = t1 + a, out = t2 + t1: each dispatch reads what the one before wrote, from
  // arena slots at nonzero offsets.
  constexpr uint32_t n = 3000;
  const int64_t bytes = n * 4;
  const int64_t step = ArenaStep();
  const int64_t t1_offset = step, t2_offset = (bytes / step + 3) * step;
  VulkanExecutableSpec spec;
  spec.name = "chain";
  spec.num_inputs = 2;
  spec.num_outputs = 1;
  spec.slots = {Slot::Input(0, bytes), Slot::Input(1, bytes), Slot::Arena(t1_offset, bytes),
                Slot::Arena(t2_offset, bytes), Slot::Output(0, bytes)};
  spec.shaders = {AddShader()};
  auto add = [&](std::vector<int> slots, std::string name) {
    return Dispatch{.shader = 0,
                    .buffer_slots = std::move(slots),
                    .push_constants = Push(n),
                    .groups = {Groups(n), 1, 1},
                    .name = std::move(name),
                    .error_context = {}};
  };
  spec.dispatches = {add({0, 1, 2}, "t1"), add({2, 0, 3}, "t2"), add({3, 2, 4}, "out")};
  auto exe = Load(std::move(spec));
  ASSERT_NE(exe, nullptr);
  EXPECT_EQ(exe->arena_bytes(), t2_offset + bytes);
  const std::vector<float> a = RandomFloats(n, 3), b = RandomFloats(n, 4);
  std::vector<float> out(n);
  const void* inputs[] = {a.data(), b.data()};
  void* outputs[] = {out.data()};
  for (int repeat = 0; repeat < 3; ++repeat) {
    ASSERT_TRUE(device_->Run(*exe, inputs, outputs).ok());
    for (uint32_t i = 0; i < n; ++i) {
      const float t1 = a[i] + b[i];
      const float t2 = t1 + a[i];
      ASSERT_EQ(out[i], t2 + t1) << i;
    }
  }
}

TEST_P(VulkanRun, PushConstantsPerDispatch) {
  // The same shader twice into one output: all n elements a + b, then the first m of them a + a.
  constexpr uint32_t n = 500, m = 123;
  VulkanExecutableSpec spec = AddSpec(n);
  spec.dispatches.push_back({.shader = 0,
                             .buffer_slots = {0, 0, 2},
                             .push_constants = Push(m),
                             .groups = {Groups(m), 1, 1},
                             .name = "head",
                             .error_context = {}});
  auto exe = Load(std::move(spec));
  ASSERT_NE(exe, nullptr);
  const std::vector<float> a = RandomFloats(n, 5), b = RandomFloats(n, 6);
  std::vector<float> c(n);
  const void* inputs[] = {a.data(), b.data()};
  void* outputs[] = {c.data()};
  ASSERT_TRUE(device_->Run(*exe, inputs, outputs).ok());
  for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(c[i], i < m ? a[i] + a[i] : a[i] + b[i]) << i;
}

TEST_P(VulkanRun, ConstantsAndScalars) {
  // out = alpha * x + y with y a constant uploaded at Load and alpha a scalar that changes
  // between runs.
  constexpr uint32_t n = 777;
  const int64_t bytes = n * 4;
  const std::vector<float> y = RandomFloats(n, 7);
  std::vector<std::byte> y_bytes(bytes);
  std::memcpy(y_bytes.data(), y.data(), bytes);
  VulkanExecutableSpec spec;
  spec.name = "axpy";
  spec.num_inputs = 1;
  spec.num_outputs = 1;
  spec.num_scalars = 1;
  spec.slots = {Slot::Input(0, bytes), Slot::Constant(y_bytes), Slot::Scalar(0, 4),
                Slot::Output(0, bytes)};
  spec.shaders = {AxpyShader()};
  spec.dispatches = {{.shader = 0,
                      .buffer_slots = {0, 1, 2, 3},
                      .push_constants = Push(n),
                      .groups = {Groups(n), 1, 1},
                      .name = "axpy",
                      .error_context = {}}};
  auto exe = Load(std::move(spec));
  ASSERT_NE(exe, nullptr);
  EXPECT_EQ(exe->scalar_bytes(0), 4);
  const std::vector<float> x = RandomFloats(n, 8);
  std::vector<float> out(n);
  const void* inputs[] = {x.data()};
  void* outputs[] = {out.data()};
  for (float alpha : RandomFloats(3, 9)) {
    const void* scalars[] = {&alpha};
    ASSERT_TRUE(device_->Run(*exe, inputs, outputs, scalars).ok());
    for (uint32_t i = 0; i < n; ++i) {
      // The shader may contract alpha * x + y into an fma: allow its rounding difference.
      ASSERT_NEAR(out[i], alpha * x[i] + y[i], 1e-5f * (std::abs(alpha * x[i]) + 1)) << i;
    }
  }
}

TEST_P(VulkanRun, ErrorFlagNamesTheDispatchAndIndex) {
  constexpr uint32_t n = 200;
  constexpr int table_size = 50;
  const std::vector<float> table = RandomFloats(table_size, 10);
  VulkanExecutableSpec spec;
  spec.name = "gather";
  spec.num_inputs = 2;
  spec.num_outputs = 1;
  spec.slots = {Slot::Input(0, table_size * 4), Slot::Input(1, n * 4), Slot::Output(0, n * 4),
                Slot::ErrorFlag()};
  spec.shaders = {GatherShader()};
  spec.dispatches = {{.shader = 0,
                      .buffer_slots = {0, 1, 2, 3},
                      .push_constants = Push(n, table_size),
                      .groups = {Groups(n), 1, 1},
                      .name = "gather_rows",
                      .error_context = "gather (model.py:12)"}};
  auto exe = Load(std::move(spec));
  ASSERT_NE(exe, nullptr);
  std::mt19937 random(11);
  std::vector<int32_t> index(n);
  for (int32_t& k : index) k = static_cast<int32_t>(random() % table_size);
  std::vector<float> out(n);
  const void* inputs[] = {table.data(), index.data()};
  void* outputs[] = {out.data()};
  ASSERT_TRUE(device_->Run(*exe, inputs, outputs).ok());
  for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(out[i], table[index[i]]) << i;

  for (int32_t bad : {table_size + 3, -7}) {
    std::vector<int32_t> wrong = index;
    wrong[n / 3] = bad;
    const void* bad_inputs[] = {table.data(), wrong.data()};
    absl::Status status = device_->Run(*exe, bad_inputs, outputs);
    ASSERT_FALSE(status.ok());
    EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange);
    EXPECT_THAT(status.message(), HasSubstr("dispatch 0 (gather_rows)"));
    EXPECT_THAT(status.message(), HasSubstr("gather (model.py:12)"));
    EXPECT_THAT(status.message(), HasSubstr(KernelErrorMessage(kKernelIndexOutOfRange)));
    EXPECT_THAT(status.message(), HasSubstr("index " + std::to_string(bad)));
  }
  // The flag is cleared for the next run.
  ASSERT_TRUE(device_->Run(*exe, inputs, outputs).ok());
}

TEST_P(VulkanRun, ConcurrentRunsOfOneExecutable) {
  constexpr uint32_t n = 4096;
  auto exe = Load(AddSpec(n));
  ASSERT_NE(exe, nullptr);
  std::vector<std::string> failures(2);
  auto worker = [&](int t) {
    for (int r = 0; r < 20; ++r) {
      const std::vector<float> a = RandomFloats(n, 100 + t * 50 + r);
      const std::vector<float> b = RandomFloats(n, 1000 + t * 50 + r);
      std::vector<float> c(n);
      const void* inputs[] = {a.data(), b.data()};
      void* outputs[] = {c.data()};
      absl::Status status = device_->Run(*exe, inputs, outputs);
      if (!status.ok()) {
        failures[t] = std::string(status.message());
        return;
      }
      for (uint32_t i = 0; i < n; ++i) {
        if (c[i] != a[i] + b[i]) {
          failures[t] = "thread " + std::to_string(t) + " run " + std::to_string(r) +
                        ": wrong element " + std::to_string(i);
          return;
        }
      }
    }
  };
  std::thread first(worker, 0), second(worker, 1);
  first.join();
  second.join();
  EXPECT_EQ(failures[0], "");
  EXPECT_EQ(failures[1], "");
}

TEST_P(VulkanRun, LargeBuffers) {
  // 32 MiB per buffer: the run buffer gets a memory block of its own, and 64 groups stride over
  // 8M elements.
  constexpr uint32_t n = 8u << 20;
  const int64_t allocated_before = device_->allocated_bytes();
  auto exe = Load(AddSpec(n, 4096));
  ASSERT_NE(exe, nullptr);
  EXPECT_GE(exe->run_buffer_bytes(), int64_t{3} * n * 4);
  EXPECT_GE(device_->allocated_bytes(), allocated_before + exe->run_buffer_bytes());
  const std::vector<float> a = RandomFloats(n, 12), b = RandomFloats(n, 13);
  std::vector<float> c(n);
  const void* inputs[] = {a.data(), b.data()};
  void* outputs[] = {c.data()};
  ASSERT_TRUE(device_->Run(*exe, inputs, outputs).ok());
  for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(c[i], a[i] + b[i]) << i;
  // Buffers this large have blocks of their own, which go back to the driver with them.
  exe.reset();
  EXPECT_EQ(device_->allocated_bytes(), allocated_before);

  // A binding larger than the device allows is refused at Load.
  const uint64_t too_big = device_->info().max_storage_buffer_range + 4;
  if (too_big < (uint64_t{1} << 40)) {
    VulkanExecutableSpec spec = AddSpec(n);
    spec.slots[2] = Slot::Output(0, static_cast<int64_t>(too_big));
    absl::StatusOr<std::shared_ptr<const VulkanExecutable>> refused = device_->Load(spec);
    ASSERT_FALSE(refused.ok());
    EXPECT_THAT(refused.status().message(), HasSubstr("maxStorageBufferRange"));
  }
}

TEST_P(VulkanRun, LoadChecksTheSpec) {
  auto expect_invalid = [&](VulkanExecutableSpec spec, const std::string& words) {
    absl::StatusOr<std::shared_ptr<const VulkanExecutable>> exe = device_->Load(std::move(spec));
    ASSERT_FALSE(exe.ok()) << words;
    EXPECT_EQ(exe.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(exe.status().message(), HasSubstr(words));
  };
  VulkanExecutableSpec spec = AddSpec(64);
  spec.dispatches[0].buffer_slots = {0, 1};
  expect_invalid(spec, "binds 2 buffers, shader \"add\" takes 3");
  spec = AddSpec(64);
  spec.dispatches[0].push_constants.pop_back();
  expect_invalid(spec, "3 push-constant bytes");
  spec = AddSpec(64);
  spec.shaders[0].spirv.assign(3, 0u);
  expect_invalid(spec, "shader 0 (add): not SPIR-V");
  if (device_->info().max_storage_buffers < (1u << 30)) {
    spec = AddSpec(64);
    spec.shaders[0].num_buffers = static_cast<int>(device_->info().max_storage_buffers) + 1;
    expect_invalid(spec, "storage buffers; the device allows 0 to");
  }
  spec = AddSpec(64);
  spec.dispatches[0].buffer_slots[2] = 7;
  expect_invalid(spec, "slot 7 does not exist");
  spec = AddSpec(64);
  spec.slots[2] = Slot::Arena(0, 256);
  expect_invalid(spec, "output 0 is bound to no slot");
  spec = AddSpec(64);
  spec.slots[2] = Slot::Arena(32, 256);
  expect_invalid(spec, "arena offsets must be multiples of");
  spec = AddSpec(64);
  spec.dispatches[0].groups[1] = device_->info().max_workgroup_count[1] + 1;
  if (spec.dispatches[0].groups[1] != 0) expect_invalid(spec, "workgroups along axis 1");

  // Run checks its arguments.
  auto exe = Load(AddSpec(64));
  ASSERT_NE(exe, nullptr);
  std::vector<float> a(64);
  const void* one_input[] = {a.data()};
  void* outputs[] = {a.data()};
  absl::Status status = device_->Run(*exe, one_input, outputs);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("takes 2 inputs, got 1"));
}

TEST_P(VulkanRun, Timings) {
  // Figures for docs/vulkan.md (printed, not asserted): Open, Load, the latency of a run of one
  // small dispatch (submit + fence + copies), and the bandwidth of a run that only moves bytes in
  // and out (no dispatch).
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  // A device of its own, so the first Load creates its pipeline (the test device has it cached).
  Clock::time_point start = Clock::now();
  absl::StatusOr<std::shared_ptr<VulkanDevice>> fresh =
      VulkanDevice::Open("", {.loader = {}, .staging = GetParam()});
  const double open_s = seconds(Clock::now() - start);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  device_ = *fresh;
  start = Clock::now();
  auto small = Load(AddSpec(64));
  const double load_s = seconds(Clock::now() - start);
  ASSERT_NE(small, nullptr);
  start = Clock::now();
  auto cached = Load(AddSpec(64));
  const double cached_load_s = seconds(Clock::now() - start);
  ASSERT_NE(cached, nullptr);
  const std::vector<float> a = RandomFloats(64, 14);
  std::vector<float> c(64);
  const void* inputs[] = {a.data(), a.data()};
  void* outputs[] = {c.data()};
  start = Clock::now();
  ASSERT_TRUE(device_->Run(*small, inputs, outputs).ok());
  const double first_run_s = seconds(Clock::now() - start);  // drivers may compile lazily
  std::vector<double> latencies;
  for (int r = 0; r < 30; ++r) {
    start = Clock::now();
    ASSERT_TRUE(device_->Run(*small, inputs, outputs).ok());
    latencies.push_back(seconds(Clock::now() - start));
  }
  std::sort(latencies.begin(), latencies.end());
  for (int i = 0; i < 64; ++i) ASSERT_EQ(c[i], a[i] + a[i]);

  constexpr int64_t bytes = int64_t{32} << 20;
  VulkanExecutableSpec copy;
  copy.name = "io";
  copy.num_inputs = 1;
  copy.num_outputs = 1;
  copy.slots = {Slot::Input(0, bytes), Slot::Output(0, bytes)};
  auto io = Load(std::move(copy));
  ASSERT_NE(io, nullptr);
  std::vector<std::byte> in(bytes, std::byte{1}), out(bytes);
  const void* io_inputs[] = {in.data()};
  void* io_outputs[] = {out.data()};
  ASSERT_TRUE(device_->Run(*io, io_inputs, io_outputs).ok());  // warm: pages touched
  std::vector<double> transfers;
  for (int r = 0; r < 5; ++r) {
    start = Clock::now();
    ASSERT_TRUE(device_->Run(*io, io_inputs, io_outputs).ok());
    transfers.push_back(seconds(Clock::now() - start));
  }
  std::sort(transfers.begin(), transfers.end());
  std::cout << "vulkan timings (" << device_->info().name
            << (device_->uses_staging() ? ", staged" : ", unified") << "): open " << open_s * 1e3
            << " ms, first load " << load_s * 1e3 << " ms, cached load " << cached_load_s * 1e3
            << " ms, first run " << first_run_s * 1e3 << " ms, run of one small dispatch median "
            << latencies[latencies.size() / 2] * 1e3 << " ms (min " << latencies[0] * 1e3
            << "), 32 MiB in + 32 MiB out per run median " << transfers[2] * 1e3
            << " ms = " << 2.0 * bytes / transfers[2] / 1e9 << " GB/s\n";
}

INSTANTIATE_TEST_SUITE_P(Memory, VulkanRun, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(info.param == 1 ? "Staged" : "Unified");
                         });

}  // namespace
}  // namespace kiln::runtime::vulkan
