// Convolution through the GEMM (codegen/cpu/gemm.h, Conv) against the reference interpreter's
// conv (ir::Interpret), over hand-picked configurations (1-d/2-d/3-d, strides, padding, dilation,
// input dilation, groups, depthwise, 1x1) and a seeded random sweep. The error allowed for each
// output uses sum |x| |w| over its window, which the interpreter also computes: the same conv of
// |x| and |w|.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/cpu/gemm.h"
#include "ir/builder.h"
#include "ir/interpreter.h"
#include "ir/tensor_data.h"
#include "runtime/thread_pool.h"
#include "tests/codegen/gemm/gemm_test_util.h"

namespace kiln::codegen::cpu {
namespace {

using testing::ErrorBound;
using ::testing::HasSubstr;
using testing::ReferenceActivation;

runtime::ThreadPool& TwoThreads() {
  static runtime::ThreadPool* pool = new runtime::ThreadPool(2);
  return *pool;
}

struct ConvCase {
  ir::Shape input;   // [N, C, S...]
  ir::Shape weight;  // [O, C/groups, K...]
  std::vector<int64_t> strides, low, high, dilation, input_dilation;
  int64_t groups = 1;
  bool bias = false, residual = false, residual_after_activation = true;
  GemmActivation activation = GemmActivation::kNone;
  GemmTuning tuning;

  std::string Name() const {
    return absl::StrCat(
        "input=", ir::ShapeToString(input), " weight=", ir::ShapeToString(weight), " strides=[",
        absl::StrJoin(strides, ","), "] low=[", absl::StrJoin(low, ","), "] high=[",
        absl::StrJoin(high, ","), "] dilation=[", absl::StrJoin(dilation, ","),
        "] input_dilation=[", absl::StrJoin(input_dilation, ","), "] groups=", groups,
        bias ? " bias" : "", residual ? " residual" : "", " act=", GemmActivationName(activation),
        " kc=", tuning.kc, " nc=", tuning.nc);
  }
};

ir::TensorData RandomTensor(ir::DType dtype, const ir::Shape& shape, std::mt19937& rng) {
  std::uniform_real_distribution<double> uniform(-1, 1);
  std::vector<double> values(static_cast<size_t>(ir::NumElements(shape)));
  for (double& v : values) v = uniform(rng);
  return *ir::TensorData::FromDoubles(dtype, shape, values);
}

ir::TensorData Abs(const ir::TensorData& x) {
  std::vector<double> values = x.ToDoubles();
  for (double& v : values) v = std::abs(v);
  return *ir::TensorData::FromDoubles(x.dtype(), x.shape(), values);
}

// The interpreter's conv of (x, w).
ir::TensorData InterpretConv(const ConvCase& tc, const ir::TensorData& x, const ir::TensorData& w) {
  ir::Builder builder;
  const ir::NodeId input = builder.Parameter("x", {x.dtype(), x.shape()});
  const ir::NodeId weight = builder.Parameter("w", {w.dtype(), w.shape()});
  ir::Attrs attrs;
  attrs.strides = tc.strides;
  attrs.low = tc.low;
  attrs.high = tc.high;
  attrs.dilation = tc.dilation;
  attrs.input_dilation = tc.input_dilation;
  attrs.groups = tc.groups;
  builder.Output(builder.Conv(input, weight, attrs));
  absl::StatusOr<ir::Graph> graph = std::move(builder).Build();
  EXPECT_TRUE(graph.ok()) << graph.status();
  const ir::TensorData arguments[] = {x, w};
  absl::StatusOr<std::vector<ir::TensorData>> out = ir::Interpret(*graph, arguments);
  EXPECT_TRUE(out.ok()) << out.status();
  return (*out)[0];
}

void RunConvCase(const ConvCase& tc, ir::DType dtype, int threads, uint32_t seed = 3) {
  SCOPED_TRACE(absl::StrCat(tc.Name(), " ", ir::DTypeName(dtype), " threads=", threads));
  std::mt19937 rng(seed);
  const ir::TensorData x = RandomTensor(dtype, tc.input, rng);
  const ir::TensorData w = RandomTensor(dtype, tc.weight, rng);
  const ir::TensorData expected_conv = InterpretConv(tc, x, w);
  const ir::TensorData abs_conv = InterpretConv(tc, Abs(x), Abs(w));
  const ir::Shape out_shape = expected_conv.shape();
  const ir::TensorData bias = RandomTensor(dtype, {tc.weight[0]}, rng);
  const ir::TensorData residual = RandomTensor(dtype, out_shape, rng);

  ConvParams params;
  params.dtype = dtype;
  params.input_shape = tc.input;
  params.weight_shape = tc.weight;
  params.strides = tc.strides;
  params.low = tc.low;
  params.high = tc.high;
  params.dilation = tc.dilation;
  params.input_dilation = tc.input_dilation;
  params.groups = tc.groups;
  params.input = x.data();
  params.weight = w.data();
  params.bias = tc.bias ? bias.data() : nullptr;
  params.residual = tc.residual ? residual.data() : nullptr;
  params.residual_after_activation = tc.residual_after_activation;
  params.activation = tc.activation;
  params.tuning = tc.tuning;
  absl::StatusOr<ir::Shape> shape = ConvOutputShape(params);
  ASSERT_TRUE(shape.ok()) << shape.status();
  ASSERT_EQ(*shape, out_shape);
  // Poisoned: every output element must be written.
  ir::TensorData out(dtype, out_shape);
  for (int64_t i = 0; i < out.num_elements(); ++i) out.SetDouble(i, std::nan(""));
  params.output = out.data();
  const absl::Status status = Conv(params, threads > 1 ? &TwoThreads() : nullptr);
  ASSERT_TRUE(status.ok()) << status;

  const int64_t channels = out_shape[1];
  int64_t plane = 1;
  for (size_t d = 2; d < out_shape.size(); ++d) plane *= out_shape[d];
  const int64_t depth = tc.weight[1] * (ir::NumElements(tc.weight) /
                                        std::max<int64_t>(1, tc.weight[0] * tc.weight[1]));
  int failures = 0;
  for (int64_t i = 0; i < out.num_elements() && failures < 5; ++i) {
    const int64_t channel = (i / plane) % channels;
    double v = expected_conv.GetDouble(i), added = 0, after = 0;
    // The interpreter rounded its conv to the dtype once: allow that rounding too.
    const double abs_dot = abs_conv.GetDouble(i) + std::abs(v);
    if (tc.bias) {
      v += bias.GetDouble(channel);
      added += std::abs(bias.GetDouble(channel));
    }
    if (tc.residual && !tc.residual_after_activation) {
      v += residual.GetDouble(i);
      added += std::abs(residual.GetDouble(i));
    }
    v = ReferenceActivation(tc.activation, v);
    if (tc.residual && tc.residual_after_activation) {
      v += residual.GetDouble(i);
      after += std::abs(residual.GetDouble(i));
    }
    const double got = out.GetDouble(i);
    const double bound = ErrorBound(dtype, tc.activation, depth, abs_dot, added, after, v);
    if (!(std::abs(got - v) <= bound)) {
      ADD_FAILURE() << "output element " << i << " = " << got << ", expected " << v
                    << " (allowed error " << bound << ")";
      ++failures;
    }
  }
}

void RunAllWays(const ConvCase& tc) {
  for (ir::DType dtype : {ir::DType::kF32, ir::DType::kF64}) {
    for (int threads : {1, 2}) RunConvCase(tc, dtype, threads);
  }
}

TEST(ConvTest, OneDimensional) {
  ConvCase tc;
  tc.input = {2, 3, 10};
  tc.weight = {4, 3, 3};
  RunAllWays(tc);
  tc.strides = {2};
  RunAllWays(tc);
  tc.low = {1};
  tc.high = {2};
  RunAllWays(tc);
  tc.dilation = {2};
  RunAllWays(tc);
  tc.input_dilation = {3};  // a transposed convolution
  RunAllWays(tc);
}

TEST(ConvTest, TwoDimensional) {
  ConvCase tc;
  tc.input = {2, 4, 9, 7};
  tc.weight = {5, 4, 3, 2};
  RunAllWays(tc);
  tc.strides = {2, 3};
  tc.low = {1, 0};
  tc.high = {2, 1};
  RunAllWays(tc);
  tc.dilation = {2, 1};
  tc.input_dilation = {1, 2};
  RunAllWays(tc);
  // Padding wider than the kernel, stride longer than the kernel.
  ConvCase wide;
  wide.input = {1, 2, 5, 6};
  wide.weight = {3, 2, 2, 2};
  wide.low = {4, 3};
  wide.high = {3, 5};
  wide.strides = {3, 4};
  RunAllWays(wide);
}

TEST(ConvTest, ThreeDimensional) {
  ConvCase tc;
  tc.input = {2, 2, 5, 6, 4};
  tc.weight = {3, 2, 2, 3, 2};
  RunAllWays(tc);
  tc.strides = {1, 2, 1};
  tc.low = {1, 1, 0};
  tc.high = {0, 1, 1};
  tc.dilation = {2, 1, 1};
  tc.input_dilation = {1, 1, 2};
  RunAllWays(tc);
}

TEST(ConvTest, Groups) {
  ConvCase tc;
  tc.input = {2, 6, 8, 7};
  tc.weight = {9, 2, 3, 3};
  tc.groups = 3;
  tc.low = {1, 1};
  tc.high = {1, 1};
  tc.bias = true;
  RunAllWays(tc);
  // Depthwise: one input channel per group, and a channel multiplier of 2.
  ConvCase depthwise;
  depthwise.input = {2, 5, 9, 9};
  depthwise.weight = {5, 1, 3, 3};
  depthwise.groups = 5;
  depthwise.strides = {2, 2};
  depthwise.low = {1, 1};
  depthwise.high = {1, 1};
  RunAllWays(depthwise);
  depthwise.weight = {10, 1, 3, 3};
  RunAllWays(depthwise);
}

TEST(ConvTest, PointwiseTakesTheStridedPath) {
  ConvCase tc;
  tc.input = {3, 8, 5, 6};
  tc.weight = {7, 8, 1, 1};
  tc.bias = true;
  tc.activation = GemmActivation::kRelu;
  RunAllWays(tc);
  tc.groups = 2;
  tc.weight = {6, 4, 1, 1};
  RunAllWays(tc);
}

TEST(ConvTest, Epilogues) {
  ConvCase tc;
  tc.input = {2, 3, 11, 10};
  tc.weight = {17, 3, 3, 3};
  tc.low = {1, 1};
  tc.high = {1, 1};
  tc.bias = true;
  for (GemmActivation activation : {GemmActivation::kRelu, GemmActivation::kGeluTanh,
                                    GemmActivation::kSilu, GemmActivation::kSigmoid}) {
    tc.activation = activation;
    tc.residual = activation != GemmActivation::kSigmoid;
    tc.residual_after_activation = activation != GemmActivation::kRelu;  // ResNet: relu(y + x)
    RunAllWays(tc);
  }
}

TEST(ConvTest, SmallBlocksSplitThePackedWindows) {
  // Depth blocks that end inside a channel's window and column blocks that end inside an output
  // row exercise the gather's k0 / n0 offsets.
  ConvCase tc;
  tc.input = {2, 3, 7, 9};
  tc.weight = {5, 3, 3, 2};
  tc.strides = {1, 2};
  tc.low = {2, 1};
  tc.high = {1, 0};
  tc.tuning.kc = 5;
  tc.tuning.nc = 1;  // rounded up to one NR panel
  tc.tuning.mc = 1;  // one MR panel
  tc.bias = true;
  tc.residual = true;
  RunAllWays(tc);
}

TEST(ConvTest, SmallImagesTakeTheRowCopyPath) {
  // 2-d convs with unit width stride and output rows of at most 16 that divide the NR panel
  // (16, 8, 4 wide) pack im2col one output row per masked copy on AVX-512 hosts (the imported
  // CNN's 16x16 and 8x8 convs); 16 and 32 output channels take balanced row panels.
  ConvCase conv1;  // as the CNN of benchmarks/peers/onnx_peers.py, fewer images
  conv1.input = {3, 3, 16, 16};
  conv1.weight = {16, 3, 3, 3};
  conv1.low = {1, 1};
  conv1.high = {1, 1};
  conv1.bias = true;
  conv1.activation = GemmActivation::kRelu;
  RunAllWays(conv1);
  ConvCase conv2;
  conv2.input = {2, 16, 8, 8};
  conv2.weight = {32, 16, 3, 3};
  conv2.low = {1, 1};
  conv2.high = {1, 1};
  RunAllWays(conv2);
  // Height stride and dilation, a 3x4 output (12 columns: a partial panel).
  ConvCase strided;
  strided.input = {2, 3, 9, 4};
  strided.weight = {5, 3, 3, 3};
  strided.strides = {2, 1};
  strided.dilation = {2, 1};
  strided.low = {0, 1};
  strided.high = {0, 1};
  RunAllWays(strided);
  // Width dilation; padding wider than the kernel (whole rows and columns of zeros).
  ConvCase dilated;
  dilated.input = {1, 2, 7, 8};
  dilated.weight = {3, 2, 2, 3};
  dilated.dilation = {1, 2};
  dilated.low = {1, 2};
  dilated.high = {1, 2};
  RunAllWays(dilated);
  ConvCase wide;
  wide.input = {1, 2, 5, 2};
  wide.weight = {3, 2, 2, 2};
  wide.low = {3, 4};
  wide.high = {2, 3};
  RunAllWays(wide);
  // Depth blocks ending inside a channel's window, column blocks of one NR panel.
  conv1.tuning.kc = 5;
  conv1.tuning.nc = 1;
  conv1.residual = true;
  RunAllWays(conv1);
}

TEST(ConvTest, WeightGradientShapesTakeTheTransposedPath) {
  // Small outputs (<= 16 positions) with a long reduction and no epilogue: the weight gradient of
  // a 3x3 conv, computed as out^T = im2col^T * W^T. Shapes as the CNN training step's dW of
  // conv 1 and conv 2 (benchmarks/train_graphs.cc) with fewer channels.
  ConvCase conv1;
  conv1.input = {1, 16, 28, 28};
  conv1.weight = {32, 16, 26, 26};
  RunAllWays(conv1);
  ConvCase conv2;
  conv2.input = {8, 16, 13, 13};
  conv2.weight = {64, 16, 11, 11};
  RunAllWays(conv2);
  conv2.tuning.kc = 100;  // many depth blocks, one ending inside a kernel row
  conv2.tuning.mc = 1;
  RunAllWays(conv2);
  // Padding, stride and dilation: kernel columns partly on the padding, an output of 3 x 5.
  ConvCase padded;
  padded.input = {3, 24, 12, 11};
  padded.weight = {16, 24, 9, 5};
  padded.strides = {2, 1};
  padded.low = {1, 1};
  padded.high = {1, 1};
  padded.dilation = {1, 2};
  RunAllWays(padded);
  padded.low = {0, 2};
  padded.high = {2, 0};
  RunAllWays(padded);
}

TEST(ConvTest, InputGradientShapesTakeTheCol2ImPath) {
  // Unit strides and full padding k - 1: the input gradient of a 3x3 conv (autodiff's conv of g
  // with the flipped weight), computed as a GEMM on g's own rows and a col2im. Shapes as the CNN
  // training step's dX of conv 2 (11x11 -> 13x13) with fewer images, then a non-square kernel.
  ConvCase conv2;
  conv2.input = {3, 64, 11, 11};
  conv2.weight = {32, 64, 3, 3};
  conv2.low = {2, 2};
  conv2.high = {2, 2};
  RunAllWays(conv2);
  conv2.tuning.kc = 20;  // several depth blocks
  conv2.tuning.mc = 1;
  RunAllWays(conv2);
  ConvCase wide;
  wide.input = {2, 5, 6, 9};
  wide.weight = {9, 5, 2, 4};
  wide.low = {1, 3};
  wide.high = {1, 3};
  RunAllWays(wide);
  // Not full padding on one side: the implicit GEMM, same results.
  wide.high = {1, 2};
  RunAllWays(wide);
}

TEST(ConvTest, EmptyChannelsGiveTheEpilogueOfZero) {
  ConvCase tc;
  tc.input = {2, 0, 4};
  tc.weight = {3, 0, 2};
  tc.bias = true;
  tc.activation = GemmActivation::kSigmoid;
  RunAllWays(tc);
}

TEST(ConvTest, RandomConfigurations) {
  std::mt19937 rng(2024);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int tested = 0;
  for (int attempt = 0; tested < 40 && attempt < 1000; ++attempt) {
    ConvCase tc;
    const int64_t spatial = pick(1, 3);
    const int64_t groups = pick(1, 3);
    tc.groups = groups;
    tc.input = {pick(1, 2), groups * pick(1, 3)};
    tc.weight = {groups * pick(1, 4), tc.input[1] / groups};
    for (int64_t d = 0; d < spatial; ++d) {
      tc.input.push_back(pick(1, spatial == 3 ? 5 : 9));
      tc.weight.push_back(pick(1, 3));
      tc.strides.push_back(pick(1, 3));
      tc.low.push_back(pick(0, 2));
      tc.high.push_back(pick(0, 2));
      tc.dilation.push_back(pick(1, 2));
      tc.input_dilation.push_back(pick(1, 2));
    }
    ConvParams probe;
    probe.input_shape = tc.input;
    probe.weight_shape = tc.weight;
    probe.strides = tc.strides;
    probe.low = tc.low;
    probe.high = tc.high;
    probe.dilation = tc.dilation;
    probe.input_dilation = tc.input_dilation;
    probe.groups = tc.groups;
    if (!ConvOutputShape(probe).ok()) continue;  // the kernel does not fit
    tc.bias = pick(0, 1) == 1;
    tc.residual = pick(0, 1) == 1;
    tc.activation = pick(0, 1) == 1 ? GemmActivation::kRelu : GemmActivation::kNone;
    if (pick(0, 2) == 0) tc.tuning.kc = pick(1, 9);
    const ir::DType dtype = tested % 2 == 0 ? ir::DType::kF32 : ir::DType::kF64;
    RunConvCase(tc, dtype, /*threads=*/1 + tested % 3 % 2, /*seed=*/static_cast<uint32_t>(tested));
    ++tested;
  }
  EXPECT_EQ(tested, 40);
}

TEST(ConvTest, RejectsBadArguments) {
  ConvParams params;
  params.input_shape = {1, 4, 5};
  params.weight_shape = {2, 3, 2};
  float data[64] = {};
  params.input = data;
  params.weight = data;
  params.output = data;
  EXPECT_THAT(Conv(params).message(), HasSubstr("input channels"));
  params.weight_shape = {2, 4, 7};
  EXPECT_THAT(Conv(params).message(), HasSubstr("does not fit"));
  params.weight_shape = {2, 4, 2};
  params.dtype = ir::DType::kI64;
  EXPECT_THAT(Conv(params).message(), HasSubstr("i64"));
  params.dtype = ir::DType::kF32;
  params.output = nullptr;
  EXPECT_THAT(Conv(params).message(), HasSubstr("null operand"));
  params.output = data;
  EXPECT_TRUE(Conv(params).ok());
}

}  // namespace
}  // namespace kiln::codegen::cpu
