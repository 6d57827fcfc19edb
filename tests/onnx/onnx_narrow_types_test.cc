// The narrow ONNX element types (float8s, float4 E2M1, 4- and 2-bit integers), which the importer
// holds widened (docs/onnx.md, "Narrow element types"). ONNX's conformance cases compare them
// with onnx's reference; these tests check the rules themselves over every code of every format:
// decoding is monotonic with the spec's specials, casting each value back is exact, and casts of
// the midpoints between neighbours round to the even code, on the interpreter and the Cpu backend.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/cpu/graph_compiler.h"
#include "frontend/onnx/import.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/interpreter.h"
#include "onnx/onnx_pb.h"

namespace kiln::onnx {
namespace {

using ::testing::HasSubstr;

::onnx::ModelProto EmptyModel() {
  ::onnx::ModelProto m;
  m.set_ir_version(10);
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(22);
  m.mutable_graph()->set_name("g");
  return m;
}

::onnx::NodeProto* AddNode(::onnx::ModelProto& m, const std::string& op,
                           std::vector<std::string> inputs, const std::string& output) {
  auto* n = m.mutable_graph()->add_node();
  n->set_op_type(op);
  for (auto& i : inputs) n->add_input(i);
  n->add_output(output);
  m.mutable_graph()->add_output()->set_name(output);
  return n;
}

void SetInt(::onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(v);
}

void AddInput(::onnx::ModelProto& m, const std::string& name, int elem_type, int64_t size) {
  auto* in = m.mutable_graph()->add_input();
  in->set_name(name);
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem_type);
  tt->mutable_shape()->add_dim()->set_dim_value(size);
}

// Every code of a `bits`-wide type, packed low bits first, as an initializer "codes".
void AddEveryCode(::onnx::ModelProto& m, int elem_type, int bits) {
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name("codes");
  t->set_data_type(elem_type);
  const int count = 1 << bits, per_byte = 8 / bits;
  t->add_dims(count);
  std::string raw(static_cast<size_t>(count / per_byte), '\0');
  for (int c = 0; c < count; ++c) {
    raw[static_cast<size_t>(c / per_byte)] =
        static_cast<char>(raw[static_cast<size_t>(c / per_byte)] | (c << (c % per_byte * bits)));
  }
  t->set_raw_data(raw);
}

// Runs a model on the interpreter and the Cpu backend; both must agree bit for bit (NaN = NaN).
std::vector<double> RunBoth(const ::onnx::ModelProto& m, std::vector<ir::TensorData> args = {}) {
  absl::StatusOr<ImportedModel> model = ImportBytes(m.SerializeAsString());
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return {};
  absl::StatusOr<std::vector<ir::TensorData>> ref = ir::Interpret(model->graph, args);
  EXPECT_TRUE(ref.ok()) << ref.status();
  if (!ref.ok()) return {};
  std::vector<std::shared_ptr<const ir::TensorData>> shared;
  for (auto& a : args) shared.push_back(std::make_shared<const ir::TensorData>(a));
  absl::StatusOr<std::vector<ir::TensorData>> cpu =
      codegen::cpu::CompileAndRun(model->graph, shared);
  EXPECT_TRUE(cpu.ok()) << cpu.status();
  std::vector<double> got = (*ref)[0].ToDoubles();
  if (cpu.ok()) {
    std::vector<double> c = (*cpu)[0].ToDoubles();
    EXPECT_EQ(c.size(), got.size());
    for (size_t i = 0; i < c.size() && i < got.size(); ++i) {
      EXPECT_TRUE(c[i] == got[i] || (std::isnan(c[i]) && std::isnan(got[i])))
          << "element " << i << ": cpu " << c[i] << ", interpreter " << got[i];
    }
  }
  return got;
}

struct FloatFormat {
  int elem_type;
  const char* name;
  int bits;
  int nan_codes, inf_codes;  // from the formats' definitions (ONNX's Cast documentation, OCP)
  double max;                // ditto
  bool overflow_is_inf;      // E5M2: Cast with saturate=0 overflows to inf, the others to NaN
  bool nan_casts_to_nan;     // E2M1 has no NaN
};

class NarrowFloats : public ::testing::TestWithParam<FloatFormat> {};

TEST_P(NarrowFloats, EveryCodeDecodesAndCastsBackAndTiesRoundToEven) {
  const FloatFormat f = GetParam();
  auto decode = EmptyModel();
  AddEveryCode(decode, f.elem_type, f.bits);
  AddNode(decode, "Cast", {"codes"}, "values");
  SetInt(decode.mutable_graph()->mutable_node(0), "to", ::onnx::TensorProto::FLOAT);
  const std::vector<double> values = RunBoth(decode);
  ASSERT_EQ(values.size(), size_t{1} << f.bits);

  int nans = 0, infs = 0;
  for (double v : values) nans += std::isnan(v), infs += std::isinf(v);
  EXPECT_EQ(nans, f.nan_codes);
  EXPECT_EQ(infs, f.inf_codes);
  // The positive half in code order: increasing from 0 up to the largest finite value.
  std::vector<double> positive;
  for (size_t c = 0; c < values.size() / 2; ++c) {
    if (std::isfinite(values[c])) positive.push_back(values[c]);
  }
  ASSERT_GE(positive.size(), 2u);
  EXPECT_EQ(positive.front(), 0.0);
  EXPECT_EQ(positive.back(), f.max);
  for (size_t i = 1; i < positive.size(); ++i) EXPECT_LT(positive[i - 1], positive[i]) << i;
  for (size_t c = values.size() / 2 + 1; c < values.size(); ++c) {  // the negative half mirrors
    const double p = values[c - values.size() / 2];
    if (std::isfinite(p) && std::isfinite(values[c])) {
      EXPECT_EQ(values[c], -p) << "code " << c;
    }
  }

  // Inputs and what the format must give for them: each value, the midpoints between neighbours
  // (to the neighbour with the even code), a float either side of each midpoint, overflow.
  std::vector<double> in, want, want_unsaturated;
  const double overflow = f.overflow_is_inf ? INFINITY : NAN;
  auto add = [&](double x, double w, double unsaturated) {
    for (double sign : {1.0, -1.0}) {
      in.push_back(sign * x);
      want.push_back(sign * w);
      want_unsaturated.push_back(sign * unsaturated);
    }
  };
  for (size_t i = 0; i < positive.size(); ++i) {
    add(positive[i], positive[i], positive[i]);
    if (i + 1 == positive.size()) break;
    const double lo = positive[i], hi = positive[i + 1], mid = (lo + hi) / 2;
    const double even = i % 2 == 0 ? lo : hi;  // positive[i] has code i
    add(mid, even, even);
    add(std::nextafter(static_cast<float>(mid), 0.0f), lo, lo);
    add(std::nextafter(static_cast<float>(mid), INFINITY), hi, hi);
  }
  add(f.max * 4, f.max, f.bits == 4 ? f.max : overflow);
  add(INFINITY, f.max, f.bits == 4 ? f.max : (f.overflow_is_inf ? INFINITY : NAN));
  const int64_t n = static_cast<int64_t>(in.size());
  absl::StatusOr<ir::TensorData> x = ir::TensorData::FromDoubles(ir::DType::kF32, {n}, in);
  ASSERT_TRUE(x.ok());
  for (const bool saturate : {true, false}) {
    SCOPED_TRACE(saturate ? "saturate" : "saturate=0");
    auto cast = EmptyModel();
    AddInput(cast, "x", ::onnx::TensorProto::FLOAT, n);
    auto* node = AddNode(cast, "Cast", {"x"}, "y");
    SetInt(node, "to", f.elem_type);
    if (!saturate) SetInt(node, "saturate", 0);
    const std::vector<double> got = RunBoth(cast, {*x});
    const std::vector<double>& expect = saturate ? want : want_unsaturated;
    ASSERT_EQ(got.size(), expect.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(got[i] == expect[i] || (std::isnan(got[i]) && std::isnan(expect[i])))
          << "Cast(" << in[i] << ") gave " << got[i] << ", want " << expect[i];
    }
  }
  // NaN stays NaN where the format has one.
  auto nan_model = EmptyModel();
  AddInput(nan_model, "x", ::onnx::TensorProto::FLOAT, 1);
  SetInt(AddNode(nan_model, "Cast", {"x"}, "y"), "to", f.elem_type);
  absl::StatusOr<ir::TensorData> nan =
      ir::TensorData::FromDoubles(ir::DType::kF32, {1}, std::vector<double>{NAN});
  ASSERT_TRUE(nan.ok());
  const std::vector<double> got = RunBoth(nan_model, {*nan});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(std::isnan(got[0]), f.nan_casts_to_nan);
}

INSTANTIATE_TEST_SUITE_P(
    Onnx, NarrowFloats,
    ::testing::Values(FloatFormat{17, "FLOAT8E4M3FN", 8, 2, 0, 448, false, true},
                      FloatFormat{18, "FLOAT8E4M3FNUZ", 8, 1, 0, 240, false, true},
                      FloatFormat{19, "FLOAT8E5M2", 8, 6, 2, 57344, true, true},
                      FloatFormat{20, "FLOAT8E5M2FNUZ", 8, 1, 0, 57344, false, true},
                      FloatFormat{23, "FLOAT4E2M1", 4, 0, 0, 6, false, false}),
    [](const auto& info) { return std::string(info.param.name); });

// 4- and 2-bit integers: packed codes sign-extend; integers keep their low bits when cast to
// them (ONNX's fixed-point rule), floats saturate.
TEST(OnnxNarrowIntegers, PackedCodesWrapAndSaturate) {
  struct Type {
    int elem_type, bits;
    bool is_signed;
  };
  for (const Type t :
       {Type{22, 4, true}, Type{21, 4, false}, Type{26, 2, true}, Type{25, 2, false}}) {
    SCOPED_TRACE(t.elem_type);
    const int span = 1 << t.bits;
    const int lo = t.is_signed ? -span / 2 : 0, hi = lo + span - 1;
    auto decode = EmptyModel();
    AddEveryCode(decode, t.elem_type, t.bits);
    SetInt(AddNode(decode, "Cast", {"codes"}, "v"), "to", ::onnx::TensorProto::INT32);
    const std::vector<double> codes = RunBoth(decode);
    ASSERT_EQ(codes.size(), static_cast<size_t>(span));
    for (int c = 0; c < span; ++c) EXPECT_EQ(codes[c], c > hi ? c - span : c) << "code " << c;

    std::vector<double> ints, wrapped, floats, saturated;
    for (int v = -3 * span; v <= 3 * span; ++v) {
      ints.push_back(v);
      wrapped.push_back(((v - lo) % span + span) % span + lo);
      floats.push_back(v + 0.75);
      saturated.push_back(std::clamp(std::trunc(v + 0.75), double(lo), double(hi)));
    }
    const int64_t n = static_cast<int64_t>(ints.size());
    for (const bool from_float : {false, true}) {
      auto cast = EmptyModel();
      AddInput(cast, "x", from_float ? ::onnx::TensorProto::FLOAT : ::onnx::TensorProto::INT32, n);
      SetInt(AddNode(cast, "Cast", {"x"}, "y"), "to", t.elem_type);
      absl::StatusOr<ir::TensorData> x = ir::TensorData::FromDoubles(
          from_float ? ir::DType::kF32 : ir::DType::kI32, {n}, from_float ? floats : ints);
      ASSERT_TRUE(x.ok());
      EXPECT_EQ(RunBoth(cast, {*x}), from_float ? saturated : wrapped);
    }
  }
}

TEST(OnnxNarrowErrors, ArithmeticOnANarrowTypeNamesIt) {
  auto m = EmptyModel();
  AddInput(m, "x", 17, 4);  // FLOAT8E4M3FN
  AddNode(m, "Add", {"x", "x"}, "y");
  absl::Status s = ImportBytes(m.SerializeAsString()).status();
  EXPECT_THAT(s.message(),
              HasSubstr("(Add): input 0 ('x') is FLOAT8E4M3FN, which kiln holds as f32"));
  // Truncated packed data names the type and the byte count.
  auto t = EmptyModel();
  AddEveryCode(t, 22, 4);
  t.mutable_graph()->mutable_initializer(0)->mutable_raw_data()->pop_back();
  AddNode(t, "Identity", {"codes"}, "y");
  s = ImportBytes(t.SerializeAsString()).status();
  EXPECT_THAT(s.message(), HasSubstr("7 bytes, but 16 elements of INT4 (packed) need 8"));
}

}  // namespace
}  // namespace kiln::onnx
