#include "ir/random.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

namespace kiln::ir {
namespace {

// Random123's kat_vectors, the "philox4x32 10" lines: counter[4] key[2] -> output[4].
struct KnownAnswer {
  PhiloxCounter counter;
  PhiloxKey key;
  PhiloxCounter expected;
};
constexpr KnownAnswer kKnownAnswers[] = {
    {{0x00000000, 0x00000000, 0x00000000, 0x00000000},
     {0x00000000, 0x00000000},
     {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

// The block function is constexpr, so a backend's compile-time use is checked too.
static_assert(Philox4x32_10({0, 0, 0, 0}, {0, 0})[0] == 0x6627e8d5u);

TEST(Philox, MatchesRandom123KnownAnswers) {
  for (const KnownAnswer& answer : kKnownAnswers) {
    EXPECT_EQ(Philox4x32_10(answer.counter, answer.key), answer.expected)
        << std::hex << "counter " << answer.counter[0] << " key " << answer.key[0];
  }
}

TEST(Philox, BlockLayoutSplitsSeedIntoKeyAndIndexIntoCounter) {
  // Seed 0, index 0 is the all-zero known answer.
  EXPECT_EQ(RandomBlock(0, 0), kKnownAnswers[0].expected);
  // key = {low word, high word} of the seed; counter = {low word, high word, 0, 0} of the index.
  const uint64_t seed = 0x299f31d0a4093822u;
  const uint64_t index = 0x0000000500000007u;
  EXPECT_EQ(RandomBlock(seed, index), Philox4x32_10({7, 5, 0, 0}, {0xa4093822, 0x299f31d0}));
  // Both words of the seed and of the index matter.
  EXPECT_NE(RandomBlock(1, 0), RandomBlock(uint64_t{1} << 32 | 1, 0));
  EXPECT_NE(RandomBlock(1, 3), RandomBlock(1, uint64_t{1} << 32 | 3));
}

TEST(Uniform, IsTheTopBitsOfTheFirstWord) {
  for (uint64_t index = 0; index < 100; ++index) {
    const PhiloxCounter block = RandomBlock(42, index);
    EXPECT_EQ(UniformFloat(42, index), std::ldexp(static_cast<float>(block[0] >> 8), -24));
    EXPECT_EQ(Uniform(42, index, DType::kF32), UniformFloat(42, index));
    EXPECT_EQ(Uniform(42, index, DType::kF16), std::ldexp(block[0] >> 21, -11));
    EXPECT_EQ(Uniform(42, index, DType::kBF16), std::ldexp(block[0] >> 24, -8));
    const double wide = std::ldexp(static_cast<double>(block[0] >> 11), -21) +
                        std::ldexp(static_cast<double>(block[1]), -53);
    EXPECT_EQ(UniformDouble(42, index), wide);
    EXPECT_EQ(Uniform(42, index, DType::kF64), wide);
  }
}

TEST(Uniform, IsInUnitIntervalAndExactInEveryFloatDType) {
  for (DType dtype : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16}) {
    bool below_half_ulp_of_f32 = false;
    for (uint64_t index = 0; index < 20000; ++index) {
      const double u = Uniform(7, index, dtype);
      ASSERT_GE(u, 0.0) << DTypeName(dtype);
      ASSERT_LT(u, 1.0) << DTypeName(dtype);
      ASSERT_EQ(RoundToDType(u, dtype), u) << DTypeName(dtype) << " index " << index;
      // f64 uniforms carry bits beyond f32's 24.
      if (static_cast<float>(u) != u) below_half_ulp_of_f32 = true;
    }
    EXPECT_EQ(below_half_ulp_of_f32, dtype == DType::kF64) << DTypeName(dtype);
  }
}

TEST(Normal, IsBoxMullerOnTheBlocksUniforms) {
  for (uint64_t index = 0; index < 100; ++index) {
    const PhiloxCounter b = RandomBlock(9, index);
    const double u1 = 1.0 - (b[0] >> 8) / 16777216.0;
    const double u2 = (b[1] >> 8) / 16777216.0;
    EXPECT_EQ(Normal(9, index),
              std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2));
    const double v1 = 1.0 - ((uint64_t{b[0] >> 11} << 32) + b[1]) / 9007199254740992.0;
    const double v2 = ((uint64_t{b[2] >> 11} << 32) + b[3]) / 9007199254740992.0;
    EXPECT_EQ(Normal(9, index, /*wide=*/true),
              std::sqrt(-2.0 * std::log(v1)) * std::cos(2 * std::numbers::pi * v2));
  }
}

// Sample mean and (population) variance.
std::pair<double, double> Moments(const std::vector<double>& samples) {
  double mean = 0;
  for (double x : samples) mean += x;
  mean /= static_cast<double>(samples.size());
  double variance = 0;
  for (double x : samples) variance += (x - mean) * (x - mean);
  return {mean, variance / static_cast<double>(samples.size())};
}

// Tolerances are 5 standard errors (CLT): a correct generator fails with probability ~6e-7 per
// check, and the seeds are fixed, so the test is deterministic.
constexpr int kSamples = 100000;
constexpr double kSigmas = 5.0;

TEST(Uniform, HasUniformMomentsAndBuckets) {
  for (DType dtype : {DType::kF32, DType::kF64}) {
    std::vector<double> samples(kSamples);
    std::vector<int> buckets(10, 0);
    for (int i = 0; i < kSamples; ++i) {
      samples[i] = Uniform(12345, static_cast<uint64_t>(i), dtype);
      ++buckets[static_cast<int>(samples[i] * 10)];
    }
    const auto [mean, variance] = Moments(samples);
    // Var(U) = 1/12; Var((U - 1/2)^2) = E(U - 1/2)^4 - (1/12)^2 = 1/80 - 1/144 = 1/180.
    EXPECT_NEAR(mean, 0.5, kSigmas * std::sqrt(1.0 / 12 / kSamples));
    EXPECT_NEAR(variance, 1.0 / 12, kSigmas * std::sqrt(1.0 / 180 / kSamples));
    for (int count : buckets) {
      EXPECT_NEAR(count, kSamples / 10, kSigmas * std::sqrt(kSamples * 0.1 * 0.9));
    }
    // Neighbouring elements are uncorrelated: E[U_i U_{i+1}] = 1/4, Var(U_i U_{i+1}) = 1/9 - 1/16.
    double product = 0;
    for (int i = 0; i + 1 < kSamples; ++i) product += samples[i] * samples[i + 1];
    EXPECT_NEAR(product / (kSamples - 1), 0.25,
                kSigmas * std::sqrt((1.0 / 9 - 1.0 / 16) / kSamples));
  }
}

TEST(Normal, HasStandardNormalMoments) {
  for (bool wide : {false, true}) {
    std::vector<double> samples(kSamples);
    int within_one_sigma = 0;
    for (int i = 0; i < kSamples; ++i) {
      samples[i] = Normal(777, static_cast<uint64_t>(i), wide);
      if (std::fabs(samples[i]) < 1) ++within_one_sigma;
      ASSERT_TRUE(std::isfinite(samples[i]));
    }
    const auto [mean, variance] = Moments(samples);
    // Var(Z) = 1; Var(Z^2) = E Z^4 - 1 = 2.
    EXPECT_NEAR(mean, 0.0, kSigmas * std::sqrt(1.0 / kSamples));
    EXPECT_NEAR(variance, 1.0, kSigmas * std::sqrt(2.0 / kSamples));
    const double p = std::erf(1 / std::numbers::sqrt2);  // P(|Z| < 1) = 0.6827
    EXPECT_NEAR(within_one_sigma / static_cast<double>(kSamples), p,
                kSigmas * std::sqrt(p * (1 - p) / kSamples));
  }
}

TEST(Random, SameSeedReproducesDifferentSeedsDiffer) {
  int equal_to_other_seed = 0;
  for (uint64_t index = 0; index < 1000; ++index) {
    EXPECT_EQ(UniformFloat(5, index), UniformFloat(5, index));
    EXPECT_EQ(Normal(5, index), Normal(5, index));
    if (UniformFloat(5, index) == UniformFloat(6, index)) ++equal_to_other_seed;
  }
  // Two independent 24-bit uniforms collide with probability 2^-24 each.
  EXPECT_LE(equal_to_other_seed, 1);
}

}  // namespace
}  // namespace kiln::ir
