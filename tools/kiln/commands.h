// The `kiln` command line's commands (docs/cli.md). main.cc parses the arguments with CLI11 and
// calls one of these; each prints its results to stdout and its errors to stderr (naming the file
// and the byte offset, line:column or op), and returns the process exit code (0 on success).
#pragma once

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

/// The ONNX import hook: the one place where `kiln` reads an .onnx file. Until ONNX import
/// (issue #7) is wired in here (kiln::onnx::ImportFile), it fails with a message saying so.
absl::StatusOr<LoadedModel> ImportOnnx(const std::string& path);

/// Reads a model: `.onnx` through ImportOnnx, anything else as IR text (ir::ParseGraph).
/// Parse errors read "<path>:<line>:<column>: <what>".
absl::StatusOr<LoadedModel> LoadModel(const std::string& path);

struct CompileArgs {
  std::string input;   // graph.kir or model.onnx
  std::string output;  // m.kiln
  std::string target = "cpu";
  std::vector<std::string> triples;
  bool no_ir_text = false;
  std::string name;  // the model's name in the signature ("" -> the input's file stem)
};
int Compile(const CompileArgs& args);

struct RunArgs {
  std::string blob;
  std::vector<std::string> inputs;  // "name=file.npy", or "file.npy" for the next unnamed input
  std::string output_dir;           // "" -> print a summary of each output
  std::string device;               // runtime::blob::LoadOptions::device: cpu, vulkan[:sel]
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
};
int Dump(const DumpArgs& args);

struct VizArgs {
  std::string input;
  std::string output;  // .dot, .svg, .png or .pdf
  int64_t max_literal_elements = 8;
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

}  // namespace kiln::tools
