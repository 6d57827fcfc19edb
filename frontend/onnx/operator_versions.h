// Which version of each default-domain ONNX operator a model's opset selects, and whether kiln's
// lowering of it applies: the lowerings implement the operators as opsets kMinOpset to kMaxOpset
// define them, and a model of an older or newer opset imports when each operator it uses is
// defined there as in the nearest of those opsets, up to compatible steps (new element types,
// new optional attributes the node does not set). A few lowerings implement older or newer
// definitions too (operator_versions.cc: kOlderDefinitionsImplemented,
// kNewerDefinitionsImplemented); for those the nearest implemented opset widens accordingly. The
// table of versions (operator_versions.inc) is generated from the onnx package by
// make_operator_versions.py.
#pragma once

#include <cstdint>
#include <string>

namespace onnx {
class NodeProto;
}

namespace kiln::onnx::internal {

/// The default-domain opsets whose operator definitions kiln's lowerings implement.
inline constexpr int64_t kMinOpset = 7;
inline constexpr int64_t kMaxOpset = 22;

/// The newest opset of the operator table, and the onnx package it came from ("onnx 1.23.2").
int64_t NewestKnownOpset();
const char* OperatorTableSource();

/// The version of `op` that `opset` selects (the newest since_version <= opset), or 0 when the
/// operator does not exist in `opset` or is not in the table.
int64_t OperatorVersionIn(const std::string& op, int64_t opset);

/// Why `op` does not exist in `opset` ("Gelu exists from opset 20, but the model imports opset
/// 17"; "Upsample was removed in opset 10 (use Resize), ..."), or "" when it does.
std::string OpsetMismatch(const std::string& op, int64_t opset);

/// Why the version of the node's operator that `opset` selects is not one kiln's lowering
/// implements ("Abs-1 (the version in opset 5) differs from Abs-6 (opset 7), the oldest
/// definition kiln implements", or an attribute newer than opset kMaxOpset that the node sets),
/// or "".
std::string VersionOutsideKiln(const ::onnx::NodeProto& node, int64_t opset);

}  // namespace kiln::onnx::internal
