#include "frontend/onnx/operator_versions.h"

#include <algorithm>
#include <map>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "onnx/onnx_pb.h"

namespace kiln::onnx::internal {
namespace {

enum class OperatorChange {
  // The first version, or one that changed what the operator computes (inputs, outputs,
  // attribute defaults, dropped types, or a new version with the same signature).
  kDefinition,
  // Only new element types and/or new optional attributes (added_attributes) since the previous
  // version: a node that sets none of them means the same in both.
  kCompatible,
};

struct OperatorVersion {
  const char* op;
  int64_t since;
  OperatorChange change;
  const char* added_attributes;  // comma-separated
  bool deprecated;               // removed from this version on
};

#include "frontend/onnx/operator_versions.inc"

// The versions of `op`, oldest first (the table is sorted by operator, then version).
std::span<const OperatorVersion> VersionsOf(const std::string& op) {
  static const auto* index = [] {
    auto* m = new std::map<std::string, std::span<const OperatorVersion>>;
    std::span<const OperatorVersion> all(kOperatorVersions);
    for (size_t i = 0; i < all.size();) {
      size_t j = i;
      while (j < all.size() && std::string_view(all[j].op) == all[i].op) ++j;
      (*m)[all[i].op] = all.subspan(i, j - i);
      i = j;
    }
    return m;
  }();
  auto it = index->find(op);
  return it == index->end() ? std::span<const OperatorVersion>() : it->second;
}

const OperatorVersion* VersionIn(std::span<const OperatorVersion> versions, int64_t opset) {
  const OperatorVersion* selected = nullptr;
  for (const auto& v : versions) {
    if (v.since <= opset) selected = &v;
  }
  return selected;
}

// Definitions newer than kMaxOpset that an operator's lowering implements too (it branches on
// the opset), with the newest opset whose definition it implements.
constexpr std::pair<std::string_view, int64_t> kNewerDefinitionsImplemented[] = {
    {"Mod", 28},  // Mod-28: fmod=0 (the floored remainder) on floating-point inputs too
    // DepthToSpace-28: unchanged but for a function body (a new version, same signature).
    {"DepthToSpace", 28},
    {"SpaceToDepth", 28},  // SpaceToDepth-28: `mode` (DCR, the default, is version 13's order)
    // QuantizeLinear-23: y_scale's type (or `precision`) is the division's; -24 to -28 types.
    {"QuantizeLinear", 28},
    // DequantizeLinear-23: `output_dtype` is the output's type and the product's precision.
    {"DequantizeLinear", 28},
};

// Definitions older than kMinOpset that an operator's lowering implements too (it branches on
// the opset), with the oldest opset whose definition it implements.
constexpr std::pair<std::string_view, int64_t> kOlderDefinitionsImplemented[] = {
    // Versions 1 and 6: the `broadcast` and `axis` attributes (B broadcast to A's shape).
    {"Add", 1},
    {"Sub", 1},
    {"Mul", 1},
    {"Div", 1},
    {"Pow", 1},
    {"Gemm", 1},                // broadcast: C broadcast to (M, N) only when set
    {"PRelu", 1},               // a slope of one value or one per channel (axis 1)
    {"BatchNormalization", 1},  // is_test, spatial; consumed_inputs ignored
};

int64_t OldestImplementedOpset(std::string_view op) {
  for (const auto& [name, opset] : kOlderDefinitionsImplemented) {
    if (name == op) return opset;
  }
  return kMinOpset;
}

int64_t NewestImplementedOpset(std::string_view op) {
  for (const auto& [name, opset] : kNewerDefinitionsImplemented) {
    if (name == op) return opset;
  }
  return kMaxOpset;
}

bool SetsAttribute(const ::onnx::NodeProto& node, std::string_view name) {
  return std::any_of(node.attribute().begin(), node.attribute().end(),
                     [&](const auto& a) { return a.name() == name; });
}

}  // namespace

int64_t NewestKnownOpset() { return kNewestKnownOpset; }
const char* OperatorTableSource() { return kOperatorTableSource; }

int64_t OperatorVersionIn(const std::string& op, int64_t opset) {
  const OperatorVersion* v = VersionIn(VersionsOf(op), opset);
  return v && !v->deprecated ? v->since : 0;
}

std::string OpsetMismatch(const std::string& op, int64_t opset) {
  const auto versions = VersionsOf(op);
  if (versions.empty()) return "";  // not an ONNX operator: the unsupported-operator check says so
  if (opset < versions.front().since) {
    return absl::StrCat(op, " exists from opset ", versions.front().since,
                        ", but the model imports opset ", opset);
  }
  if (const OperatorVersion* v = VersionIn(versions, opset); v->deprecated) {
    // The replacements the specification names in the deprecation notes.
    static const auto* replacement = new std::map<std::string, std::string>{
        {"Upsample", "Resize"}, {"Scatter", "ScatterElements"}};
    auto it = replacement->find(op);
    return absl::StrCat(op, " was removed in opset ", v->since,
                        it == replacement->end() ? "" : absl::StrCat(" (use ", it->second, ")"),
                        ", and the model imports opset ", opset);
  }
  return "";
}

std::string VersionOutsideKiln(const ::onnx::NodeProto& node, int64_t opset) {
  const std::string& op = node.op_type();
  const auto versions = VersionsOf(op);
  const OperatorVersion* model = VersionIn(versions, opset);
  const int64_t newest = NewestImplementedOpset(op);
  const int64_t nearest = std::clamp(opset, OldestImplementedOpset(op), newest);
  const OperatorVersion* implemented = VersionIn(versions, nearest);
  if (!model || model == implemented) return "";
  if (!implemented) {  // the operator is newer than kMaxOpset: kiln cannot have a lowering for it
    return absl::StrCat(op, "-", model->since, " is newer than opset ", newest,
                        ", the newest whose operators kiln implements");
  }
  const bool newer = model->since > implemented->since;
  // The steps between the two versions (each version record describes the step that made it).
  const OperatorVersion* first_step = (newer ? implemented : model) + 1;
  const OperatorVersion* last_step = newer ? model : implemented;
  for (const OperatorVersion* step = first_step; step <= last_step; ++step) {
    if (step->change == OperatorChange::kDefinition) {
      return absl::StrCat(op, "-", model->since, " (the version in opset ", opset, ") ",
                          newer ? "changed the operator after " : "differs from ", op, "-",
                          implemented->since, " (opset ", nearest, "), the ",
                          newer ? "newest" : "oldest", " definition kiln implements",
                          newer ? "" : "; export the model at opset 7 or newer");
    }
    if (!newer) continue;  // an older model cannot set attributes added after its version
    const std::vector<std::string> added =
        absl::StrSplit(step->added_attributes, ',', absl::SkipEmpty());
    for (const std::string& name : added) {
      if (SetsAttribute(node, name)) {
        return absl::StrCat("attribute '", name, "' exists from ", op, "-", step->since,
                            ", newer than the ", op, "-", implemented->since, " (opset ", nearest,
                            ") that kiln implements");
      }
    }
  }
  return "";
}

}  // namespace kiln::onnx::internal
