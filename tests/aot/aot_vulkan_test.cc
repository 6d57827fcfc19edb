// Blobs with a Vulkan section (aot::CompileOptions::vulkan): one blob with both sections loaded
// through the C API on the machine's Vulkan device (lavapipe in CI) and on the CPU, both checked
// against ir::Interpret; the sections, shared weights and recorded features; the device-choice
// errors of kiln_model_load_*_on. (Blobs of one backend's section against the interpreter are the
// conformance suite's: tests/conformance/blob_test.cc.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "codegen/aot/aot.h"
#include "ir/builder.h"
#include "ir/interpreter.h"
#include "ir/tensor_data.h"
#include "runtime/blob.h"
#include "runtime/include/kiln_runtime.h"
#include "runtime/vulkan/blob_vulkan.h"
#include "tests/codegen/mlp_graphs.h"
#include "tests/codegen/random_graph.h"

namespace kiln {
namespace {

using testing::HasSubstr;

ir::TensorType F32(ir::Shape shape) { return ir::TensorType{ir::DType::kF32, std::move(shape)}; }

std::span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// test::WeightBoundMlp (the conformance suite's blob test runs it too), the weights bound at
// compile time, with a Vulkan section.
struct Case {
  ir::Graph graph;
  std::vector<ir::TensorData> args;
  aot::CompileOptions options;
};

Case Mlp(int64_t batch) {
  test::MlpCase m = test::WeightBoundMlp(batch);
  Case c{std::move(m.graph), std::move(m.inputs), {}};
  c.options.name = "mlp";
  c.options.vulkan = true;
  c.options.weights = std::move(m.weights);
  return c;
}

// The graph with the weights as arguments, run by the reference interpreter.
std::vector<ir::TensorData> Reference(const Case& c) {
  absl::StatusOr<std::vector<ir::TensorData>> out =
      ir::Interpret(c.graph, test::AllArguments(c.graph, c.args, c.options.weights));
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *std::move(out) : std::vector<ir::TensorData>{};
}

// Loads `blob` through the C API on `device` and runs it once.
std::vector<std::vector<float>> RunC(const std::string& blob, const char* device,
                                     const std::vector<ir::TensorData>& args) {
  kiln_model* model = nullptr;
  const kiln_status s = kiln_model_load_memory_on(blob.data(), blob.size(), device, &model);
  EXPECT_EQ(s, KILN_OK) << kiln_last_error();
  if (s != KILN_OK) return {};
  EXPECT_THAT(kiln_model_device(model), HasSubstr(device));
  std::vector<const void*> inputs;
  for (const ir::TensorData& a : args) inputs.push_back(a.data());
  std::vector<std::vector<float>> results(kiln_model_num_outputs(model));
  std::vector<void*> outputs;
  for (size_t k = 0; k < results.size(); ++k) {
    kiln_tensor_info info;
    EXPECT_EQ(kiln_model_output_info(model, k, &info), KILN_OK);
    results[k].resize(info.size_bytes / sizeof(float));
    outputs.push_back(results[k].data());
  }
  EXPECT_EQ(kiln_model_run(model, inputs.data(), outputs.data()), KILN_OK) << kiln_last_error();
  kiln_model_free(model);
  return results;
}

void ExpectClose(const std::vector<float>& actual, const ir::TensorData& expected,
                 const std::string& what) {
  ASSERT_EQ(actual.size() * sizeof(float), expected.size_bytes()) << what;
  const float* e = reinterpret_cast<const float*>(expected.data());
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], e[i], 1e-4 + 1e-4 * std::fabs(e[i])) << what << " element " << i;
  }
}

void ExpectVulkanAndCpuMatchInterpret(const Case& c) {
  absl::StatusOr<std::string> blob = aot::Compile(c.graph, c.options);
  ASSERT_TRUE(blob.ok()) << blob.status();
  const std::vector<ir::TensorData> expected = Reference(c);
  const std::vector<std::vector<float>> on_vulkan = RunC(*blob, "vulkan", c.args);
  const std::vector<std::vector<float>> on_cpu = RunC(*blob, "cpu", c.args);
  ASSERT_EQ(on_vulkan.size(), expected.size());
  ASSERT_EQ(on_cpu.size(), expected.size());
  for (size_t k = 0; k < expected.size(); ++k) {
    ExpectClose(on_vulkan[k], expected[k], absl::StrCat("vulkan output ", k));
    ExpectClose(on_cpu[k], expected[k], absl::StrCat("cpu output ", k));
  }
}

// The Vulkan blob driver for the whole binary, before any test: the corpus test's Vulkan cases
// (corpus_test.cc) need ParseBlob to validate Vulkan plans too.
[[maybe_unused]] const bool kVulkanBlobsEnabled = (runtime::vulkan::EnableVulkanBlobs(), true);

class AotVulkanTest : public testing::Test {};

TEST_F(AotVulkanTest, MlpOnVulkanAndCpuMatchesInterpret) {
  ExpectVulkanAndCpuMatchInterpret(Mlp(5));
}

TEST_F(AotVulkanTest, SectionsAndSharedWeights) {
  Case c = Mlp(3);
  absl::StatusOr<std::string> with = aot::Compile(c.graph, c.options);
  ASSERT_TRUE(with.ok()) << with.status();
  c.options.vulkan = false;
  absl::StatusOr<std::string> without = aot::Compile(c.graph, c.options);
  ASSERT_TRUE(without.ok()) << without.status();
  absl::StatusOr<runtime::blob::BlobView> v = runtime::blob::ParseBlob(Bytes(*with));
  ASSERT_TRUE(v.ok()) << v.status();
  absl::StatusOr<runtime::blob::BlobView> cpu = runtime::blob::ParseBlob(Bytes(*without));
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(cpu->Target("vulkan"), nullptr);
  const runtime::vulkan::VulkanPlan* plan = v->PlanOf<runtime::vulkan::VulkanPlan>("vulkan");
  ASSERT_NE(plan, nullptr);
  EXPECT_THAT(plan->features, testing::Contains("shaderInt64"));
  EXPECT_THAT(plan->features, testing::Not(testing::Contains("shaderFloat64")));
  EXPECT_GT(plan->shaders.size(), 0u);
  EXPECT_EQ(v->sections[static_cast<size_t>(plan->spirv_section)].name, "vulkan:spirv");
  // The weights the Vulkan plan binds are the CPU plan's bytes: w1, b1 and w2 are stored once.
  int64_t weight_bytes = 0;
  for (const auto& [name, value] : c.options.weights) weight_bytes += value->size_bytes();
  const uint64_t with_weights = v->sections[static_cast<size_t>(v->weights_section)].size;
  const uint64_t cpu_weights = cpu->sections[static_cast<size_t>(cpu->weights_section)].size;
  EXPECT_LT(with_weights, cpu_weights + static_cast<uint64_t>(weight_bytes) / 2)
      << "the Vulkan plan's constants were duplicated";
  EXPECT_THAT(runtime::blob::DescribeBlob(*v), HasSubstr("vulkan plan (section"));
}

TEST_F(AotVulkanTest, NoVulkanSectionIsAClearError) {
  Case c = Mlp(2);
  c.options.vulkan = false;
  absl::StatusOr<std::string> blob = aot::Compile(c.graph, c.options);
  ASSERT_TRUE(blob.ok()) << blob.status();
  kiln_model* model = nullptr;
  EXPECT_EQ(kiln_model_load_memory_on(blob->data(), blob->size(), "vulkan", &model),
            KILN_ERROR_UNSUPPORTED);
  EXPECT_EQ(model, nullptr);
  EXPECT_THAT(kiln_last_error(), HasSubstr("the blob has no vulkan plan (it has: cpu)"));
  EXPECT_EQ(kiln_model_load_memory_on(blob->data(), blob->size(), "tpu", &model),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kiln_last_error(), HasSubstr("unknown device \"tpu\""));
}

TEST_F(AotVulkanTest, NoSuchDeviceIsAClearError) {
  Case c = Mlp(2);
  absl::StatusOr<std::string> blob = aot::Compile(c.graph, c.options);
  ASSERT_TRUE(blob.ok()) << blob.status();
  kiln_model* model = nullptr;
  EXPECT_EQ(kiln_model_load_memory_on(blob->data(), blob->size(), "vulkan:no such gpu", &model),
            KILN_ERROR_UNSUPPORTED);
  EXPECT_THAT(kiln_last_error(), HasSubstr("no such gpu"));
}

TEST_F(AotVulkanTest, MissingFeatureNamesIt) {
  // An f64 graph needs shaderFloat64; a device without it is refused, naming the feature.
  ir::Builder b;
  ir::NodeId x = b.Parameter("x", ir::TensorType{ir::DType::kF64, {16}});
  b.Output(b.Binary(ir::Op::kMul, x, x), "y");
  absl::StatusOr<ir::Graph> g = std::move(b).Build();
  ASSERT_TRUE(g.ok()) << g.status();
  aot::CompileOptions options;
  options.vulkan = true;
  absl::StatusOr<std::string> blob = aot::Compile(*g, options);
  ASSERT_TRUE(blob.ok()) << blob.status();
  absl::StatusOr<runtime::blob::BlobView> v = runtime::blob::ParseBlob(Bytes(*blob));
  ASSERT_TRUE(v.ok()) << v.status();
  const runtime::vulkan::VulkanPlan* plan = v->PlanOf<runtime::vulkan::VulkanPlan>("vulkan");
  ASSERT_NE(plan, nullptr);
  EXPECT_THAT(plan->features, testing::Contains("shaderFloat64"));
  std::vector<runtime::vulkan::DeviceInfo> devices = runtime::vulkan::ListDevices();
  ASSERT_FALSE(devices.empty()) << "no Vulkan device (lavapipe: VK_DRIVER_FILES)";
  runtime::vulkan::DeviceInfo info = devices[0];
  EXPECT_TRUE(runtime::vulkan::CheckDeviceCanRun(*plan, info).ok());
  info.float64 = false;
  absl::Status s = runtime::vulkan::CheckDeviceCanRun(*plan, info);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("lacks shaderFloat64"));
  info = devices[0];
  info.max_workgroup_invocations = 32;
  EXPECT_THAT(runtime::vulkan::CheckDeviceCanRun(*plan, info).message(), HasSubstr("invocations"));
}

TEST_F(AotVulkanTest, ByteOutputsNeed8BitStorage) {
  // u8 and bool outputs: the section lists storageBuffer8BitAccess (from the SPIR-V). (That the
  // bytes equal the interpreter's is the conformance suite's ConformanceBlobTest.ByteOutputs.)
  ir::Builder b;
  ir::NodeId x = b.Parameter("x", F32({300}));
  ir::NodeId scaled = b.Binary(ir::Op::kMul, x, b.Fill(100.0, F32({300})));
  b.Output(b.Cast(scaled, ir::DType::kU8), "bytes");
  b.Output(b.Cast(x, ir::DType::kBool), "nonzero");
  absl::StatusOr<ir::Graph> g = std::move(b).Build();
  ASSERT_TRUE(g.ok()) << g.status();
  aot::CompileOptions options;
  options.vulkan = true;
  absl::StatusOr<std::string> blob = aot::Compile(*g, options);
  ASSERT_TRUE(blob.ok()) << blob.status();
  absl::StatusOr<runtime::blob::BlobView> v = runtime::blob::ParseBlob(Bytes(*blob));
  ASSERT_TRUE(v.ok()) << v.status();
  const runtime::vulkan::VulkanPlan* plan = v->PlanOf<runtime::vulkan::VulkanPlan>("vulkan");
  ASSERT_NE(plan, nullptr);
  EXPECT_THAT(plan->features, testing::Contains("storageBuffer8BitAccess"));
}

}  // namespace
}  // namespace kiln
