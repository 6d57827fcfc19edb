// operator<<: values in nested brackets (middle elided for big tensors), shape, dtype, device.
#include <cmath>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/frontend/test_util.h"

namespace kiln::testing {
namespace {

using ::testing::HasSubstr;

// The expected strings below name the reference device; on another backend (tests/cpu runs this
// suite with KILN_DEVICE=cpu) the printed device is that backend's first device.
template <class T>
std::string Print(const T& t) {
  std::ostringstream os;
  os << t;
  std::string text = os.str();
  const std::string device = "device=" + B::Device().ToString() + ")";
  const size_t at = text.rfind(device);
  if (at != std::string::npos) text.replace(at, device.size(), "device=reference:0)");
  return text;
}

TEST(PrintTest, Matrix) {
  B::Device device;
  auto x = TF<2>::from_data({{1.f, 2.f}, {3.f, 4.f}}, device);
  EXPECT_EQ(Print(x),
            "tensor([[1.0000, 2.0000],\n"
            "        [3.0000, 4.0000]], shape=[2, 2], dtype=f32, device=reference:0)");
  EXPECT_EQ(Print(x - 2.5f),
            "tensor([[-1.5000, -0.5000],\n"
            "        [ 0.5000,  1.5000]], shape=[2, 2], dtype=f32, device=reference:0)");
}

TEST(PrintTest, KindsAndScalars) {
  B::Device device;
  EXPECT_EQ(Print(TI<1>::from_data({-3, 10}, device)),
            "tensor([-3, 10], shape=[2], dtype=i64, device=reference:0)");
  EXPECT_EQ(Print(TB<1>::from_data({true, false}, device)),
            "tensor([ true, false], shape=[2], dtype=bool, device=reference:0)");
  EXPECT_EQ(Print(TF<0>::from_data(0.5, device, ir::DType::kF64)),
            "tensor(0.5000, shape=[], dtype=f64, device=reference:0)");
  EXPECT_EQ(Print(TF<1>::zeros({0}, device)),
            "tensor([], shape=[0], dtype=f32, device=reference:0)");
}

TEST(PrintTest, RankThreeSeparatesBlocks) {
  B::Device device;
  auto x = TI<1>::arange(0, 8, device).reshape<3>({2, 2, 2});
  EXPECT_EQ(Print(x),
            "tensor([[[0, 1],\n"
            "         [2, 3]],\n"
            "\n"
            "        [[4, 5],\n"
            "         [6, 7]]], shape=[2, 2, 2], dtype=i64, device=reference:0)");
}

TEST(PrintTest, SpecialValuesAndScientific) {
  B::Device device;
  auto x = TF<1>::from_data({NAN, INFINITY, -INFINITY, 1e-5f}, device);
  const std::string s = Print(x);
  EXPECT_THAT(s, HasSubstr("nan"));
  EXPECT_THAT(s, HasSubstr(" inf"));
  EXPECT_THAT(s, HasSubstr("-inf"));
  EXPECT_THAT(s, HasSubstr("1.0000e-05"));
}

TEST(PrintTest, BigTensorsAreElided) {
  B::Device device;
  auto x = TI<1>::arange(0, 2000, device);
  EXPECT_EQ(Print(x),
            "tensor([   0,    1,    2, ..., 1997, 1998, 1999], shape=[2000], dtype=i64, "
            "device=reference:0)");
  auto m = TI<1>::arange(0, 1200, device).reshape<2>({40, 30});
  const std::string s = Print(m);
  EXPECT_THAT(s, HasSubstr("[   0,    1,    2, ...,   27,   28,   29],\n"));
  EXPECT_THAT(s, HasSubstr("        ...,\n"));
  EXPECT_THAT(s, HasSubstr("[1170, 1171, 1172, ..., 1197, 1198, 1199]]"));
}

TEST(PrintTest, TensorDataPrintsWithoutDevice) {
  B::Device device;
  std::ostringstream os;
  os << (TF<1>::from_data({1.f, 2.f}, device) * 2).into_data();
  EXPECT_EQ(os.str(), "tensor([2.0000, 4.0000], shape=[2], dtype=f32)");
}

}  // namespace
}  // namespace kiln::testing
