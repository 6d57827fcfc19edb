// Ahead-of-time blobs on the CPU: traced modules and functions through the C API, foreign
// triples, two models loaded at once, the host section at each KILN_CPU level, weight errors.
// (Graphs compiled to blobs and run against the interpreter and the JIT, on every backend, are
// the conformance suite's: tests/conformance/blob_test.cc.)
#include "codegen/aot/aot.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "codegen/cpu/graph_compiler.h"
#include "ir/builder.h"
#include "ir/tensor_data.h"
#include "kiln/kiln.h"
#include "runtime/blob.h"
#include "runtime/cpu/blob_cpu.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/include/kiln_runtime.h"
#include "tests/codegen/child_process.h"
#include "tests/codegen/mlp_graphs.h"
#include "tests/codegen/random_graph.h"

namespace kiln {
namespace {

using runtime::blob::Model;

std::span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

std::vector<ir::TensorData> RunBlob(const Model& model, const std::vector<ir::TensorData>& args) {
  std::vector<const void*> inputs;
  for (const ir::TensorData& a : args) inputs.push_back(a.data());
  std::vector<ir::TensorData> results;
  std::vector<void*> outputs;
  for (const auto& spec : model.signature().outputs) {
    results.push_back(
        ir::TensorData::Uninitialized(*ir::ParseDType(spec.dtype), ir::Shape(spec.shape)));
  }
  for (ir::TensorData& r : results) outputs.push_back(r.data());
  absl::Status s = model.Run(inputs, outputs);
  EXPECT_TRUE(s.ok()) << s;
  return results;
}

std::vector<ir::TensorData> RunJit(const ir::Graph& graph,
                                   const std::vector<ir::TensorData>& args) {
  std::vector<std::shared_ptr<const ir::TensorData>> shared;
  for (const ir::TensorData& a : args) shared.push_back(std::make_shared<ir::TensorData>(a));
  absl::StatusOr<std::vector<ir::TensorData>> out = codegen::cpu::CompileAndRun(graph, shared);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *std::move(out) : std::vector<ir::TensorData>{};
}

ir::TensorData Random(const ir::TensorType& type, uint64_t seed) {
  return test::RandomTensor(type, seed);
}

ir::TensorType F32(ir::Shape shape) { return ir::TensorType{ir::DType::kF32, std::move(shape)}; }

// test::ConstantMlp (the conformance suite's blob test runs it too); its input goes to `args`.
ir::Graph Mlp(int64_t batch, std::vector<ir::TensorData>* args) {
  test::MlpCase c = test::ConstantMlp(batch);
  for (ir::TensorData& input : c.inputs) args->push_back(std::move(input));
  return std::move(c.graph);
}

// The blob also goes through the C API and kiln::trace of a module with named weights.
template <class B>
struct SmallMlp {
  nn::Linear<B> fc1, fc2;
  KILN_MODULE(SmallMlp, fc1, fc2);
  Tensor<B, 2> forward(const Tensor<B, 2>& x) const {
    return fc2.forward(activation::relu(fc1.forward(x)));
  }
};

// The traced graph compiled with its weights into a blob (the default targets) and loaded; null
// (after a test failure) when either fails.
std::unique_ptr<Model> CompileAndLoad(const TracedGraph& traced) {
  aot::CompileOptions options;
  options.weights = traced.weights;
  absl::StatusOr<std::string> blob = aot::Compile(traced.graph, options);
  EXPECT_TRUE(blob.ok()) << blob.status();
  if (!blob.ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<Model>> loaded = Model::LoadMemory(Bytes(*blob));
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return loaded.ok() ? *std::move(loaded) : nullptr;
}

SmallMlp<Cpu> MakeSmallMlp(uint64_t seed) {
  manual_seed(seed);
  const Cpu::Device device;
  return SmallMlp<Cpu>{nn::LinearConfig(20, 16).init<Cpu>(device),
                       nn::LinearConfig(16, 5).init<Cpu>(device)};
}

TEST(AotTest, TracedModuleThroughTheCApi) {
  using B = Cpu;
  B::Device device;
  SmallMlp<B> model = MakeSmallMlp(3);
  std::vector<float> xs(4 * 20);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 7) * 0.25f - 0.5f;
  auto x = Tensor<B, 2>::from_vector(xs, {4, 20}, device);
  TracedGraph traced = trace_named(TraceNames{{"x"}, {"logits"}}, model, x);
  ASSERT_EQ(traced.weights.size(), 4u);
  EXPECT_EQ(traced.weights[0].first.substr(0, 4), "fc1.");
  aot::CompileOptions options;
  options.name = "small_mlp";
  options.weights = traced.weights;
  absl::StatusOr<std::string> blob = aot::Compile(traced.graph, options);
  ASSERT_TRUE(blob.ok()) << blob.status();

  kiln_model* m = nullptr;
  ASSERT_EQ(kiln_model_load_memory(blob->data(), blob->size(), &m), KILN_OK) << kiln_last_error();
  ASSERT_EQ(kiln_model_num_inputs(m), 1u);
  ASSERT_EQ(kiln_model_num_outputs(m), 1u);
  kiln_tensor_info in, out;
  ASSERT_EQ(kiln_model_input_info(m, 0, &in), KILN_OK);
  ASSERT_EQ(kiln_model_output_info(m, 0, &out), KILN_OK);
  EXPECT_STREQ(in.name, "x");
  EXPECT_STREQ(out.name, "logits");
  EXPECT_EQ(in.dtype, KILN_DTYPE_F32);
  ASSERT_EQ(out.rank, 2u);
  EXPECT_EQ(out.shape[0], 4);
  EXPECT_EQ(out.shape[1], 5);
  EXPECT_EQ(kiln_model_input_info(m, 1, &in), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kiln_last_error(), testing::HasSubstr("input 1 does not exist"));
  std::vector<float> y(20);
  const void* inputs[] = {xs.data()};
  void* outputs[] = {y.data()};
  ASSERT_EQ(kiln_model_run(m, inputs, outputs), KILN_OK) << kiln_last_error();
  kiln_model_free(m);

  // The module run eagerly (JIT path) is the oracle.
  const std::vector<float> expected = model.forward(x).to_vector();
  ASSERT_EQ(expected.size(), y.size());
  for (size_t i = 0; i < y.size(); ++i) EXPECT_FLOAT_EQ(y[i], expected[i]) << i;
}

// A module traced under bf16 autocast: its matmuls are bf16 GEMM steps in the blob (the f32
// micro-kernels on widened operands), and the blob gives the JIT's bits.
TEST(AotTest, AutocastModuleCompilesToABlobWithTheJitsBits) {
  using B = Cpu;
  B::Device device;
  SmallMlp<B> model = MakeSmallMlp(4);
  std::vector<float> xs(8 * 20);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 11) * 0.2f - 1.0f;
  auto x = Tensor<B, 2>::from_vector(xs, {8, 20}, device);
  amp::AutocastGuard autocast(ir::DType::kBF16);
  TracedGraph traced = trace(model, x);
  ASSERT_EQ(traced.graph.outputs().size(), 1u);
  const std::unique_ptr<Model> loaded = CompileAndLoad(traced);
  ASSERT_NE(loaded, nullptr);
  EXPECT_EQ(loaded->signature().outputs[0].dtype, "bf16");
  const std::vector<ir::TensorData> out = RunBlob(*loaded, {x.into_data()});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0] == model.forward(x).into_data());
}

// A module quantized with kiln::quant::quantize traces and compiles into a blob like any other:
// its int8 GEMM steps (with their epilogues) run in the blob with the JIT's bits, in the host
// section and in the x86-64-v3 and -v2 sections the blob carries.
TEST(AotTest, QuantizedModuleCompilesToABlobWithTheJitsBits) {
  using B = Cpu;
  B::Device device;
  SmallMlp<B> model = MakeSmallMlp(6);
  ir::TensorData calibration_inputs(ir::DType::kF32, {64, 20});
  for (int64_t i = 0; i < calibration_inputs.num_elements(); ++i) {
    calibration_inputs.SetDouble(i, static_cast<double>(i % 13) * 0.15 - 0.6);
  }
  data::DataLoader calibration =
      data::DataLoaderConfig(16).init(std::make_shared<data::InMemoryDataset>(
          calibration_inputs, ir::TensorData(ir::DType::kI64, {64})));
  const SmallMlp<B> q =
      quant::quantize(model, calibration, [&](const SmallMlp<B>& m, const data::Batch& batch) {
        return m.forward(batch.inputs_as<B, 2, Float>(device));
      });
  // 8 rows, and 64 (on an AMX host, the blob's tile kernels); the blob packs its int8 weights
  // when it loads, the JIT's lazy run packs them per call.
  for (const int64_t rows : {8, 64}) {
    SCOPED_TRACE(testing::Message() << rows << " rows");
    std::vector<float> xs(static_cast<size_t>(rows) * 20);
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 11) * 0.2f - 1.0f;
    auto x = Tensor<B, 2>::from_vector(xs, {rows, 20}, device);
    TracedGraph traced = trace(q, x);
    int integer_matmuls = 0;
    for (const ir::Node& node : traced.graph.nodes()) {
      integer_matmuls += node.op == ir::Op::kMatMul && node.attrs.accumulate == ir::DType::kI32;
    }
    EXPECT_EQ(integer_matmuls, 2);
    const std::unique_ptr<Model> loaded = CompileAndLoad(traced);
    ASSERT_NE(loaded, nullptr);
    const std::vector<ir::TensorData> out = RunBlob(*loaded, {x.into_data()});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(out[0] == q.forward(x).into_data());
  }
}

TEST(AotTest, TracedFunctionWithCapturedTensorAndTwoOutputs) {
  using B = Cpu;
  B::Device device;
  auto w = Tensor<B, 1>::from_vector(std::vector<float>{1.5f, -2.0f, 3.25f}, {3}, device);
  auto x = Tensor<B, 1>::from_vector(std::vector<float>{0.5f, -1.0f, 2.0f}, {3}, device);
  TracedGraph traced =
      trace([&w](const Tensor<B, 1>& a) { return std::make_tuple(a * w, a + w * w); }, x);
  ASSERT_EQ(traced.weights.size(), 1u);
  EXPECT_EQ(traced.weights[0].first, "weight0");
  ASSERT_EQ(traced.graph.outputs().size(), 2u);
  EXPECT_EQ(traced.graph.outputs()[1].name, "output1");
  aot::CompileOptions options;
  options.weights = traced.weights;
  absl::StatusOr<std::string> blob = aot::Compile(traced.graph, options);
  ASSERT_TRUE(blob.ok()) << blob.status();
  absl::StatusOr<std::unique_ptr<Model>> model = Model::LoadMemory(Bytes(*blob));
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ((*model)->signature().inputs.size(), 1u);
  EXPECT_EQ((*model)->signature().inputs[0].name, "input0");
  const std::vector<ir::TensorData> out = RunBlob(**model, {x.into_data()});
  ASSERT_EQ(out.size(), 2u);
  const std::vector<float> product = (x * w).to_vector(), sum = (x + w * w).to_vector();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(reinterpret_cast<const float*>(out[0].data())[i], product[i]);
    EXPECT_EQ(reinterpret_cast<const float*>(out[1].data())[i], sum[i]);
  }
}

TEST(AotTest, ForeignTripleSectionIsAarch64) {
  std::vector<ir::TensorData> args;
  ir::Graph g = Mlp(2, &args);
  aot::CompileOptions options;
  options.triples = {"aarch64-linux-gnu"};
  // One section for the host triple (the host's code, or the level KILN_CPU pins): two in all.
  options.cpu_levels = {runtime::cpu::CpuLevelName(*runtime::cpu::ProcessCpuLevel())};
  absl::StatusOr<std::string> blob = aot::Compile(g, options);
  ASSERT_TRUE(blob.ok()) << blob.status();
  absl::StatusOr<runtime::blob::BlobView> view = runtime::blob::ParseBlob(Bytes(*blob));
  ASSERT_TRUE(view.ok()) << view.status();
  const runtime::cpu::CpuBlobPlan* cpu = view->PlanOf<runtime::cpu::CpuBlobPlan>("cpu");
  ASSERT_NE(cpu, nullptr);
  ASSERT_EQ(cpu->code.size(), 2u);
  EXPECT_EQ(cpu->code[1].triple, "aarch64-unknown-linux-gnu");
  const auto& section = view->sections[static_cast<size_t>(cpu->code[1].section)];
  EXPECT_EQ(section.name, "cpu:aarch64-unknown-linux-gnu");
  // An ELF shared object for EM_AARCH64 (183).
  const char* code = blob->data() + section.offset;
  ASSERT_GT(section.size, 64u);
  EXPECT_EQ(std::memcmp(code,
                        "\x7f"
                        "ELF",
                        4),
            0);
  uint16_t machine;
  std::memcpy(&machine, code + 18, 2);
  EXPECT_EQ(machine, 183);
  EXPECT_EQ(cpu->code[1].vector_bits, 128);
  // The host still loads its own section from the two-target blob and matches the JIT.
  absl::StatusOr<std::unique_ptr<Model>> model = Model::LoadMemory(Bytes(*blob));
  ASSERT_TRUE(model.ok()) << model.status();
}

// Two models alive at once keep their own code, though their kernels have the same symbols (the
// code is dlopen'ed by a /proc/self/fd path, which must not be one the other model's still uses).
TEST(AotTest, TwoModelsLoadedAtOnceKeepTheirOwnCode) {
  const auto elementwise = [](ir::Op op) {
    ir::Builder b;
    ir::NodeId x = b.Parameter("x", F32({64}));
    b.Output(b.Binary(op, x, b.Fill(3.0, F32({64}))), "y");
    return *std::move(b).Build();
  };
  const ir::Graph add = elementwise(ir::Op::kAdd), mul = elementwise(ir::Op::kMul);
  const std::vector<ir::TensorData> args = {Random(F32({64}), 8)};
  std::vector<std::unique_ptr<Model>> models;
  for (const ir::Graph* g : {&add, &mul}) {
    absl::StatusOr<std::string> blob = aot::Compile(*g, aot::CompileOptions{});
    ASSERT_TRUE(blob.ok()) << blob.status();
    absl::StatusOr<std::unique_ptr<Model>> model = Model::LoadMemory(Bytes(*blob));
    ASSERT_TRUE(model.ok()) << model.status();
    models.push_back(*std::move(model));
  }
  EXPECT_EQ(RunBlob(*models[0], args)[0], RunJit(add, args)[0]);
  EXPECT_EQ(RunBlob(*models[1], args)[0], RunJit(mul, args)[0]);
}

// ---- KILN_CPU: the host section follows the pinned level, and the loader refuses a section
// above it as a machine of that level would. The level is fixed per process, so each level runs
// in a child process (AotCpuLevelChild) that loads this process's blob and compiles its own.

constexpr char kAotChildDir[] = "KILN_AOT_CPU_LEVEL_CHILD_DIR";

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

runtime::cpu::CodeTarget HostSection(const std::string& bytes) {
  absl::StatusOr<runtime::blob::BlobView> view = runtime::blob::ParseBlob(Bytes(bytes));
  EXPECT_TRUE(view.ok()) << view.status();
  const runtime::cpu::CpuBlobPlan* cpu =
      view.ok() ? view->PlanOf<runtime::cpu::CpuBlobPlan>("cpu") : nullptr;
  return cpu != nullptr && !cpu->code.empty() ? cpu->code[0] : runtime::cpu::CodeTarget{};
}

TEST(AotCpuLevelChild, LoadsWhatItsLevelRunsAndCompilesForIt) {
  const char* dir = std::getenv(kAotChildDir);
  if (dir == nullptr) GTEST_SKIP() << "run by AotTest.HostSectionFollowsKilnCpu";
  const absl::StatusOr<runtime::cpu::CpuLevel>& level = runtime::cpu::ProcessCpuLevel();
  ASSERT_TRUE(level.ok()) << level.status();
  std::vector<ir::TensorData> args;
  const ir::Graph g = Mlp(3, &args);

  // The parent's blob of the host's code alone: refused exactly when that code needs more than
  // this level.
  const std::string host_path = absl::StrCat(dir, "/host.kiln");
  const runtime::cpu::CodeTarget parent = HostSection(ReadFile(host_path));
  absl::StatusOr<std::unique_ptr<Model>> host_model = Model::LoadFile(host_path);
  const bool runs = runtime::cpu::CodeRunsAtLevel(*level, parent.features);
  ASSERT_EQ(host_model.ok(), runs)
      << parent.cpu << " " << parent.features << ": " << host_model.status();
  if (!runs) {
    EXPECT_EQ(host_model.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(host_model.status().message(),
                testing::HasSubstr(absl::StrCat("no code for this CPU (x86_64 as KILN_CPU=",
                                                runtime::cpu::CpuLevelName(*level))));
  }
  // Its blob of the host's code and every x86-64 level loads at every level, taking the
  // level's own section, which computes what this level's JIT does, bit for bit.
  const std::vector<ir::TensorData> expected = RunJit(g, args);
  {
    absl::StatusOr<std::unique_ptr<Model>> all = Model::LoadFile(absl::StrCat(dir, "/all.kiln"));
    ASSERT_TRUE(all.ok()) << all.status();
    EXPECT_THAT((*all)->device(),
                testing::HasSubstr(absl::StrCat(", ", runtime::cpu::CpuLevelName(*level), ")")));
    const std::vector<ir::TensorData> actual = RunBlob(**all, args);
    ASSERT_EQ(expected.size(), actual.size());
    for (size_t k = 0; k < expected.size(); ++k) {
      EXPECT_EQ(std::memcmp(expected[k].data(), actual[k].data(), expected[k].size_bytes()), 0);
    }
  }

  // Its own blob: compiled for the level, and bit for bit the JIT's results at the same level.
  const std::string own_path = absl::StrCat(dir, "/", runtime::cpu::CpuLevelName(*level), ".kiln");
  ASSERT_TRUE(aot::CompileToFile(g, aot::CompileOptions{}, own_path).ok());
  const runtime::cpu::CodeTarget own = HostSection(ReadFile(own_path));
  EXPECT_EQ(own.cpu, runtime::cpu::CpuLevelName(*level));
  EXPECT_EQ(own.vector_bits, runtime::cpu::LevelAllows(*level, "avx512f") ? 512
                             : runtime::cpu::LevelAllows(*level, "avx")   ? 256
                                                                          : 128);
  EXPECT_EQ(own.fma, runtime::cpu::LevelAllows(*level, "fma"));
  absl::StatusOr<std::unique_ptr<Model>> model = Model::LoadFile(own_path);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<ir::TensorData> actual = RunBlob(**model, args);
  ASSERT_EQ(expected.size(), actual.size());
  for (size_t k = 0; k < expected.size(); ++k) {
    EXPECT_EQ(std::memcmp(expected[k].data(), actual[k].data(), expected[k].size_bytes()), 0);
  }
}

TEST(AotTest, HostSectionFollowsKilnCpu) {
  const absl::StatusOr<runtime::cpu::CpuLevel>& here = runtime::cpu::ProcessCpuLevel();
  ASSERT_TRUE(here.ok()) << here.status();
  const std::string dir =
      absl::StrCat(testing::TempDir(), "/kiln_aot_cpu_level_", static_cast<int64_t>(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::vector<ir::TensorData> args;
  const ir::Graph g = Mlp(3, &args);
  aot::CompileOptions host_only;
  host_only.cpu_levels = {"host"};
  ASSERT_TRUE(aot::CompileToFile(g, host_only, dir + "/host.kiln").ok());
  aot::CompileOptions all;
  all.cpu_levels = {"x86-64-v2", "host", "x86-64-v4", "x86-64-v3"};  // (stored best first)
  ASSERT_TRUE(aot::CompileToFile(g, all, dir + "/all.kiln").ok());
  const std::vector<ir::TensorData> jit = RunJit(g, args);
  for (runtime::cpu::CpuLevel level :
       {runtime::cpu::CpuLevel::kX86_64V2, runtime::cpu::CpuLevel::kX86_64V3,
        runtime::cpu::CpuLevel::kX86_64V4}) {
    const char* name = runtime::cpu::CpuLevelName(level);
    if (!runtime::cpu::CheckLevelRunsHere(level).ok()) continue;
    const child_process::ChildRun run =
        child_process::RunTestInChild("AotCpuLevelChild.LoadsWhatItsLevelRunsAndCompilesForIt",
                                      {{kAotChildDir, dir}, {"KILN_CPU", name}});
    ASSERT_TRUE(run.passed_one()) << "KILN_CPU=" << name << ":\n" << run.output;
    // The child's blob runs here when this process's level has the child's, with results within
    // rounding of this process's JIT (other vector widths sum in other orders).
    const std::string path = absl::StrCat(dir, "/", name, ".kiln");
    absl::StatusOr<std::unique_ptr<Model>> model = Model::LoadFile(path);
    ASSERT_EQ(model.ok(),
              runtime::cpu::CodeRunsAtLevel(*here, HostSection(ReadFile(path)).features))
        << model.status();
    if (!model.ok()) continue;
    const std::vector<ir::TensorData> blob = RunBlob(**model, args);
    ASSERT_EQ(blob.size(), jit.size());
    const std::vector<double> a = jit[0].ToDoubles(), b = blob[0].ToDoubles();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5) << name << " at " << i;
  }
  std::filesystem::remove_all(dir);
}

// By default an x86-64 host's blob holds the host's code and the three x86-64 levels, best first,
// in sections of their own; the host loads its own code, the JIT's, bit for bit.
TEST(AotTest, DefaultBlobHasEveryX86Level) {
  const absl::StatusOr<runtime::cpu::CpuLevel>& here = runtime::cpu::ProcessCpuLevel();
  ASSERT_TRUE(here.ok()) << here.status();
  if (*here != runtime::cpu::CpuLevel::kHost) GTEST_SKIP() << "KILN_CPU pins one level here";
  std::vector<ir::TensorData> args;
  const ir::Graph g = Mlp(3, &args);
  absl::StatusOr<std::string> blob = aot::Compile(g, aot::CompileOptions{});
  ASSERT_TRUE(blob.ok()) << blob.status();
  absl::StatusOr<runtime::blob::BlobView> view = runtime::blob::ParseBlob(Bytes(*blob));
  ASSERT_TRUE(view.ok()) << view.status();
  const runtime::cpu::CpuBlobPlan* cpu = view->PlanOf<runtime::cpu::CpuBlobPlan>("cpu");
  ASSERT_NE(cpu, nullptr);
  if (!absl::StartsWith(cpu->code[0].triple, "x86_64")) GTEST_SKIP() << "not an x86-64 host";
  ASSERT_EQ(cpu->code.size(), 4u);
  EXPECT_NE(cpu->code[0].cpu, "x86-64-v4");  // the host's own CPU name
  EXPECT_EQ(cpu->code[1].cpu, "x86-64-v4");
  EXPECT_EQ(cpu->code[2].cpu, "x86-64-v3");
  EXPECT_EQ(cpu->code[3].cpu, "x86-64-v2");
  EXPECT_EQ(cpu->code[1].vector_bits, 512);
  EXPECT_EQ(cpu->code[2].vector_bits, 256);
  EXPECT_EQ(cpu->code[3].vector_bits, 128);
  const std::string triple = cpu->code[0].triple;
  for (size_t t = 0; t < cpu->code.size(); ++t) {
    EXPECT_EQ(view->sections[static_cast<size_t>(cpu->code[t].section)].name,
              t == 0 ? "cpu:" + triple : absl::StrCat("cpu:", triple, "@", t));
  }
  absl::StatusOr<std::unique_ptr<Model>> model = Model::LoadMemory(Bytes(*blob));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->device(), absl::StrCat("cpu (", triple, ", ", cpu->code[0].cpu, ")"));
  const std::vector<ir::TensorData> expected = RunJit(g, args);
  const std::vector<ir::TensorData> actual = RunBlob(**model, args);
  ASSERT_EQ(expected.size(), actual.size());
  for (size_t k = 0; k < expected.size(); ++k) {
    EXPECT_EQ(std::memcmp(expected[k].data(), actual[k].data(), expected[k].size_bytes()), 0);
  }
  // Levels are checked by name.
  aot::CompileOptions bad;
  bad.cpu_levels = {"x86-64-v5"};
  EXPECT_THAT(aot::Compile(g, bad).status().message(),
              testing::HasSubstr("cpu level \"x86-64-v5\""));
}

TEST(AotTest, WeightErrorsNameTheWeight) {
  ir::Builder b;
  ir::NodeId x = b.Parameter("x", F32({2}));
  ir::NodeId w = b.Parameter("w", F32({2}));
  b.Output(b.Binary(ir::Op::kAdd, x, w));
  ir::Graph g = *std::move(b).Build();
  aot::CompileOptions options;
  options.weights = {{"nope", std::make_shared<ir::TensorData>(Random(F32({2}), 1))}};
  EXPECT_THAT(aot::Compile(g, options).status().message(),
              testing::HasSubstr("weight \"nope\" is not a parameter"));
  options.weights = {{"w", std::make_shared<ir::TensorData>(Random(F32({3}), 1))}};
  EXPECT_THAT(aot::Compile(g, options).status().message(),
              testing::HasSubstr("weight \"w\" is f32[3], the parameter is f32[2]"));
}

}  // namespace
}  // namespace kiln
