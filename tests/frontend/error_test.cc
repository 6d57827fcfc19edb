// kiln::Error messages: they name the op, the operand types and the user's line (this file's),
// and they come when the op is recorded, before anything runs.
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/frontend/test_util.h"

namespace kiln::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// The message of the kiln::Error that `statement` throws ("<no error>" when none).
#define KILN_ERROR_OF(statement)       \
  ([&]() -> std::string {              \
    try {                              \
      statement;                       \
    } catch (const ::kiln::Error& e) { \
      return e.what();                 \
    }                                  \
    return "<no error>";               \
  }())

std::string At(int line) { return absl::StrCat("error_test.cc:", line, ": "); }

TEST(ErrorTest, BroadcastMismatchNamesOpShapesAndLine) {
  B::Device device;
  auto a = TF<2>::zeros({2, 3}, device);
  auto b = TF<2>::zeros({4, 3}, device);
  const int64_t graphs_before = detail::GetEngineStats().graphs_executed;
  const int line = __LINE__ + 1;
  const std::string message = KILN_ERROR_OF(a + b);
  EXPECT_THAT(message, AllOf(HasSubstr(At(line) + "add: cannot broadcast [2,3] with [4,3]"),
                             HasSubstr("operands f32[2,3], f32[4,3]")));
  EXPECT_EQ(detail::GetEngineStats().graphs_executed, graphs_before);  // nothing ran
}

TEST(ErrorTest, MethodsReportTheCallerLine) {
  B::Device device;
  auto x = TF<2>::zeros({2, 3}, device);
  int line = __LINE__ + 1;
  std::string message = KILN_ERROR_OF(x.sum(5));
  EXPECT_THAT(message, AllOf(HasSubstr(At(line) + "sum: dim 5 out of range for rank 2"),
                             HasSubstr("f32[2,3]")));

  line = __LINE__ + 1;
  message = KILN_ERROR_OF(x.reshape<2>({4, 2}));
  EXPECT_THAT(message, HasSubstr(At(line) + "reshape: cannot reshape 6 elements to [4,2]"));

  line = __LINE__ + 1;
  message = KILN_ERROR_OF(x.squeeze<0>());
  EXPECT_THAT(message, HasSubstr(At(line) + "squeeze: dim 0 has size 2, not 1"));

  line = __LINE__ + 1;
  message = KILN_ERROR_OF(x.matmul(x));
  EXPECT_THAT(message, AllOf(HasSubstr(At(line) + "matmul: contracting dims differ (3 vs 2)"),
                             HasSubstr("operands f32[2,3], f32[2,3]")));

  line = __LINE__ + 1;
  message = KILN_ERROR_OF(cat(std::vector{x, x.transpose()}, 0));
  EXPECT_THAT(message, AllOf(HasSubstr(At(line) + "cat: tensor 1 differs from tensor 0 in dim 1"),
                             HasSubstr("f32[2,3], f32[3,2]")));

  line = __LINE__ + 1;
  message = KILN_ERROR_OF(x.gather(0, TI<2>::zeros({2, 4}, device)));
  EXPECT_THAT(message, AllOf(HasSubstr(At(line) + "gather: index axis 1 (4) exceeds operand (3)"),
                             HasSubstr("f32[2,3], i64[2,4]")));
}

TEST(ErrorTest, ScalarOperatorsAndCompoundAssignmentReportTheLine) {
  B::Device device;
  auto x = TF<1>::zeros({2}, device);
  auto y = TF<1>::zeros({3}, device);
  int line = __LINE__ + 1;
  std::string message = KILN_ERROR_OF(x += y);
  EXPECT_THAT(message, HasSubstr(At(line) + "add: cannot broadcast [2] with [3]"));
  line = __LINE__ + 1;
  message = KILN_ERROR_OF(x.to_bool() & y.to_bool());
  EXPECT_THAT(message, HasSubstr(At(line) + "logical_and: cannot broadcast"));
  line = __LINE__ + 1;
  message = KILN_ERROR_OF(y < x);
  EXPECT_THAT(message, HasSubstr(At(line) + "lt: cannot broadcast [3] with [2]"));
}

TEST(ErrorTest, ModuleErrorsReportTheLine) {
  B::Device device;
  auto layer = nn::LinearConfig(4, 2).init<B>(device);
  auto x = TF<2>::zeros({1, 3}, device);
  const int line = __LINE__ + 1;
  const std::string message = KILN_ERROR_OF(layer.forward(x));
  EXPECT_THAT(message, AllOf(HasSubstr(At(line) + "linear: the input's last dim must be 4"),
                             HasSubstr("operands f32[1,3], f32[2,4]")));
}

TEST(ErrorTest, DevicesMustMatchTheBackendAndEachOther) {
  B::Device device0;
  B::Device device1(1);
  auto a = TF<1>::zeros({2}, device0);
  auto b = TF<1>::zeros({2}, device1);
  int line = __LINE__ + 1;
  std::string message = KILN_ERROR_OF(a + b);
  EXPECT_THAT(
      message,
      HasSubstr(At(line) + "add: operands on different devices (reference:0 vs reference:1)"));
  const Device cpu(runtime::DeviceId{runtime::DeviceKind::kCpu, 0});
  line = __LINE__ + 1;
  message = KILN_ERROR_OF(TF<1>::zeros({2}, cpu));
  EXPECT_THAT(message, HasSubstr(At(line) + "zeros: device cpu:0 is not a Reference device"));
  line = __LINE__ + 1;
  message = KILN_ERROR_OF(Device::Parse("tpu"));
  EXPECT_THAT(message, HasSubstr(At(line) + "unknown device \"tpu\""));
}

TEST(ErrorTest, RunTimeErrorsNameTheNodeAndBothLines) {
  B::Device device;
  auto x = TF<1>::zeros({3}, device);
  const int made = __LINE__ + 1;
  auto bad = x.gather(0, TI<1>::from_data({0, 5}, device));
  const int realized = __LINE__ + 1;
  const std::string message = KILN_ERROR_OF(bad.to_vector());
  EXPECT_THAT(message,
              AllOf(HasSubstr(At(realized)), HasSubstr("gather"),
                    HasSubstr(absl::StrCat("error_test.cc:", made)), HasSubstr("out of range")));
}

TEST(ErrorTest, ItemNeedsOneElement) {
  B::Device device;
  const int line = __LINE__ + 1;
  const std::string message = KILN_ERROR_OF(TF<1>::zeros({2}, device).item());
  EXPECT_THAT(message, HasSubstr(At(line) + "item: needs exactly one element; operands f32[2]"));
}

}  // namespace
}  // namespace kiln::testing
