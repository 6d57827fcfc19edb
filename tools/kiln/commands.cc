#include "tools/kiln/commands.h"

#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <random>
#include <set>
#include <span>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "codegen/aot/aot.h"
#include "codegen/cpu/graph_compiler.h"
#include "codegen/mlir/mlir_text.h"
#include "frontend/onnx/export.h"
#include "frontend/onnx/import.h"
#include "ir/dtype.h"
#include "ir/graphviz.h"
#include "ir/npy.h"
#include "ir/parser.h"
#include "runtime/blob.h"
#if KILN_TOOL_HAVE_VULKAN
#include "runtime/vulkan/blob_vulkan.h"
#endif
#if KILN_TOOL_HAVE_CUDA
#include "runtime/cuda/blob_cuda.h"
#endif

extern char** environ;

namespace kiln::tools {
namespace {

namespace fs = std::filesystem;
using runtime::blob::Model;
using runtime::blob::TensorSpec;

int Fail(std::string_view command, std::string_view message) {
  std::cerr << "kiln " << command << ": " << message << "\n";
  return 1;
}
int Fail(std::string_view command, const absl::Status& status) {
  return Fail(command, std::string(status.message()));
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return absl::InvalidArgumentError(path + ": is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::DataLossError(path + ": read error");
  return bytes;
}

std::string TypeString(const TensorSpec& spec) {
  return spec.dtype + ir::ShapeToString(spec.shape);
}
std::string TypeString(const ir::TensorData& t) {
  return std::string(ir::DTypeName(t.dtype())) + ir::ShapeToString(t.shape());
}

// Binds "name=file.npy" / "file.npy" arguments to the model's inputs. `required`: every input
// must be given (run); otherwise missing inputs stay empty (bench fills them).
absl::StatusOr<std::vector<std::optional<ir::TensorData>>> BindInputs(
    const std::string& blob, const std::vector<TensorSpec>& specs,
    const std::vector<std::string>& args, bool required) {
  std::vector<std::optional<ir::TensorData>> values(specs.size());
  std::vector<std::string> names;
  for (const TensorSpec& s : specs) names.push_back(s.name.empty() ? "\"\"" : s.name);
  size_t next_positional = 0;
  for (const std::string& arg : args) {
    const size_t eq = arg.find('=');
    size_t index = specs.size();
    std::string path = arg;
    if (eq != std::string::npos) {
      const std::string name = arg.substr(0, eq);
      path = arg.substr(eq + 1);
      for (size_t i = 0; i < specs.size(); ++i) {
        if (specs[i].name == name) index = i;
      }
      if (index == specs.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat(blob, ": the model has no input named '", name,
                         "' (inputs: ", absl::StrJoin(names, ", "), ")"));
      }
    } else {
      while (next_positional < specs.size() && values[next_positional]) ++next_positional;
      if (next_positional == specs.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            blob, ": more --input files than the model's ", specs.size(), " inputs (", arg, ")"));
      }
      index = next_positional;
    }
    if (values[index]) {
      return absl::InvalidArgumentError(
          absl::StrCat(blob, ": input '", specs[index].name, "' is given twice"));
    }
    absl::StatusOr<ir::TensorData> value = ir::ReadNpy(path);
    if (!value.ok()) return value.status();
    const TensorSpec& spec = specs[index];
    if (ir::DTypeName(value->dtype()) != spec.dtype || value->shape() != spec.shape) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": input '", spec.name, "' of ", blob,
                                                     " is ", TypeString(spec), ", the file holds ",
                                                     TypeString(*value)));
    }
    values[index] = *std::move(value);
  }
  if (required) {
    for (size_t i = 0; i < specs.size(); ++i) {
      if (!values[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat(blob, ": input '", specs[i].name, "' (", TypeString(specs[i]),
                         ") is not given: add --input ", specs[i].name, "=file.npy"));
      }
    }
  }
  return values;
}

absl::StatusOr<ir::TensorData> TensorFor(const TensorSpec& spec) {
  const std::optional<ir::DType> dtype = ir::ParseDType(spec.dtype);
  if (!dtype) return absl::InternalError("unknown dtype '" + spec.dtype + "' in the signature");
  return ir::TensorData(*dtype, spec.shape);
}

// Uniform values in [-1, 1) for floats, [0, 10) for integers, 0/1 for bool.
void FillRandom(ir::TensorData& t, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    if (ir::IsFloat(t.dtype())) {
      t.SetDouble(i, real(rng));
    } else if (ir::IsBool(t.dtype())) {
      t.SetInt64(i, static_cast<int64_t>(rng() & 1));
    } else {
      t.SetInt64(i, static_cast<int64_t>(rng() % 10));
    }
  }
}

absl::Status RunModel(const Model& model, const std::vector<ir::TensorData>& inputs,
                      std::vector<ir::TensorData>& outputs) {
  std::vector<const void*> in;
  for (const ir::TensorData& t : inputs) in.push_back(t.data());
  std::vector<void*> out;
  for (ir::TensorData& t : outputs) out.push_back(t.data());
  return model.Run(in, out);
}

std::string OutputFileName(const std::string& name, size_t index, std::set<std::string>& used) {
  std::string base;
  for (char c : name) {
    base +=
        (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_') ? c : '_';
  }
  if (base.empty() || base == "." || base == "..") base = absl::StrCat("output_", index);
  std::string file = base + ".npy";
  for (int k = 1; used.count(file) != 0; ++k) file = absl::StrCat(base, "_", k, ".npy");
  used.insert(file);
  return file;
}

std::string Preview(const ir::TensorData& t) {
  constexpr int64_t kMax = 8;
  std::string out = "[";
  for (int64_t i = 0; i < std::min(t.num_elements(), kMax); ++i) {
    if (i > 0) out += ", ";
    if (ir::IsFloat(t.dtype())) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.6g", t.GetDouble(i));
      out += buf;
    } else {
      absl::StrAppend(&out, t.GetInt64(i));
    }
  }
  if (t.num_elements() > kMax) out += ", ...";
  return out + "]";
}

double Millis(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// Runs `argv` (argv[0] looked up on PATH) and waits for it.
absl::Status Spawn(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ);
  if (err != 0) {
    if (err == ENOENT) {
      return absl::NotFoundError(absl::StrCat(
          "Graphviz's '", argv[0],
          "' is not on PATH (apt-get install graphviz), or write DOT text with -o graph.dot"));
    }
    return absl::InternalError(absl::StrCat("cannot start ", argv[0], ": ", std::strerror(err)));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return absl::InternalError(absl::StrCat("waitpid: ", std::strerror(errno)));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat(absl::StrJoin(argv, " "), " failed (status ",
                                            WIFEXITED(status) ? WEXITSTATUS(status) : -1, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::map<std::string, ir::Shape>> ParseInputShapes(
    const std::vector<std::string>& args) {
  std::map<std::string, ir::Shape> shapes;
  for (const std::string& arg : args) {
    // The last '=': ONNX names may hold any character, dimensions never hold '='.
    const size_t eq = arg.rfind('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--input-shape '", arg, "': expected name=dims, e.g. input_0=1x3x16x16"));
    }
    const std::string name = arg.substr(0, eq), dims = arg.substr(eq + 1);
    ir::Shape shape;
    if (!dims.empty()) {  // "name=" is a scalar
      for (absl::string_view d : absl::StrSplit(dims, absl::ByAnyChar("x,"))) {
        int64_t v = 0;
        if (!absl::SimpleAtoi(d, &v) || v < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("--input-shape '", arg, "': bad dimension '", d,
                           "' (dimensions are integers >= 0 joined by 'x', e.g. 1x3x16x16)"));
        }
        shape.push_back(v);
      }
    }
    if (!shapes.emplace(name, std::move(shape)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--input-shape: input '", name, "' is given twice"));
    }
  }
  return shapes;
}

absl::StatusOr<LoadedModel> ImportOnnx(const std::string& path, const OnnxArgs& onnx_args) {
  absl::StatusOr<std::map<std::string, ir::Shape>> shapes =
      ParseInputShapes(onnx_args.input_shapes);
  if (!shapes.ok()) return shapes.status();
  onnx::ImportOptions options;
  options.input_shapes = *std::move(shapes);
  options.weights_as_parameters = onnx_args.weights_as_parameters;
  absl::StatusOr<onnx::ImportedModel> imported = onnx::ImportFile(path, options);
  if (!imported.ok()) {
    // The importer's messages name its C++ option; on the command line that is --input-shape.
    return absl::Status(imported.status().code(),
                        absl::StrReplaceAll(imported.status().message(),
                                            {{"in ImportOptions::input_shapes (CLI: --input-shape)",
                                              "with --input-shape <input>=<d0>x<d1>x..."},
                                             {"ImportOptions::input_shapes", "--input-shape"}}));
  }
  LoadedModel model{std::move(imported->graph), {}};
  // Weights in parameter order: the blob's signature lists them that way.
  for (ir::NodeId p : model.graph.Parameters()) {
    const std::string& name = model.graph.node(p).attrs.name;
    auto it = imported->weights.find(name);
    if (it == imported->weights.end()) continue;
    model.weights.emplace_back(name, std::make_shared<const ir::TensorData>(std::move(it->second)));
  }
  return model;
}

absl::StatusOr<LoadedModel> LoadModel(const std::string& path, const OnnxArgs& onnx) {
  if (fs::path(path).extension() == ".onnx") return ImportOnnx(path, onnx);
  if (!onnx.input_shapes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": --input-shape applies to .onnx models only (IR text has static shapes)"));
  }
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  // A blob given where a graph is expected (`kiln viz m.kiln`) would otherwise fail on its first
  // bytes as bad IR text; the graph it was compiled from may be inside it.
  if (text->starts_with(std::string_view(runtime::blob::kMagic, sizeof(runtime::blob::kMagic)))) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": a compiled .kiln blob, not a graph (IR text or ONNX); 'kiln inspect --ir ", path,
        "' shows the graph stored in it"));
  }
  absl::StatusOr<ir::Graph> graph = ir::ParseGraph(*text);
  if (!graph.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ":", graph.status().message()));
  }
  return LoadedModel{*std::move(graph), {}};
}

int Compile(const CompileArgs& args) {
  if (args.target != "cpu" && args.target != "vulkan" && args.target != "cuda") {
    return Fail("compile",
                absl::StrCat("target '", args.target,
                             "' is not available in this build (targets: cpu, vulkan, cuda)"));
  }
  absl::StatusOr<LoadedModel> model = LoadModel(args.input, args.onnx);
  if (!model.ok()) return Fail("compile", model.status());
  aot::CompileOptions options;
  options.triples = args.triples;
  options.cpu_levels = args.cpu_levels;
  options.include_ir_text = !args.no_ir_text;
  options.name = args.name.empty() ? fs::path(args.input).stem().string() : args.name;
  options.weights = std::move(model->weights);
  options.vulkan = args.target == "vulkan";  // a Vulkan section beside the CPU code
  options.cuda = args.target == "cuda";      // a CUDA section (PTX) beside the CPU code
  if (!args.cuda_arch.empty()) {
    if (!options.cuda) return Fail("compile", "--cuda-arch needs --target cuda");
    options.cuda_arch = args.cuda_arch;
  }
  if (args.cuda_allow_tf32) {
    if (!options.cuda) return Fail("compile", "--cuda-allow-tf32 needs --target cuda");
    options.cuda_allow_tf32 = true;
  }
  if (absl::Status s = aot::CompileToFile(model->graph, options, args.output); !s.ok()) {
    return Fail("compile", absl::StrCat(args.input, ": ", s.message()));
  }
  std::error_code ec;
  std::cout << "wrote " << args.output << " (" << fs::file_size(args.output, ec) << " bytes)\n";
  return 0;
}

int Run(const RunArgs& args) {
#if KILN_TOOL_HAVE_VULKAN
  runtime::vulkan::EnableVulkanBlobs();
#endif
#if KILN_TOOL_HAVE_CUDA
  runtime::cuda::EnableCudaBlobs();
#endif
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::LoadFile(args.blob, runtime::blob::LoadOptions{args.device});
  if (!model.ok()) return Fail("run", absl::StrCat(args.blob, ": ", model.status().message()));
  const runtime::blob::Signature& sig = (*model)->signature();
  absl::StatusOr<std::vector<std::optional<ir::TensorData>>> bound =
      BindInputs(args.blob, sig.inputs, args.inputs, /*required=*/true);
  if (!bound.ok()) return Fail("run", bound.status());
  std::vector<ir::TensorData> inputs;
  for (std::optional<ir::TensorData>& v : *bound) inputs.push_back(*std::move(v));
  std::vector<ir::TensorData> outputs;
  for (const TensorSpec& spec : sig.outputs) {
    absl::StatusOr<ir::TensorData> t = TensorFor(spec);
    if (!t.ok()) return Fail("run", absl::StrCat(args.blob, ": ", t.status().message()));
    outputs.push_back(*std::move(t));
  }
  if (absl::Status s = RunModel(**model, inputs, outputs); !s.ok()) {
    return Fail("run", absl::StrCat(args.blob, ": ", s.message()));
  }
  if (args.output_dir.empty()) {
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::cout << (sig.outputs[i].name.empty() ? absl::StrCat("output ", i) : sig.outputs[i].name)
                << ": " << TypeString(outputs[i]) << " " << Preview(outputs[i]) << "\n";
    }
    return 0;
  }
  std::error_code ec;
  fs::create_directories(args.output_dir, ec);
  if (ec) return Fail("run", absl::StrCat(args.output_dir, ": cannot create: ", ec.message()));
  std::set<std::string> used;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string path =
        (fs::path(args.output_dir) / OutputFileName(sig.outputs[i].name, i, used)).string();
    if (absl::Status s = ir::WriteNpy(path, outputs[i]); !s.ok()) return Fail("run", s);
    std::cout << "wrote " << path << " (" << TypeString(outputs[i]) << ")\n";
  }
  return 0;
}

int Inspect(const InspectArgs& args) {
#if KILN_TOOL_HAVE_VULKAN
  runtime::vulkan::EnableVulkanBlobs();  // the Vulkan plan parsed, checked and described too
#endif
#if KILN_TOOL_HAVE_CUDA
  runtime::cuda::EnableCudaBlobs();  // and the CUDA plan
#endif
  absl::StatusOr<std::string> bytes = ReadFile(args.blob);
  if (!bytes.ok()) return Fail("inspect", bytes.status());
  const std::span<const std::byte> span(reinterpret_cast<const std::byte*>(bytes->data()),
                                        bytes->size());
  absl::StatusOr<runtime::blob::BlobView> view = runtime::blob::ParseBlob(span);
  if (!view.ok()) return Fail("inspect", absl::StrCat(args.blob, ": ", view.status().message()));
  std::cout << args.blob << ": " << bytes->size() << " bytes\n"
            << runtime::blob::DescribeBlob(*view);
  if (args.ir_text) {
    if (view->ir_text_section < 0) {
      return Fail("inspect", args.blob + ": the blob has no IR text (compiled with --no-ir-text)");
    }
    const runtime::blob::SectionEntry& s =
        view->sections[static_cast<size_t>(view->ir_text_section)];
    std::cout << "\nIR text:\n" << std::string_view(bytes->data() + s.offset, s.size) << "\n";
  }
  return 0;
}

int Dump(const DumpArgs& args) {
  absl::StatusOr<LoadedModel> model = LoadModel(args.input, args.onnx);
  if (!model.ok()) return Fail("dump", model.status());
  // The same machinery as KILN_DUMP on the JIT path (passes/dump.h): the compile writes a fresh
  // numbered folder under the directory, with the same files.
  if (setenv("KILN_DUMP", args.dir.c_str(), 1) != 0) {
    return Fail("dump", absl::StrCat("setenv: ", std::strerror(errno)));
  }
  absl::StatusOr<std::shared_ptr<const codegen::cpu::CompiledGraph>> compiled =
      codegen::cpu::CompileGraph(model->graph);
  if (!compiled.ok())
    return Fail("dump", absl::StrCat(args.input, ": ", compiled.status().message()));
  if ((*compiled)->dump_directory.empty()) {
    return Fail("dump", absl::StrCat(args.dir, ": could not create the dump folder"));
  }
  int files = 0;
  std::error_code ec;
  for (auto it = fs::directory_iterator((*compiled)->dump_directory, ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    ++files;
  }
  // Printed as typed: `--dir dump/` makes the session's folder "dump//0000-cpu".
  std::cout << "wrote " << fs::path((*compiled)->dump_directory).lexically_normal().string() << " ("
            << files << " files, " << (*compiled)->num_kernels << " kernels, "
            << (*compiled)->num_gemm_steps << " GEMM steps)\n";
  return 0;
}

int Viz(const VizArgs& args) {
  absl::StatusOr<LoadedModel> model = LoadModel(args.input, args.onnx);
  if (!model.ok()) return Fail("viz", model.status());
  ir::DotOptions options;
  options.max_literal_elements = args.max_literal_elements;
  const std::string dot = ir::ToDot(model->graph, options);
  const std::string ext = fs::path(args.output).extension().string();
  const std::string dot_path = ext == ".dot" ? args.output : args.output + ".tmp.dot";
  {
    std::ofstream out(dot_path, std::ios::binary | std::ios::trunc);
    out << dot;
    out.close();
    if (!out) return Fail("viz", absl::StrCat(dot_path, ": cannot write: ", std::strerror(errno)));
  }
  if (ext != ".dot") {
    if (ext != ".svg" && ext != ".png" && ext != ".pdf") {
      std::remove(dot_path.c_str());
      return Fail("viz", absl::StrCat(args.output,
                                      ": unknown picture format (use .svg, .png, .pdf or .dot)"));
    }
    const absl::Status s = Spawn({"dot", "-T" + ext.substr(1), "-o", args.output, dot_path});
    std::remove(dot_path.c_str());
    if (!s.ok()) return Fail("viz", absl::StrCat(args.output, ": ", s.message()));
  }
  std::cout << "wrote " << args.output << " (" << model->graph.num_nodes() << " nodes)\n";
  return 0;
}

int Bench(const BenchArgs& args) {
  if (args.runs < 1 || args.warmup < 0) return Fail("bench", "--runs must be >= 1, --warmup >= 0");
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = Clock::now();
  absl::StatusOr<std::unique_ptr<Model>> model = Model::LoadFile(args.blob);
  const Clock::time_point t1 = Clock::now();
  if (!model.ok()) return Fail("bench", absl::StrCat(args.blob, ": ", model.status().message()));
  const runtime::blob::Signature& sig = (*model)->signature();
  absl::StatusOr<std::vector<std::optional<ir::TensorData>>> bound =
      BindInputs(args.blob, sig.inputs, args.inputs, /*required=*/false);
  if (!bound.ok()) return Fail("bench", bound.status());
  std::mt19937_64 rng(args.seed);
  std::vector<ir::TensorData> inputs;
  for (size_t i = 0; i < sig.inputs.size(); ++i) {
    if ((*bound)[i]) {
      inputs.push_back(*std::move((*bound)[i]));
      continue;
    }
    absl::StatusOr<ir::TensorData> t = TensorFor(sig.inputs[i]);
    if (!t.ok()) return Fail("bench", absl::StrCat(args.blob, ": ", t.status().message()));
    FillRandom(*t, rng);
    inputs.push_back(*std::move(t));
  }
  std::vector<ir::TensorData> outputs;
  for (const TensorSpec& spec : sig.outputs) {
    absl::StatusOr<ir::TensorData> t = TensorFor(spec);
    if (!t.ok()) return Fail("bench", absl::StrCat(args.blob, ": ", t.status().message()));
    outputs.push_back(*std::move(t));
  }
  const Clock::time_point t2 = Clock::now();
  if (absl::Status s = RunModel(**model, inputs, outputs); !s.ok()) {
    return Fail("bench", absl::StrCat(args.blob, ": ", s.message()));
  }
  const Clock::time_point t3 = Clock::now();
  for (int i = 0; i < args.warmup; ++i) {
    if (absl::Status s = RunModel(**model, inputs, outputs); !s.ok()) return Fail("bench", s);
  }
  std::vector<double> ms;
  for (int i = 0; i < args.runs; ++i) {
    const Clock::time_point a = Clock::now();
    if (absl::Status s = RunModel(**model, inputs, outputs); !s.ok()) return Fail("bench", s);
    ms.push_back(Millis(Clock::now() - a));
  }
  std::sort(ms.begin(), ms.end());
  const double median =
      ms.size() % 2 == 1 ? ms[ms.size() / 2] : (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]) / 2;
  double mean = 0;
  for (double m : ms) mean += m / static_cast<double>(ms.size());
  // Microseconds: a small model's run takes a few of them.
  auto us = [](double ms_value) { return ms_value * 1000.0; };
  std::printf("%s (%s)\n", args.blob.c_str(), sig.name.c_str());
  std::printf("  load        %12.1f us\n", us(Millis(t1 - t0)));
  std::printf("  first run   %12.1f us\n", us(Millis(t3 - t2)));
  std::printf("  median      %12.2f us  (%d runs after %d warm-up)\n", us(median), args.runs,
              args.warmup);
  std::printf("  min         %12.2f us\n", us(ms.front()));
  std::printf("  mean        %12.2f us\n", us(mean));
  return 0;
}

int Export(const ExportArgs& args) {
  std::string format = args.format;
  if (format.empty()) {
    const std::string ext = fs::path(args.output).extension().string();
    if (ext == ".onnx") format = "onnx";
    if (ext == ".mlir") format = "mlir";
    if (format.empty()) {
      return Fail("export", absl::StrCat(args.output,
                                         ": unknown format (name the file .onnx or .mlir, or "
                                         "give --format onnx|mlir)"));
    }
  }
  if (format != "onnx" && format != "mlir") {
    return Fail("export", absl::StrCat("unknown --format '", format, "' (onnx or mlir)"));
  }
  OnnxArgs onnx_args = args.onnx;
  // ONNX keeps initializers as initializers; MLIR has no weights, so they become constants
  // (the function's arguments are then the model's inputs only).
  onnx_args.weights_as_parameters = format == "onnx";
  absl::StatusOr<LoadedModel> model = LoadModel(args.input, onnx_args);
  if (!model.ok()) return Fail("export", model.status());
  absl::StatusOr<std::string> bytes;
  if (format == "onnx") {
    onnx::ExportOptions options;
    options.opset = args.opset;
    options.graph_name = fs::path(args.input).stem().string();
    for (const auto& [name, value] : model->weights) options.weights[name] = *value;
    bytes = onnx::ExportModel(model->graph, options);
  } else {
    codegen::MlirExportOptions options;
    options.function_name = args.function_name;
    bytes = codegen::ExportMlir(model->graph, options);
  }
  if (!bytes.ok()) return Fail("export", absl::StrCat(args.input, ": ", bytes.status().message()));
  {
    std::ofstream out(args.output, std::ios::binary | std::ios::trunc);
    out.write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
    out.close();
    if (!out) {
      const int err = errno;
      std::remove(args.output.c_str());
      return Fail("export", absl::StrCat(args.output, ": cannot write: ", std::strerror(err)));
    }
  }
  std::cout << "wrote " << args.output << " (" << format << ", " << bytes->size() << " bytes, "
            << model->graph.num_nodes() << " nodes)\n";
  return 0;
}

}  // namespace kiln::tools
