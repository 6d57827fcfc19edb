// ONNX import against golden data made outside kiln:
//  - models/<name>: PyTorch models exported by torch.onnx.export, with PyTorch's outputs
//    (make_fixtures.py; onnxruntime agreed with them when they were made);
//  - ops/<case>: single-node models (make_op_fixtures.py) with outputs from numpy/PyTorch
//    reference code, cross-checked with onnxruntime (ops/oracles.txt records which);
//  - opsets/<case>: single-node models at opsets 7 to 22 (make_opset_fixtures.py) for the
//    operators' versioned forms, with outputs from numpy code written from each version's spec.
// kiln's outputs, on the reference interpreter and on the Cpu backend, must match within 1e-4
// relative error. Plus the error paths: unsupported operators, malformed models, dynamic shapes.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/cpu/graph_compiler.h"
#include "frontend/onnx/import.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/interpreter.h"
#include "onnx/onnx_pb.h"

namespace kiln::onnx {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kDir = "tests/onnx/";

struct Case {
  ImportedModel model;
  std::vector<ir::TensorData> inputs;
  std::vector<ir::TensorData> expected;
};

std::vector<ir::TensorData> ReadSet(const std::string& folder, const std::string& prefix) {
  std::vector<ir::TensorData> out;
  for (int i = 0;; ++i) {
    std::string path = folder + "/test_data_set_0/" + prefix + "_" + std::to_string(i) + ".pb";
    if (!fs::exists(path)) break;
    absl::StatusOr<ir::TensorData> t = ReadTensorProtoFile(path);
    EXPECT_TRUE(t.ok()) << t.status();
    if (t.ok()) out.push_back(*std::move(t));
  }
  return out;
}

// Imports folder/model.onnx; inputs with dynamic dimensions take the test data's shapes.
absl::StatusOr<Case> Load(const std::string& folder) {
  Case c;
  c.inputs = ReadSet(folder, "input");
  c.expected = ReadSet(folder, "output");
  absl::StatusOr<ImportedModel> m = ImportFile(folder + "/model.onnx");
  if (!m.ok() && m.status().message().find("is dynamic") != std::string::npos) {
    ImportOptions options;
    ::onnx::ModelProto proto;
    std::ifstream in(folder + "/model.onnx", std::ios::binary);
    if (!proto.ParseFromIstream(&in)) return absl::InternalError("cannot reparse");
    int k = 0;
    for (const auto& vi : proto.graph().input()) {
      if (k < static_cast<int>(c.inputs.size()))
        options.input_shapes[vi.name()] = c.inputs[k++].shape();
    }
    m = ImportFile(folder + "/model.onnx", options);
  }
  if (!m.ok()) return m.status();
  c.model = *std::move(m);
  return c;
}

// |got - want| <= 1e-4 * |want| + 1e-5 * max|want| per element (the second term covers
// elements that are near zero after cancellation), and identical integer/bool outputs.
void ExpectClose(const ir::TensorData& got, const ir::TensorData& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  std::vector<double> g = got.ToDoubles(), w = want.ToDoubles();
  double scale = 0;
  for (double v : w) {
    if (std::isfinite(v)) scale = std::max(scale, std::abs(v));
  }
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    bool ok;
    if (ir::IsFloat(want.dtype())) {
      ok = (std::isnan(w[i]) && std::isnan(g[i])) || g[i] == w[i] ||
           std::abs(g[i] - w[i]) <= 1e-4 * std::abs(w[i]) + 1e-5 * scale;
    } else {
      ok = g[i] == w[i];
    }
    if (!ok && ++bad <= 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", expected " << w[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << g.size() << " elements differ";
}

void RunAndCompare(const std::string& folder, bool cpu) {
  SCOPED_TRACE(folder);
  absl::StatusOr<Case> c = Load(folder);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<std::vector<ir::TensorData>> args = c->model.Arguments(c->inputs);
  ASSERT_TRUE(args.ok()) << args.status();
  absl::StatusOr<std::vector<ir::TensorData>> ref = ir::Interpret(c->model.graph, *args);
  ASSERT_TRUE(ref.ok()) << ref.status();
  ASSERT_EQ(ref->size(), c->expected.size());
  for (size_t i = 0; i < ref->size(); ++i) {
    ExpectClose((*ref)[i], c->expected[i], folder + " reference output " + std::to_string(i));
  }
  if (!cpu) return;
  std::vector<std::shared_ptr<const ir::TensorData>> shared;
  for (auto& a : *args) shared.push_back(std::make_shared<const ir::TensorData>(std::move(a)));
  absl::StatusOr<std::vector<ir::TensorData>> out =
      codegen::cpu::CompileAndRun(c->model.graph, shared);
  ASSERT_TRUE(out.ok()) << out.status();
  for (size_t i = 0; i < out->size(); ++i) {
    ExpectClose((*out)[i], c->expected[i], folder + " cpu output " + std::to_string(i));
  }
}

class Models : public ::testing::TestWithParam<std::string> {};

TEST_P(Models, ReferenceAndCpuMatchPyTorch) { RunAndCompare(kDir + "models/" + GetParam(), true); }

INSTANTIATE_TEST_SUITE_P(Onnx, Models,
                         ::testing::Values("mlp", "cnn", "transformer", "transformer13", "resblock",
                                           "dwsep", "upsample"));

// The same models exported by PyTorch 2.x with its defaults (make_torch2_fixtures.py: the
// dynamo exporter, opset 20, IR 10, weights as external data, a symbolic batch).
class Torch2Models : public ::testing::TestWithParam<std::string> {};

TEST_P(Torch2Models, ReferenceAndCpuMatchPyTorch) {
  // A copy with symlinks followed: under Bazel the data files are symlinks out of their folder,
  // which the importer rightly refuses for external data.
  const fs::path copy =
      fs::temp_directory_path() / ("kiln_torch2_" + GetParam() + "_" + std::to_string(::getpid()));
  fs::remove_all(copy);
  fs::copy(kDir + "models_torch2/" + GetParam(), copy, fs::copy_options::recursive);
  RunAndCompare(copy.string(), true);
  absl::StatusOr<Case> c = Load(copy.string());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.opset_version, 20);
  EXPECT_THAT(c->model.producer, HasSubstr("pytorch"));
  EXPECT_TRUE(fs::exists(copy / "model.onnx.data"));
  fs::remove_all(copy);
}

INSTANTIATE_TEST_SUITE_P(Onnx, Torch2Models,
                         ::testing::Values("mlp", "cnn", "transformer", "resblock", "dwsep",
                                           "upsample"));

std::vector<std::string> OpCases() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(kDir + "ops")) {
    if (e.is_directory()) names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Every single-operator case, on both backends.
TEST(OnnxOps, EveryCaseMatchesItsOracle) {
  std::vector<std::string> names = OpCases();
  ASSERT_GE(names.size(), 60u);
  for (const std::string& name : names) RunAndCompare(kDir + "ops/" + name, true);
}

std::vector<std::string> OpsetCases() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(kDir + "opsets")) {
    if (e.is_directory()) names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Every versioned-rule case (old attribute forms, Softmax's 2-D coercion, Upsample, Resize by
// version, ...), on both backends; each model's opset is the one its name ends in.
TEST(OnnxOpsets, EveryCaseMatchesItsOracle) {
  std::vector<std::string> names = OpsetCases();
  ASSERT_GE(names.size(), 50u);
  std::set<int64_t> opsets;
  for (const std::string& name : names) {
    RunAndCompare(kDir + "opsets/" + name, true);
    absl::StatusOr<ImportedModel> m = ImportFile(kDir + "opsets/" + name + "/model.onnx");
    if (m.ok()) opsets.insert(m->opset_version);
  }
  // The oldest and newest opsets of kiln's definitions are among them, and older and newer ones.
  for (int64_t opset : {6, 7, 22, 23, 28}) EXPECT_TRUE(opsets.count(opset)) << opset;
}

TEST(OnnxImport, WeightsAreNamedParameters) {
  absl::StatusOr<ImportedModel> m = ImportFile(kDir + "models/mlp/model.onnx");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->input_names, std::vector<std::string>{"input_0"});
  EXPECT_EQ(m->output_names, std::vector<std::string>{"output_0"});
  for (const char* name : {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}) {
    EXPECT_TRUE(m->weights.count(name)) << name;
    EXPECT_NE(m->graph.FindParameter(name), ir::kInvalidNode) << name;
  }
  EXPECT_EQ(m->weights.at("fc1.weight").shape(), (ir::Shape{32, 12}));
  EXPECT_EQ(m->opset_version, 13);
  EXPECT_THAT(m->producer, HasSubstr("pytorch"));
  // Baked in as constants instead: no parameter but the input, same values.
  ImportOptions options;
  options.weights_as_parameters = false;
  absl::StatusOr<ImportedModel> baked = ImportFile(kDir + "models/mlp/model.onnx", options);
  ASSERT_TRUE(baked.ok()) << baked.status();
  EXPECT_TRUE(baked->weights.empty());
  EXPECT_EQ(baked->graph.Parameters().size(), 1u);
  std::vector<ir::TensorData> x = ReadSet(kDir + "models/mlp", "input");
  auto a = ir::Interpret(m->graph, *m->Arguments(x));
  auto b = ir::Interpret(baked->graph, *baked->Arguments(x));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)[0], (*b)[0]);
}

// PyTorch's transformer export computes reshape targets with Shape → Gather → Unsqueeze →
// Concat chains; with static shapes these fold during import and no integer value is left.
TEST(OnnxImport, ShapeSubgraphsFoldAway) {
  for (const char* name : {"transformer", "transformer13"}) {
    absl::StatusOr<ImportedModel> m = ImportFile(kDir + "models/" + name + "/model.onnx");
    ASSERT_TRUE(m.ok()) << m.status();
    ::onnx::ModelProto proto;
    std::ifstream in(kDir + "models/" + name + "/model.onnx", std::ios::binary);
    ASSERT_TRUE(proto.ParseFromIstream(&in));
    int shape_nodes = 0;
    for (const auto& n : proto.graph().node()) shape_nodes += n.op_type() == "Shape";
    EXPECT_GT(shape_nodes, 0) << name << ": the fixture should exercise shape subgraphs";
    for (const ir::Node& n : m->graph.nodes()) {
      EXPECT_FALSE(ir::IsInteger(n.type.dtype))
          << name << ": " << ir::OpName(n.op) << " : " << ir::TypeToString(n.type);
      EXPECT_NE(n.op, ir::Op::kGather) << name;
    }
  }
}

TEST(OnnxImport, DynamicBatchNeedsAShape) {
  absl::StatusOr<ImportedModel> m = ImportFile(kDir + "models/cnn/model.onnx");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("input 'input_0'"));
  EXPECT_THAT(m.status().message(), HasSubstr("dimension 0 is dynamic ('batch')"));
  EXPECT_THAT(m.status().message(), HasSubstr("input_shapes"));
  ImportOptions options;
  options.input_shapes["input_0"] = {64, 3, 16, 16};
  m = ImportFile(kDir + "models/cnn/model.onnx", options);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->graph.node(m->graph.outputs()[0].node).type.shape, (ir::Shape{64, 10}));
  options.input_shapes["input_0"] = {64, 4, 16, 16};  // contradicts the fixed channel count
  m = ImportFile(kDir + "models/cnn/model.onnx", options);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("fixed dimension 1 (3)"));
  options.input_shapes = {{"nope", {1}}};
  m = ImportFile(kDir + "models/cnn/model.onnx", options);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("'nope'"));
}

// ---- Hand-made models for the error paths ----------------------------------------------------

::onnx::ModelProto Model(int opset = 13) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  auto* g = m.mutable_graph();
  g->set_name("g");
  auto* in = g->add_input();
  in->set_name("x");
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(::onnx::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_value(2);
  tt->mutable_shape()->add_dim()->set_dim_value(3);
  return m;
}

::onnx::NodeProto* AddNode(::onnx::ModelProto& m, const std::string& op, const std::string& name,
                           std::vector<std::string> inputs, std::vector<std::string> outputs) {
  auto* n = m.mutable_graph()->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (auto& i : inputs) n->add_input(i);
  for (auto& o : outputs) n->add_output(o);
  return n;
}

void AddOutput(::onnx::ModelProto& m, const std::string& name) {
  m.mutable_graph()->add_output()->set_name(name);
}

absl::Status Import(const ::onnx::ModelProto& m) {
  return ImportBytes(m.SerializeAsString()).status();
}

// A QDQ model (what onnxruntime's quantizer writes): x quantized to u8 and dequantized, a MatMul
// with a weight stored as i8 and dequantized per column (axis 1), the result quantized to u8 and
// dequantized. The MatMul imports as an integer contraction (matmul {accumulate=i32}) times the
// two scales, the QuantizeLinear after it becomes the int8 GEMM's epilogue on the CPU, and the
// output is within one output step of the float computation of the QDQ graph.
TEST(OnnxImport, QdqMatMulRunsAsAnIntegerContraction) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(13);
  auto* g = m.mutable_graph();
  g->set_name("qdq");
  auto* in = g->add_input();
  in->set_name("x");
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(::onnx::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_value(5);
  tt->mutable_shape()->add_dim()->set_dim_value(12);
  const auto scalar = [&](const std::string& name, int type, double value) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(type);
    if (type == ::onnx::TensorProto::FLOAT) {
      t->add_float_data(static_cast<float>(value));
    } else {
      t->add_int32_data(static_cast<int32_t>(value));
    }
  };
  scalar("xs", ::onnx::TensorProto::FLOAT, 0.02);
  scalar("xz", ::onnx::TensorProto::UINT8, 10);
  scalar("ys", ::onnx::TensorProto::FLOAT, 0.05);
  scalar("yz", ::onnx::TensorProto::UINT8, 128);
  std::mt19937 rng(3);
  std::vector<int8_t> w(12 * 4);
  for (int8_t& v : w) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  auto* wt = g->add_initializer();
  wt->set_name("w");
  wt->set_data_type(::onnx::TensorProto::INT8);
  wt->add_dims(12);
  wt->add_dims(4);
  wt->set_raw_data(w.data(), w.size());
  const std::vector<float> w_scale = {0.01f, 0.02f, 0.005f, 0.03f};
  auto* ws = g->add_initializer();
  ws->set_name("ws");
  ws->set_data_type(::onnx::TensorProto::FLOAT);
  ws->add_dims(4);
  for (float v : w_scale) ws->add_float_data(v);
  AddNode(m, "QuantizeLinear", "qx", {"x", "xs", "xz"}, {"xq"});
  AddNode(m, "DequantizeLinear", "dqx", {"xq", "xs", "xz"}, {"xd"});
  AddNode(m, "DequantizeLinear", "dqw", {"w", "ws"}, {"wd"});  // axis 1 by default
  AddNode(m, "MatMul", "mm", {"xd", "wd"}, {"y"});
  AddNode(m, "QuantizeLinear", "qy", {"y", "ys", "yz"}, {"yq"});
  AddNode(m, "DequantizeLinear", "dqy", {"yq", "ys", "yz"}, {"out"});
  AddOutput(m, "out");
  absl::StatusOr<ImportedModel> model = ImportBytes(m.SerializeAsString());
  ASSERT_TRUE(model.ok()) << model.status();
  int integer = 0, float_matmuls = 0;
  for (const ir::Node& n : model->graph.nodes()) {
    integer += n.op == ir::Op::kMatMul && n.attrs.accumulate.has_value();
    float_matmuls += n.op == ir::Op::kMatMul && !n.attrs.accumulate.has_value();
  }
  EXPECT_EQ(integer, 1);
  EXPECT_EQ(float_matmuls, 0);

  ir::TensorData x(ir::DType::kF32, {5, 12});
  for (int64_t i = 0; i < x.num_elements(); ++i) x.SetDouble(i, (i * 37 % 101) / 20.0 - 0.2);
  absl::StatusOr<std::vector<ir::TensorData>> args = model->Arguments({x});
  ASSERT_TRUE(args.ok()) << args.status();
  absl::StatusOr<std::vector<ir::TensorData>> ref = ir::Interpret(model->graph, *args);
  ASSERT_TRUE(ref.ok()) << ref.status();
  absl::StatusOr<std::shared_ptr<const codegen::cpu::CompiledGraph>> compiled =
      codegen::cpu::CompileGraph(model->graph);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ((*compiled)->num_gemm_steps, 1);
  std::vector<std::shared_ptr<const ir::TensorData>> shared;
  for (const ir::TensorData& a : *args) shared.push_back(std::make_shared<const ir::TensorData>(a));
  absl::StatusOr<std::vector<ir::TensorData>> cpu =
      codegen::cpu::RunCompiledGraph(**compiled, shared);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_TRUE((*cpu)[0] == (*ref)[0]);  // the int8 GEMM's epilogue is the graph's f32 ops
  // The QDQ graph in double: dequantized operands multiplied, quantized, dequantized.
  for (int64_t r = 0; r < 5; ++r) {
    for (int64_t c = 0; c < 4; ++c) {
      double y = 0;
      for (int64_t k = 0; k < 12; ++k) {
        const double xq =
            std::clamp(std::nearbyint(x.GetDouble(r * 12 + k) / 0.02f) + 10, 0.0, 255.0);
        y +=
            (xq - 10) * 0.02f * w[static_cast<size_t>(k * 4 + c)] * w_scale[static_cast<size_t>(c)];
      }
      const double want = (std::clamp(std::nearbyint(y / 0.05f) + 128, 0.0, 255.0) - 128) * 0.05f;
      EXPECT_NEAR((*ref)[0].GetDouble(r * 4 + c), want, 0.05 * 1.01) << r << ", " << c;
    }
  }
}

// TopK on the interpreter and the CPU backend: largest and smallest, ties in index order (as
// ONNX specifies), the Indices output as i64.
TEST(OnnxImport, TopKTiesKeepTheLowerIndex) {
  for (const bool largest : {true, false}) {
    SCOPED_TRACE(largest ? "largest" : "smallest");
    auto m = Model();
    auto* k = m.mutable_graph()->add_initializer();
    k->set_name("k");
    k->set_data_type(::onnx::TensorProto::INT64);
    k->add_dims(1);
    k->add_int64_data(2);
    auto* topk = AddNode(m, "TopK", "topk", {"x", "k"}, {"values", "indices"});
    auto* attr = topk->add_attribute();
    attr->set_name("largest");
    attr->set_type(::onnx::AttributeProto::INT);
    attr->set_i(largest ? 1 : 0);
    AddOutput(m, "values");
    AddOutput(m, "indices");
    absl::StatusOr<ImportedModel> model = ImportBytes(m.SerializeAsString());
    ASSERT_TRUE(model.ok()) << model.status();
    const std::vector<double> x_values = {1, 5, 1, 4, 4, 7};
    absl::StatusOr<ir::TensorData> x =
        ir::TensorData::FromDoubles(ir::DType::kF32, {2, 3}, x_values);
    ASSERT_TRUE(x.ok());
    const std::vector<ir::TensorData> args = {*x};
    absl::StatusOr<std::vector<ir::TensorData>> want = ir::Interpret(model->graph, args);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_EQ(want->size(), 2u);
    EXPECT_EQ((*want)[0].shape(), (ir::Shape{2, 2}));
    EXPECT_EQ((*want)[1].dtype(), ir::DType::kI64);
    const std::vector<double> values =
        largest ? std::vector<double>{5, 1, 7, 4} : std::vector<double>{1, 1, 4, 4};
    const std::vector<double> indices =
        largest ? std::vector<double>{1, 0, 2, 0} : std::vector<double>{0, 2, 0, 1};
    EXPECT_EQ((*want)[0].ToDoubles(), values);
    EXPECT_EQ((*want)[1].ToDoubles(), indices);
    const std::vector<std::shared_ptr<const ir::TensorData>> shared = {
        std::make_shared<const ir::TensorData>(*x)};
    absl::StatusOr<std::vector<ir::TensorData>> cpu =
        codegen::cpu::CompileAndRun(model->graph, shared);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    EXPECT_EQ((*cpu)[0].ToDoubles(), values);
    EXPECT_EQ((*cpu)[1].ToDoubles(), indices);
  }
}

TEST(OnnxErrors, EveryUnsupportedOperatorInOneMessage) {
  auto m = Model();
  AddNode(m, "Relu", "r", {"x"}, {"a"});
  AddNode(m, "NonMaxSuppression", "nms1", {"a"}, {"b"});
  AddNode(m, "NonZero", "nz", {"b"}, {"c"});
  AddNode(m, "NonMaxSuppression", "nms2", {"c"}, {"d"});
  auto* custom = AddNode(m, "Thing", "t", {"d"}, {"e"});
  custom->set_domain("com.example");
  AddOutput(m, "e");
  absl::Status s = Import(m);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), HasSubstr("NonMaxSuppression (nodes nms1, nms2)"));
  EXPECT_THAT(s.message(), HasSubstr("NonZero (node nz)"));
  EXPECT_THAT(s.message(), HasSubstr("com.example::Thing (node t)"));
  EXPECT_THAT(s.message(), ::testing::Not(HasSubstr("Relu")));
}

// SupportedOperators() (what the conformance runner, tests/onnx/conformance, holds kiln to) is
// exactly what the importer accepts: each listed operator passes the unsupported-operator check
// (its one-node model fails later, for its missing inputs, if at all), and others do not.
TEST(OnnxImport, SupportedOperatorsAreTheImportersTable) {
  std::vector<std::string> ops = SupportedOperators();
  EXPECT_TRUE(std::is_sorted(ops.begin(), ops.end()));
  EXPECT_EQ(std::adjacent_find(ops.begin(), ops.end()), ops.end());
  EXPECT_THAT(ops, ::testing::IsSupersetOf({"Add", "Conv", "MatMul", "Reshape", "TopK"}));
  EXPECT_THAT(ops, ::testing::Not(::testing::Contains("NonZero")));
  for (const std::string& op : ops) {
    auto m = Model();
    AddNode(m, op, "n", {"x"}, {"y"});
    AddOutput(m, "y");
    absl::Status s = Import(m);
    EXPECT_THAT(s.message(), ::testing::Not(HasSubstr("unsupported ONNX operators"))) << op;
  }
}

// README.md and docs/onnx.md state the number of supported operators; they must state this one.
// (The docs are not in Bazel's runfiles of this test: there it skips.)
TEST(OnnxImport, DocsStateTheNumberOfSupportedOperators) {
  const std::string count = std::to_string(SupportedOperators().size());
  for (const auto& [path, phrase] :
       {std::pair<std::string, std::string>{"README.md", "mean the same; " + count + " operators)"},
        {"docs/onnx.md", "\n" + count + " operators. \"in\" = "}}) {
    std::ifstream in(path);
    if (!in) GTEST_SKIP() << path << " is not in this test's files (Bazel)";
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_THAT(text.str(), HasSubstr(phrase)) << path;
  }
}

TEST(OnnxErrors, MissingAndUndefinedInputsNameTheNode) {
  auto m = Model();
  AddNode(m, "Add", "add1", {"x", "nowhere"}, {"y"});
  AddOutput(m, "y");
  absl::Status s = Import(m);
  EXPECT_THAT(s.message(), HasSubstr("node 'add1' (Add): input 1: 'nowhere' is not defined"));
  auto m2 = Model();
  AddNode(m2, "Add", "add2", {"x"}, {"y"});
  AddOutput(m2, "y");
  EXPECT_THAT(Import(m2).message(), HasSubstr("node 'add2' (Add): input 1 is missing"));
  auto m3 = Model();
  AddNode(m3, "Relu", "r", {"x"}, {"y"});
  AddOutput(m3, "z");
  EXPECT_THAT(Import(m3).message(), HasSubstr("output 'z'"));
}

::onnx::TensorProto* AddInit(::onnx::ModelProto& m, const std::string& name,
                             std::vector<int64_t> dims) {
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(::onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  return t;
}

TEST(OnnxErrors, BadTensors) {
  {
    auto m = Model();
    AddInit(m, "w", {2, 3})->set_raw_data(std::string(20, '\0'));  // needs 24 bytes
    AddNode(m, "Add", "a", {"x", "w"}, {"y"});
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(),
                HasSubstr("initializer 'w': raw_data has 20 bytes, but 6 elements of f32 need 24"));
  }
  {
    auto m = Model();
    auto* t = AddInit(m, "w", {2, 3});
    for (int i = 0; i < 5; ++i) t->add_float_data(1.0f);
    AddNode(m, "Add", "a", {"x", "w"}, {"y"});
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(), HasSubstr("float_data has 5 values, but dims [2,3] need 6"));
  }
  {
    auto m = Model();
    auto* t = AddInit(m, "w", {2, 3});
    t->set_data_location(::onnx::TensorProto::EXTERNAL);
    auto* e = t->add_external_data();
    e->set_key("location");
    e->set_value("weights.bin");
    AddNode(m, "Add", "a", {"x", "w"}, {"y"});
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(), HasSubstr("initializer 'w': stored as external data"));
  }
  {
    auto m = Model();
    AddInit(m, "w", {-2, 3});
    AddNode(m, "Add", "a", {"x", "w"}, {"y"});
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(), HasSubstr("initializer 'w': bad dimension -2"));
  }
  {
    auto m = Model();
    auto* t = AddInit(m, "w", {1});
    t->set_data_type(::onnx::TensorProto::STRING);
    t->add_string_data("hi");
    AddNode(m, "Add", "a", {"x", "w"}, {"y"});
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(), HasSubstr("element type STRING is not supported"));
  }
}

TEST(OnnxErrors, InconsistentNodesNameTheNode) {
  {
    auto m = Model();
    auto* shape = AddInit(m, "s", {1});
    shape->set_data_type(::onnx::TensorProto::INT64);
    shape->add_int64_data(7);
    AddNode(m, "Reshape", "rs", {"x", "s"}, {"y"});
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(),
                HasSubstr("node 'rs' (Reshape): cannot reshape f32[2,3] to [7]"));
  }
  {
    auto m = Model();
    AddInit(m, "w", {4, 5})->set_raw_data(std::string(80, '\0'));
    AddNode(m, "MatMul", "mm", {"x", "w"}, {"y"});
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(),
                HasSubstr("node 'mm' (MatMul): contracting dimensions differ"));
  }
  {
    // A reshape target computed from a model input cannot be static.
    auto m = Model();
    auto* in = m.mutable_graph()->add_input();
    in->set_name("dims");
    auto* tt = in->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(::onnx::TensorProto::INT64);
    tt->mutable_shape()->add_dim()->set_dim_value(1);
    AddNode(m, "Reshape", "rs", {"x", "dims"}, {"y"});
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(), HasSubstr("must be known at import time"));
  }
}

TEST(OnnxErrors, MalformedBytesAndOpsets) {
  EXPECT_THAT(ImportBytes("this is not a model").status().message(), HasSubstr("protobuf"));
  EXPECT_THAT(ImportBytes("").status().message(), HasSubstr("no graph"));
  for (int opset : {1, 6, 7, 22, 23, 28}) {
    auto m = Model(opset);
    AddNode(m, "Relu", "r", {"x"}, {"y"});
    AddOutput(m, "y");
    absl::Status s = Import(m);
    if (opset == 1) {
      // Relu-1 (consumed_inputs) is not Relu-6, the definition of opset 7.
      EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
      EXPECT_THAT(s.message(), HasSubstr("node 'r' (Relu): Relu-1 (the version in opset 1) "
                                         "differs from Relu-6 (opset 7), the oldest definition "
                                         "kiln implements; export the model at opset 7 or newer"));
    } else {
      EXPECT_TRUE(s.ok()) << opset << ": " << s;
    }
  }
  {
    auto m = Model(29);
    AddNode(m, "Relu", "r", {"x"}, {"y"});
    AddOutput(m, "y");
    absl::Status s = Import(m);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(s.message(), HasSubstr("ONNX opset 29 is newer than kiln's operator table "
                                       "(opsets 1 to 28, from onnx "));
  }
  {
    auto m = Model(0);
    AddNode(m, "Relu", "r", {"x"}, {"y"});
    AddOutput(m, "y");
    EXPECT_EQ(Import(m).code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(ImportFile("tests/onnx/does_not_exist.onnx").status().code(),
            absl::StatusCode::kNotFound);
  // Every truncation of a real model fails cleanly or imports (protobuf may accept a prefix).
  std::ifstream in(kDir + "models/dwsep/model.onnx", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  for (size_t cut = 0; cut < bytes.size(); cut += 97) {
    (void)ImportBytes(std::string_view(bytes).substr(0, cut));
  }
}

::onnx::AttributeProto* AddAttr(::onnx::NodeProto* n, const std::string& name) {
  auto* a = n->add_attribute();
  a->set_name(name);
  return a;
}
void SetInts(::onnx::NodeProto* n, const std::string& name, std::vector<int64_t> v) {
  auto* a = AddAttr(n, name);
  a->set_type(::onnx::AttributeProto::INTS);
  for (int64_t i : v) a->add_ints(i);
}
void SetInt(::onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = AddAttr(n, name);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(v);
}
void SetString(::onnx::NodeProto* n, const std::string& name, const std::string& v) {
  auto* a = AddAttr(n, name);
  a->set_type(::onnx::AttributeProto::STRING);
  a->set_s(v);
}
void AddInt64s(::onnx::ModelProto& m, const std::string& name, std::vector<int64_t> v) {
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(::onnx::TensorProto::INT64);
  t->add_dims(static_cast<int64_t>(v.size()));
  for (int64_t i : v) t->add_int64_data(i);
}

// An operator newer (or older) than the model's opset names the node and the opset it needs;
// several in one message.
TEST(OnnxErrors, OperatorNotInTheModelsOpset) {
  {
    auto m = Model(17);
    AddNode(m, "Gelu", "g", {"x"}, {"a"});
    AddNode(m, "Mish", "mi", {"a"}, {"y"});
    AddOutput(m, "y");
    absl::Status s = Import(m);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("node 'g' (Gelu): Gelu exists from opset 20, but the model "
                                       "imports opset 17"));
    EXPECT_THAT(s.message(), HasSubstr("node 'mi' (Mish): Mish exists from opset 18"));
  }
  {
    auto m = Model(10);
    AddNode(m, "LessOrEqual", "le", {"x", "x"}, {"y"});
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(),
                HasSubstr("node 'le' (LessOrEqual): LessOrEqual exists from opset 12"));
  }
  {
    auto m = Model(11);
    AddNode(m, "Upsample", "up", {"x"}, {"y"});
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(),
                HasSubstr("node 'up' (Upsample): Upsample was removed in opset 10 (use Resize)"));
  }
}

// A model older or newer than the opsets whose definitions kiln implements (7 to 22) imports
// only where each operator's version means the same (OnnxOpsets runs those that do); the others
// are refused in one message, naming the node and both versions.
TEST(OnnxErrors, OperatorVersionOutsideKilnsDefinitions) {
  {
    // Abs-1 (consumed_inputs) differs from the Abs-6 of opset 7. (Add-1/-6, Gemm-6 and the other
    // definitions before 7 that kiln implements import: operator_versions.cc.)
    auto m = Model(5);
    AddNode(m, "Abs", "abs", {"x"}, {"a"});
    AddNode(m, "Add", "add", {"a", "x"}, {"y"});
    AddOutput(m, "y");
    absl::Status s = Import(m);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
    EXPECT_EQ(s.message(),
              "node 'abs' (Abs): Abs-1 (the version in opset 5) differs from Abs-6 (opset 7), the "
              "oldest definition kiln implements; export the model at opset 7 or newer");
  }
  {
    // The definitions after opset 22 that the lowerings implement too (operator_versions.cc):
    // DepthToSpace-28 (a function body only), SpaceToDepth-28's mode, QuantizeLinear-23's
    // precision, DequantizeLinear-23's output_dtype. (No supported operator's newer definition
    // is refused now; the message would read "X-28 (the version in opset 28) changed the
    // operator after X-13 (opset 22), the newest definition kiln implements".)
    auto m = Model(28);
    auto* in = m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type();
    in->mutable_shape()->add_dim()->set_dim_value(4);
    in->mutable_shape()->add_dim()->set_dim_value(4);  // x: [2, 3, 4, 4]
    auto* s2d = AddNode(m, "SpaceToDepth", "s2d", {"x"}, {"a"});
    SetInt(s2d, "blocksize", 2);
    SetString(s2d, "mode", "CRD");
    SetInt(AddNode(m, "DepthToSpace", "d2s", {"a"}, {"b"}), "blocksize", 2);
    AddInit(m, "scale", {})->add_float_data(0.5f);
    SetInt(AddNode(m, "QuantizeLinear", "q", {"b", "scale"}, {"c"}), "precision",
           ::onnx::TensorProto::FLOAT);
    SetInt(AddNode(m, "DequantizeLinear", "dq", {"c", "scale"}, {"y"}), "output_dtype",
           ::onnx::TensorProto::DOUBLE);
    AddOutput(m, "y");
    EXPECT_TRUE(Import(m).ok()) << Import(m);
    m.mutable_opset_import(0)->set_version(22);
    EXPECT_THAT(Import(m).message(),
                HasSubstr("node 's2d' (SpaceToDepth): attribute 'mode' exists from opset 28, but "
                          "the model imports opset 22"));
    s2d->mutable_attribute(1)->set_s("XYZ");
    m.mutable_opset_import(0)->set_version(28);
    EXPECT_THAT(Import(m).message(), HasSubstr("node 's2d' (SpaceToDepth): bad mode 'XYZ'"));
    s2d->mutable_attribute(1)->set_s("DCR");
    m.mutable_graph()->mutable_node(2)->mutable_attribute(0)->set_i(::onnx::TensorProto::INT32);
    EXPECT_THAT(Import(m).message(),
                HasSubstr("node 'q' (QuantizeLinear): attribute 'precision' must be a float type"));
  }
  {
    // Cast-24 means Cast-21 unless the node sets the attribute it added.
    auto m = Model(24);
    auto* cast = AddNode(m, "Cast", "c", {"x"}, {"y"});
    auto* to = cast->add_attribute();
    to->set_name("to");
    to->set_type(::onnx::AttributeProto::INT);
    to->set_i(::onnx::TensorProto::INT32);
    AddOutput(m, "y");
    EXPECT_TRUE(Import(m).ok());
    auto* round = cast->add_attribute();
    round->set_name("round_mode");
    round->set_type(::onnx::AttributeProto::STRING);
    round->set_s("up");
    EXPECT_THAT(Import(m).message(),
                HasSubstr("node 'c' (Cast): attribute 'round_mode' exists from Cast-24, newer "
                          "than the Cast-21 (opset 22) that kiln implements"));
  }
}

// Add/Sub/Mul/Div/Pow, Gemm and PRelu before opset 7 broadcast only as their versions say
// (the opsets/ fixtures check the numbers); anything else names the shapes.
TEST(OnnxErrors, LegacyBroadcastNamesTheShapes) {
  auto model = [](int opset, const std::string& op, std::vector<int64_t> b_shape) {
    auto m = Model(opset);
    auto* in = m.mutable_graph()->add_input();
    in->set_name("b");
    auto* tt = in->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(::onnx::TensorProto::FLOAT);
    for (int64_t d : b_shape) tt->mutable_shape()->add_dim()->set_dim_value(d);
    AddNode(m, op, "n", {"x", "b"}, {"y"});
    AddOutput(m, "y");
    return m;
  };
  auto node = [](::onnx::ModelProto& m) { return m.mutable_graph()->mutable_node(0); };
  {
    auto m = model(6, "Add", {3});
    EXPECT_THAT(Import(m).message(),
                HasSubstr("node 'n' (Add): A [2,3] and B [3] differ and broadcast is not set"));
    SetInt(node(m), "broadcast", 1);
    EXPECT_TRUE(Import(m).ok());  // suffix-aligned
    SetInt(node(m), "axis", 0);
    EXPECT_THAT(Import(m).message(),
                HasSubstr("broadcast=1 cannot broadcast B [3] to A [2,3]: B's dim 0 (3) is "
                          "neither 1 nor A's dim 0 (2)"));
  }
  {
    auto m = model(6, "Mul", {2, 3, 1});
    SetInt(node(m), "broadcast", 1);
    EXPECT_THAT(Import(m).message(), HasSubstr("B has the higher rank"));
  }
  {
    auto m = model(6, "Sub", {1, 3});
    SetInt(node(m), "axis", 0);
    EXPECT_THAT(Import(m).message(), HasSubstr("attribute 'axis' is set without broadcast=1"));
  }
  {
    auto m = model(7, "Div", {3});
    SetInt(node(m), "broadcast", 1);
    EXPECT_THAT(Import(m).message(),
                HasSubstr("node 'n' (Div): attribute 'broadcast' exists only before opset 7"));
  }
  {
    auto m = model(6, "Add", {2, 3});
    SetInts(node(m), "consumed_inputs", {0, 0});
    EXPECT_THAT(Import(m).message(),
                HasSubstr("attribute 'consumed_inputs' exists only before opset 6"));
    auto m1 = model(1, "Add", {2, 3});
    SetInts(node(m1), "consumed_inputs", {0, 0});
    EXPECT_TRUE(Import(m1).ok());
  }
  {
    auto m = model(6, "Pow", {1, 2});
    SetInt(node(m), "broadcast", 1);
    EXPECT_THAT(Import(m).message(), HasSubstr("B's dim 1 (2) is neither 1 nor A's dim 1 (3)"));
  }
  {
    auto m = model(6, "PRelu", {2});
    EXPECT_THAT(Import(m).message(),
                HasSubstr("node 'n' (PRelu): slope [2] for X [2,3]: before opset 7 the slope has "
                          "one value, one per channel"));
    auto m2 = model(6, "PRelu", {3});  // per channel (X's dim 1)
    EXPECT_TRUE(Import(m2).ok());
  }
  {
    auto m = model(6, "Gemm", {3, 3});
    node(m)->add_input("c");
    AddInit(m, "c", {3})->set_raw_data(std::string(12, '\0'));
    EXPECT_THAT(Import(m).message(),
                HasSubstr("node 'n' (Gemm): C [3] is not (M, N) [2,3] and broadcast is not set"));
    SetInt(node(m), "broadcast", 1);
    EXPECT_TRUE(Import(m).ok());
  }
}

// A node written in another version's form than its model's opset is an error naming the
// attribute or input and the opsets, not a silently different computation.
TEST(OnnxErrors, AttributeOrInputOfAnotherVersion) {
  {
    // axes as an input before 13 (Squeeze), as an attribute from 13.
    auto m = Model(11);
    AddInt64s(m, "axes", {0});
    AddNode(m, "Unsqueeze", "u", {"x", "axes"}, {"y"});
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(),
                HasSubstr("node 'u' (Unsqueeze): input 1 (axes) exists from opset 13, but the "
                          "model imports opset 11"));
    auto m2 = Model(13);
    SetInts(AddNode(m2, "Unsqueeze", "u", {"x"}, {"y"}), "axes", {0});
    AddOutput(m2, "y");
    EXPECT_THAT(Import(m2).message(), HasSubstr("attribute 'axes' exists only before opset 13"));
  }
  {
    // ReduceMean's axes became an input in 18 (ReduceSum's in 13).
    auto m = Model(18);
    SetInts(AddNode(m, "ReduceMean", "rm", {"x"}, {"y"}), "axes", {1});
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(), HasSubstr("node 'rm' (ReduceMean): attribute 'axes' exists "
                                               "only before opset 18"));
    auto m2 = Model(17);
    AddInt64s(m2, "axes", {1});
    AddNode(m2, "ReduceMean", "rm", {"x", "axes"}, {"y"});
    AddOutput(m2, "y");
    EXPECT_THAT(Import(m2).message(), HasSubstr("input 1 (axes) exists from opset 18"));
  }
  {
    auto m = Model(18);
    AddNode(m, "Split", "sp", {"x"}, {"a", "b"});
    AddOutput(m, "a");
    EXPECT_THAT(Import(m).message(), HasSubstr("needs a split input or num_outputs"));
    auto m2 = Model(13);
    SetInt(AddNode(m2, "Split", "sp", {"x"}, {"a", "b"}), "num_outputs", 2);
    AddOutput(m2, "a");
    EXPECT_THAT(Import(m2).message(), HasSubstr("attribute 'num_outputs' exists from opset 18"));
    auto m3 = Model(13);
    SetInt(AddNode(m3, "Split", "sp", {"x"}, {"a", "b"}), "axis", 1);  // 3 does not split in 2
    AddOutput(m3, "a");
    EXPECT_THAT(Import(m3).message(), HasSubstr("does not split into 2 equal parts"));
  }
  {
    auto m = Model(9);
    AddInt64s(m, "k", {1});
    AddNode(m, "TopK", "t", {"x", "k"}, {"v", "i"});
    AddOutput(m, "v");
    EXPECT_THAT(Import(m).message(), HasSubstr("input 1 (K) exists from opset 10"));
    auto m2 = Model(10);
    AddInt64s(m2, "k", {1});
    SetInt(AddNode(m2, "TopK", "t", {"x", "k"}, {"v", "i"}), "largest", 0);
    AddOutput(m2, "v");
    EXPECT_THAT(Import(m2).message(), HasSubstr("attribute 'largest' exists from opset 11"));
  }
  {
    auto m = Model(10);
    SetInts(AddNode(m, "Pad", "p", {"x", "pads"}, {"y"}), "pads", {0, 0, 0, 0});
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(), HasSubstr("input 1 (pads) exists from opset 11"));
    auto m2 = Model(18);
    AddInt64s(m2, "pads", {0, 1, 0, 1});
    SetString(AddNode(m2, "Pad", "p", {"x", "pads"}, {"y"}), "mode", "wrap");
    AddOutput(m2, "y");
    EXPECT_THAT(Import(m2).message(), HasSubstr("mode 'wrap' exists from opset 19"));
  }
  {
    auto m = Model(11);
    SetInts(AddNode(m, "Slice", "s", {"x"}, {"y"}), "starts", {0});
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(), HasSubstr("attribute 'starts' exists only before opset 10"));
  }
  {
    auto m = Model(11);
    AddNode(m, "Clip", "c", {"x"}, {"y"})->add_attribute()->set_name("min");
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(), HasSubstr("attribute 'min' exists only before opset 11"));
  }
  {
    auto m = Model(10);
    AddNode(m, "Gemm", "gm", {"x", "x"}, {"y"});
    SetInt(m.mutable_graph()->mutable_node(0), "transB", 1);
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(), HasSubstr("input 2 (C) is required before opset 11"));
  }
  {
    auto m = Model(10);
    AddNode(m, "Equal", "eq", {"x", "x"}, {"y"});
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(), HasSubstr("Equal on f32 exists from opset 11"));
  }
  {
    auto m = Model(7);
    auto* in = m.mutable_graph()->add_input();
    in->set_name("z");
    auto* tt = in->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(::onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_value(3);
    AddNode(m, "Max", "mx", {"x", "z"}, {"y"});
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(), HasSubstr("broadcasting exists from opset 8"));
  }
}

TEST(OnnxErrors, TrainingOnlyAndUnsupportedVersionedForms) {
  using Edit = std::function<void(::onnx::NodeProto*)>;
  auto bn = [](int opset, int outputs, const Edit& edit) {
    auto m = Model(opset);
    for (const char* p : {"s", "b", "mean", "var"}) {
      AddInit(m, p, {3})->set_raw_data(std::string(12, '\0'));
    }
    std::vector<std::string> outs = {"y", "o1", "o2"};
    outs.resize(static_cast<size_t>(outputs));
    edit(AddNode(m, "BatchNormalization", "bn", {"x", "s", "b", "mean", "var"}, outs));
    AddOutput(m, "y");
    return Import(m);
  };
  // Training (batch statistics; running mean and variance outputs) from opset 14, and before
  // opset 7 (is_test=0); the outputs past Y of versions 7 and 9 stay refused.
  EXPECT_TRUE(bn(15, 1, [](auto* n) { SetInt(n, "training_mode", 1); }).ok());
  EXPECT_TRUE(bn(15, 3, [](auto* n) { SetInt(n, "training_mode", 1); }).ok());
  EXPECT_THAT(bn(15, 3, [](auto*) {}).message(),
              HasSubstr("output 1 ('o1') exists only in training (training_mode=1)"));
  EXPECT_TRUE(bn(6, 3, [](auto*) {}).ok());
  EXPECT_THAT(bn(6, 3, [](auto* n) { SetInt(n, "is_test", 1); }).message(),
              HasSubstr("output 1 ('o1') exists only in training (is_test=0)"));
  EXPECT_THAT(bn(7, 1, [](auto* n) { SetInt(n, "is_test", 1); }).message(),
              HasSubstr("attribute 'is_test' exists only before opset 7"));
  EXPECT_THAT(bn(9, 3, [](auto*) {}).message(),
              HasSubstr("output 1 ('o1') exists only in training"));
  EXPECT_THAT(bn(13, 1, [](auto* n) { SetInt(n, "training_mode", 0); }).message(),
              HasSubstr("attribute 'training_mode' exists from opset 14"));
  EXPECT_THAT(bn(9, 1, [](auto* n) { SetInt(n, "spatial", 1); }).message(),
              HasSubstr("attribute 'spatial' exists only before opset 9"));
  auto resize = [](int opset, const Edit& edit) {
    auto m = Model(opset);
    auto* t = AddInit(m, "scales", {2});
    t->add_float_data(0.5f);
    t->add_float_data(0.5f);
    edit(AddNode(m, "Resize", "rz", {"x", "", "scales"}, {"y"}));
    AddOutput(m, "y");
    return Import(m);
  };
  // Antialiased and cubic resizing import (the conformance cases check their numbers); cubic
  // exists from Resize-11.
  EXPECT_TRUE(resize(18, [](auto* n) {
                SetInt(n, "antialias", 1);
                SetString(n, "mode", "linear");
              }).ok());
  EXPECT_TRUE(resize(19, [](auto* n) { SetString(n, "mode", "cubic"); }).ok());
  {
    auto m = Model(10);
    auto* t = AddInit(m, "scales", {2});
    t->add_float_data(1.0f);
    t->add_float_data(2.0f);
    SetString(AddNode(m, "Resize", "rz", {"x", "scales"}, {"y"}), "mode", "cubic");
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(),
                HasSubstr("bad mode 'cubic' (Resize-10 has nearest and linear)"));
  }
  EXPECT_THAT(resize(17, [](auto* n) { SetInt(n, "antialias", 1); }).message(),
              HasSubstr("attribute 'antialias' exists from opset 18"));
  EXPECT_THAT(resize(13,
                     [](auto* n) {
                       SetString(n, "coordinate_transformation_mode", "tf_half_pixel_for_nn");
                     })
                  .message(),
              HasSubstr("coordinate_transformation_mode 'tf_half_pixel_for_nn' is not defined in "
                        "opset 13"));
  EXPECT_THAT(resize(18,
                     [](auto* n) {
                       SetString(n, "coordinate_transformation_mode", "half_pixel_symmetric");
                     })
                  .message(),
              HasSubstr("'half_pixel_symmetric' is not defined in opset 18"));
  // tf_crop_and_resize needs a roi of two entries per axis (the conformance cases check the
  // numbers, extrapolation_value's too).
  EXPECT_THAT(
      resize(13,
             [](auto* n) { SetString(n, "coordinate_transformation_mode", "tf_crop_and_resize"); })
          .message(),
      HasSubstr("node 'rz' (Resize): tf_crop_and_resize needs the roi input"));
  {
    auto m = Model(13);
    auto* roi = AddInit(m, "roi", {2});
    roi->add_float_data(0.f);
    roi->add_float_data(1.f);
    auto* t = AddInit(m, "scales", {2});
    t->add_float_data(1.0f);
    t->add_float_data(2.0f);
    SetString(AddNode(m, "Resize", "rz", {"x", "roi", "scales"}, {"y"}),
              "coordinate_transformation_mode", "tf_crop_and_resize");
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(), HasSubstr("roi has 2 entries for 2 axes (starts, then ends)"));
    roi->set_dims(0, 4);
    roi->add_float_data(1.f);
    roi->add_float_data(1.f);
    EXPECT_TRUE(Import(m).ok()) << Import(m);
  }
  {
    auto m = Model(12);
    auto* t = AddInit(m, "t", {});
    t->set_data_type(::onnx::TensorProto::BOOL);
    t->add_int32_data(1);
    AddNode(m, "Dropout", "d", {"x", "", "t"}, {"y"});
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(),
                HasSubstr("training_mode=true with ratio 0.5 drops elements at random"));
  }
}

// Inputs the fuzzer found crashing (tests/onnx/fuzz/regressions): each must import or fail
// cleanly, and an imported graph must run on the interpreter or fail cleanly.
TEST(OnnxErrors, FuzzRegressions) {
  int count = 0;
  for (const auto& e : fs::directory_iterator(kDir + "fuzz/regressions")) {
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    absl::StatusOr<ImportedModel> m = ImportBytes(ss.str());
    if (m.ok()) {
      std::vector<ir::TensorData> inputs;
      for (ir::NodeId id : m->graph.Parameters()) {
        const ir::Node& n = m->graph.node(id);
        if (!m->weights.count(n.attrs.name)) inputs.emplace_back(n.type.dtype, n.type.shape);
      }
      if (auto args = m->Arguments(inputs); args.ok()) (void)ir::Interpret(m->graph, *args);
    }
    ++count;
  }
  EXPECT_GT(count, 0);
}

// ---- Issue 15: LRN, Gelu, Mish, scatters, quantization, Compress, data-dependent shapes -------

int64_t ModelOpset(const std::string& path) {
  ::onnx::ModelProto proto;
  std::ifstream in(path, std::ios::binary);
  if (!proto.ParseFromIstream(&in)) return -1;
  for (const auto& o : proto.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") return o.version();
  }
  return -1;
}

// The numpy-only cases of make_op_fixtures_more.py, on both backends. Cases at opsets the
// importer does not take yet (Gelu 20, Mish 18, the scatter reductions max/min 18, Scatter 10)
// must fail with exactly the importer's opset error, and are counted as skipped.
TEST(OnnxOps, MoreCasesMatchTheirOracle) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(kDir + "ops_more")) {
    if (e.is_directory()) names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  ASSERT_GE(names.size(), 30u);
  std::vector<std::string> gated;
  for (const std::string& name : names) {
    const std::string folder = kDir + "ops_more/" + name;
    absl::StatusOr<ImportedModel> m = ImportFile(folder + "/model.onnx");
    const std::string opset_error =
        "ONNX opset " + std::to_string(ModelOpset(folder + "/model.onnx")) + " is not supported";
    if (!m.ok() && m.status().message().find(opset_error) != std::string::npos) {
      gated.push_back(name);
      continue;
    }
    RunAndCompare(folder, true);
  }
  if (!gated.empty()) {
    std::cout << "[  NOTE    ] " << gated.size()
              << " cases skipped, their opset is not imported yet: " << absl::StrJoin(gated, ", ")
              << "\n";
  }
}

void AddTypedInput(::onnx::ModelProto& m, const std::string& name, int elem_type,
                   std::vector<int64_t> dims) {
  auto* in = m.mutable_graph()->add_input();
  in->set_name(name);
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem_type);
  for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
}

::onnx::TensorProto* AddInts(::onnx::ModelProto& m, const std::string& name,
                             std::vector<int64_t> dims, std::vector<int64_t> values) {
  auto* t = AddInit(m, name, std::move(dims));
  t->set_data_type(::onnx::TensorProto::INT64);
  for (int64_t v : values) t->add_int64_data(v);
  return t;
}

void SetAttr(::onnx::NodeProto* n, const std::string& name, int64_t value) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(value);
}

void SetAttr(::onnx::NodeProto* n, const std::string& name, const std::string& value) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::STRING);
  a->set_s(value);
}

TEST(OnnxErrors, DataDependentShapesSayWhy) {
  {
    auto m = Model();
    AddNode(m, "NonZero", "nz", {"x"}, {"a"});
    AddNode(m, "Unique", "u", {"x"}, {"b"});
    AddNode(m, "Erf", "e", {"x"}, {"c"});
    AddOutput(m, "a");
    AddOutput(m, "b");
    absl::Status s = Import(m);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(s.message(),
                HasSubstr("NonZero (node nz): its output shape depends on the input data, and "
                          "kiln compiles static shapes"));
    EXPECT_THAT(s.message(), HasSubstr("Unique (node u): its output shape depends on the input"));
  }
  {
    // Compress selects by a model input: the output's length is data-dependent.
    auto m = Model();
    AddTypedInput(m, "c", ::onnx::TensorProto::BOOL, {3});
    SetAttr(AddNode(m, "Compress", "cp", {"x", "c"}, {"y"}), "axis", 1);
    AddOutput(m, "y");
    absl::Status s = Import(m);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
    // The wording of every operand refused for not being a constant (ConstInput), plus why.
    EXPECT_THAT(s.message(),
                HasSubstr("node 'cp' (Compress): input 1 ('c') must be known at import time (kiln "
                          "compiles static shapes), but it depends on the model input 'c'; the "
                          "condition selects the output's length"));
  }
  {
    // TopK's K from a model input: the output shape would follow the value.
    auto m = Model();
    AddTypedInput(m, "k", ::onnx::TensorProto::INT64, {1});
    AddNode(m, "TopK", "tk", {"x", "k"}, {"v", "i"});
    AddOutput(m, "v");
    absl::Status s = Import(m);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(s.message(), HasSubstr("node 'tk' (TopK): input 1 ('k') must be known at import "
                                       "time (kiln compiles static shapes), but it depends on the "
                                       "model input 'k'"));
  }
}

// An operand computed from model inputs (as the `_expanded` function bodies of ONNX's window
// operators compute Range's limit through Cast and Div) names every model input it depends on,
// and the weights too when initializers are parameters.
TEST(OnnxErrors, NonConstantOperandsNameTheInputsTheyDependOn) {
  {
    auto m = Model();
    AddTypedInput(m, "size", ::onnx::TensorProto::INT64, {1});
    AddTypedInput(m, "step", ::onnx::TensorProto::INT64, {1});
    AddInts(m, "zero", {}, {0});
    AddInts(m, "two", {}, {2});
    AddNode(m, "Div", "half", {"size", "two"}, {"h"});
    SetAttr(AddNode(m, "Cast", "cast", {"h"}, {"limit"}), "to",
            int64_t{::onnx::TensorProto::INT64});
    AddNode(m, "Add", "lim", {"limit", "step"}, {"l2"});
    AddNode(m, "Range", "range", {"zero", "l2", "step"}, {"y"});
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(),
                HasSubstr("node 'range' (Range): input 1 ('l2') must be known at import time "
                          "(kiln compiles static shapes), but it depends on the model inputs "
                          "'size', 'step'"));
  }
  {
    // A float initializer is a graph parameter unless weights_as_parameters is false.
    auto m = Model();
    AddInit(m, "w", {2})->set_raw_data(std::string("\0\0\0\x40\0\0\x40\x40", 8));  // 2, 3
    SetAttr(AddNode(m, "Cast", "c", {"w"}, {"shape"}), "to", int64_t{::onnx::TensorProto::INT64});
    AddNode(m, "Reshape", "rs", {"x", "shape"}, {"y"});
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(),
                HasSubstr("node 'rs' (Reshape): input 1 ('shape') must be known at import time "
                          "(kiln compiles static shapes), but it depends on the weight 'w' (graph "
                          "parameters under ImportOptions::weights_as_parameters)"));
    ImportOptions constants;
    constants.weights_as_parameters = false;
    EXPECT_TRUE(ImportBytes(m.SerializeAsString(), constants).ok());
  }
}

// A model input that is not a tensor (ONNX's optional and sequence types) is named with its type.
TEST(OnnxErrors, NonTensorInputsNameTheirType) {
  auto m = Model(18);
  auto* opt = m.mutable_graph()->add_input();
  opt->set_name("o");
  opt->mutable_type()
      ->mutable_optional_type()
      ->mutable_elem_type()
      ->mutable_tensor_type()
      ->set_elem_type(::onnx::TensorProto::FLOAT);
  AddNode(m, "Identity", "id", {"o"}, {"y"});
  AddOutput(m, "y");
  EXPECT_THAT(
      Import(m).message(),
      HasSubstr("input 'o': is an optional, not a tensor (kiln imports tensor inputs only)"));
  opt->mutable_type()
      ->mutable_sequence_type()
      ->mutable_elem_type()
      ->mutable_tensor_type()
      ->set_elem_type(::onnx::TensorProto::FLOAT);
  EXPECT_THAT(Import(m).message(), HasSubstr("input 'o': is a sequence, not a tensor"));
}

// Negative axes before opset 11: taken where onnx's checker and strict shape inference take them
// (Split, Concat, Slice-1, Gather, the reductions; the opsets/ fixtures check the numbers),
// refused where onnx's shape inference does not (Squeeze-1, Unsqueeze-1, Flatten-1/-9).
TEST(OnnxErrors, NegativeAxesBeforeOpset11) {
  {
    auto m = Model(10);
    SetInts(AddNode(m, "Unsqueeze", "u", {"x"}, {"y"}), "axes", {-1});
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(),
                HasSubstr("node 'u' (Unsqueeze): negative axis -1 exists from opset 11 (onnx's "
                          "shape inference does not take it before), but the model imports "
                          "opset 10"));
    m.mutable_opset_import(0)->set_version(11);
    EXPECT_TRUE(Import(m).ok()) << Import(m);
  }
  {
    auto m = Model(7);
    SetInts(AddNode(m, "Unsqueeze", "u", {"x"}, {"x1"}), "axes", {2});
    SetInts(AddNode(m, "Squeeze", "s", {"x1"}, {"y"}), "axes", {-1});
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(), HasSubstr("node 's' (Squeeze): negative axis -1 exists "
                                               "from opset 11"));
  }
  {
    auto m = Model(9);
    SetInt(AddNode(m, "Flatten", "f", {"x"}, {"y"}), "axis", -1);
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(), HasSubstr("node 'f' (Flatten): negative axis -1 exists "
                                               "from opset 11"));
  }
  {
    auto m = Model(6);
    SetInt(AddNode(m, "Split", "sp", {"x"}, {"a", "b", "c"}), "axis", -1);
    SetInt(AddNode(m, "Concat", "cat", {"c", "b", "a"}, {"y"}), "axis", -1);
    SetInts(AddNode(m, "ReduceSum", "r", {"y"}, {"z"}), "axes", {-1});
    AddOutput(m, "z");
    EXPECT_TRUE(Import(m).ok()) << Import(m);
  }
}

TEST(OnnxErrors, NewOperatorsCheckTheirAttributes) {
  {
    auto m = Model(16);
    AddInts(m, "i", {1, 3}, {0, 1, 0});
    AddInit(m, "u", {1, 3})->set_raw_data(std::string(12, '\0'));
    SetAttr(AddNode(m, "ScatterElements", "se", {"x", "i", "u"}, {"y"}), "reduction", "max");
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(),
                HasSubstr("node 'se' (ScatterElements): reduction 'max' needs opset 18 (the model "
                          "imports opset 16)"));
  }
  {
    auto m = Model(16);
    AddInts(m, "i", {1, 2}, {1, 3});  // axis 1 has 3 elements
    AddInit(m, "u", {1})->set_raw_data(std::string(4, '\0'));
    AddNode(m, "ScatterND", "snd", {"x", "i", "u"}, {"y"});
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(),
                HasSubstr("node 'snd' (ScatterND): index 3 (element 1 of the indices) is out of "
                          "range for an axis of size 3"));
  }
  {
    auto m = Model();
    AddInts(m, "i", {2, 1}, {0, 1});
    AddInit(m, "u", {2})->set_raw_data(std::string(8, '\0'));  // needs [2, 3]
    AddNode(m, "ScatterND", "snd", {"x", "i", "u"}, {"y"});
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(), HasSubstr("must have shape [2,3]"));
  }
  {
    auto m = Model();
    AddNode(m, "LRN", "lrn", {"x"}, {"y"});
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(), HasSubstr("node 'lrn' (LRN): needs an input of rank >= 3"));
  }
  {
    // Blocked quantization (opset 21): the scale is x's shape with ceil(D / block_size) along
    // the axis (the conformance cases check the numbers).
    auto m = Model(21);
    auto* s = AddInit(m, "s", {});
    s->add_float_data(0.5f);
    SetAttr(AddNode(m, "QuantizeLinear", "q", {"x", "s"}, {"y"}), "block_size", 2);
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(),
                HasSubstr("node 'q' (QuantizeLinear): y_scale f32[] must have shape [2,2] for "
                          "blocks of 2 along axis 1 of f32[2,3]"));
    s->add_dims(2);
    s->add_dims(2);
    for (int i = 0; i < 3; ++i) s->add_float_data(0.25f);
    EXPECT_TRUE(Import(m).ok()) << Import(m);
    m.mutable_opset_import(0)->set_version(19);
    EXPECT_THAT(Import(m).message(), HasSubstr("attribute 'block_size' exists from opset 21"));
  }
  {
    auto m = Model();
    auto* s = AddInit(m, "s", {2});
    s->add_float_data(0.5f);
    s->add_float_data(0.25f);
    SetAttr(AddNode(m, "QuantizeLinear", "q", {"x", "s"}, {"y"}), "axis", 1);
    AddOutput(m, "y");
    EXPECT_THAT(Import(m).message(),
                HasSubstr("y_scale has 2 values, but axis 1 of f32[2,3] has 3"));
  }
}

// ReduceMax/ReduceMin take bool from opset 20 (any, all; the conformance cases check the numbers,
// the empty set's too); the other reductions never do.
TEST(OnnxErrors, BoolReductionsByVersion) {
  auto model = [](int opset, const std::string& op) {
    auto m = Model(opset);
    m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(
        ::onnx::TensorProto::BOOL);
    AddNode(m, op, "r", {"x"}, {"y"});
    AddOutput(m, "y");
    return m;
  };
  EXPECT_TRUE(Import(model(20, "ReduceMax")).ok());
  EXPECT_TRUE(Import(model(20, "ReduceMin")).ok());
  EXPECT_THAT(Import(model(18, "ReduceMax")).message(),
              HasSubstr("node 'r' (ReduceMax): bool inputs exist from opset 20, but the model "
                        "imports opset 18"));
  EXPECT_THAT(Import(model(20, "ReduceSum")).message(),
              HasSubstr("node 'r' (ReduceSum): bool inputs are not supported"));
}

// Einsum's ellipsis and diagonals (the opsets/ fixtures check the numbers); malformed equations
// and mismatched sizes name the node.
TEST(OnnxErrors, EinsumEquations) {
  auto einsum = [](const std::string& equation) {
    auto m = Model(12);  // x: [2, 3]
    SetString(AddNode(m, "Einsum", "e", {"x"}, {"y"}), "equation", equation);
    AddOutput(m, "y");
    return Import(m);
  };
  EXPECT_TRUE(einsum("...i->i").ok());
  EXPECT_TRUE(einsum("i...").ok());
  EXPECT_THAT(einsum("ii").message(),
              HasSubstr("node 'e' (Einsum): letter 'i' has sizes 2 and 3 in one operand"));
  EXPECT_THAT(einsum("...i...").message(), HasSubstr("bad equation '...i...'"));
  EXPECT_THAT(einsum("ijk...").message(), HasSubstr("operand 0 has rank 2"));
  EXPECT_THAT(einsum("ij->ii").message(), HasSubstr("output letter 'i' repeats"));
  EXPECT_THAT(einsum("ij->...i").message(), HasSubstr("bad equation 'ij->...i'"));
}

}  // namespace
}  // namespace kiln::onnx
