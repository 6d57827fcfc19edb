// Reductions: dims, keepdim, negative dims, every reduction against plain loops.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/frontend/test_util.h"

namespace kiln::testing {
namespace {

using ::testing::ElementsAre;

TEST(ReduceTest, HandComputed) {
  B::Device device;
  auto x = TF<2>::from_data({{1.f, 2.f, 3.f}, {4.f, 5.f, 6.f}}, device);
  EXPECT_EQ(x.sum().item(), 21);
  EXPECT_THAT(x.sum(0).to_vector(), ElementsAre(5, 7, 9));
  EXPECT_THAT(x.sum(1).to_vector(), ElementsAre(6, 15));
  EXPECT_THAT(x.sum(-1).to_vector(), ElementsAre(6, 15));
  auto kept = x.sum(-1, keepdim);
  EXPECT_EQ(kept.shape(), (std::array<int64_t, 2>{2, 1}));
  EXPECT_THAT(kept.to_vector(), ElementsAre(6, 15));
  EXPECT_EQ(x.sum_dims({0, 1}).item(), 21);
  EXPECT_EQ(x.sum_dims({1, 0}, keepdim).shape(), (std::array<int64_t, 2>{1, 1}));
  EXPECT_THAT(x.mean(0).to_vector(), ElementsAre(2.5, 3.5, 4.5));
  EXPECT_EQ(x.mean().item(), 3.5);
  EXPECT_THAT(x.var(1).to_vector(), ElementsAre(1, 1));                     // unbiased: /(n - 1)
  EXPECT_THAT(x.var(0, false).to_vector(), ElementsAre(2.25, 2.25, 2.25));  // biased
  EXPECT_DOUBLE_EQ(x.var().item(), 3.5);                                    // 17.5 / 5
  EXPECT_NEAR(x.var(false).item(), 17.5 / 6, 1e-6);
  EXPECT_THAT(x.prod(1).to_vector(), ElementsAre(6, 120));
  EXPECT_EQ(x.max().item(), 6);
  EXPECT_THAT(x.max(0).to_vector(), ElementsAre(4, 5, 6));
  EXPECT_THAT(x.min(1).to_vector(), ElementsAre(1, 4));
  EXPECT_EQ(x.argmax().item(), 5);
  EXPECT_THAT(x.argmax(1).to_vector(), ElementsAre(2, 2));
  EXPECT_THAT(x.argmin(0, keepdim).to_vector(), ElementsAre(0, 0, 0));
  EXPECT_EQ(x.argmin(0, keepdim).shape(), (std::array<int64_t, 2>{1, 3}));
  EXPECT_THAT((x > 3).any(1).to_vector(), ElementsAre(false, true));
  EXPECT_THAT((x > 1).all(1).to_vector(), ElementsAre(false, true));
  EXPECT_TRUE((x > 5).any().item());
  EXPECT_FALSE((x > 5).all().item());
}

TEST(ReduceTest, TiesPickTheFirstIndex) {
  B::Device device;
  auto x = TF<1>::from_data({3.f, 1.f, 3.f, 1.f}, device);
  EXPECT_EQ(x.argmax().item(), 0);
  EXPECT_EQ(x.argmin().item(), 1);
}

TEST(ReduceTest, IntegerSumsAccumulateInI64) {
  B::Device device;
  auto x = TI<1>::from_data({200, 100}, device, ir::DType::kU8);
  auto s = x.sum();
  EXPECT_EQ(s.dtype(), ir::DType::kI64);
  EXPECT_EQ(s.item(), 300);
  EXPECT_EQ(x.max().dtype(), ir::DType::kU8);
  EXPECT_EQ(TI<1>::from_data({3, -4}, device).prod().item(), -12);
}

TEST(ReduceTest, EmptyReductions) {
  B::Device device;
  auto e = TF<2>::zeros({0, 3}, device);
  EXPECT_THAT(e.sum(0).to_vector(), ElementsAre(0, 0, 0));
  EXPECT_THAT(e.prod(0).to_vector(), ElementsAre(1, 1, 1));
  EXPECT_THAT((e > 0).any(0).to_vector(), ElementsAre(false, false, false));
  EXPECT_THAT((e > 0).all(0).to_vector(), ElementsAre(true, true, true));
  EXPECT_TRUE(std::isnan(e.mean(0).to_vector()[0]));
  EXPECT_THROW(e.max(0), Error);
  EXPECT_THROW(e.argmax(), Error);
}

TEST(ReduceTest, BadDimsThrow) {
  B::Device device;
  auto x = TF<2>::zeros({2, 3}, device);
  EXPECT_THROW(x.sum(2), Error);
  EXPECT_THROW(x.sum(-3), Error);
  EXPECT_THROW(x.sum_dims({0, -2}), Error);  // the same dim twice
}

TEST(ReduceTest, ScalarInput) {
  B::Device device;
  auto s = TF<0>::from_data(4.0, device);
  EXPECT_EQ(s.sum().item(), 4);
  EXPECT_EQ(s.argmax().item(), 0);
  EXPECT_EQ(s.max().item(), 4);
}

// Independent reference: reduces `values` of `shape` over `dims` (a mask), returning one
// accumulator list per output element (in keepdim row-major order).
std::vector<std::vector<double>> Groups(const std::vector<float>& values, const Shape& shape,
                                        const std::vector<bool>& reduced) {
  Shape out_shape = shape;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (reduced[d]) out_shape[d] = 1;
  }
  std::vector<std::vector<double>> groups(static_cast<size_t>(Count(out_shape)));
  for (int64_t i = 0; i < Count(shape); ++i) {
    std::vector<int64_t> idx = Unravel(i, shape);
    for (size_t d = 0; d < shape.size(); ++d) {
      if (reduced[d]) idx[d] = 0;
    }
    groups[static_cast<size_t>(Ravel(idx, out_shape))].push_back(values[i]);
  }
  return groups;
}

std::vector<double> Map(const std::vector<std::vector<double>>& groups,
                        double (*f)(const std::vector<double>&)) {
  std::vector<double> out;
  for (const auto& g : groups) out.push_back(f(g));
  return out;
}

double Sum(const std::vector<double>& g) {
  double s = 0;
  for (double v : g) s += v;
  return s;
}
double Mean(const std::vector<double>& g) { return Sum(g) / static_cast<double>(g.size()); }
double VarUnbiased(const std::vector<double>& g) {
  const double m = Mean(g);
  double s = 0;
  for (double v : g) s += (v - m) * (v - m);
  return s / static_cast<double>(g.size() - 1);
}
double VarBiased(const std::vector<double>& g) {
  return VarUnbiased(g) * static_cast<double>(g.size() - 1) / static_cast<double>(g.size());
}
double Prod(const std::vector<double>& g) {
  double p = 1;
  for (double v : g) p *= v;
  return p;
}
double Max(const std::vector<double>& g) { return *std::max_element(g.begin(), g.end()); }
double Min(const std::vector<double>& g) { return *std::min_element(g.begin(), g.end()); }
double ArgMax(const std::vector<double>& g) {
  return static_cast<double>(std::max_element(g.begin(), g.end()) - g.begin());
}
double ArgMin(const std::vector<double>& g) {
  return static_cast<double>(std::min_element(g.begin(), g.end()) - g.begin());
}
double Any(const std::vector<double>& g) {
  return std::any_of(g.begin(), g.end(), [](double v) { return v > 0.5; });
}
double All(const std::vector<double>& g) {
  return std::all_of(g.begin(), g.end(), [](double v) { return v > 0.5; });
}

TEST(ReduceTest, RandomSingleDimsMatchLoops) {
  B::Device device;
  const Shape shape = {3, 4, 5};
  const auto values = RandomFloats(60, 31, 0.6f, 1.4f);  // products stay moderate
  auto x = TF<3>::from_vector(values, {3, 4, 5}, device);
  for (int64_t dim = -3; dim < 3; ++dim) {
    SCOPED_TRACE(dim);
    std::vector<bool> reduced(3, false);
    reduced[static_cast<size_t>(dim < 0 ? dim + 3 : dim)] = true;
    const auto groups = Groups(values, shape, reduced);
    ExpectAllClose(x.sum(dim).to_vector(), Map(groups, Sum));
    ExpectAllClose(x.mean(dim, keepdim).to_vector(), Map(groups, Mean));
    ExpectAllClose(x.var(dim).to_vector(), Map(groups, VarUnbiased), 1e-4, 1e-6);
    ExpectAllClose(x.var(dim, keepdim, false).to_vector(), Map(groups, VarBiased), 1e-4, 1e-6);
    ExpectAllClose(x.prod(dim).to_vector(), Map(groups, Prod));
    ExpectAllClose(x.max(dim).to_vector(), Map(groups, Max));
    ExpectAllClose(x.min(dim, keepdim).to_vector(), Map(groups, Min));
    ExpectAllClose(x.argmax(dim).to_vector(), Map(groups, ArgMax));
    ExpectAllClose(x.argmin(dim, keepdim).to_vector(), Map(groups, ArgMin));
    auto bools = x > 1.0;
    std::vector<float> truth;
    for (float v : values) truth.push_back(v > 1.0f ? 1.f : 0.f);
    const auto bool_groups = Groups(truth, shape, reduced);
    ExpectAllClose(bools.any(dim).to_vector<double>(), Map(bool_groups, Any));
    ExpectAllClose(bools.all(dim, keepdim).to_vector<double>(), Map(bool_groups, All));
    EXPECT_EQ(x.sum(dim).rank(), 2);
    EXPECT_EQ(x.sum(dim, keepdim).dim(dim), 1);
  }
}

TEST(ReduceTest, RandomMultiDimsMatchLoops) {
  B::Device device;
  const Shape shape = {2, 3, 4};
  const auto values = RandomFloats(24, 32);
  auto x = TF<3>::from_vector(values, {2, 3, 4}, device);
  const auto g02 = Groups(values, shape, {true, false, true});
  ExpectAllClose(x.sum_dims({0, -1}).to_vector(), Map(g02, Sum));
  ExpectAllClose(x.mean_dims({2, 0}, keepdim).to_vector(), Map(g02, Mean));
  ExpectAllClose(x.var_dims({0, 2}).to_vector(), Map(g02, VarUnbiased), 1e-4, 1e-6);
  ExpectAllClose(x.max_dims({0, 2}).to_vector(), Map(g02, Max));
  ExpectAllClose(x.min_dims({0, 2}).to_vector(), Map(g02, Min));
  ExpectAllClose(x.prod_dims({0, 2}).to_vector(), Map(g02, Prod), 1e-5, 1e-7);
  const auto all = Groups(values, shape, {true, true, true});
  EXPECT_NEAR(x.sum().item(), Sum(all[0]), 1e-5);
  EXPECT_NEAR(x.var().item(), VarUnbiased(all[0]), 1e-5);
  EXPECT_EQ(x.argmax().item(), ArgMax(all[0]));
  EXPECT_EQ(x.argmin().item(), ArgMin(all[0]));
  EXPECT_EQ(x.sum_dims({0, 2}).rank(), 1);
}

// ---- Sorting (sort, argsort, topk) --------------------------------------------------------------

TEST(SortTest, HandComputed) {
  B::Device device;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto x = TF<1>::from_data({3.f, nan, 1.f, 3.f, -2.f, 1.f}, device);
  auto [up, up_at] = x.sort();
  const std::vector<float> up_values = up.to_vector();
  EXPECT_THAT(std::vector<float>(up_values.begin(), up_values.end() - 1),
              ElementsAre(-2, 1, 1, 3, 3));
  EXPECT_TRUE(std::isnan(up_values.back()));
  EXPECT_THAT(up_at.to_vector(), ElementsAre(4, 2, 5, 0, 3, 1));  // ties in index order
  auto [down, down_at] = x.sort(0, true);
  const std::vector<float> down_values = down.to_vector();
  EXPECT_TRUE(std::isnan(down_values.front()));  // NaN is the largest: first when descending
  EXPECT_THAT(std::vector<float>(down_values.begin() + 1, down_values.end()),
              ElementsAre(3, 3, 1, 1, -2));
  EXPECT_THAT(down_at.to_vector(), ElementsAre(1, 0, 3, 2, 5, 4));  // still stable
  EXPECT_THAT(x.argsort(-1, true).to_vector(), ElementsAre(1, 0, 3, 2, 5, 4));
  EXPECT_EQ(up_at.dtype(), ir::DType::kI64);

  auto m = TI<2>::from_data({{5, 1, 4}, {0, 0, 7}}, device);
  auto [cols, col_at] = m.sort(0);
  EXPECT_THAT(cols.to_vector(), ElementsAre(0, 0, 4, 5, 1, 7));
  EXPECT_THAT(col_at.to_vector(), ElementsAre(1, 1, 0, 0, 0, 1));
  auto [top, top_at] = m.topk(2);
  EXPECT_EQ(top.shape(), (std::array<int64_t, 2>{2, 2}));
  EXPECT_THAT(top.to_vector(), ElementsAre(5, 4, 7, 0));
  EXPECT_THAT(top_at.to_vector(), ElementsAre(0, 2, 2, 0));
  auto [low, low_at] = m.topk(1, 1, /*largest=*/false);
  EXPECT_THAT(low.to_vector(), ElementsAre(1, 0));
  EXPECT_THAT(low_at.to_vector(), ElementsAre(1, 0));
  EXPECT_THROW(m.topk(4, 1), Error);
  EXPECT_THROW(m.sort(2), Error);
}

// Against std::stable_sort of each fibre, both directions, with ties; topk is a prefix.
TEST(SortTest, RandomMatchesStableSort) {
  B::Device device;
  const Shape shape = {3, 5, 4};
  std::vector<float> values = RandomFloats(60, 77);
  for (float& v : values) v = std::round(v * 2) / 2;  // few levels: ties
  auto x = TF<3>::from_vector(values, {3, 5, 4}, device);
  for (int64_t dim = 0; dim < 3; ++dim) {
    for (bool descending : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "dim " << dim << (descending ? " descending" : ""));
      std::vector<float> want(values.size());
      std::vector<int64_t> want_at(values.size());
      const int64_t n = shape[static_cast<size_t>(dim)];
      for (int64_t f = 0; f < Count(shape); ++f) {
        std::vector<int64_t> at = Unravel(f, shape);
        if (at[static_cast<size_t>(dim)] != 0) continue;  // one visit per fibre
        std::vector<int64_t> order(static_cast<size_t>(n));
        for (int64_t k = 0; k < n; ++k) order[static_cast<size_t>(k)] = k;
        const auto value = [&](int64_t k) {
          at[static_cast<size_t>(dim)] = k;
          return values[static_cast<size_t>(Ravel(at, shape))];
        };
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
          return descending ? value(a) > value(b) : value(a) < value(b);
        });
        for (int64_t k = 0; k < n; ++k) {
          const float v = value(order[static_cast<size_t>(k)]);
          at[static_cast<size_t>(dim)] = k;
          want[static_cast<size_t>(Ravel(at, shape))] = v;
          want_at[static_cast<size_t>(Ravel(at, shape))] = order[static_cast<size_t>(k)];
        }
      }
      auto [sorted, sorted_at] = x.sort(dim, descending);
      EXPECT_EQ(sorted.to_vector(), want);
      EXPECT_EQ(sorted_at.to_vector(), want_at);
      auto [top, top_at] = x.topk(2, dim, descending);
      const std::vector<int64_t> top_at_values = top_at.to_vector();
      const std::array<int64_t, 3> top_dims = top.shape();
      const Shape top_shape(top_dims.begin(), top_dims.end());
      for (int64_t i = 0; i < static_cast<int64_t>(top_at_values.size()); ++i) {
        std::vector<int64_t> at = Unravel(i, top_shape);
        EXPECT_EQ(top_at_values[static_cast<size_t>(i)],
                  want_at[static_cast<size_t>(Ravel(at, shape))]);
      }
    }
  }
}

// The values' gradient goes back to where each value came from: d/dx sum(w * sort(x)) is w
// permuted by the sort's indices.
TEST(SortTest, GradientScattersToTheIndices) {
  B::Device device;
  auto x = TF<2>::from_data({{0.5, -1.0, 2.0}, {3.0, 1.5, -0.5}}, device, ir::DType::kF64)
               .require_grad();
  auto w = TF<2>::from_data({{1.0, 10.0, 100.0}, {2.0, 20.0, 200.0}}, device, ir::DType::kF64);
  auto [values, indices] = x.sort(1, true);
  Gradients grads = (values * w).sum().backward();
  auto g = x.grad(grads);
  ASSERT_TRUE(g.has_value());
  // Row 0 descending: 2.0 (at 2), 0.5 (at 0), -1.0 (at 1); row 1: 3.0, 1.5, -0.5 in place.
  EXPECT_THAT(g->to_vector<double>(), ElementsAre(10, 100, 1, 2, 20, 200));
}

}  // namespace
}  // namespace kiln::testing
