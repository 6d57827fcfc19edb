// The CUDA matmul templates (codegen/cuda/matmul.h) run on the host through a CUDA emulation
// (emulated_cuda.h): tiling, shared-memory staging, vectorised and transposed reads, partial
// tiles and the epilogue of every template are checked against a double-precision reference on
// machines without a GPU. What the emulation cannot check, the PTX instructions themselves, is
// checked by ptxas (cuda_codegen_test) and on a GPU by the conformance suite.
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "codegen/cuda/matmul.h"
#include "gtest/gtest.h"
#include "tests/cuda/emulation/emulated_cuda.h"

namespace kiln::test::cuda_emulation {

using codegen::cuda::MatmulKernel;

struct EmulatedCase {
  const char* name;
  MatmulKernel kernel;
  int64_t batch, m, k, n, a_row, a_col, b_row, b_col;
  void (*run)(const void* a, const void* b, void* c);
};

#include "tests/cuda/emulation/matmul_cases.inc"

namespace {

// Runs one block of `launch` per grid cell, sequentially, its threads in parallel.
void RunGrid(const EmulatedCase& c, const void* a, const void* b, void* out) {
  codegen::cuda::MatmulShape shape;
  shape.kernel = c.kernel;
  shape.batch = c.batch;
  shape.m = c.m;
  shape.k = c.k;
  shape.n = c.n;
  const codegen::cuda::MatmulLaunch launch = codegen::cuda::MatmulLaunchFor(shape);
  const uint32_t threads = launch.block[0] * launch.block[1];
  for (uint32_t z = 0; z < launch.grid[2]; ++z) {
    for (uint32_t y = 0; y < launch.grid[1]; ++y) {
      for (uint32_t x = 0; x < launch.grid[0]; ++x) {
        std::barrier<> barrier(threads);
        std::vector<std::thread> block;
        for (uint32_t t = 0; t < threads; ++t) {
          block.emplace_back([&, t] {
            threadIdx = {t % launch.block[0], t / launch.block[0], 0};
            blockIdx = {x, y, z};
            block_barrier = &barrier;
            c.run(a, b, out);
          });
        }
        for (std::thread& thread : block) thread.join();
      }
    }
  }
}

class MatmulEmulationTest : public ::testing::TestWithParam<EmulatedCase> {};

TEST_P(MatmulEmulationTest, MatchesTheReference) {
  const EmulatedCase& c = GetParam();
  const bool half = c.kernel == MatmulKernel::kMmaBf16 || c.kernel == MatmulKernel::kMmaF16;
  const auto from_bits = [&](uint16_t bits) {
    return c.kernel == MatmulKernel::kMmaBf16 ? Bf16ToFloat(bits) : F16ToFloat(bits);
  };
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const size_t a_size = c.batch * c.m * c.k, b_size = c.batch * c.k * c.n;
  const size_t c_size = c.batch * c.m * c.n;
  // Operands as the kernel reads them (16-bit patterns or f32), and their values.
  std::vector<uint16_t> a16(a_size), b16(b_size), c16(c_size, 0x7e00);
  std::vector<float> a32(a_size), b32(b_size), c32(c_size, -1234.5f);
  for (size_t i = 0; i < a_size + b_size; ++i) {
    float x = uniform(rng);
    if (half) {
      const uint16_t bits = c.kernel == MatmulKernel::kMmaBf16 ? FloatToBf16(x) : FloatToF16(x);
      (i < a_size ? a16[i] : b16[i - a_size]) = bits;
      x = from_bits(bits);
    }
    (i < a_size ? a32[i] : b32[i - a_size]) = x;
  }
  if (half) {
    RunGrid(c, a16.data(), b16.data(), c16.data());
  } else {
    RunGrid(c, a32.data(), b32.data(), c32.data());
  }
  int bad = 0;
  for (int64_t z = 0; z < c.batch; ++z) {
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double want = 0, magnitude = 0;
        for (int64_t k = 0; k < c.k; ++k) {
          double x = a32[z * c.m * c.k + i * c.a_row + k * c.a_col];
          double y = b32[z * c.k * c.n + k * c.b_row + j * c.b_col];
          if (c.kernel == MatmulKernel::kMmaTf32) {
            x = BitsToFloat(FloatToTf32(static_cast<float>(x)));
            y = BitsToFloat(FloatToTf32(static_cast<float>(y)));
          }
          want += x * y;
          magnitude += std::abs(x * y);
        }
        const size_t at = z * c.m * c.n + i * c.n + j;
        const double got = half ? from_bits(c16[at]) : c32[at];
        // One rounding of the result to the output type, plus f32 accumulation error.
        const double rounding = c.kernel == MatmulKernel::kMmaBf16  ? 0x1p-8
                                : c.kernel == MatmulKernel::kMmaF16 ? 0x1p-11
                                                                    : 0x1p-24;
        const double tolerance = rounding * std::abs(want) + 0x1p-22 * magnitude + 1e-30;
        if (!(std::abs(got - want) <= tolerance) && ++bad <= 5) {
          ADD_FAILURE() << c.name << ": C[" << z << "][" << i << "][" << j << "] = " << got
                        << ", want " << want;
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << c.name;
}

INSTANTIATE_TEST_SUITE_P(Templates, MatmulEmulationTest, ::testing::ValuesIn(kEmulatedCases),
                         [](const ::testing::TestParamInfo<EmulatedCase>& info) {
                           std::string name = info.param.name;
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace kiln::test::cuda_emulation
