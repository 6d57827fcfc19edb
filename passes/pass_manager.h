// PassManager: runs a pipeline of passes over a graph, checking, dumping and timing each one.
//
//   passes::PassManagerOptions options;
//   options.dump = passes::DumpSession::FromEnv("mlp");  // The compile's session.
//   passes::PassManager pm(std::move(options));
//   passes::AddSimplifyPasses(pm);
//   absl::StatusOr<ir::Graph> simplified = pm.Run(std::move(graph));
//
// After every pass the graph is checked with ir::Verify; a pass that returns an invalid graph
// (or fails) stops the pipeline with an error naming it. With an enabled DumpSession the graph is
// written before the first pass as `00-input.kir` and after the k-th pass run as
// `NN-<pass>.kir` (NN = k, two digits or more), in the text form with source locations as
// comments, so each file parses back with ir::ParseGraph. KILN_TIME_PASSES=1 prints one line per
// pass run to stderr:
//
//   kiln: pass 03 constant_fold     0.412 ms   57 -> 41 nodes
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "passes/dump.h"
#include "passes/pass.h"

namespace kiln::passes {

/// True when the environment variable KILN_TIME_PASSES is set to something other than "" or "0".
bool TimePassesFromEnv();

struct PassManagerOptions {
  /// Where the per-pass graphs go; disabled by default.
  DumpSession dump;
  /// Prepended to the dump file names, for a compile that runs several pipelines into one
  /// session ("simplify-" gives "simplify-00-input.kir", ...).
  std::string dump_prefix;
  /// Print each pass's wall time to stderr.
  bool time_passes = TimePassesFromEnv();
  /// Run ir::Verify on the input and after every pass.
  bool verify = true;
};

class PassManager {
 public:
  PassManager() = default;
  explicit PassManager(PassManagerOptions options) : options_(std::move(options)) {}

  /// Appends a pass, run once.
  void Add(std::unique_ptr<Pass> pass);
  /// Appends a group of passes that runs repeatedly, in order, until a whole round leaves the
  /// graph unchanged (passes::SameGraph) or `max_rounds` rounds have run.
  void AddFixedPoint(std::vector<std::unique_ptr<Pass>> passes, int max_rounds);

  /// Runs the pipeline. Errors: the input fails ir::Verify; a pass fails ("pass \"cse\": ..."
  /// with the pass's status code); a pass returns a graph that fails ir::Verify (Internal,
  /// "pass \"cse\" produced an invalid graph: ...", with the offending graph dumped as
  /// `NN-<pass>.invalid.kir`).
  absl::StatusOr<ir::Graph> Run(ir::Graph graph);

  /// The pipeline, e.g. "cse, (constant_fold, algebraic, dce)x8".
  std::string ToString() const;
  /// Pass runs of the last Run, in order (fixed-point rounds repeat names).
  const std::vector<std::string>& last_run() const { return last_run_; }

 private:
  struct Stage {
    std::vector<std::unique_ptr<Pass>> passes;
    int max_rounds = 1;
  };

  absl::StatusOr<ir::Graph> RunPass(Pass& pass, ir::Graph graph);
  void Dump(const std::string& name, const ir::Graph& graph);

  PassManagerOptions options_;
  std::vector<Stage> stages_;
  std::vector<std::string> last_run_;
};

}  // namespace kiln::passes
