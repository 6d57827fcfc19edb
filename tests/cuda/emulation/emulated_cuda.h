// The subset of CUDA C that the tensor-core matmul template (codegen/cuda/matmul.h) uses,
// emulated on the host so that the kernel's tiling, staging, bounds and epilogue are checked on
// machines without a GPU: one std::thread per CUDA thread, a block barrier for __syncthreads,
// and the warp-wide mma.sync done through a per-warp exchange, with the fragment layouts of the
// PTX ISA (as CUTLASS's MMA_Traits for SM80_16x8x16_F32BF16BF16F32_TN, ..._F16F16..., and
// SM80_16x8x8_F32TF32TF32F32_TN spell them). Included before a generated kernel whose inline-asm
// functions (mma, to_out, tf32) write_matmul_cases.cc replaced with the Emulated* calls below.
#pragma once

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace kiln::test::cuda_emulation {

struct Dim3 {
  uint32_t x = 0, y = 0, z = 0;
};
inline thread_local Dim3 threadIdx, blockIdx;  // NOLINT: CUDA's names
inline thread_local std::barrier<>* block_barrier = nullptr;
inline void __syncthreads() { block_barrier->arrive_and_wait(); }  // NOLINT

enum class MmaKind { kBf16, kF16, kTf32 };

inline float Bf16ToFloat(uint16_t h) {
  const uint32_t u = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float F16ToFloat(uint16_t h) {
  _Float16 x;
  std::memcpy(&x, &h, 2);
  return static_cast<float>(x);
}
inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// cvt.rn.bf16.f32: round to nearest even, NaN stays NaN.
inline uint16_t FloatToBf16(float x) {
  if (std::isnan(x)) return 0x7fc0;
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline uint16_t FloatToF16(float x) {
  const _Float16 h = static_cast<_Float16>(x);
  uint16_t r;
  std::memcpy(&r, &h, 2);
  return r;
}
// cvt.rna.tf32.f32: round to nearest, ties away from zero, keeping 10 mantissa bits (finite x).
inline uint32_t FloatToTf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return (u + 0x1000u) & 0xffffe000u;
}

// What each lane hands to the warp's mma.
struct LaneFragments {
  uint32_t a[4];
  uint32_t b[2];
  float c[4];
};
inline LaneFragments lane_fragments[8][32];  // 8 warps of a 256-thread block

// D = A B + C for the warp of the calling thread: every lane of the block calls it the same
// number of times (the kernel's control flow around mma is uniform), so a block barrier works
// as the warp's rendezvous.
template <MmaKind kind>
inline void EmulatedMma(float* d, const uint32_t* a, const uint32_t* b) {
  const uint32_t lane = threadIdx.x & 31u, warp = threadIdx.x >> 5u;
  LaneFragments& mine = lane_fragments[warp][lane];
  std::memcpy(mine.a, a, sizeof(mine.a));
  std::memcpy(mine.b, b, sizeof(mine.b));
  std::memcpy(mine.c, d, sizeof(mine.c));
  __syncthreads();
  constexpr int kK = kind == MmaKind::kTf32 ? 8 : 16;
  float ma[16][16], mb[16][8];  // A[m][k], B[k][n]
  const auto half = [](uint32_t reg, int high) {
    const uint16_t bits = static_cast<uint16_t>(high ? reg >> 16 : reg & 0xffffu);
    return kind == MmaKind::kBf16 ? Bf16ToFloat(bits) : F16ToFloat(bits);
  };
  for (int l = 0; l < 32; ++l) {
    const int g = l >> 2, t = l & 3;
    const LaneFragments& f = lane_fragments[warp][l];
    if constexpr (kind == MmaKind::kTf32) {
      // A: ((4,8),(2,2)):((16,1),(8,64)) over M x K; B: ((4,8),2):((8,1),32) over N x K.
      ma[g][t] = BitsToFloat(f.a[0]);
      ma[g + 8][t] = BitsToFloat(f.a[1]);
      ma[g][t + 4] = BitsToFloat(f.a[2]);
      ma[g + 8][t + 4] = BitsToFloat(f.a[3]);
      mb[t][g] = BitsToFloat(f.b[0]);
      mb[t + 4][g] = BitsToFloat(f.b[1]);
    } else {
      // A: ((4,8),(2,2,2)):((32,1),(16,8,128)) over M x K; B: ((4,8),(2,2)):((16,1),(8,64)).
      for (int v = 0; v < 8; ++v) {
        ma[g + ((v >> 1) & 1) * 8][2 * t + (v & 1) + (v >> 2) * 8] = half(f.a[v >> 1], v & 1);
      }
      for (int v = 0; v < 4; ++v) mb[2 * t + (v & 1) + (v >> 1) * 8][g] = half(f.b[v >> 1], v & 1);
    }
  }
  // C and D: ((4,8),(2,2)):((32,1),(16,8)) over M x N.
  const int g = static_cast<int>(lane >> 2), t = static_cast<int>(lane & 3);
  for (int e = 0; e < 4; ++e) {
    const int m = g + (e >> 1) * 8, n = 2 * t + (e & 1);
    float acc = mine.c[e];
    for (int k = 0; k < kK; ++k) acc += ma[m][k] * mb[k][n];
    d[e] = acc;
  }
  __syncthreads();
}

}  // namespace kiln::test::cuda_emulation

#define __global__
#define __device__
#define __shared__ static
#define __restrict__
#define __launch_bounds__(threads)
#define __align__(n) __attribute__((aligned(n)))
