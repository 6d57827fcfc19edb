// Tensors live on their device (frontend/engine.h): on a backend whose tensors are device memory
// (BackendUnderTest::tensors_in_device_memory), a training step uploads the batch and reads back
// the loss and nothing else, values are read back once, and a long training loop runs in bounded
// device memory through the device's caching allocator. On a host-memory backend nothing is
// transferred at all, and the loop's node count stays bounded all the same.
#include <kiln/kiln.h>

#include <cstdint>
#include <vector>

#include "frontend/engine.h"
#include "gtest/gtest.h"
#include "tests/conformance/backend_under_test.h"

namespace kiln::conformance {
namespace {

using B = Any;

B::Device BackendDevice() { return B::Device(kiln::Device::Parse(Backend().device)); }

// A small MLP (the demo's shape of model, sized so that a thousand steps take seconds).
constexpr int64_t kFeatures = 48, kHidden = 32, kClasses = 10, kBatch = 16;

struct SmallMlp {
  nn::Linear<B> fc1, fc2;
  KILN_MODULE(SmallMlp, fc1, fc2);

  Tensor<B, 2> forward(const Tensor<B, 2>& x) const {
    return fc2.forward(activation::relu(fc1.forward(x)));
  }
};

SmallMlp MakeSmallMlp(const B::Device& device) {
  return SmallMlp{nn::LinearConfig(kFeatures, kHidden).init<B>(device),
                  nn::LinearConfig(kHidden, kClasses).init<B>(device)};
}

// One SGD step (momentum, as the demo) on a batch made on the host; returns the loss read back.
double TrainStep(SmallMlp& model, optim::Sgd& optimizer, int64_t step, const B::Device& device) {
  std::vector<float> x(kBatch * kFeatures);
  std::vector<int64_t> y(kBatch);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<float>((i * 7 + step * 3) % 17) / 17.0f - 0.5f;
  }
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int64_t>((i + step) % kClasses);
  const auto inputs = Tensor<B, 2>::from_vector(x, {kBatch, kFeatures}, device);
  const auto labels = Tensor<B, 1, Int>::from_vector(y, {kBatch}, device);
  const auto loss = nn::cross_entropy(model.forward(inputs), labels);
  optimizer.step(model, loss.backward());
  optim::realize_step(model, optimizer, loss);
  return loss.item();
}

TEST(ConformanceResidencyTest, TrainingStepMovesOnlyTheBatchInAndTheLossOut) {
  manual_seed(0);
  const B::Device device = BackendDevice();
  SmallMlp model = MakeSmallMlp(device);
  optim::Sgd optimizer = optim::SgdConfig().with_lr(0.05).with_momentum(0.9).init();
  // The first steps compile, and the first one also computes the initialisation (on the device).
  for (int64_t step = 0; step < 3; ++step) TrainStep(model, optimizer, step, device);

  const runtime::TransferStats before = device.transfer_stats();
  const double loss = TrainStep(model, optimizer, 3, device);
  const runtime::TransferStats after = device.transfer_stats();
  EXPECT_GT(loss, 0.0);
  if (!Backend().tensors_in_device_memory) {
    EXPECT_EQ(after.host_to_device_bytes, 0);
    EXPECT_EQ(after.device_to_host_bytes, 0);
    return;
  }
  // In: the images (f32) and the labels (i64), one copy each. Out: the f32 loss.
  EXPECT_EQ(after.host_to_device_bytes - before.host_to_device_bytes,
            kBatch * kFeatures * 4 + kBatch * 8);
  EXPECT_EQ(after.host_to_device_copies - before.host_to_device_copies, 2);
  EXPECT_EQ(after.device_to_host_bytes - before.device_to_host_bytes, 4);
  EXPECT_EQ(after.device_to_host_copies - before.device_to_host_copies, 1);

  // Reading the parameters is what copies them (a checkpoint would).
  int64_t parameter_bytes = 0;
  model.visit([&](const std::string&, const auto& tensor) {
    parameter_bytes += tensor.into_data().size_bytes();
  });
  EXPECT_EQ(device.transfer_stats().device_to_host_bytes - after.device_to_host_bytes,
            parameter_bytes);
}

TEST(ConformanceResidencyTest, AValueIsReadBackOnceAndSharedByItsCopies) {
  const B::Device device = BackendDevice();
  const auto x = Tensor<B, 1>::from_vector(std::vector<float>{1, 2, 3, 4}, {4}, device);
  const auto y = x * 2.0 + 1.0;
  const runtime::TransferStats start = device.transfer_stats();
  EXPECT_EQ(y.to_vector(), (std::vector<float>{3, 5, 7, 9}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{3, 5, 7, 9}));
  const auto copy = y.detach();
  EXPECT_EQ(copy.to_vector(), (std::vector<float>{3, 5, 7, 9}));
  EXPECT_FLOAT_EQ((y.sum()).item(), 24.0f);
  const runtime::TransferStats end = device.transfer_stats();
  if (!Backend().tensors_in_device_memory) {
    EXPECT_EQ(end.device_to_host_bytes, 0);
    return;
  }
  // x went up once; y came back once (its detached copy shares that), and the sum's 4 bytes.
  EXPECT_EQ(end.host_to_device_bytes - start.host_to_device_bytes, 16);
  EXPECT_EQ(end.device_to_host_bytes - start.device_to_host_bytes, 16 + 4);
  EXPECT_EQ(end.device_to_host_copies - start.device_to_host_copies, 2);
}

TEST(ConformanceResidencyTest, AThousandStepsRunInBoundedMemory) {
  manual_seed(1);
  const B::Device device = BackendDevice();
  SmallMlp model = MakeSmallMlp(device);
  optim::Sgd optimizer = optim::SgdConfig().with_lr(0.05).with_momentum(0.9).init();
  constexpr int64_t kWarmup = 20, kSteps = 1000;
  double first_loss = 0;
  for (int64_t step = 0; step < kWarmup; ++step) {
    const double loss = TrainStep(model, optimizer, step, device);
    if (step == 0) first_loss = loss;
  }
  const runtime::AllocatorStats warm = device.memory_stats();
  const int64_t warm_nodes = detail::GetEngineStats().live_nodes;
  double last_loss = 0;
  for (int64_t step = kWarmup; step < kSteps; ++step) {
    last_loss = TrainStep(model, optimizer, step, device);
  }
  const runtime::AllocatorStats end = device.memory_stats();
  EXPECT_LT(last_loss, first_loss) << "the loop trained nothing";
  EXPECT_EQ(detail::GetEngineStats().live_nodes, warm_nodes);
  if (!Backend().tensors_in_device_memory) return;
  // Every step after the warm-up reuses cached buffers: no driver allocation, no growth.
  EXPECT_EQ(end.system_allocations, warm.system_allocations);
  EXPECT_LE(end.bytes_in_use + end.bytes_cached, warm.bytes_in_use + warm.bytes_cached);
  EXPECT_EQ(end.bytes_in_use, warm.bytes_in_use);
  EXPECT_GT(end.reused - warm.reused, (kSteps - kWarmup) * 4);
  EXPECT_LE(end.peak_bytes_in_use, warm.peak_bytes_in_use);
}

TEST(ConformanceResidencyTest, EmptyCacheGivesUnusedMemoryBack) {
  const B::Device device = BackendDevice();
  {
    const auto big = Tensor<B, 2>::ones({256, 256}, device) * 3.0;
    EXPECT_FLOAT_EQ(big.sum().item(), 3.0f * 256 * 256);
  }
  if (!Backend().tensors_in_device_memory) {
    EXPECT_EQ(device.memory_stats().allocations, 0);
    return;
  }
  EXPECT_GT(device.memory_stats().bytes_cached, 0);
  device.empty_cache();
  EXPECT_EQ(device.memory_stats().bytes_cached, 0);
}

}  // namespace
}  // namespace kiln::conformance
