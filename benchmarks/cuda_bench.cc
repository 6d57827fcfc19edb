// cuda_bench: kiln::Cuda's figures for scripts/gpu_check.sh, printed as one JSON object (each
// figure beside what it was measured on); benchmarks/cuda_peers.py times the same work with the
// machine's PyTorch and prints the table with the ratios. Links the CUDA backend alone (no LLVM,
// no shaderc), so it runs on a GPU server that has only the NVIDIA driver.
//
//   copy_gbps          device-to-device copy of 1 GiB (CudaDevice::CopyBuffer), bytes read and
//                      written per second, timed with CUDA events: the bandwidth reference
//   gelu_gbps          y = gelu_tanh(x * a + b) on 256M f32 through the Tensor API (one fused
//                      kernel), bytes read and written per second of wall time per realize
//   matmul_bf16_tflops 8192^3 bf16, matmul_f32_tflops 4096^3 f32 (2 m n k per run)
//   mlp_step_ms        the Fashion-MNIST MLP training step, batch 128 (checked against
//                      kiln::Reference on two steps first), cnn_step_ms the CNN's, batch 64
//   dispatch_us        a cache-hit realize of a 10-op elementwise graph on 16 elements
//
// Each timed figure is the median of its repetitions after a warm-up (the compile). A figure that
// fails (an error, a wrong answer) is null with the reason under "errors".
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "benchmarks/frontend_workloads.h"
#include "codegen/cuda/graph_compiler.h"
#include "frontend/activation.h"
#include "kiln/kiln.h"
#include "nlohmann/json.hpp"
#include "runtime/cuda/cuda_device.h"

namespace {

namespace ir = kiln::ir;
using B = kiln::Cuda;
using Clock = std::chrono::steady_clock;
using kiln::bench::RandomValues;

// The median seconds of `body` over `repeats` runs after one warm-up.
double MedianSeconds(int repeats, const std::function<void()>& body) {
  body();
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const auto start = Clock::now();
    body();
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

double GeluTanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

struct Report {
  nlohmann::json figures = nlohmann::json::object();
  nlohmann::json errors = nlohmann::json::object();

  void Measure(const std::string& name, const std::function<double()> measure) {
    std::fprintf(stderr, "cuda_bench: %s ...\n", name.c_str());
    try {
      figures[name] = measure();
    } catch (const std::exception& e) {
      figures[name] = nullptr;
      errors[name] = e.what();
    }
  }
};

void Require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

double CopyBandwidth() {
  auto device = kiln::codegen::cuda::DeviceForIndex(0);
  Require(device.ok(), std::string(device.status().message()));
  constexpr int64_t kBytes = int64_t{1} << 30;
  auto source = (*device)->Allocate(kBytes);
  auto destination = (*device)->Allocate(kBytes);
  Require(source.ok() && destination.ok(), "cannot allocate 2 GiB");
  auto timer = (*device)->CreateTimer();
  Require(timer.ok(), std::string(timer.status().message()));
  constexpr int kRepeats = 20;
  Require((*device)->CopyBuffer(**source, 0, **destination, 0, kBytes).ok(), "warm-up copy");
  Require((*timer)->Start().ok(), "timer");
  for (int i = 0; i < kRepeats; ++i) {
    Require((*device)->CopyBuffer(**source, 0, **destination, 0, kBytes).ok(), "copy");
  }
  Require((*timer)->Stop().ok(), "timer");
  auto ms = (*timer)->ElapsedMilliseconds();
  Require(ms.ok(), std::string(ms.status().message()));
  return 2.0 * kBytes * kRepeats / (*ms * 1e-3) / 1e9;
}

double GeluBandwidth() {
  constexpr int64_t kN = int64_t{256} << 20;
  const std::vector<float> host = RandomValues(kN, 1);
  const auto x = kiln::Tensor<B, 1>::from_vector(host, {kN}, B::Device{});
  const auto body = [&] { return kiln::activation::gelu_tanh(x * 0.75f + 0.25f); };
  const std::vector<float> y = body().to_vector<float>();
  for (int64_t i = 0; i < kN; i += 65537) {
    const double want = GeluTanh(host[static_cast<size_t>(i)] * 0.75 + 0.25);
    Require(std::abs(y[static_cast<size_t>(i)] - want) <= 1e-5 * (1 + std::abs(want)),
            "gelu: wrong result at element " + std::to_string(i));
  }
  const double seconds = MedianSeconds(20, [&] { body().realize(); });
  return 8.0 * kN / seconds / 1e9;
}

double MatmulTflops(int64_t n, ir::DType dtype, int repeats) {
  const auto a = kiln::Tensor<B, 2>::from_vector(RandomValues(n * n, 2, -1, 1), {n, n}, B::Device{})
                     .cast(dtype);
  const auto b = kiln::Tensor<B, 2>::from_vector(RandomValues(n * n, 3, -1, 1), {n, n}, B::Device{})
                     .cast(dtype);
  a.realize();
  b.realize();
  // One element against a dot product in double (inputs rounded as the device holds them).
  const auto c = a.matmul(b);
  const std::vector<double> row = a.slice(0, 5, 6).to_float(ir::DType::kF64).to_vector<double>();
  const std::vector<double> col = b.slice(1, 7, 8).to_float(ir::DType::kF64).to_vector<double>();
  double want = 0;
  for (int64_t k = 0; k < n; ++k) want += row[static_cast<size_t>(k)] * col[static_cast<size_t>(k)];
  const double got =
      c.slice(0, 5, 6).slice(1, 7, 8).to_float(ir::DType::kF64).to_vector<double>().at(0);
  Require(
      std::abs(got - want) <= 0.02 * std::sqrt(static_cast<double>(n)),
      "matmul: element (5, 7) is " + std::to_string(got) + ", expected " + std::to_string(want));
  const double seconds = MedianSeconds(repeats, [&] { a.matmul(b).realize(); });
  return 2.0 * n * n * n / seconds / 1e12;
}

template <template <class> class Net>
double TrainStepMs(int64_t batch_size) {
  const kiln::bench::HostBatch batch = kiln::bench::MakeHostBatch(batch_size, 11);
  kiln::manual_seed(0);
  Net<kiln::Reference> reference = Net<kiln::Reference>::Make();
  kiln::manual_seed(0);
  Net<B> model = Net<B>::Make();
  auto reference_sgd = kiln::optim::SgdConfig().with_lr(0.01).with_momentum(0.9).init();
  auto sgd = kiln::optim::SgdConfig().with_lr(0.01).with_momentum(0.9).init();
  for (int step = 0; step < 2; ++step) {
    const double want =
        kiln::bench::FrontendTrainStep<kiln::Reference>(reference, reference_sgd, batch);
    const double got = kiln::bench::FrontendTrainStep<B>(model, sgd, batch);
    Require(std::abs(got - want) <= 1e-4 * (1.0 + std::abs(want)),
            "wrong loss at step " + std::to_string(step) + ": " + std::to_string(got) +
                ", reference " + std::to_string(want));
  }
  const std::string problem = kiln::bench::CompareParameters(kiln::bench::Parameters(model),
                                                             kiln::bench::Parameters(reference));
  Require(problem.empty(), "wrong update: " + problem);
  return 1e3 * MedianSeconds(50, [&] { kiln::bench::FrontendTrainStep<B>(model, sgd, batch); });
}

double DispatchMicroseconds() {
  const auto x = kiln::Tensor<B, 1>::from_vector(RandomValues(16, 21, -1, 1), {16}, B::Device{});
  const auto y = kiln::Tensor<B, 1>::from_vector(RandomValues(16, 22), {16}, B::Device{});
  const auto body = [&] {
    const auto a = x * y;
    const auto b = (a - y).tanh();
    const auto c = b * a + y.exp();
    return c / (y.abs() + x.abs());
  };
  body().realize();
  constexpr int kCalls = 2000;
  const double seconds = MedianSeconds(5, [&] {
    for (int i = 0; i < kCalls; ++i) body().realize();
  });
  return 1e6 * seconds / kCalls;
}

}  // namespace

int main() {
  std::string reason;
  if (!B::Device().is_available(&reason)) {
    std::fprintf(stderr, "cuda_bench: %s\n", reason.c_str());
    return 2;
  }
  Report report;
  auto device = kiln::codegen::cuda::DeviceForIndex(0);
  report.figures["device"] = (*device)->info().ToString();
  report.Measure("copy_gbps", CopyBandwidth);
  report.Measure("gelu_gbps", GeluBandwidth);
  report.Measure("matmul_bf16_tflops", [] { return MatmulTflops(8192, ir::DType::kBF16, 3); });
  report.Measure("matmul_f32_tflops", [] { return MatmulTflops(4096, ir::DType::kF32, 5); });
  report.Measure("mlp_step_ms", [] { return TrainStepMs<kiln::bench::FrontendMlp>(128); });
  report.Measure("cnn_step_ms", [] { return TrainStepMs<kiln::bench::FrontendCnn>(64); });
  report.Measure("dispatch_us", DispatchMicroseconds);
  nlohmann::json out = report.figures;
  out["errors"] = report.errors;
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
