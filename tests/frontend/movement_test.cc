// Movement ops: reshape, transpose/permute, (un)squeeze, expand, slice/narrow, cat/stack,
// split/chunk, pad, flip, gather, index_select, repeat.
#include <numeric>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/frontend/test_util.h"

namespace kiln::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

template <class T>
std::vector<int64_t> ShapeOf(const T& t) {
  const auto s = t.shape();
  return std::vector<int64_t>(s.begin(), s.end());
}

TF<2> Iota23(const Device& device) {
  return TF<2>::from_data({{0.f, 1.f, 2.f}, {3.f, 4.f, 5.f}}, device);
}

TEST(ReshapeTest, InferredDimAndErrors) {
  B::Device device;
  auto x = Iota23(device);
  auto r = x.reshape<3>({3, -1, 1});
  EXPECT_THAT(ShapeOf(r), ElementsAre(3, 2, 1));
  EXPECT_THAT(r.to_vector(), ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_THAT(ShapeOf(x.flatten()), ElementsAre(6));
  EXPECT_EQ(x.sum().reshape<1>({1}).to_vector()[0], 15);
  EXPECT_THROW(x.reshape<2>({4, -1}), Error);
  EXPECT_THROW(x.reshape<2>({-1, -1}), Error);
  EXPECT_THROW(x.reshape<1>({5}), Error);
  EXPECT_THAT(ShapeOf(x.reshape<2>(std::array<int64_t, 2>{1, 6})), ElementsAre(1, 6));
}

TEST(PermuteTest, TransposeSwapPermute) {
  B::Device device;
  auto x = Iota23(device);
  EXPECT_THAT(x.transpose().to_vector(), ElementsAre(0, 3, 1, 4, 2, 5));
  EXPECT_THAT(x.swap_dims(0, -1).to_vector(), ElementsAre(0, 3, 1, 4, 2, 5));
  EXPECT_THAT(x.permute({1, 0}).to_vector(), ElementsAre(0, 3, 1, 4, 2, 5));
  EXPECT_THROW(x.permute({0, 0}), Error);
}

TEST(PermuteTest, RandomPermuteMatchesLoops) {
  B::Device device;
  const Shape shape = {2, 3, 4};
  auto values = RandomFloats(24, 41);
  auto x = TF<3>::from_vector(values, {2, 3, 4}, device);
  const std::vector<int64_t> perm = {2, 0, 1};
  auto y = x.permute({2, 0, -2});
  const Shape out = {4, 2, 3};
  EXPECT_EQ(ShapeOf(y), out);
  std::vector<float> expected(24);
  for (int64_t i = 0; i < 24; ++i) {
    auto oi = Unravel(i, out);
    std::vector<int64_t> ii(3);
    for (int d = 0; d < 3; ++d) ii[perm[d]] = oi[d];
    expected[i] = values[Ravel(ii, shape)];
  }
  EXPECT_EQ(y.to_vector(), expected);
  // transpose of a batch swaps the last two dims only.
  auto t = x.transpose().to_vector();
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(t[b * 12 + j * 3 + i], values[b * 12 + i * 4 + j]);
    }
  }
}

TEST(SqueezeTest, UnsqueezeSqueeze) {
  B::Device device;
  auto x = Iota23(device);
  EXPECT_THAT(ShapeOf(x.unsqueeze<0>()), ElementsAre(1, 2, 3));
  EXPECT_THAT(ShapeOf(x.unsqueeze<-1>()), ElementsAre(2, 3, 1));
  EXPECT_THAT(ShapeOf(x.unsqueeze<1>()), ElementsAre(2, 1, 3));
  EXPECT_THAT(ShapeOf(x.unsqueeze_dim(-2)), ElementsAre(2, 1, 3));
  auto y = x.unsqueeze<1>();
  EXPECT_THAT(ShapeOf(y.squeeze<1>()), ElementsAre(2, 3));
  EXPECT_THAT(ShapeOf(y.squeeze_dim(-2)), ElementsAre(2, 3));
  EXPECT_THAT(y.squeeze<1>().to_vector(), ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_THROW(x.squeeze<0>(), Error);  // size 2
  EXPECT_THROW(x.unsqueeze_dim(4), Error);
}

TEST(ExpandTest, TorchSemantics) {
  B::Device device;
  auto c = TF<2>::from_data({{1.f}, {2.f}}, device);
  EXPECT_THAT(c.expand({2, 3}).to_vector(), ElementsAre(1, 1, 1, 2, 2, 2));
  EXPECT_THAT(c.expand({-1, 2}).to_vector(), ElementsAre(1, 1, 2, 2));
  auto e = c.expand<3>({2, 2, 2});
  EXPECT_THAT(ShapeOf(e), ElementsAre(2, 2, 2));
  EXPECT_THAT(e.to_vector(), ElementsAre(1, 1, 2, 2, 1, 1, 2, 2));
  EXPECT_THROW(c.expand({3, 3}), Error);
  EXPECT_THROW(c.expand<3>({-1, 2, 2}), Error);
}

TEST(SliceTest, PythonSemantics) {
  B::Device device;
  auto v = TI<1>::arange(0, 10, device);
  EXPECT_THAT(v.slice(0, 2, 5).to_vector(), ElementsAre(2, 3, 4));
  EXPECT_THAT(v.slice(0, 1, kEnd, 3).to_vector(), ElementsAre(1, 4, 7));
  EXPECT_THAT(v.slice(0, -3).to_vector(), ElementsAre(7, 8, 9));
  EXPECT_THAT(v.slice(0, -100, 2).to_vector(), ElementsAre(0, 1));
  EXPECT_THAT(v.slice(0, 8, 100).to_vector(), ElementsAre(8, 9));
  EXPECT_TRUE(v.slice(0, 5, 2).to_vector().empty());
  EXPECT_THROW(v.slice(0, 0, 5, 0), Error);
  auto x = Iota23(device);
  EXPECT_THAT(x.slice({{0, 2}, {1, kEnd, 1}}).to_vector(), ElementsAre(1, 2, 4, 5));
  EXPECT_THAT(x.slice({{-1}, {}}).to_vector(), ElementsAre(3, 4, 5));
  EXPECT_THAT(x.slice({{}, {0, kEnd, 2}}).to_vector(), ElementsAre(0, 2, 3, 5));
}

TEST(SliceTest, RandomSliceMatchesLoops) {
  B::Device device;
  const Shape shape = {5, 6};
  auto values = RandomFloats(30, 42);
  auto x = TF<2>::from_vector(values, {5, 6}, device);
  auto y = x.slice({{1, -1, 2}, {-5, 6, 3}});  // rows 1, 3; columns 1, 4
  std::vector<float> expected;
  for (int64_t i : {1, 3}) {
    for (int64_t j : {1, 4}) expected.push_back(values[Ravel({i, j}, shape)]);
  }
  EXPECT_EQ(y.to_vector(), expected);
}

TEST(SliceTest, Narrow) {
  B::Device device;
  auto x = Iota23(device);
  EXPECT_THAT(x.narrow(1, 1, 2).to_vector(), ElementsAre(1, 2, 4, 5));
  EXPECT_THAT(x.narrow(-1, -1, 1).to_vector(), ElementsAre(2, 5));
  EXPECT_THROW(x.narrow(1, 2, 2), Error);
}

TEST(CatTest, CatAndStack) {
  B::Device device;
  auto a = Iota23(device);
  auto b = a + 10;
  auto c0 = cat(std::vector{a, b}, 0);
  EXPECT_THAT(ShapeOf(c0), ElementsAre(4, 3));
  EXPECT_THAT(c0.to_vector(), ElementsAre(0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15));
  auto c1 = cat(std::vector{a, b.slice(1, 0, 1)}, -1);
  EXPECT_THAT(ShapeOf(c1), ElementsAre(2, 4));
  EXPECT_THAT(c1.to_vector(), ElementsAre(0, 1, 2, 10, 3, 4, 5, 13));
  EXPECT_THROW(cat(std::vector{a, b.slice(1, 0, 1)}, 0), Error);
  EXPECT_EQ(cat(std::vector{a, a.cast(ir::DType::kF64)}, 0).dtype(), ir::DType::kF64);

  auto s0 = stack(std::vector{a, b}, 0);
  EXPECT_THAT(ShapeOf(s0), ElementsAre(2, 2, 3));
  EXPECT_THAT(s0.to_vector(), ElementsAre(0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15));
  auto s2 = stack(std::vector{a, b}, -1);
  EXPECT_THAT(ShapeOf(s2), ElementsAre(2, 3, 2));
  EXPECT_THAT(s2.to_vector(), ElementsAre(0, 10, 1, 11, 2, 12, 3, 13, 4, 14, 5, 15));
  EXPECT_THROW(stack(std::vector{a, a.transpose()}, 0), Error);
}

TEST(SplitTest, SplitAndChunk) {
  B::Device device;
  auto v = TI<1>::arange(0, 7, device);
  auto parts = v.split(3, 0);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_THAT(parts[0].to_vector(), ElementsAre(0, 1, 2));
  EXPECT_THAT(parts[2].to_vector(), ElementsAre(6));
  auto chunks = v.chunk(2, 0);  // ceil(7 / 2) = 4
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_THAT(chunks[0].to_vector(), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(chunks[1].to_vector(), ElementsAre(4, 5, 6));
  auto columns = Iota23(device).chunk(3, -1);
  ASSERT_EQ(columns.size(), 3u);
  EXPECT_THAT(columns[1].to_vector(), ElementsAre(1, 4));
  EXPECT_THROW(v.split(0, 0), Error);
}

TEST(PadTest, PadAndFlip) {
  B::Device device;
  auto x = TF<2>::from_data({{1.f, 2.f}}, device);
  auto p = x.pad({{1, 0}, {0, 2}}, -1);
  EXPECT_THAT(ShapeOf(p), ElementsAre(2, 4));
  EXPECT_THAT(p.to_vector(), ElementsAre(-1, -1, -1, -1, 1, 2, -1, -1));
  EXPECT_THROW(x.pad({{-1, 0}, {0, 0}}), Error);
  auto y = Iota23(device);
  EXPECT_THAT(y.flip({1}).to_vector(), ElementsAre(2, 1, 0, 5, 4, 3));
  EXPECT_THAT(y.flip({0, -1}).to_vector(), ElementsAre(5, 4, 3, 2, 1, 0));
}

TEST(GatherTest, RandomGatherMatchesLoops) {
  B::Device device;
  const Shape shape = {4, 5};
  auto values = RandomFloats(20, 43);
  auto x = TF<2>::from_vector(values, {4, 5}, device);
  auto rows = RandomInts(3 * 5, 44, 0, 3);
  auto index0 = TI<2>::from_vector(rows, {3, 5}, device);
  auto g0 = x.gather(0, index0).to_vector();
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 5; ++j) EXPECT_EQ(g0[i * 5 + j], values[rows[i * 5 + j] * 5 + j]);
  }
  auto cols = RandomInts(4 * 2, 45, 0, 4);
  auto index1 = TI<2>::from_vector(cols, {4, 2}, device, ir::DType::kI32);
  auto g1 = x.gather(-1, index1).to_vector();
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 2; ++j) EXPECT_EQ(g1[i * 2 + j], values[i * 5 + cols[i * 2 + j]]);
  }
}

TEST(GatherTest, OutOfRangeIndexFailsAtRealization) {
  B::Device device;
  auto x = Iota23(device);
  auto bad = x.gather(1, TI<2>::from_data({{0}, {3}}, device));
  EXPECT_THROW(bad.to_vector(), Error);
}

TEST(GatherTest, RandomIndexSelectMatchesLoops) {
  B::Device device;
  auto values = RandomFloats(24, 46);
  auto x = TF<3>::from_vector(values, {2, 3, 4}, device);
  const std::vector<int64_t> picks = {3, 0, 3, 1, 2};
  auto index = TI<1>::from_vector(picks, {5}, device);
  auto y = x.index_select(2, index);
  EXPECT_THAT(ShapeOf(y), ElementsAre(2, 3, 5));
  auto got = y.to_vector();
  for (int64_t a = 0; a < 2; ++a) {
    for (int64_t b = 0; b < 3; ++b) {
      for (int64_t k = 0; k < 5; ++k) {
        EXPECT_EQ(got[(a * 3 + b) * 5 + k], values[(a * 3 + b) * 4 + picks[k]]);
      }
    }
  }
  auto rows = x.index_select(0, TI<1>::from_data({1, 1}, device));
  EXPECT_THAT(ShapeOf(rows), ElementsAre(2, 3, 4));
  EXPECT_EQ(rows.slice(0, 0, 1).to_vector(), std::vector<float>(values.begin() + 12, values.end()));
}

TEST(RepeatTest, TilesLikeTorch) {
  B::Device device;
  auto x = TF<2>::from_data({{1.f, 2.f}}, device);
  auto r = x.repeat({2, 3});
  EXPECT_THAT(ShapeOf(r), ElementsAre(2, 6));
  EXPECT_THAT(r.to_vector(), ElementsAre(1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2));
  auto values = RandomFloats(6, 47);
  auto y = TF<2>::from_vector(values, {2, 3}, device).repeat({3, 2});
  auto got = y.to_vector();
  for (int64_t i = 0; i < 6; ++i) {
    for (int64_t j = 0; j < 6; ++j) EXPECT_EQ(got[i * 6 + j], values[(i % 2) * 3 + j % 3]);
  }
}

TEST(RandomMovementTest, FlipPadExpandMatchLoops) {
  B::Device device;
  const Shape shape = {3, 4, 5};
  auto values = RandomFloats(60, 48);
  auto x = TF<3>::from_vector(values, {3, 4, 5}, device);
  auto flipped = x.flip({0, -1}).to_vector();
  for (int64_t i = 0; i < 60; ++i) {
    auto idx = Unravel(i, shape);
    EXPECT_EQ(flipped[i], values[Ravel({2 - idx[0], idx[1], 4 - idx[2]}, shape)]);
  }

  const Shape ps = {5, 5, 8};  // pads {1, 1}, {0, 1}, {2, 1}
  auto padded = x.pad({{1, 1}, {0, 1}, {2, 1}}, 9.f);
  EXPECT_EQ(ShapeOf(padded), ps);
  auto pv = padded.to_vector();
  for (int64_t i = 0; i < Count(ps); ++i) {
    auto o = Unravel(i, ps);
    const bool inside = o[0] >= 1 && o[0] < 4 && o[1] < 4 && o[2] >= 2 && o[2] < 7;
    EXPECT_EQ(pv[i], inside ? values[Ravel({o[0] - 1, o[1], o[2] - 2}, shape)] : 9.f);
  }

  auto column = x.slice(1, 0, 1);  // [3, 1, 5]
  auto expanded = column.expand<4>({2, -1, 6, 5});
  const Shape es = {2, 3, 6, 5};
  EXPECT_EQ(ShapeOf(expanded), es);
  auto ev = expanded.to_vector();
  for (int64_t i = 0; i < Count(es); ++i) {
    auto o = Unravel(i, es);
    EXPECT_EQ(ev[i], values[Ravel({o[1], 0, o[3]}, shape)]);
  }
}

TEST(RandomMovementTest, CatSplitNarrowMatchLoops) {
  B::Device device;
  const std::vector<int64_t> widths = {2, 5, 1};
  std::vector<std::vector<float>> parts;
  std::vector<TF<2>> tensors;
  for (size_t p = 0; p < widths.size(); ++p) {
    parts.push_back(RandomFloats(3 * widths[p], 49 + static_cast<uint32_t>(p)));
    tensors.push_back(TF<2>::from_vector(parts[p], {3, widths[p]}, device));
  }
  auto joined = cat(tensors, 1);
  EXPECT_EQ(ShapeOf(joined), (Shape{3, 8}));
  auto jv = joined.to_vector();
  for (int64_t i = 0; i < 3; ++i) {
    int64_t column = 0;
    for (size_t p = 0; p < widths.size(); ++p) {
      for (int64_t j = 0; j < widths[p]; ++j, ++column) {
        EXPECT_EQ(jv[i * 8 + column], parts[p][i * widths[p] + j]);
      }
    }
  }
  auto pieces = joined.split(3, 1);  // widths 3, 3, 2
  ASSERT_EQ(pieces.size(), 3u);
  for (size_t p = 0; p < pieces.size(); ++p) {
    auto pv = pieces[p].to_vector();
    const int64_t width = p < 2 ? 3 : 2;
    ASSERT_EQ(static_cast<int64_t>(pv.size()), 3 * width);
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t j = 0; j < width; ++j) {
        EXPECT_EQ(pv[i * width + j], jv[i * 8 + static_cast<int64_t>(p) * 3 + j]);
      }
    }
  }
  auto narrowed = joined.narrow(1, 2, 5).to_vector();
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 5; ++j) EXPECT_EQ(narrowed[i * 5 + j], jv[i * 8 + 2 + j]);
  }
}

}  // namespace
}  // namespace kiln::testing
