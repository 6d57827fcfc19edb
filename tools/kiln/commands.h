// The `kiln` command line's commands (docs/cli.md). main.cc parses the arguments with CLI11 and
// calls one of these; each prints its results to stdout and its errors to stderr (naming the file
// and the byte offset, line:column or op), and returns the process exit code (0 on success).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/tensor_data.h"

namespace kiln::tools {

/// A model read from a file: the graph, plus values bound to some of its parameters (an ONNX
/// model's initializers; empty for IR text, whose constants are in the graph).
struct LoadedModel {
  ir::Graph graph;
  std::vector<std::pair<std::string, std::shared_ptr<const ir::TensorData>>> weights;
};

/// How an ONNX model is read (kiln::onnx::ImportOptions, from the command line).
struct OnnxArgs {
  /// "--input-shape name=1x3x16x16" arguments (repeatable): static shapes for inputs with
  /// dynamic dimensions. A scalar is "name=" (no dimensions).
  std::vector<std::string> input_shapes;
  /// true: initializers become graph parameters bound through LoadedModel::weights (compile puts
  /// them in the blob's weights section, export writes them as initializers); false: they are
  /// baked into the graph as constants.
  bool weights_as_parameters = true;
};

/// Parses "name=1x3x16x16" arguments into ImportOptions::input_shapes' form. Errors name the
/// argument.
absl::StatusOr<std::map<std::string, ir::Shape>> ParseInputShapes(
    const std::vector<std::string>& args);

/// The ONNX import hook: the one place where `kiln` reads an .onnx file, through
/// kiln::onnx::ImportFile. Initializers become LoadedModel::weights (in parameter order) unless
/// onnx.weights_as_parameters is false. Errors name the file and the ONNX node or input.
absl::StatusOr<LoadedModel> ImportOnnx(const std::string& path, const OnnxArgs& onnx = {});

/// Reads a model: `.onnx` through ImportOnnx, anything else as IR text (ir::ParseGraph).
/// Parse errors read "<path>:<line>:<column>: <what>". `onnx` only applies to .onnx files; for
/// IR text, input shapes are an error (its shapes are static already).
absl::StatusOr<LoadedModel> LoadModel(const std::string& path, const OnnxArgs& onnx = {});

struct CompileArgs {
  std::string input;             // graph.kir or model.onnx
  std::string output;            // m.kiln
  std::string target = "cpu";    // cpu, vulkan or cuda (each adds its section to the CPU code)
  std::string cuda_arch;         // --target cuda: aot::CompileOptions::cuda_arch ("" -> sm_80)
  bool cuda_allow_tf32 = false;  // --target cuda: aot::CompileOptions::cuda_allow_tf32
  std::vector<std::string> triples;
  std::vector<std::string> cpu_levels;  // aot::CompileOptions::cpu_levels
  bool no_ir_text = false;
  std::string name;  // the model's name in the signature ("" -> the input's file stem)
  OnnxArgs onnx;
};
int Compile(const CompileArgs& args);

struct RunArgs {
  std::string blob;
  std::vector<std::string> inputs;  // "name=file.npy", or "file.npy" for the next unnamed input
  std::string output_dir;           // "" -> print a summary of each output
  std::string device;  // runtime::blob::LoadOptions::device: cpu, vulkan[:sel], cuda[:ordinal]
};
int Run(const RunArgs& args);

struct InspectArgs {
  std::string blob;
  bool ir_text = false;  // also print the IR text section
};
int Inspect(const InspectArgs& args);

struct DumpArgs {
  std::string input;
  std::string dir;
  OnnxArgs onnx;
};
int Dump(const DumpArgs& args);

struct VizArgs {
  std::string input;
  std::string output;  // .dot, .svg, .png or .pdf
  int64_t max_literal_elements = 8;
  OnnxArgs onnx;
};
int Viz(const VizArgs& args);

struct BenchArgs {
  std::string blob;
  std::vector<std::string> inputs;  // as RunArgs::inputs; inputs not given are random
  int runs = 100;
  int warmup = 3;
  uint64_t seed = 0;
};
int Bench(const BenchArgs& args);

struct ExportArgs {
  std::string input;                   // graph.kir or model.onnx
  std::string output;                  // out.onnx or out.mlir
  std::string format;                  // "onnx", "mlir" or "" (from the output's extension)
  int64_t opset = 17;                  // ONNX output: the default-domain opset (16 or 17)
  std::string function_name = "main";  // MLIR output: the func.func's name
  OnnxArgs onnx;
};
/// Writes the graph as ONNX (kiln::onnx::ExportFile; an ONNX input's initializers stay
/// initializers) or as MLIR text (codegen::ExportMlir; an ONNX input's initializers become
/// constants, so the function's arguments are the model's inputs).
int Export(const ExportArgs& args);

}  // namespace kiln::tools
