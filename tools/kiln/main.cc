// `kiln`: compile graphs into .kiln blobs, run, inspect and benchmark blobs, dump every compile
// stage, draw graphs, export graphs as ONNX or MLIR text. docs/cli.md has every command with an
// example.
#include <CLI/CLI.hpp>
#include <iostream>
#include <string>

#include "tools/kiln/commands.h"

#ifndef KILN_VERSION_STRING
#error "KILN_VERSION_STRING must be defined by the build (the project version)"
#endif

namespace {

// --input-shape, on every command that reads a model.
void AddOnnxOptions(CLI::App* command, kiln::tools::OnnxArgs& onnx) {
  command->add_option("--input-shape", onnx.input_shapes,
                      "ONNX input: a static shape for an input with dynamic dimensions, "
                      "name=1x3x16x16 (repeatable)");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kiln::tools;
  CLI::App app{"kiln: the kiln graph compiler's command line (docs/cli.md)", "kiln"};
  // `kiln --version`: the project version (project(VERSION) in CMakeLists.txt), the same the
  // installed kilnConfigVersion.cmake and kiln_runtime.pc carry.
  app.set_version_flag("--version", std::string("kiln ") + KILN_VERSION_STRING,
                       "Print kiln's version and exit");
  app.require_subcommand(1);
  app.failure_message(CLI::FailureMessage::help);
  int result = 0;

  CompileArgs compile;
  CLI::App* c = app.add_subcommand(
      "compile", "Compile IR text (.kir) or an ONNX model into a .kiln blob for libkiln_runtime");
  c->add_option("input", compile.input, "graph.kir (IR text, docs/ir.md) or model.onnx")
      ->required();
  c->add_option("-o,--output", compile.output, "the blob to write (m.kiln)")->required();
  c->add_option("--target", compile.target,
                "cpu, or vulkan: also a Vulkan section (SPIR-V) beside the CPU code, or cuda: "
                "also a CUDA section (PTX; compiling needs NVRTC, running only the NVIDIA driver)")
      ->default_val("cpu")
      ->check(CLI::IsMember({"cpu", "vulkan", "cuda"}));
  c->add_option("--cuda-arch", compile.cuda_arch,
                "with --target cuda: the GPU architecture of the PTX (default sm_80: runs on "
                "A100, H100, H200 and newer; e.g. sm_90 for Hopper and newer only)");
  c->add_flag("--cuda-allow-tf32", compile.cuda_allow_tf32,
              "with --target cuda: run f32 matmuls on tensor cores as tf32 (faster; 10 mantissa "
              "bits instead of 23, like torch.backends.cuda.matmul.allow_tf32)");
  c->add_option("--triple", compile.triples,
                "also compile machine code for this LLVM target triple (repeatable), e.g. "
                "aarch64-linux-gnu; the host's triple is always included");
  c->add_option("--cpu-level", compile.cpu_levels,
                "the host triple's code: host, x86-64-v2, x86-64-v3 or x86-64-v4 (repeatable; "
                "default: host and all three levels on x86-64, or the level KILN_CPU pins); the "
                "runtime loads the best one the CPU runs")
      ->delimiter(',');
  c->add_flag("--no-ir-text", compile.no_ir_text, "leave the graph's IR text out of the blob");
  c->add_option("--name", compile.name, "the model's name in the signature (default: file stem)");
  AddOnnxOptions(c, compile.onnx);
  c->callback([&] { result = Compile(compile); });

  RunArgs run;
  CLI::App* r = app.add_subcommand("run", "Run a .kiln blob on .npy inputs");
  r->add_option("blob", run.blob, "m.kiln")->required();
  r->add_option("-i,--input", run.inputs,
                "name=file.npy (repeatable); a bare file.npy fills the next input not named");
  r->add_option("-o,--output", run.output_dir,
                "write each output to <dir>/<output name>.npy (default: print a summary)");
  r->add_option("--device", run.device,
                "cpu (default), vulkan or vulkan:<index|name> (needs a blob compiled with "
                "--target vulkan), cuda or cuda:<ordinal> (needs --target cuda)");
  r->callback([&] { result = Run(run); });

  InspectArgs inspect;
  CLI::App* i = app.add_subcommand(
      "inspect", "Show a blob's format version, sections, signature, code targets and sizes");
  i->add_option("blob", inspect.blob, "m.kiln")->required();
  i->add_flag("--ir", inspect.ir_text, "also print the graph's IR text stored in the blob");
  i->callback([&] { result = Inspect(inspect); });

  DumpArgs dump;
  CLI::App* d = app.add_subcommand(
      "dump",
      "Compile a graph for the CPU and write every stage into <dir>/NNNN-cpu/: the graph after "
      "each pass, fusion decisions, kernel IR, LLVM IR, assembly, memory plan, launch plan "
      "(the same files as KILN_DUMP=<dir>)");
  d->add_option("input", dump.input, "graph.kir or model.onnx")->required();
  d->add_option("--dir", dump.dir, "the dump folder (created when missing)")->required();
  AddOnnxOptions(d, dump.onnx);
  d->callback([&] { result = Dump(dump); });

  VizArgs viz;
  CLI::App* v = app.add_subcommand("viz", "Draw a graph with Graphviz");
  v->add_option("input", viz.input, "graph.kir or model.onnx")->required();
  v->add_option("-o,--output", viz.output,
                "g.svg, g.png or g.pdf (runs Graphviz's dot), or g.dot (DOT text only)")
      ->required();
  v->add_option("--max-literal", viz.max_literal_elements,
                "constants show at most this many elements")
      ->default_val(8);
  AddOnnxOptions(v, viz.onnx);
  v->callback([&] { result = Viz(viz); });

  BenchArgs bench;
  CLI::App* b = app.add_subcommand(
      "bench", "Time a blob: load, first run, then median and min latency over --runs runs");
  b->add_option("blob", bench.blob, "m.kiln")->required();
  b->add_option("-i,--input", bench.inputs,
                "name=file.npy (repeatable); inputs not given get seeded random values");
  b->add_option("-n,--runs", bench.runs, "timed runs")->default_val(100);
  b->add_option("--warmup", bench.warmup, "untimed runs after the first")->default_val(3);
  b->add_option("--seed", bench.seed, "seed of the random inputs")->default_val(0);
  b->callback([&] { result = Bench(bench); });

  ExportArgs exp;
  CLI::App* e = app.add_subcommand(
      "export", "Write a graph as an ONNX model or as MLIR text (linalg on tensors)");
  e->add_option("input", exp.input, "graph.kir or model.onnx")->required();
  e->add_option("-o,--output", exp.output, "out.onnx or out.mlir")->required();
  e->add_option("--format", exp.format, "onnx or mlir (default: from the output's extension)")
      ->check(CLI::IsMember({"onnx", "mlir"}));
  e->add_option("--opset", exp.opset, "ONNX output: the default-domain opset")
      ->default_val(17)
      ->check(CLI::IsMember({16, 17}));
  e->add_option("--function", exp.function_name, "MLIR output: the func.func's name")
      ->default_val("main");
  AddOnnxOptions(e, exp.onnx);
  e->callback([&] { result = Export(exp); });

  // CLI11 reports an unknown command only as "a subcommand is required": name it.
  bool known = true;
  try {
    if (argc > 1 && argv[1][0] != '-') app.get_subcommand(argv[1]);
  } catch (const CLI::OptionNotFound&) {
    known = false;
  }
  if (!known) {
    std::cerr << "kiln: unknown command '" << argv[1]
              << "' (commands: compile, run, inspect, dump, viz, bench, export; see kiln --help)\n";
    return 2;
  }
  CLI11_PARSE(app, argc, argv);
  return result;
}
