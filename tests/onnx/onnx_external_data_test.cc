// ONNX external data (frontend/onnx/external_data.h): models whose tensors live in files beside
// the model, made by tests/onnx/make_extdata_fixtures.py with python3-onnx's own writer (one file
// for every tensor at increasing offsets; one file per tensor, in a subfolder, at an offset, with
// no length), must import and compute numpy's output on the interpreter and the Cpu backend. The
// error paths edit the fixture's ModelProto here (offsets, lengths, locations) and check each
// message in full.
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/cpu/graph_compiler.h"
#include "frontend/onnx/import.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/interpreter.h"
#include "onnx/onnx_pb.h"

namespace kiln::onnx {
namespace {

namespace fs = std::filesystem;

const std::string kExt = "tests/onnx/extdata/";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ir::TensorData ReadTensor(const std::string& path) {
  absl::StatusOr<ir::TensorData> t = ReadTensorProtoFile(path);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : ir::TensorData();
}

// numpy's y for the fixture's x, within the golden tolerance of tests/onnx.
void ExpectNumpyOutput(const ImportedModel& m, const std::string& folder) {
  const ir::TensorData x = ReadTensor(folder + "/test_data_set_0/input_0.pb");
  const ir::TensorData want = ReadTensor(folder + "/test_data_set_0/output_0.pb");
  absl::StatusOr<std::vector<ir::TensorData>> args = m.Arguments({x});
  ASSERT_TRUE(args.ok()) << args.status();
  auto check = [&](const ir::TensorData& got, const std::string& what) {
    ASSERT_EQ(got.shape(), want.shape()) << what;
    double scale = 0;
    for (int64_t i = 0; i < want.num_elements(); ++i) {
      scale = std::max(scale, std::abs(want.GetDouble(i)));
    }
    for (int64_t i = 0; i < want.num_elements(); ++i) {
      EXPECT_NEAR(got.GetDouble(i), want.GetDouble(i),
                  1e-4 * std::abs(want.GetDouble(i)) + 1e-5 * scale)
          << what << " element " << i;
    }
  };
  absl::StatusOr<std::vector<ir::TensorData>> ref = ir::Interpret(m.graph, *args);
  ASSERT_TRUE(ref.ok()) << ref.status();
  ASSERT_EQ(ref->size(), 1u);
  check((*ref)[0], folder + " reference");
  std::vector<std::shared_ptr<const ir::TensorData>> shared;
  for (const auto& a : *args) shared.push_back(std::make_shared<const ir::TensorData>(a));
  absl::StatusOr<std::vector<ir::TensorData>> cpu = codegen::cpu::CompileAndRun(m.graph, shared);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  check((*cpu)[0], folder + " cpu");
}

// A fresh temporary folder, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "kiln_extdata_XXXXXX").string();
    if (mkdtemp(pattern.data()) != nullptr) path_ = fs::canonical(pattern);
  }
  ~TempDir() {
    if (!path_.empty()) fs::remove_all(path_);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// The fixture folder `name` copied (symlinks followed) into `tmp`/`name`, so that the tests edit
// and link real files of their own (under Bazel the fixtures are symlinks into the source tree).
std::string CopyFixture(const TempDir& tmp, const std::string& name) {
  const fs::path to = tmp.path() / name;
  fs::copy(kExt + name, to, fs::copy_options::recursive);
  return to.string();
}

TEST(OnnxExternalData, OneFileMatchesNumpy) {
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const std::string folder = CopyFixture(tmp, "one_file");
  absl::StatusOr<ImportedModel> m = ImportFile(folder + "/model.onnx");
  ASSERT_TRUE(m.ok()) << m.status();
  // The float initializers are weights read from the file; `shape` and the Constant fold away.
  EXPECT_EQ(m->weights.size(), 3u);
  EXPECT_EQ(m->weights.at("w2").shape(), (ir::Shape{16, 6}));
  ExpectNumpyOutput(*m, folder);
  // Baked in as constants, the same values.
  ImportOptions constants;
  constants.weights_as_parameters = false;
  absl::StatusOr<ImportedModel> c = ImportFile(folder + "/model.onnx", constants);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->weights.empty());
  ExpectNumpyOutput(*c, folder);
}

TEST(OnnxExternalData, OneFilePerTensorMatchesNumpy) {
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const std::string folder = CopyFixture(tmp, "per_file");
  absl::StatusOr<ImportedModel> m = ImportFile(folder + "/model.onnx");
  ASSERT_TRUE(m.ok()) << m.status();
  ExpectNumpyOutput(*m, folder);
}

// The Hugging Face cache's layout: snapshots/<rev>/ holds symlinks into blobs/, so the data file
// resolves outside the folder the model is named in, but inside the one the model really lies in.
// (Bazel's runfiles are the same shape.) A data file that leaves both is still refused.
TEST(OnnxExternalData, SymlinkedModelFindsItsDataWhereTheModelLies) {
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const std::string blobs = CopyFixture(tmp, "one_file");
  const fs::path snapshot = tmp.path() / "snapshots" / "rev";
  fs::create_directories(snapshot);
  fs::create_symlink(fs::path(blobs) / "model.onnx", snapshot / "model.onnx");
  fs::create_symlink(fs::path(blobs) / "model.onnx.data", snapshot / "model.onnx.data");
  absl::StatusOr<ImportedModel> m = ImportFile((snapshot / "model.onnx").string());
  ASSERT_TRUE(m.ok()) << m.status();
  ExpectNumpyOutput(*m, blobs);

  fs::copy_file(fs::path(blobs) / "model.onnx.data", tmp.path() / "model.onnx.data");
  fs::remove(snapshot / "model.onnx.data");
  fs::create_symlink(tmp.path() / "model.onnx.data", snapshot / "model.onnx.data");
  m = ImportFile((snapshot / "model.onnx").string());
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()),
              ::testing::HasSubstr("outside the model's folder"));
}

TEST(OnnxExternalData, ImportBytesWithAFolderOrInMemoryFiles) {
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const std::string folder = CopyFixture(tmp, "one_file");
  const std::string model = ReadAll(folder + "/model.onnx");
  ImportOptions dir;
  dir.external_data_dir = folder;
  absl::StatusOr<ImportedModel> a = ImportBytes(model, dir);
  ASSERT_TRUE(a.ok()) << a.status();
  ExpectNumpyOutput(*a, folder);
  const std::string data = ReadAll(folder + "/model.onnx.data");
  ImportOptions memory;
  memory.external_data_files["./model.onnx.data"] = data;  // "./" is dropped when matching
  absl::StatusOr<ImportedModel> b = ImportBytes(model, memory);
  ASSERT_TRUE(b.ok()) << b.status();
  ExpectNumpyOutput(*b, folder);
  EXPECT_EQ(a->weights.at("w1"), b->weights.at("w1"));
}

// A copy of one_file in a fresh temporary folder, `tmp/model/`, whose ModelProto the tests edit.
class ExternalDataErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(temp_.path().empty());
    tmp_ = temp_.path();
    dir_ = tmp_ / "model";
    path_ = (dir_ / "model.onnx").string();
    fs::create_directory(dir_);
    fs::copy_file(kExt + "one_file/model.onnx.data", dir_ / "model.onnx.data");
    std::ifstream in(kExt + "one_file/model.onnx", std::ios::binary);
    ASSERT_TRUE(model_.ParseFromIstream(&in));
  }

  ::onnx::TensorProto& Init(const std::string& name) {
    for (auto& t : *model_.mutable_graph()->mutable_initializer()) {
      if (t.name() == name) return t;
    }
    ADD_FAILURE() << "no initializer " << name;
    return *model_.mutable_graph()->add_initializer();
  }
  // Sets (or with an empty value removes) one external_data entry.
  static void Set(::onnx::TensorProto& t, const std::string& key, const std::string& value) {
    auto* entries = t.mutable_external_data();
    for (int i = 0; i < entries->size(); ++i) {
      if (entries->Get(i).key() != key) continue;
      if (value.empty()) {
        entries->DeleteSubrange(i, 1);
      } else {
        entries->Mutable(i)->set_value(value);
      }
      return;
    }
    auto* e = t.add_external_data();
    e->set_key(key);
    e->set_value(value);
  }
  // Writes the edited model as tmp/model/model.onnx and imports it with ImportFile.
  absl::Status ImportEdited() {
    std::ofstream(path_, std::ios::binary) << model_.SerializeAsString();
    return ImportFile(path_).status();
  }
  // ImportFile's message for an error in initializer `name`.
  std::string Error(const std::string& name, const std::string& msg) const {
    return path_ + ": initializer '" + name + "': " + msg;
  }

  TempDir temp_;
  fs::path tmp_, dir_;
  std::string path_;
  ::onnx::ModelProto model_;
};

TEST_F(ExternalDataErrors, TheUneditedCopyImports) { EXPECT_TRUE(ImportEdited().ok()); }

TEST_F(ExternalDataErrors, OffsetPastTheEnd) {
  Set(Init("w1"), "offset", "2000");
  EXPECT_EQ(ImportEdited().message(),
            Error("w1",
                  "external data location 'model.onnx.data': offset 2000 is past the end of the "
                  "file (988 bytes)"));
}

TEST_F(ExternalDataErrors, OffsetPlusLengthPastTheEnd) {
  Set(Init("w2"), "offset", "900");
  EXPECT_EQ(ImportEdited().message(),
            Error("w2",
                  "external data location 'model.onnx.data': offset 900 + length 384 is past the "
                  "end of the file (988 bytes)"));
  // Near 2^64: offset + length would wrap around in unsigned arithmetic.
  Set(Init("w2"), "offset", "18446744073709551600");
  EXPECT_EQ(ImportEdited().message(),
            Error("w2",
                  "external data location 'model.onnx.data': offset 18446744073709551600 is past "
                  "the end of the file (988 bytes)"));
  Set(Init("w2"), "offset", "18446744073709551616");  // 2^64
  EXPECT_EQ(ImportEdited().message(),
            Error("w2",
                  "external data location 'model.onnx.data': offset '18446744073709551616' is not "
                  "a non-negative integer"));
}

TEST_F(ExternalDataErrors, LengthMustBeTheTensorsSize) {
  Set(Init("b1"), "length", "60");
  EXPECT_EQ(ImportEdited().message(),
            Error("b1",
                  "external data location 'model.onnx.data': length 60 at offset 512, but 16 "
                  "elements of f32 need 64 bytes"));
  // Without a length the tensor runs to the end of the file, which is too long here.
  Set(Init("b1"), "length", "");
  EXPECT_EQ(ImportEdited().message(),
            Error("b1",
                  "external data location 'model.onnx.data': no length given, and the 476 bytes "
                  "from offset 512 to the end of the file are not the 64 that 16 elements of f32 "
                  "need"));
  Set(Init("b1"), "length", "-64");
  EXPECT_EQ(ImportEdited().message(),
            Error("b1",
                  "external data location 'model.onnx.data': length '-64' is not a non-negative "
                  "integer"));
}

TEST_F(ExternalDataErrors, LocationsLeavingTheFolder) {
  Set(Init("w1"), "location", "../model.onnx.data");
  fs::copy_file(dir_ / "model.onnx.data", tmp_ / "model.onnx.data");
  EXPECT_EQ(ImportEdited().message(),
            Error("w1",
                  "external data location '../model.onnx.data' has a '..' component; locations "
                  "must stay inside the model's folder"));
  const std::string absolute = (dir_ / "model.onnx.data").string();
  Set(Init("w1"), "location", absolute);
  EXPECT_EQ(ImportEdited().message(),
            Error("w1", "external data location '" + absolute +
                            "' is an absolute path; locations are relative to the model's folder"));
  // A symlink inside the folder that points out of it.
  fs::create_symlink("../model.onnx.data", dir_ / "link.bin");
  Set(Init("w1"), "location", "link.bin");
  EXPECT_EQ(ImportEdited().message(),
            Error("w1", "external data location 'link.bin': resolves to '" +
                            (tmp_ / "model.onnx.data").string() +
                            "', outside the model's folder '" + dir_.string() + "'"));
  // One that stays inside is fine.
  fs::create_symlink("model.onnx.data", dir_ / "inside.bin");
  Set(Init("w1"), "location", "inside.bin");
  EXPECT_TRUE(ImportEdited().ok());
}

TEST_F(ExternalDataErrors, MissingAndSpecialFiles) {
  Set(Init("w1"), "location", "missing.bin");
  EXPECT_EQ(ImportEdited().message(),
            Error("w1", "external data location 'missing.bin': cannot open '" +
                            (dir_ / "missing.bin").string() + "': No such file or directory"));
  // A FIFO would block a plain open(); a folder has no bytes.
  ASSERT_EQ(mkfifo((dir_ / "fifo.bin").c_str(), 0600), 0);
  Set(Init("w1"), "location", "fifo.bin");
  EXPECT_EQ(ImportEdited().message(),
            Error("w1", "external data location 'fifo.bin': '" + (dir_ / "fifo.bin").string() +
                            "' is not a regular file"));
  fs::create_directory(dir_ / "sub");
  Set(Init("w1"), "location", "sub");
  EXPECT_EQ(ImportEdited().message(),
            Error("w1", "external data location 'sub': '" + (dir_ / "sub").string() +
                            "' is not a regular file"));
}

TEST_F(ExternalDataErrors, InconsistentTensors) {
  Set(Init("w1"), "location", "");
  EXPECT_EQ(ImportEdited().message(),
            Error("w1", "data_location is EXTERNAL, but external_data has no 'location'"));
  Set(Init("w1"), "location", "model.onnx.data");
  Init("w1").add_external_data()->set_key("offset");
  EXPECT_EQ(ImportEdited().message(), Error("w1", "external data key 'offset' is given twice"));
  Init("w1").mutable_external_data()->RemoveLast();
  Init("w1").set_raw_data(std::string(512, '\0'));
  EXPECT_EQ(ImportEdited().message(),
            Error("w1", "is stored as external data, but also holds data in the model"));
  Init("w1").clear_raw_data();
  Init("w1").set_data_location(::onnx::TensorProto::DEFAULT);
  EXPECT_EQ(ImportEdited().message(),
            Error("w1", "has external_data entries, but data_location is not EXTERNAL"));
}

TEST_F(ExternalDataErrors, ConstantValuesNameTheNode) {
  auto* value = model_.mutable_graph()->mutable_node(5)->mutable_attribute(0)->mutable_t();
  Set(*value, "offset", "5000");
  EXPECT_EQ(ImportEdited().message(),
            path_ +
                ": node 'scale_const' (Constant): attribute 'value': external data location "
                "'model.onnx.data': offset 5000 is past the end of the file (988 bytes)");
}

TEST_F(ExternalDataErrors, BytesNeedAFolder) {
  const std::string bytes = model_.SerializeAsString();
  const std::string no_folder =
      "stored as external data (location 'model.onnx.data'), but the model came as bytes, with no "
      "folder to read it from: use ImportFile, or set ImportOptions::external_data_dir (or "
      "external_data_files)";
  // The Constant's value is read first (attribute tensors are inlined before initializers).
  EXPECT_EQ(ImportBytes(bytes).status().message(),
            "node 'scale_const' (Constant): attribute 'value': " + no_folder);
  ImportOptions memory;
  memory.external_data_files["other.bin"] = "";
  EXPECT_EQ(ImportBytes(bytes, memory).status().message(),
            "node 'scale_const' (Constant): attribute 'value': external data location "
            "'model.onnx.data': not among ImportOptions::external_data_files");
  ImportOptions dir;
  dir.external_data_dir = (tmp_ / "nowhere").string();
  EXPECT_EQ(ImportBytes(bytes, dir).status().message(),
            "node 'scale_const' (Constant): attribute 'value': external data location "
            "'model.onnx.data': cannot resolve the model's folder '" +
                (tmp_ / "nowhere").string() + "': No such file or directory");
  // With the Constant's value inline, the first initializer is named.
  ::onnx::TensorProto inline_value;
  inline_value.set_data_type(::onnx::TensorProto::FLOAT);
  inline_value.add_dims(3);
  for (float v : {0.5f, -2.0f, 3.0f}) inline_value.add_float_data(v);
  *model_.mutable_graph()->mutable_node(5)->mutable_attribute(0)->mutable_t() = inline_value;
  EXPECT_EQ(ImportBytes(model_.SerializeAsString()).status().message(),
            "initializer 'w1': " + no_folder);
}

}  // namespace
}  // namespace kiln::onnx
