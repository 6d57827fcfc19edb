// Host side of the cross-target test (run_aarch64_test.sh):
//   cross_check prepare <graph.kir> <dir>
//     writes <dir>/in_<i>.npy: seeded random values for each parameter of the graph
//   cross_check compare <graph.kir> <dir> <label>=<out_dir> ...
//     runs the graph on the reference interpreter (ir::Interpret) and checks that each out_dir
//     holds the same outputs (out_<i>.npy, or <output name>.npy as `kiln run --output` writes),
//     within a tolerance for the different float code of each target, and the first out_dir
//     against the others; prints the largest errors.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "ir/interpreter.h"
#include "ir/npy.h"
#include "ir/parser.h"

namespace {

namespace fs = std::filesystem;
using kiln::ir::TensorData;

int Fail(const std::string& message) {
  std::fprintf(stderr, "cross_check: %s\n", message.c_str());
  return 1;
}

absl::StatusOr<kiln::ir::Graph> Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(path + ": cannot open");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  absl::StatusOr<kiln::ir::Graph> graph = kiln::ir::ParseGraph(text);
  if (!graph.ok())
    return absl::InvalidArgumentError(path + ":" + std::string(graph.status().message()));
  return graph;
}

int Prepare(const kiln::ir::Graph& graph, const std::string& dir) {
  std::mt19937_64 rng(20261129);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  fs::create_directories(dir);
  const std::vector<kiln::ir::NodeId> params = graph.Parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const kiln::ir::TensorType& type = graph.node(params[i]).type;
    TensorData t(type.dtype, type.shape);
    for (int64_t k = 0; k < t.num_elements(); ++k) {
      if (kiln::ir::IsFloat(type.dtype)) {
        t.SetDouble(k, uniform(rng));
      } else if (type.dtype == kiln::ir::DType::kU8) {
        t.SetInt64(k, static_cast<int64_t>(rng() % 256));
      } else if (type.dtype == kiln::ir::DType::kI8) {
        // Within [-64, 64]: an int8 matmul's B takes the quad kernels (docs/quantization.md).
        t.SetInt64(k, static_cast<int64_t>(rng() % 129) - 64);
      } else {
        // i32/i64 are gather/scatter indices in the test graphs: 0 and 1 are in range for them.
        t.SetInt64(k, static_cast<int64_t>(rng() % 2));
      }
    }
    const std::string path = dir + "/in_" + std::to_string(i) + ".npy";
    if (absl::Status s = kiln::ir::WriteNpy(path, t); !s.ok())
      return Fail(std::string(s.message()));
  }
  std::printf("cross_check: wrote %zu inputs to %s\n", params.size(), dir.c_str());
  return 0;
}

int Compare(const kiln::ir::Graph& graph, const std::string& dir, int argc, char** argv) {
  std::vector<TensorData> inputs;
  for (size_t i = 0; i < graph.Parameters().size(); ++i) {
    absl::StatusOr<TensorData> t = kiln::ir::ReadNpy(dir + "/in_" + std::to_string(i) + ".npy");
    if (!t.ok()) return Fail(std::string(t.status().message()));
    inputs.push_back(*std::move(t));
  }
  absl::StatusOr<std::vector<TensorData>> expected = kiln::ir::Interpret(graph, inputs);
  if (!expected.ok()) return Fail(std::string(expected.status().message()));
  int failures = 0;
  std::vector<std::vector<TensorData>> all;  // per label, its outputs
  for (int a = 0; a < argc; ++a) {
    all.emplace_back();
    const std::string arg = argv[a];
    const size_t eq = arg.find('=');
    const std::string label = arg.substr(0, eq), out_dir = arg.substr(eq + 1);
    for (size_t o = 0; o < expected->size(); ++o) {
      std::string path = out_dir + "/out_" + std::to_string(o) + ".npy";
      if (!fs::exists(path)) path = out_dir + "/" + graph.outputs()[o].name + ".npy";
      absl::StatusOr<TensorData> got = kiln::ir::ReadNpy(path);
      if (!got.ok()) return Fail(std::string(got.status().message()));
      const TensorData& want = (*expected)[o];
      if (got->dtype() != want.dtype() || got->shape() != want.shape()) {
        return Fail(path + ": dtype or shape differs from the interpreter's");
      }
      double worst = 0;
      int64_t bad = 0;
      for (int64_t k = 0; k < want.num_elements(); ++k) {
        const double w = want.GetDouble(k), g = got->GetDouble(k);
        const double err = std::fabs(w - g);
        worst = std::max(worst, err);
        if (!(err <= 1e-5 + 1e-4 * std::fabs(w))) ++bad;
      }
      std::printf("cross_check: %-8s output %zu (%s): max |error| vs interpreter %.3g, %lld bad\n",
                  label.c_str(), o, graph.outputs()[o].name.c_str(), worst,
                  static_cast<long long>(bad));
      if (bad > 0) ++failures;
      all.back().push_back(*std::move(got));
    }
  }
  // The targets against each other (the first label against the others): they run different
  // machine code, so equal within the same tolerance, not bit for bit.
  for (size_t a = 1; a < all.size(); ++a) {
    for (size_t o = 0; o < all[0].size(); ++o) {
      double worst = 0;
      for (int64_t k = 0; k < all[0][o].num_elements(); ++k) {
        worst = std::max(worst, std::fabs(all[0][o].GetDouble(k) - all[a][o].GetDouble(k)));
      }
      std::printf("cross_check: output %zu: max |%s - %s| = %.3g\n", o,
                  std::string(argv[0]).substr(0, std::string(argv[0]).find('=')).c_str(),
                  std::string(argv[a]).substr(0, std::string(argv[a]).find('=')).c_str(), worst);
      if (!(worst <= 1e-4)) ++failures;
    }
  }
  return failures == 0 ? 0 : Fail(std::to_string(failures) + " outputs differ");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    return Fail(
        "usage: cross_check prepare <graph.kir> <dir> | compare <graph.kir> <dir> label=dir ...");
  }
  const std::string mode = argv[1];
  absl::StatusOr<kiln::ir::Graph> graph = Load(argv[2]);
  if (!graph.ok()) return Fail(std::string(graph.status().message()));
  if (mode == "prepare") return Prepare(*graph, argv[3]);
  if (mode == "compare") return Compare(*graph, argv[3], argc - 4, argv + 4);
  return Fail("unknown mode '" + mode + "'");
}
