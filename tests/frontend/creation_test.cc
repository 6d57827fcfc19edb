// Creation: fill, literal data, ranges, seeded random tensors, *_like.
#include <cmath>
#include <numeric>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/frontend/test_util.h"

namespace kiln::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(CreationTest, ZerosOnesFull) {
  B::Device device;
  auto z = TF<2>::zeros({2, 3}, device);
  EXPECT_EQ(z.shape(), (std::array<int64_t, 2>{2, 3}));
  EXPECT_EQ(z.dtype(), ir::DType::kF32);
  EXPECT_EQ(z.num_elements(), 6);
  EXPECT_THAT(z.to_vector(), ElementsAre(0, 0, 0, 0, 0, 0));
  EXPECT_THAT(TF<1>::ones({3}, device).to_vector(), ElementsAre(1, 1, 1));
  auto f = TI<2>::full({1, 2}, 7, device, ir::DType::kI32);
  EXPECT_EQ(f.dtype(), ir::DType::kI32);
  EXPECT_THAT(f.to_vector(), ElementsAre(7, 7));
  EXPECT_THAT(TB<1>::ones({2}, device).to_vector(), ElementsAre(true, true));
  auto scalar = TF<0>::full({}, 2.5, device, ir::DType::kF64);
  EXPECT_EQ(scalar.item(), 2.5);
  EXPECT_EQ(scalar.dtype(), ir::DType::kF64);
}

TEST(CreationTest, EmptyShapes) {
  B::Device device;
  auto e = TF<2>::zeros({0, 3}, device);
  EXPECT_EQ(e.num_elements(), 0);
  EXPECT_TRUE(e.to_vector().empty());
}

TEST(CreationTest, DTypeMustBelongToKind) {
  B::Device device;
  EXPECT_THROW(TF<1>::zeros({2}, device, ir::DType::kI32), Error);
  EXPECT_THROW(TI<1>::zeros({2}, device, ir::DType::kF32), Error);
}

TEST(CreationTest, FromNestedLists) {
  B::Device device;
  auto m = TF<2>::from_data({{1.f, 2.f, 3.f}, {4.f, 5.f, 6.f}}, device);
  EXPECT_EQ(m.shape(), (std::array<int64_t, 2>{2, 3}));
  EXPECT_THAT(m.to_vector(), ElementsAre(1, 2, 3, 4, 5, 6));

  auto t = TI<3>::from_data({{{1, 2}}, {{3, 4}}, {{5, 6}}}, device);
  EXPECT_EQ(t.shape(), (std::array<int64_t, 3>{3, 1, 2}));
  EXPECT_THAT(t.to_vector(), ElementsAre(1, 2, 3, 4, 5, 6));

  auto b = TB<1>::from_data({true, false}, device);
  EXPECT_THAT(b.to_vector(), ElementsAre(true, false));

  auto s = TF<0>::from_data(3.5, device);
  EXPECT_EQ(s.item(), 3.5);

  auto d = TF<1>::from_data({0.1, 0.2}, device, ir::DType::kF64);
  EXPECT_THAT(d.to_vector<double>(), ElementsAre(0.1, 0.2));
}

TEST(CreationTest, FromDataRoundsToDType) {
  B::Device device;
  auto h = TF<1>::from_data({0.1f, 1000.3f}, device, ir::DType::kF16);
  EXPECT_EQ(h.dtype(), ir::DType::kF16);
  const std::vector<double> got = h.to_vector<double>();
  EXPECT_EQ(got[0], ir::HalfToFloat(ir::FloatToHalf(0.1f)));
  EXPECT_EQ(got[1], ir::HalfToFloat(ir::FloatToHalf(1000.3f)));
}

TEST(CreationTest, RaggedListThrows) {
  B::Device device;
  try {
    TF<2>::from_data({{1.f, 2.f}, {3.f}}, device);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("ragged"));
    EXPECT_THAT(e.what(), HasSubstr("creation_test.cc"));
  }
}

TEST(CreationTest, FromVectorAndTensorData) {
  B::Device device;
  std::vector<float> values(6);
  std::iota(values.begin(), values.end(), 0.f);
  auto x = TF<2>::from_vector(values, {3, 2}, device);
  EXPECT_EQ(x.shape(), (std::array<int64_t, 2>{3, 2}));
  EXPECT_EQ(x.to_vector(), values);
  EXPECT_THROW(TF<2>::from_vector(values, {4, 2}, device), Error);

  std::vector<int64_t> ints = {5, -3};
  auto i = TI<1>::from_vector(ints, {2}, device);
  EXPECT_EQ(i.to_vector(), ints);

  ir::TensorData data = x.into_data();
  EXPECT_EQ(data.shape(), (ir::Shape{3, 2}));
  auto back = TF<2>::from_tensor_data(data, device);
  EXPECT_EQ(back.to_vector(), values);
  EXPECT_THROW(TF<1>::from_tensor_data(data, device), Error);
  EXPECT_THROW(TI<2>::from_tensor_data(data, device), Error);
}

TEST(CreationTest, ArangeInt) {
  B::Device device;
  EXPECT_THAT(TI<1>::arange(0, 5, device).to_vector(), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_THAT(TI<1>::arange_step(10, 0, -3, device).to_vector(), ElementsAre(10, 7, 4, 1));
  EXPECT_TRUE(TI<1>::arange(3, 3, device).to_vector().empty());
  EXPECT_THROW(TI<1>::arange_step(0, 3, 0, device), Error);
  EXPECT_EQ(TI<1>::arange(0, 2, device, ir::DType::kI32).dtype(), ir::DType::kI32);
}

TEST(CreationTest, ArangeFloatMatchesLoop) {
  B::Device device;
  const double start = -1.25, end = 2.0, step = 0.35;
  std::vector<double> expected;
  for (int64_t i = 0; start + static_cast<double>(i) * step < end; ++i) {
    expected.push_back(static_cast<float>(start + static_cast<double>(i) * step));
  }
  auto x = TF<1>::arange_step(start, end, step, device);
  EXPECT_EQ(x.num_elements(), static_cast<int64_t>(expected.size()));
  ExpectAllClose(x.to_vector(), expected, 0, 0);
}

TEST(CreationTest, Linspace) {
  B::Device device;
  EXPECT_THAT(TF<1>::linspace(0, 1, 5, device).to_vector(), ElementsAre(0, 0.25, 0.5, 0.75, 1));
  EXPECT_THAT(TF<1>::linspace(3, 9, 1, device).to_vector(), ElementsAre(3));
  EXPECT_TRUE(TF<1>::linspace(3, 9, 0, device).to_vector().empty());
  std::vector<double> expected;
  for (int i = 0; i < 7; ++i) expected.push_back(-2.0 + i * (5.0 - -2.0) / 6.0);
  ExpectAllClose(TF<1>::linspace(-2, 5, 7, device, ir::DType::kF64).to_vector<double>(), expected,
                 1e-15, 1e-15);
}

TEST(CreationTest, RandomIsSeededAndReproducible) {
  B::Device device;
  manual_seed(42);
  auto a = TF<2>::random_uniform({3, 4}, -1, 1, device).to_vector();
  auto b = TF<2>::random_uniform({3, 4}, -1, 1, device).to_vector();
  manual_seed(42);
  auto a2 = TF<2>::random_uniform({3, 4}, -1, 1, device).to_vector();
  EXPECT_EQ(a, a2);
  EXPECT_NE(a, b);
  manual_seed(43);
  EXPECT_NE(TF<2>::random_uniform({3, 4}, -1, 1, device).to_vector(), a);
}

TEST(CreationTest, RandomUniformRangeAndMoments) {
  B::Device device;
  manual_seed(7);
  const double low = 2, high = 5;
  auto v = TF<1>::random_uniform({20000}, low, high, device).to_vector<double>();
  double sum = 0, sq = 0;
  for (double x : v) {
    EXPECT_GE(x, low);
    EXPECT_LT(x, high);
    sum += x;
  }
  const double mean = sum / static_cast<double>(v.size());
  for (double x : v) sq += (x - mean) * (x - mean);
  const double var = sq / static_cast<double>(v.size());
  // U(2, 5): mean 3.5, variance 9/12; 20000 samples put both well within these bounds.
  EXPECT_NEAR(mean, 3.5, 0.03);
  EXPECT_NEAR(var, 0.75, 0.03);
}

TEST(CreationTest, RandomNormalMoments) {
  B::Device device;
  manual_seed(9);
  auto v = TF<2>::random_normal({100, 200}, 1.5, 2.0, device).to_vector<double>();
  double sum = 0, sq = 0;
  for (double x : v) sum += x;
  const double mean = sum / static_cast<double>(v.size());
  for (double x : v) sq += (x - mean) * (x - mean);
  EXPECT_NEAR(mean, 1.5, 0.05);
  EXPECT_NEAR(std::sqrt(sq / static_cast<double>(v.size())), 2.0, 0.05);
}

TEST(CreationTest, Likes) {
  B::Device device;
  auto x = TF<2>::from_data({{1.f, 2.f}}, device, ir::DType::kF64);
  auto z = zeros_like(x);
  EXPECT_EQ(z.dtype(), ir::DType::kF64);
  EXPECT_EQ(z.shape(), x.shape());
  EXPECT_THAT(z.to_vector(), ElementsAre(0, 0));
  EXPECT_THAT(ones_like(x).to_vector(), ElementsAre(1, 1));
  EXPECT_THAT(full_like(x, -4.0).to_vector(), ElementsAre(-4, -4));
}

TEST(CreationTest, PropertiesNeedNoRealization) {
  B::Device device;
  auto x = TF<3>::zeros({2, 3, 4}, device);
  EXPECT_EQ(x.dim(0), 2);
  EXPECT_EQ(x.dim(-1), 4);
  EXPECT_THROW(x.dim(3), Error);
  EXPECT_EQ(x.rank(), 3);
  EXPECT_EQ(x.device(), device);
}

}  // namespace
}  // namespace kiln::testing
