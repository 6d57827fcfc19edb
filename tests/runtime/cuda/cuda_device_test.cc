// The CUDA driver (runtime/cuda/cuda_device.h). CheckSpec and the no-driver errors run
// everywhere; the device cases load the hand-written PTX of test_kernels_ptx.h and skip with
// DriverAvailable()'s message where there is no GPU.
#include "runtime/cuda/cuda_device.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tests/runtime/cuda/test_kernels_ptx.h"

namespace kiln::runtime::cuda {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::byte> Int64Bytes(std::vector<int64_t> values) {
  std::vector<std::byte> bytes(values.size() * sizeof(int64_t));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// out = a + b over n floats: inputs 0, 1, output 0, n in a constant slot.
CudaExecutableSpec AddSpec(int64_t n) {
  CudaExecutableSpec spec;
  spec.name = "add";
  spec.num_inputs = 2;
  spec.num_outputs = 1;
  spec.slots = {Slot::Input(0, n * 4), Slot::Input(1, n * 4), Slot::Output(0, n * 4),
                Slot::Constant(Int64Bytes({n}))};
  spec.modules = {testing::kTestKernelsPtx};
  spec.kernels = {
      {.name = "kiln_add", .module = 0, .num_buffers = 4, .max_dynamic_shared_bytes = 0}};
  spec.launches = {{.kernel = 0,
                    .buffer_slots = {0, 1, 2, 3},
                    .grid = {static_cast<uint32_t>((n + 255) / 256), 1, 1},
                    .block = {256, 1, 1},
                    .shared_bytes = 0,
                    .name = "add",
                    .error_context = {}}};
  return spec;
}

// out[i] = table[indices[i]]: input 0 the table (`table` floats), input 1 the int64 indices,
// output 0, scalar 0 the sizes {count, table}, and the error flag.
CudaExecutableSpec GatherSpec(int64_t table, int64_t count) {
  CudaExecutableSpec spec;
  spec.name = "gather";
  spec.num_inputs = 2;
  spec.num_outputs = 1;
  spec.num_scalars = 1;
  spec.slots = {Slot::Input(0, table * 4), Slot::Input(1, count * 8), Slot::Output(0, count * 4),
                Slot::Scalar(0, 16), Slot::ErrorFlag()};
  spec.modules = {testing::kTestKernelsPtx};
  spec.kernels = {
      {.name = "kiln_gather", .module = 0, .num_buffers = 5, .max_dynamic_shared_bytes = 0}};
  spec.launches = {{.kernel = 0,
                    .buffer_slots = {0, 1, 2, 3, 4},
                    .grid = {static_cast<uint32_t>((count + 127) / 128), 1, 1},
                    .block = {128, 1, 1},
                    .shared_bytes = 0,
                    .name = "gather",
                    .error_context = "gather at model.py:3"}};
  return spec;
}

// ---- CheckSpec (no device) ---------------------------------------------------------------------

void ExpectInvalid(const CudaExecutableSpec& spec, const std::string& message) {
  absl::Status status = CheckSpec(spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << message << ": " << status;
  EXPECT_THAT(status.message(), HasSubstr(message));
}

TEST(CudaCheckSpec, AcceptsWellFormedSpecs) {
  EXPECT_TRUE(CheckSpec(AddSpec(1000)).ok()) << CheckSpec(AddSpec(1000));
  EXPECT_TRUE(CheckSpec(GatherSpec(16, 8)).ok()) << CheckSpec(GatherSpec(16, 8));
  CudaExecutableSpec big_shared = AddSpec(8);
  big_shared.kernels[0].max_dynamic_shared_bytes = 100 * 1024;
  big_shared.launches[0].shared_bytes = 100 * 1024;
  EXPECT_TRUE(CheckSpec(big_shared).ok()) << CheckSpec(big_shared);
}

TEST(CudaCheckSpec, RejectsMalformedSlots) {
  CudaExecutableSpec spec = AddSpec(8);
  spec.num_scalars = -1;
  ExpectInvalid(spec, "cuda executable \"add\": negative input, output or scalar count");

  spec = AddSpec(8);
  spec.slots[1] = Slot::Input(2, 32);
  ExpectInvalid(spec, "slot 1 (input 2, 32 bytes): the executable has 2 inputs");
  spec = AddSpec(8);
  spec.slots[2] = Slot::Output(1, 32);
  ExpectInvalid(spec, "slot 2 (output 1, 32 bytes): the executable has 1 output");
  spec = AddSpec(8);
  spec.slots.push_back(Slot::Scalar(0, 8));
  ExpectInvalid(spec, "slot 4 (scalar 0, 8 bytes): the executable has 0 scalars");
  spec = AddSpec(8);
  spec.slots[0].size_bytes = -4;
  ExpectInvalid(spec, "slot 0 (input 0, -4 bytes): negative size");
  spec = AddSpec(8);
  spec.slots.push_back(Slot::Arena(32, 64));
  ExpectInvalid(spec,
                "slot 4 (arena +32, 64 bytes): arena offsets must be non-negative "
                "multiples of 64");
  spec = AddSpec(8);
  spec.slots[3].size_bytes = 16;
  ExpectInvalid(spec, "slot 3 (constant, 16 bytes): holds 8 bytes");
  spec = GatherSpec(16, 8);
  spec.slots[4].size_bytes = 4;
  ExpectInvalid(spec, "slot 4 (error flag, 4 bytes): the error flag is two int64 (16 bytes)");
  spec = AddSpec(8);
  spec.num_outputs = 2;
  ExpectInvalid(spec, "output 1 is bound to no slot");
}

TEST(CudaCheckSpec, RejectsMalformedModulesAndKernels) {
  CudaExecutableSpec spec = AddSpec(8);
  spec.modules.push_back("");
  ExpectInvalid(spec, "module 1 has no PTX");
  spec = AddSpec(8);
  spec.kernels[0].module = 1;
  ExpectInvalid(spec, "kernel 0 (kiln_add): module 1 does not exist (1 module)");
  spec = AddSpec(8);
  spec.kernels[0].name.clear();
  ExpectInvalid(spec, "kernel 0 has no name");
  spec = AddSpec(8);
  spec.kernels[0].max_dynamic_shared_bytes = -1;
  ExpectInvalid(spec, "kernel 0 (kiln_add): negative max_dynamic_shared_bytes");
}

TEST(CudaCheckSpec, RejectsMalformedLaunches) {
  CudaExecutableSpec spec = AddSpec(8);
  spec.launches[0].kernel = 1;
  ExpectInvalid(spec, "launch 0 (add): kernel 1 does not exist (1 kernel)");
  spec = AddSpec(8);
  spec.launches[0].buffer_slots.pop_back();
  ExpectInvalid(spec, "launch 0 (add): passes 3 buffers, kernel \"kiln_add\" takes 4");
  spec = AddSpec(8);
  spec.launches[0].buffer_slots[3] = 4;
  ExpectInvalid(spec, "launch 0 (add): slot 4 does not exist (4 slots)");
  spec = AddSpec(8);
  spec.launches[0].block[1] = 8;  // 256 * 8 threads
  ExpectInvalid(spec, "launch 0 (add): block [256, 8, 1] has 2048 threads; a block has 1 to 1024");
  spec = AddSpec(8);
  spec.launches[0].block[2] = 0;
  ExpectInvalid(spec, "launch 0 (add): block [256, 1, 0] has 0 threads");
  spec = AddSpec(8);
  spec.launches[0].shared_bytes = 64 * 1024;
  ExpectInvalid(spec,
                "launch 0 (add): 65536 bytes of dynamic shared memory; kernel \"kiln_add\" "
                "allows 49152 (raise its max_dynamic_shared_bytes)");
}

// ---- No driver ---------------------------------------------------------------------------------

constexpr char kMissingDriver[] = "/nonexistent/kiln/libcuda.so.1";

void ExpectNoDriver(const absl::Status& status) {
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(status.message(), HasSubstr(std::string("kiln::Cuda: cannot load the CUDA driver (") +
                                          kMissingDriver + ": "));
  EXPECT_THAT(status.message(), HasSubstr("); is an NVIDIA driver installed? Use KILN_DEVICE=cpu "
                                          "to run on the CPU"));
  // dlerror()'s own copy of the path is dropped.
  EXPECT_THAT(status.message(),
              Not(HasSubstr(std::string(kMissingDriver) + ": " + kMissingDriver)));
}

TEST(CudaNoDriver, EveryEntryPointSaysSo) {
  const OpenOptions options{.driver = kMissingDriver};
  ExpectNoDriver(DriverAvailable(options));
  EXPECT_TRUE(ListDevices(options).empty());
  ExpectNoDriver(CudaDevice::Open(0, options).status());
}

TEST(CudaNoDriver, KilnCudaDriverNamesTheLibrary) {
  const char* saved = std::getenv("KILN_CUDA_DRIVER");
  const std::optional<std::string> previous =
      saved != nullptr ? std::optional<std::string>(saved) : std::nullopt;
  setenv("KILN_CUDA_DRIVER", kMissingDriver, 1);
  ExpectNoDriver(DriverAvailable());
  EXPECT_TRUE(ListDevices().empty());
  ExpectNoDriver(CudaDevice::Open().status());
  if (previous.has_value()) {
    setenv("KILN_CUDA_DRIVER", previous->c_str(), 1);
  } else {
    unsetenv("KILN_CUDA_DRIVER");
  }
}

// ---- On a device -------------------------------------------------------------------------------

class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (absl::Status status = DriverAvailable(); !status.ok()) GTEST_SKIP() << status.message();
    device_ = Device();
    ASSERT_NE(device_, nullptr);
  }

  // Opened once per process (the primary context is kept retained between cases).
  static std::shared_ptr<CudaDevice> Device() {
    static auto* device = new std::shared_ptr<CudaDevice>([] {
      absl::StatusOr<std::shared_ptr<CudaDevice>> opened = CudaDevice::Open(0);
      EXPECT_TRUE(opened.ok()) << opened.status();
      return opened.ok() ? *opened : nullptr;
    }());
    return *device;
  }

  std::shared_ptr<const CudaExecutable> Load(CudaExecutableSpec spec) {
    absl::StatusOr<std::shared_ptr<const CudaExecutable>> exe = device_->Load(std::move(spec));
    EXPECT_TRUE(exe.ok()) << exe.status();
    return exe.ok() ? *exe : nullptr;
  }

  std::unique_ptr<DeviceBuffer> Upload(std::span<const std::byte> bytes) {
    absl::StatusOr<std::unique_ptr<DeviceBuffer>> buffer =
        device_->Allocate(static_cast<int64_t>(bytes.size()));
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    if (!buffer.ok()) return nullptr;
    absl::Status copied = device_->CopyToDevice(bytes, **buffer, 0);
    EXPECT_TRUE(copied.ok()) << copied;
    return *std::move(buffer);
  }

  template <typename T>
  std::vector<T> Download(const DeviceBuffer& buffer, size_t n) {
    std::vector<T> values(n);
    absl::Status status =
        device_->CopyFromDevice(buffer, 0, std::as_writable_bytes(std::span(values)));
    EXPECT_TRUE(status.ok()) << status;
    return values;
  }

  std::shared_ptr<CudaDevice> device_;
};

TEST_F(CudaDeviceTest, DescribesTheDevice) {
  const DeviceInfo& info = device_->info();
  EXPECT_EQ(info.index, 0);
  EXPECT_FALSE(info.name.empty());
  EXPECT_GE(info.compute_major, 5);
  EXPECT_EQ(info.Arch(),
            "sm_" + std::to_string(info.compute_major) + std::to_string(info.compute_minor));
  EXPECT_EQ(info.warp_size, 32);
  EXPECT_GE(info.max_threads_per_block, 1024);
  EXPECT_GE(info.max_block[0], 1024);
  EXPECT_GE(info.max_grid[0], 65535);
  EXPECT_EQ(info.max_shared_per_block, 48 * 1024);
  EXPECT_GE(info.max_shared_per_block_optin, info.max_shared_per_block);
  EXPECT_GT(info.multiprocessors, 0);
  EXPECT_GT(info.total_memory, int64_t{1} << 30);
  EXPECT_GE(info.driver_version, 11000);
  EXPECT_THAT(info.ToString(), HasSubstr("0: " + info.name + " (" + info.Arch() + ", "));
  EXPECT_THAT(info.ToString(), HasSubstr(" SMs, "));
  EXPECT_EQ(device_->id(), (DeviceId{DeviceKind::kCuda, 0}));
  const std::vector<DeviceInfo> devices = ListDevices();
  ASSERT_FALSE(devices.empty());
  EXPECT_EQ(devices[0].name, info.name);

  absl::StatusOr<std::pair<int64_t, int64_t>> memory = device_->MemoryInfo();
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_GT(memory->first, 0);
  EXPECT_LE(memory->first, memory->second);
  EXPECT_LE(memory->second, info.total_memory);
  EXPECT_GT(memory->second, info.total_memory / 2);

  absl::StatusOr<std::shared_ptr<CudaDevice>> missing = CudaDevice::Open(1000);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("no CUDA device 1000: the devices are 0: "));
}

TEST_F(CudaDeviceTest, RunsOnHostMemory) {
  constexpr int64_t n = 1000;
  std::shared_ptr<const CudaExecutable> add = Load(AddSpec(n));
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(add->kind(), DeviceKind::kCuda);
  EXPECT_EQ(add->input_bytes(1), n * 4);
  EXPECT_EQ(add->output_bytes(0), n * 4);
  std::vector<float> a(n), b(n), out(n, -1.0f);
  for (int64_t i = 0; i < n; ++i) {
    a[i] = 0.5f * static_cast<float>(i);
    b[i] = 3.0f - static_cast<float>(i);
  }
  const TransferStats before = device_->transfer_stats();
  const void* inputs[] = {a.data(), b.data()};
  void* outputs[] = {out.data()};
  ASSERT_TRUE(device_->Run(*add, inputs, outputs).ok());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]) << i;
  const TransferStats after = device_->transfer_stats();
  EXPECT_EQ(after.host_to_device_bytes - before.host_to_device_bytes, 2 * n * 4);
  EXPECT_EQ(after.host_to_device_copies - before.host_to_device_copies, 2);
  EXPECT_EQ(after.device_to_host_bytes - before.device_to_host_bytes, n * 4);
  EXPECT_EQ(after.device_to_host_copies - before.device_to_host_copies, 1);

  // Argument checks.
  const void* one[] = {a.data()};
  EXPECT_THAT(device_->Run(*add, one, outputs).message(),
              HasSubstr("cuda executable \"add\" takes 2 inputs, got 1"));
  const void* null_input[] = {a.data(), nullptr};
  EXPECT_THAT(device_->Run(*add, null_input, outputs).message(),
              HasSubstr("cuda executable \"add\": input 1 is null"));
}

TEST_F(CudaDeviceTest, RunsLaunchesInOrderAndSkipsEmptyGrids) {
  // arena = a + b; out = arena + b; a third launch with an empty grid would make out = a + a.
  constexpr int64_t n = 4097;
  CudaExecutableSpec spec = AddSpec(n);
  spec.slots.push_back(Slot::Arena(0, n * 4));  // slot 4
  Launch first = spec.launches[0];
  first.buffer_slots = {0, 1, 4, 3};
  first.name = "add_to_arena";
  Launch second = spec.launches[0];
  second.buffer_slots = {4, 1, 2, 3};
  second.name = "add_arena";
  Launch skipped = spec.launches[0];
  skipped.buffer_slots = {0, 0, 2, 3};
  skipped.grid[1] = 0;
  skipped.name = "skipped";
  spec.launches = {first, second, skipped};
  std::shared_ptr<const CudaExecutable> exe = Load(std::move(spec));
  ASSERT_NE(exe, nullptr);
  EXPECT_EQ(exe->arena_bytes(), n * 4);
  std::vector<float> a(n), b(n);
  for (int64_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 97);
    b[i] = 0.25f * static_cast<float>(i % 13);
  }
  std::unique_ptr<DeviceBuffer> a_buffer = Upload(std::as_bytes(std::span(a)));
  std::unique_ptr<DeviceBuffer> b_buffer = Upload(std::as_bytes(std::span(b)));
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> out = device_->Allocate(n * 4);
  ASSERT_TRUE(out.ok()) << out.status();
  const DeviceBuffer* inputs[] = {a_buffer.get(), b_buffer.get()};
  DeviceBuffer* outputs[] = {out->get()};
  for (int run = 0; run < 3; ++run) {
    ASSERT_TRUE(device_->Run(*exe, inputs, outputs, {}).ok());
    const std::vector<float> result = Download<float>(**out, n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(result[i], (a[i] + b[i]) + b[i]) << run << " " << i;
  }
}

TEST_F(CudaDeviceTest, ReportsKernelErrorsNamingTheLaunch) {
  constexpr int64_t table = 16, count = 300;
  std::shared_ptr<const CudaExecutable> gather = Load(GatherSpec(table, count));
  ASSERT_NE(gather, nullptr);
  EXPECT_EQ(gather->scalar_bytes(0), 16);
  std::vector<float> values(table);
  for (int64_t i = 0; i < table; ++i) values[i] = 10.0f + static_cast<float>(i);
  std::vector<int64_t> indices(count);
  for (int64_t i = 0; i < count; ++i) indices[i] = (i * 7) % table;
  std::unique_ptr<DeviceBuffer> table_buffer = Upload(std::as_bytes(std::span(values)));
  std::unique_ptr<DeviceBuffer> index_buffer = Upload(std::as_bytes(std::span(indices)));
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> out = device_->Allocate(count * 4);
  ASSERT_TRUE(out.ok()) << out.status();
  const DeviceBuffer* inputs[] = {table_buffer.get(), index_buffer.get()};
  DeviceBuffer* outputs[] = {out->get()};
  int64_t sizes[2] = {count, table};
  const void* scalars[] = {sizes};

  // In range; the scalar is read before Run returns and counted as a transfer.
  const TransferStats before = device_->transfer_stats();
  ASSERT_TRUE(device_->Run(*gather, inputs, outputs, scalars).ok());
  const TransferStats after = device_->transfer_stats();
  EXPECT_EQ(after.host_to_device_bytes - before.host_to_device_bytes, 16);
  EXPECT_EQ(after.host_to_device_copies - before.host_to_device_copies, 1);
  EXPECT_EQ(after.device_to_host_bytes, before.device_to_host_bytes);
  std::vector<float> result = Download<float>(**out, count);
  for (int64_t i = 0; i < count; ++i) ASSERT_EQ(result[i], values[indices[i]]) << i;

  // A table of 5 makes index 7 (i = 1) and others out of range: the flag names the launch.
  sizes[1] = 5;
  absl::Status status = device_->Run(*gather, inputs, outputs, scalars);
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange) << status;
  EXPECT_THAT(status.message(),
              HasSubstr("cuda executable \"gather\": launch 0 (gather): gather at model.py:3: "));
  EXPECT_THAT(status.message(), HasSubstr("(kernel error code 1, index "));
  // The flags are zeroed before every run.
  sizes[1] = table;
  EXPECT_TRUE(device_->Run(*gather, inputs, outputs, scalars).ok());

  // The host-pointer Run: the same error, and results when in range.
  std::vector<float> host_out(count);
  const void* host_inputs[] = {values.data(), indices.data()};
  void* host_outputs[] = {host_out.data()};
  ASSERT_TRUE(device_->Run(*gather, host_inputs, host_outputs, scalars).ok());
  for (int64_t i = 0; i < count; ++i) ASSERT_EQ(host_out[i], values[indices[i]]) << i;
  indices[5] = -3;
  status = device_->Run(*gather, host_inputs, host_outputs, scalars);
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange) << status;
  EXPECT_THAT(status.message(), HasSubstr("(kernel error code 1, index -3)"));

  const void* no_scalars[] = {nullptr};
  EXPECT_THAT(device_->Run(*gather, inputs, outputs, no_scalars).message(),
              HasSubstr("cuda executable \"gather\": scalar 0 is null"));
}

TEST_F(CudaDeviceTest, RefusesAliasedAndForeignRuns) {
  std::shared_ptr<const CudaExecutable> add = Load(AddSpec(64));
  ASSERT_NE(add, nullptr);
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> a = device_->Allocate(256),
                                                b = device_->Allocate(256);
  ASSERT_TRUE(a.ok() && b.ok());
  const DeviceBuffer* inputs[] = {a->get(), b->get()};
  DeviceBuffer* aliased[] = {b->get()};
  absl::Status status = device_->Run(*add, inputs, aliased, {});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("cuda:0: executable \"add\" output 0 is also one of its "
                                          "inputs"));

  // An executable of one CudaDevice does not run on another (here: on the same GPU).
  absl::StatusOr<std::shared_ptr<CudaDevice>> other = CudaDevice::Open(0);
  ASSERT_TRUE(other.ok()) << other.status();
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> x = (*other)->Allocate(256),
                                                y = (*other)->Allocate(256),
                                                z = (*other)->Allocate(256);
  ASSERT_TRUE(x.ok() && y.ok() && z.ok());
  const DeviceBuffer* other_inputs[] = {x->get(), y->get()};
  DeviceBuffer* other_outputs[] = {z->get()};
  status = (*other)->Run(*add, other_inputs, other_outputs, {});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("cuda executable \"add\" was loaded on another device"));
  std::vector<float> host(64);
  const void* host_inputs[] = {host.data(), host.data()};
  void* host_outputs[] = {host.data()};
  EXPECT_THAT((*other)->Run(*add, host_inputs, host_outputs).message(),
              HasSubstr("cuda executable \"add\" was loaded on another device"));
}

TEST_F(CudaDeviceTest, LoadReportsWhatTheDriverRejects) {
  CudaExecutableSpec bad_ptx = AddSpec(8);
  bad_ptx.modules[0] = ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry kiln_add(\n";
  absl::StatusOr<std::shared_ptr<const CudaExecutable>> loaded = device_->Load(std::move(bad_ptx));
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument) << loaded.status();
  EXPECT_THAT(loaded.status().message(),
              HasSubstr("cuda executable \"add\": module 0: cuModuleLoadDataEx: "));

  CudaExecutableSpec missing = AddSpec(8);
  missing.kernels[0].name = "kiln_missing";
  loaded = device_->Load(std::move(missing));
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument) << loaded.status();
  EXPECT_THAT(loaded.status().message(),
              HasSubstr("kernel 0 (kiln_missing): module 0 has no .entry kiln_missing"));

  CudaExecutableSpec too_much_shared = AddSpec(8);
  too_much_shared.kernels[0].max_dynamic_shared_bytes = 64 << 20;
  loaded = device_->Load(std::move(too_much_shared));
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(loaded.status().message(),
              HasSubstr("kernel 0 (kiln_add): 67108864 bytes of dynamic shared memory; "));

  // Opting in to more than 48 KiB (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) works, and a
  // launch may then use it.
  CudaExecutableSpec opted_in = AddSpec(8);
  opted_in.kernels[0].max_dynamic_shared_bytes = device_->info().max_shared_per_block_optin;
  opted_in.launches[0].shared_bytes = 64 * 1024;
  std::shared_ptr<const CudaExecutable> exe = Load(std::move(opted_in));
  ASSERT_NE(exe, nullptr);
  std::vector<float> a(8, 1.0f), out(8);
  const void* inputs[] = {a.data(), a.data()};
  void* outputs[] = {out.data()};
  ASSERT_TRUE(device_->Run(*exe, inputs, outputs).ok());
  EXPECT_EQ(out, std::vector<float>(8, 2.0f));
}

TEST_F(CudaDeviceTest, ToStringListsThePlan) {
  std::shared_ptr<const CudaExecutable> add = Load(AddSpec(16));
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(add->ToString(),
            "cuda executable \"add\": 2 inputs, 1 output, 0 scalars, arena 0 bytes, 1 module, "
            "1 kernel, 1 launch\n"
            "  slot 0: input 0, 64 bytes\n"
            "  slot 1: input 1, 64 bytes\n"
            "  slot 2: output 0, 64 bytes\n"
            "  slot 3: constant, 8 bytes\n"
            "  kernel 0: kiln_add (module 0, 4 buffers)\n"
            "  launch 0: add grid [1, 1, 1] block [256, 1, 1] shared 0 slots [0, 1, 2, 3]\n");
}

TEST_F(CudaDeviceTest, CopiesBetweenBuffersOnTheDevice) {
  std::vector<std::byte> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i * 13 + 5);
  std::unique_ptr<DeviceBuffer> source = Upload(bytes);
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> destination = device_->Allocate(600);
  ASSERT_TRUE(destination.ok()) << destination.status();
  const TransferStats before = device_->transfer_stats();
  ASSERT_TRUE(device_->CopyBuffer(*source, 100, **destination, 50, 500).ok());
  EXPECT_EQ(device_->transfer_stats().host_to_device_bytes, before.host_to_device_bytes);
  std::vector<std::byte> back(500);
  ASSERT_TRUE(device_->CopyFromDevice(**destination, 50, back).ok());
  EXPECT_TRUE(std::equal(back.begin(), back.end(), bytes.begin() + 100));

  absl::Status status = device_->CopyBuffer(*source, 0, **destination, 200, 500);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("CopyBuffer destination of 500 bytes at offset 200 does not fit a buffer "
                        "of 600 bytes"));
  status = device_->CopyBuffer(*source, 0, *source, 100, 200);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("the ranges overlap"));
  EXPECT_TRUE(device_->CopyBuffer(*source, 0, *source, 500, 500).ok());
}

TEST_F(CudaDeviceTest, TimesWorkOnTheStream) {
  std::shared_ptr<const CudaExecutable> add = Load(AddSpec(1 << 20));
  ASSERT_NE(add, nullptr);
  absl::StatusOr<std::unique_ptr<StreamTimer>> timer = device_->CreateTimer();
  ASSERT_TRUE(timer.ok()) << timer.status();
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  for (int i = 0; i < 3; ++i) buffers.push_back(*device_->Allocate(4 << 20));
  const DeviceBuffer* inputs[] = {buffers[0].get(), buffers[1].get()};
  DeviceBuffer* outputs[] = {buffers[2].get()};
  ASSERT_TRUE((*timer)->Start().ok());
  for (int r = 0; r < 10; ++r) ASSERT_TRUE(device_->Run(*add, inputs, outputs, {}).ok());
  ASSERT_TRUE((*timer)->Stop().ok());
  absl::StatusOr<double> milliseconds = (*timer)->ElapsedMilliseconds();
  ASSERT_TRUE(milliseconds.ok()) << milliseconds.status();
  EXPECT_GT(*milliseconds, 0.0);
  EXPECT_LT(*milliseconds, 10000.0);
  EXPECT_TRUE(device_->Synchronize().ok());
}

}  // namespace
}  // namespace kiln::runtime::cuda
