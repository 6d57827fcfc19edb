// The counter-based random numbers of random_uniform and random_normal.
//
// Every backend must reproduce these bit-exactly, so the whole definition lives here and is kept
// small: Philox4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel Random Numbers: As Easy as 1, 2,
// 3", SC11 — the Random123 generator) with
//
//   key     = { low 32 bits of the node's seed, high 32 bits of the seed }
//   counter = { low 32 bits of the element's row-major index, high 32 bits of it, 0, 0 }
//
// Element i of a random tensor is a function of (seed, i) alone: no state, no ordering between
// threads, and any slice of a tensor can be generated on its own.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>

#include "ir/dtype.h"

namespace kiln::ir {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

/// The Philox4x32-10 block function: ten rounds of the Random123 reference, key bumped by the
/// Weyl constants before every round after the first.
constexpr PhiloxCounter Philox4x32_10(PhiloxCounter counter, PhiloxKey key) {
  constexpr uint64_t kMultiplier0 = 0xD2511F53u;
  constexpr uint64_t kMultiplier1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u;
  constexpr uint32_t kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    const uint64_t product0 = kMultiplier0 * counter[0];
    const uint64_t product1 = kMultiplier1 * counter[2];
    counter = {static_cast<uint32_t>(product1 >> 32) ^ counter[1] ^ key[0],
               static_cast<uint32_t>(product1),
               static_cast<uint32_t>(product0 >> 32) ^ counter[3] ^ key[1],
               static_cast<uint32_t>(product0)};
  }
  return counter;
}

/// The block of element `index` of a random tensor with this seed.
constexpr PhiloxCounter RandomBlock(uint64_t seed, uint64_t index) {
  return Philox4x32_10({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0u, 0u},
                       {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}

/// The top `bits` (1..32) of a word as a multiple of 2^-bits in [0, 1).
constexpr double WordToUnit(uint32_t word, int bits) {
  return static_cast<double>(word >> (32 - bits)) / static_cast<double>(uint64_t{1} << bits);
}

/// Two words as a multiple of 2^-53 in [0, 1): the top 21 bits of `high` then all of `low`.
constexpr double WordsToUnit53(uint32_t high, uint32_t low) {
  return static_cast<double>((static_cast<uint64_t>(high >> 11) << 32) | low) * 0x1p-53;
}

/// Uniform in [0, 1) with 24 bits: (word0 >> 8) * 2^-24. Exact in f32.
constexpr float UniformFloat(uint64_t seed, uint64_t index) {
  return static_cast<float>(WordToUnit(RandomBlock(seed, index)[0], 24));
}

/// Uniform in [0, 1) with 53 bits from words 0 (high 21 bits) and 1 (all 32). Exact in f64.
constexpr double UniformDouble(uint64_t seed, uint64_t index) {
  const PhiloxCounter block = RandomBlock(seed, index);
  return WordsToUnit53(block[0], block[1]);
}

/// Significand bits a uniform of `dtype` uses: as many as the type holds (f64 53, f32 24, f16 11,
/// bf16 8), so every value is exactly representable and none rounds up to 1.
constexpr int UniformBits(DType dtype) {
  switch (dtype) {
    case DType::kF64:
      return 53;
    case DType::kF16:
      return 11;
    case DType::kBF16:
      return 8;
    default:
      return 24;
  }
}

/// Element `index` of random_uniform of a float `dtype`: (word0 >> (32 - b)) * 2^-b with
/// b = UniformBits(dtype) (UniformFloat for f32), or UniformDouble for f64. Exact in `dtype`.
constexpr double Uniform(uint64_t seed, uint64_t index, DType dtype) {
  if (dtype == DType::kF64) return UniformDouble(seed, index);
  return WordToUnit(RandomBlock(seed, index)[0], UniformBits(dtype));
}

/// Element `index` of random_normal, before rounding to the dtype: Box–Muller on two uniforms
/// of the same block, evaluated in double,
///
///   u1 = 1 - U1,  u2 = U2,  z = sqrt(-2 * log(u1)) * cos(2 * pi * u2),
///
/// where for `wide` == false (f32 and narrower) U1 = (word0 >> 8) * 2^-24 and
/// U2 = (word1 >> 8) * 2^-24, and for `wide` == true (f64) U1 = WordsToUnit53(word0, word1) and
/// U2 = WordsToUnit53(word2, word3). Using 1 - U1 keeps u1 in (0, 1], so log never sees 0 and
/// |z| <= sqrt(-2 log 2^-53) < 8.6. Backends round z to the dtype exactly like the reference
/// interpreter (TensorData::SetDouble); their log and cos must be accurate to double precision.
inline double Normal(uint64_t seed, uint64_t index, bool wide = false) {
  const PhiloxCounter block = RandomBlock(seed, index);
  const double u1 = 1.0 - (wide ? WordsToUnit53(block[0], block[1]) : WordToUnit(block[0], 24));
  const double u2 = wide ? WordsToUnit53(block[2], block[3]) : WordToUnit(block[1], 24);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace kiln::ir
