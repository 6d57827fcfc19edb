#include "passes/pass_manager.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/env_flag.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/rewriter.h"

namespace kiln::passes {

bool TimePassesFromEnv() { return base::EnvFlag("KILN_TIME_PASSES"); }

void PassManager::Add(std::unique_ptr<Pass> pass) {
  Stage stage;
  stage.passes.push_back(std::move(pass));
  stages_.push_back(std::move(stage));
}

void PassManager::AddFixedPoint(std::vector<std::unique_ptr<Pass>> passes, int max_rounds) {
  Stage stage;
  stage.passes = std::move(passes);
  stage.max_rounds = std::max(max_rounds, 1);
  stages_.push_back(std::move(stage));
}

std::string PassManager::ToString() const {
  std::string text;
  for (const Stage& stage : stages_) {
    if (!text.empty()) text += ", ";
    if (stage.max_rounds == 1 && stage.passes.size() == 1) {
      text += stage.passes[0]->name();
      continue;
    }
    text += "(";
    for (size_t i = 0; i < stage.passes.size(); ++i) {
      absl::StrAppend(&text, i == 0 ? "" : ", ", stage.passes[i]->name());
    }
    absl::StrAppend(&text, ")x", stage.max_rounds);
  }
  return text;
}

void PassManager::Dump(const std::string& name, const ir::Graph& graph) {
  if (!options_.dump.enabled()) return;
  ir::PrintOptions print;
  print.locations = true;
  const absl::Status status =
      options_.dump.Write(absl::StrCat(options_.dump_prefix, name), ir::PrintGraph(graph, print));
  if (!status.ok()) {
    std::fprintf(stderr, "kiln: %s\n", std::string(status.message()).c_str());
  }
}

absl::StatusOr<ir::Graph> PassManager::RunPass(Pass& pass, ir::Graph graph) {
  last_run_.push_back(pass.name());
  const std::string number = absl::StrFormat("%02d", last_run_.size());
  const int32_t nodes_before = graph.num_nodes();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<ir::Graph> result = pass.Run(std::move(graph));
  const std::chrono::duration<double, std::milli> elapsed =
      std::chrono::steady_clock::now() - start;
  if (options_.time_passes) {
    std::fprintf(stderr, "kiln: pass %s %-16s %9.3f ms  %6d -> %d nodes\n", number.c_str(),
                 pass.name(), elapsed.count(), nodes_before,
                 result.ok() ? result->num_nodes() : -1);
  }
  if (!result.ok()) {
    return absl::Status(result.status().code(),
                        absl::StrCat("pass \"", pass.name(), "\": ", result.status().message()));
  }
  if (options_.verify) {
    if (absl::Status status = ir::Verify(*result); !status.ok()) {
      Dump(absl::StrCat(number, "-", pass.name(), ".invalid.kir"), *result);
      return absl::InternalError(
          absl::StrCat("pass \"", pass.name(), "\" produced an invalid graph: ", status.message()));
    }
  }
  Dump(absl::StrCat(number, "-", pass.name(), ".kir"), *result);
  return result;
}

absl::StatusOr<ir::Graph> PassManager::Run(ir::Graph graph) {
  last_run_.clear();
  if (options_.verify) {
    if (absl::Status status = ir::Verify(graph); !status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat("pass manager: invalid input graph: ", status.message()));
    }
  }
  Dump("00-input.kir", graph);
  for (Stage& stage : stages_) {
    for (int round = 0; round < stage.max_rounds; ++round) {
      // Only a group that repeats needs the copy to compare against.
      const bool repeats = stage.max_rounds > 1;
      ir::Graph before = repeats ? graph : ir::Graph();
      for (const std::unique_ptr<Pass>& pass : stage.passes) {
        absl::StatusOr<ir::Graph> result = RunPass(*pass, std::move(graph));
        if (!result.ok()) return result.status();
        graph = *std::move(result);
      }
      if (!repeats || SameGraph(before, graph)) break;
    }
  }
  return graph;
}

}  // namespace kiln::passes
