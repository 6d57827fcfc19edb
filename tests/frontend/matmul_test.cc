// matmul with torch semantics: vectors, matrices, batch broadcasting; checked against loops.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/frontend/test_util.h"

namespace kiln::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

template <class T>
Shape ShapeOf(const T& t) {
  const auto s = t.shape();
  return Shape(s.begin(), s.end());
}

TEST(MatMulTest, HandComputed) {
  B::Device device;
  auto a = TF<2>::from_data({{1.f, 2.f}, {3.f, 4.f}}, device);
  auto b = TF<2>::from_data({{5.f, 6.f}, {7.f, 8.f}}, device);
  EXPECT_THAT(a.matmul(b).to_vector(), ElementsAre(19, 22, 43, 50));
  auto v = TF<1>::from_data({1.f, 1.f}, device);
  EXPECT_EQ(v.matmul(v).item(), 2);                         // dot: rank 0
  EXPECT_THAT(a.matmul(v).to_vector(), ElementsAre(3, 7));  // row sums
  EXPECT_THAT(v.matmul(a).to_vector(), ElementsAre(4, 6));  // column sums
  auto i = TI<2>::from_data({{1, 2}, {3, 4}}, device);
  EXPECT_THAT(i.matmul(i).to_vector(), ElementsAre(7, 10, 15, 22));
  EXPECT_EQ(a.matmul(b.cast(ir::DType::kF64)).dtype(), ir::DType::kF64);
}

TEST(MatMulTest, ContractingMismatchThrows) {
  B::Device device;
  auto a = TF<2>::zeros({2, 3}, device);
  auto b = TF<2>::zeros({4, 5}, device);
  try {
    a.matmul(b);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("matmul: contracting dims differ (3 vs 4)"));
    EXPECT_THAT(e.what(), HasSubstr("f32[2,3], f32[4,5]"));
  }
}

// Reference batched matmul with numpy broadcasting of the batch dims (both operands rank >= 2).
std::vector<double> ReferenceMatMul(const std::vector<float>& a, const Shape& sa,
                                    const std::vector<float>& b, const Shape& sb, Shape* out) {
  const int64_t m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
  Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  const size_t rank = std::max(ba.size(), bb.size());
  while (ba.size() < rank) ba.insert(ba.begin(), 1);
  while (bb.size() < rank) bb.insert(bb.begin(), 1);
  Shape batch(rank);
  for (size_t i = 0; i < rank; ++i) batch[i] = std::max(ba[i], bb[i]);
  *out = batch;
  out->push_back(m);
  out->push_back(n);
  std::vector<double> c;
  for (int64_t t = 0; t < Count(batch); ++t) {
    const int64_t ta = BroadcastSource(t, batch, ba), tb = BroadcastSource(t, batch, bb);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += a[(ta * m + i) * k + p] * b[(tb * k + p) * n + j];
        c.push_back(static_cast<float>(s));
      }
    }
  }
  return c;
}

TEST(MatMulTest, RandomBatchedBroadcastMatchesLoops) {
  B::Device device;
  const Shape sa = {2, 1, 3, 4}, sb = {5, 4, 2};
  auto va = RandomFloats(Count(sa), 51);
  auto vb = RandomFloats(Count(sb), 52);
  auto a = TF<4>::from_vector(va, {2, 1, 3, 4}, device);
  auto b = TF<3>::from_vector(vb, {5, 4, 2}, device);
  auto c = a.matmul(b);
  static_assert(decltype(c)::kRank == 4);
  Shape out;
  auto expected = ReferenceMatMul(va, sa, vb, sb, &out);
  EXPECT_EQ(ShapeOf(c), out);
  ExpectAllClose(c.to_vector(), expected, 1e-5, 1e-5);
}

TEST(MatMulTest, RandomVectorOperandsMatchLoops) {
  B::Device device;
  auto vm = RandomFloats(2 * 3 * 4, 53);
  auto vv = RandomFloats(4, 54);
  auto m = TF<3>::from_vector(vm, {2, 3, 4}, device);
  auto v = TF<1>::from_vector(vv, {4}, device);
  auto mv = m.matmul(v);  // [2, 3]
  static_assert(decltype(mv)::kRank == 2);
  std::vector<double> expected;
  for (int64_t r = 0; r < 6; ++r) {
    double s = 0;
    for (int64_t p = 0; p < 4; ++p) s += vm[r * 4 + p] * vv[p];
    expected.push_back(static_cast<float>(s));
  }
  ExpectAllClose(mv.to_vector(), expected, 1e-5, 1e-5);

  auto vw = RandomFloats(3, 55);
  auto w = TF<1>::from_vector(vw, {3}, device);
  auto vm2 = w.matmul(m);  // [3] x [2, 3, 4] -> [2, 4]
  EXPECT_EQ(ShapeOf(vm2), (Shape{2, 4}));
  std::vector<double> expected2;
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t j = 0; j < 4; ++j) {
      double s = 0;
      for (int64_t p = 0; p < 3; ++p) s += vw[p] * vm[(b * 3 + p) * 4 + j];
      expected2.push_back(static_cast<float>(s));
    }
  }
  ExpectAllClose(vm2.to_vector(), expected2, 1e-5, 1e-5);
}

}  // namespace
}  // namespace kiln::testing
