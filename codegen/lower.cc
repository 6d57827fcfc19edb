#include "codegen/lower.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <numbers>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/scalar_limits.h"
#include "ir/random.h"

namespace kiln::codegen {
namespace {

using ir::NodeId;
using passes::FusionGroup;
using passes::FusionKind;

// ---- Indices ------------------------------------------------------------------------------------

// A run of axes [begin, end) of a shape whose coordinates are linearised (row-major) into one
// i64 value in [0, product of their sizes).
struct Seg {
  int begin = 0;
  int end = 0;
  ValueId value = kNoValue;
};

// A multi-index into `shape` as consecutive segments covering every axis (none for rank 0).
struct Idx {
  ir::Shape shape;
  std::vector<Seg> segs;
};

int Rank(const ir::Shape& shape) { return static_cast<int>(shape.size()); }

int64_t Prod(const ir::Shape& shape, int begin, int end) {
  int64_t p = 1;
  for (int i = begin; i < end; ++i) p *= shape[static_cast<size_t>(i)];
  return p;
}

int64_t Dim(const ir::Shape& shape, int axis) { return shape[static_cast<size_t>(axis)]; }

class Lowerer {
 public:
  Lowerer(const ir::Graph& graph, const FusionGroup& group, std::string name)
      : graph_(graph), group_(group), b_(std::move(name)) {
    nodes_.insert(group.nodes.begin(), group.nodes.end());
  }

  absl::StatusOr<Kernel> Lower() {
    for (NodeId input : group_.inputs) AddInput(input);
    for (NodeId output : group_.outputs) AddOutput(output);
    PushScope();
    switch (group_.kind) {
      case FusionKind::kReduction:
        LowerReduction();
        break;
      case FusionKind::kScatter:
        if (ir::GetOpClass(graph_.node(group_.root).op) == ir::OpClass::kSort) {
          LowerSort();
        } else {
          LowerScatter();
        }
        break;
      default:
        LowerElementwise();
        break;
    }
    PopScope();
    return Finish(parallel_extent_);
  }

  absl::StatusOr<Epilogue> LowerEpilogueKernel() {
    const NodeId contraction = group_.root;
    const ir::Shape& shape = graph_.node(contraction).type.shape;
    for (NodeId output : group_.outputs) {
      if (graph_.node(output).type.shape != shape) {
        return absl::InvalidArgumentError(absl::StrCat(
            "epilogue output %", output, " ", TypeOf(output), " does not have the ",
            ir::OpName(graph_.node(contraction).op), " result's shape ", ir::ShapeToString(shape)));
      }
    }
    // The contraction is read from a buffer; its operands are not the epilogue's business.
    nodes_.erase(contraction);
    Epilogue epilogue;
    epilogue.contraction = contraction;
    epilogue.contraction_arg = AddInput(contraction);
    std::set<NodeId> inputs;
    for (NodeId id : nodes_) {
      for (NodeId operand : graph_.node(id).inputs) {
        if (!nodes_.count(operand) && operand != contraction) inputs.insert(operand);
      }
    }
    for (NodeId input : inputs) AddInput(input);
    for (NodeId output : group_.outputs) epilogue.output_args.push_back(AddOutput(output));
    PushScope();
    const int rank = Rank(shape);
    b_.SetParallelExtent(rank == 0 ? 1 : Dim(shape, 0));
    Idx idx{shape, {}};
    epilogue.coords.push_back(kGid);
    idx.segs.push_back({0, 1, b_.Var(kGid)});
    for (int axis = 1; axis < rank; ++axis) {
      const VarId var = BeginLoop(Dim(shape, axis));
      epilogue.coords.push_back(var);
      idx.segs.push_back({axis, axis + 1, b_.Var(var)});
    }
    const ValueId linear = Linear(idx);
    epilogue.contraction_value = b_.Load(epilogue.contraction_arg, linear);
    for (size_t k = 0; k < group_.outputs.size(); ++k) {
      const NodeId output = group_.outputs[k];
      const ValueId value = Value(output, idx);
      b_.Store(epilogue.output_args[k], linear, value);
      epilogue.outputs.push_back(output);
      epilogue.output_indices.push_back(linear);
      epilogue.output_values.push_back(value);
    }
    for (int axis = rank - 1; axis >= 1; --axis) EndLoop();
    PopScope();
    absl::StatusOr<Kernel> kernel = Finish(rank == 0 ? 1 : Dim(shape, 0));
    if (!kernel.ok()) return kernel.status();
    epilogue.kernel = *std::move(kernel);
    return epilogue;
  }

 private:
  // ---- Setup ------------------------------------------------------------------------------------

  std::string TypeOf(NodeId id) const { return ir::TypeToString(graph_.node(id).type); }

  std::string ArgName(NodeId id) const {
    const ir::Node& node = graph_.node(id);
    if (node.op == ir::Op::kParameter) return node.attrs.name;
    return absl::StrCat("%", id, " ", ir::OpName(node.op));
  }

  ArgId AddInput(NodeId id) {
    const ir::Node& node = graph_.node(id);
    const ArgId arg =
        b_.AddArg({ArgName(id), node.type.dtype, node.type.num_elements(), ArgRole::kInput, id});
    input_args_[id] = arg;
    return arg;
  }

  ArgId AddOutput(NodeId id) {
    const ir::Node& node = graph_.node(id);
    const ArgId arg =
        b_.AddArg({ArgName(id), node.type.dtype, node.type.num_elements(), ArgRole::kOutput, id});
    output_args_[id] = arg;
    return arg;
  }

  absl::StatusOr<Kernel> Finish(int64_t parallel_extent) {
    if (!status_.ok()) return status_;
    Kernel kernel = std::move(b_).Finish(parallel_extent);
    if (error_flag_ >= 0) {
      kernel.args[static_cast<size_t>(error_flag_)].name = absl::StrJoin(checks_, "; ");
    }
    if (absl::Status s = VerifyKernel(kernel); !s.ok()) {
      return absl::InternalError(absl::StrCat("lowering produced an invalid kernel: ", s.message(),
                                              "\n", PrintKernel(kernel)));
    }
    return kernel;
  }

  void Fail(std::string message) {
    if (status_.ok()) status_ = absl::InvalidArgumentError(std::move(message));
  }

  ArgId ErrorFlag(std::string check) {
    if (error_flag_ < 0) {
      error_flag_ = b_.AddArg({"", ir::DType::kI64, 2, ArgRole::kErrorFlag, ir::kInvalidNode});
    }
    if (std::find(checks_.begin(), checks_.end(), check) == checks_.end()) {
      checks_.push_back(std::move(check));
    }
    return error_flag_;
  }

  // ---- Scopes -----------------------------------------------------------------------------------

  void PushScope() { cache_.emplace_back(); }
  void PopScope() { cache_.pop_back(); }

  VarId BeginLoop(int64_t extent) {
    const VarId var = b_.BeginLoop(extent);
    PushScope();
    return var;
  }
  void EndLoop() {
    PopScope();
    b_.EndLoop();
  }

  // ---- Index arithmetic -------------------------------------------------------------------------

  Idx Flat(const ir::Shape& shape, ValueId linear) {
    Idx idx{shape, {}};
    if (!shape.empty()) idx.segs.push_back({0, Rank(shape), linear});
    return idx;
  }

  Idx Singles(const ir::Shape& shape, const std::vector<ValueId>& coords) {
    Idx idx{shape, {}};
    for (int axis = 0; axis < Rank(shape); ++axis) {
      idx.segs.push_back({axis, axis + 1, coords[static_cast<size_t>(axis)]});
    }
    return idx;
  }

  ValueId Linear(const Idx& idx) {
    ValueId acc = b_.Index(0);
    for (const Seg& seg : idx.segs) {
      acc = b_.IAdd(b_.IMulConst(acc, Prod(idx.shape, seg.begin, seg.end)), seg.value);
    }
    return acc;
  }

  // Makes `p` (0 < p < rank) a segment boundary.
  void Cut(Idx& idx, int p) {
    for (size_t s = 0; s < idx.segs.size(); ++s) {
      Seg seg = idx.segs[s];
      if (seg.begin < p && p < seg.end) {
        const int64_t low_size = Prod(idx.shape, p, seg.end);
        const ValueId high = b_.IDivConst(seg.value, low_size);
        const ValueId low = b_.IModConst(seg.value, low_size);
        idx.segs[s] = {seg.begin, p, high};
        idx.segs.insert(idx.segs.begin() + static_cast<std::ptrdiff_t>(s) + 1, {p, seg.end, low});
        return;
      }
    }
  }

  void Isolate(Idx& idx, int axis) {
    Cut(idx, axis);
    Cut(idx, axis + 1);
  }

  Idx AllSingles(Idx idx) {
    for (int axis = 1; axis < Rank(idx.shape); ++axis) Cut(idx, axis);
    return idx;
  }

  // The coordinate along `axis` (isolating it in `idx`).
  ValueId Coord(Idx& idx, int axis) {
    Isolate(idx, axis);
    for (const Seg& seg : idx.segs) {
      if (seg.begin == axis) return seg.value;
    }
    return b_.Index(0);
  }

  // The linearised value of axes [begin, end), which must be segment boundaries.
  ValueId Merge(const Idx& idx, int begin, int end) {
    ValueId acc = b_.Index(0);
    for (const Seg& seg : idx.segs) {
      if (seg.begin >= begin && seg.end <= end) {
        acc = b_.IAdd(b_.IMulConst(acc, Prod(idx.shape, seg.begin, seg.end)), seg.value);
      }
    }
    return acc;
  }

  // Output index of reshape(x) → index into x (shape `to`).
  Idx Reshaped(const Idx& idx, const ir::Shape& to) {
    const ir::Shape& from = idx.shape;
    if (from == to) return idx;
    if (ir::NumElements(from) == 0) return Flat(to, b_.Index(0));
    const int rank_from = Rank(from), rank_to = Rank(to);
    std::vector<int64_t> prefix_to(static_cast<size_t>(rank_to) + 1, 1);
    for (int q = 0; q < rank_to; ++q) prefix_to[q + 1] = prefix_to[q] * Dim(to, q);
    Idx out{to, {}};
    int p0 = 0, q0 = 0;
    int64_t prefix_from = 1;
    for (const Seg& seg : idx.segs) {
      for (int i = seg.begin; i < seg.end; ++i) prefix_from *= Dim(from, i);
      const int p = seg.end;
      int q = -1;
      if (p == rank_from) {
        q = rank_to;
      } else {
        for (int candidate = q0; candidate <= rank_to; ++candidate) {
          if (prefix_to[static_cast<size_t>(candidate)] == prefix_from) {
            q = candidate;
            break;
          }
        }
      }
      if (q < 0) continue;  // Not a common boundary: merge with the next segment.
      if (q > q0) out.segs.push_back({q0, q, Merge(idx, p0, p)});
      p0 = p;
      q0 = q;
    }
    if (q0 < rank_to) out.segs.push_back({q0, rank_to, b_.Index(0)});  // Trailing unit axes.
    return out;
  }

  // Output index of broadcast(x) → index into x (shape `in`).
  Idx Broadcasted(const Idx& idx, const ir::Shape& in) {
    Idx out{in, {}};
    for (const Seg& seg : idx.segs) {
      bool any = false, all = true;
      for (int i = seg.begin; i < seg.end; ++i) {
        const bool expanded = Dim(in, i) == 1 && Dim(idx.shape, i) != 1;
        any = any || expanded;
        if (!expanded && Dim(idx.shape, i) != 1) all = false;
      }
      if (!any) {
        out.segs.push_back(seg);
      } else if (all) {
        out.segs.push_back({seg.begin, seg.end, b_.Index(0)});
      } else {
        Idx one{idx.shape, {seg}};
        for (int i = seg.begin + 1; i < seg.end; ++i) Cut(one, i);
        for (const Seg& s : one.segs) {
          const bool expanded = Dim(in, s.begin) == 1;
          out.segs.push_back({s.begin, s.end, expanded ? b_.Index(0) : s.value});
        }
      }
    }
    return out;
  }

  // Output index of permute(x, perm) → index into x (output axis i is x's axis perm[i]).
  Idx Permuted(const Idx& idx, const ir::Shape& in, const std::vector<int64_t>& perm) {
    std::vector<Seg> segs;
    for (const Seg& seg : idx.segs) {
      bool consecutive = true;
      for (int i = seg.begin + 1; i < seg.end; ++i) {
        consecutive = consecutive && perm[static_cast<size_t>(i)] == perm[i - 1] + 1;
      }
      if (consecutive) {
        const int begin = static_cast<int>(perm[static_cast<size_t>(seg.begin)]);
        segs.push_back({begin, begin + (seg.end - seg.begin), seg.value});
        continue;
      }
      Idx one{idx.shape, {seg}};
      for (int i = seg.begin + 1; i < seg.end; ++i) Cut(one, i);
      for (const Seg& s : one.segs) {
        const int axis = static_cast<int>(perm[static_cast<size_t>(s.begin)]);
        segs.push_back({axis, axis + 1, s.value});
      }
    }
    std::sort(segs.begin(), segs.end(),
              [](const Seg& a, const Seg& b) { return a.begin < b.begin; });
    return Idx{in, std::move(segs)};
  }

  Idx Sliced(const Idx& idx, const ir::Shape& in, const ir::Attrs& attrs) {
    const auto stride = [&](int i) {
      return attrs.strides.empty() ? int64_t{1} : attrs.strides[static_cast<size_t>(i)];
    };
    const auto start = [&](int i) { return attrs.starts[static_cast<size_t>(i)]; };
    const auto full = [&](int i) {
      return start(i) == 0 && attrs.limits[static_cast<size_t>(i)] == Dim(in, i) &&
             (stride(i) == 1 || Dim(in, i) <= 1);
    };
    Idx out{in, {}};
    for (const Seg& seg : idx.segs) {
      bool inner_full = true;
      for (int i = seg.begin + 1; i < seg.end; ++i) inner_full = inner_full && full(i);
      if (inner_full && (stride(seg.begin) == 1 || Dim(idx.shape, seg.begin) <= 1)) {
        // Only the outermost axis moves: shift the linear value.
        const int64_t offset = start(seg.begin) * Prod(in, seg.begin + 1, seg.end);
        out.segs.push_back({seg.begin, seg.end, b_.IAddConst(seg.value, offset)});
        continue;
      }
      Idx one{idx.shape, {seg}};
      for (int i = seg.begin + 1; i < seg.end; ++i) Cut(one, i);
      for (const Seg& s : one.segs) {
        out.segs.push_back(
            {s.begin, s.end, b_.IAddConst(b_.IMulConst(s.value, stride(s.begin)), start(s.begin))});
      }
    }
    return out;
  }

  Idx Flipped(const Idx& idx, const std::vector<int64_t>& axes) {
    const std::set<int64_t> flipped(axes.begin(), axes.end());
    Idx out{idx.shape, {}};
    for (const Seg& seg : idx.segs) {
      bool any = false, all = true;
      for (int i = seg.begin; i < seg.end; ++i) {
        if (Dim(idx.shape, i) <= 1) continue;
        const bool f = flipped.count(i) > 0;
        any = any || f;
        all = all && f;
      }
      if (!any) {
        out.segs.push_back(seg);
      } else if (all) {
        const int64_t last = Prod(idx.shape, seg.begin, seg.end) - 1;
        out.segs.push_back(
            {seg.begin, seg.end, b_.Binary(ExprOp::kSub, b_.Index(last), seg.value)});
      } else {
        Idx one{idx.shape, {seg}};
        for (int i = seg.begin + 1; i < seg.end; ++i) Cut(one, i);
        for (const Seg& s : one.segs) {
          ValueId v = s.value;
          if (flipped.count(s.begin)) {
            v = b_.Binary(ExprOp::kSub, b_.Index(Dim(idx.shape, s.begin) - 1), v);
          }
          out.segs.push_back({s.begin, s.end, v});
        }
      }
    }
    return out;
  }

  // The same coordinates in another shape (operands of gather and scatter_add have other sizes
  // off the indexed axis): segments whose dims agree are kept, the rest are split into axes.
  Idx Reinterpreted(const Idx& idx, const ir::Shape& to) {
    Idx out{to, {}};
    for (const Seg& seg : idx.segs) {
      bool same = true;
      for (int i = seg.begin; i < seg.end; ++i) same = same && Dim(idx.shape, i) == Dim(to, i);
      if (same) {
        out.segs.push_back(seg);
        continue;
      }
      Idx one{idx.shape, {seg}};
      for (int i = seg.begin + 1; i < seg.end; ++i) Cut(one, i);
      for (const Seg& s : one.segs) out.segs.push_back(s);
    }
    return out;
  }

  // Replaces the coordinate of `axis` (already a single segment).
  static void SetCoord(Idx& idx, int axis, ValueId value) {
    for (Seg& seg : idx.segs) {
      if (seg.begin == axis) seg.value = value;
    }
  }

  // ---- Scalars ----------------------------------------------------------------------------------

  ScalarType TypeOfNode(NodeId id) const { return ComputeType(graph_.node(id).type.dtype); }

  ValueId Zero(ScalarType type) { return b_.ConstantOf(type, 0.0); }

  // A double stored into `dtype` (the IR's rounding), as a compute-type constant.
  ValueId StoredConstant(double value, ir::DType dtype) {
    return b_.ConstantOf(ComputeType(dtype),
                         ir::IsFloat(dtype) ? ir::RoundToDType(value, dtype) : value);
  }

  // The IR's cast of a compute-type value of dtype `from` to dtype `to`.
  ValueId CastValue(ValueId v, ir::DType from, ir::DType to) {
    if (from == to) return v;
    if (to == ir::DType::kF16 || to == ir::DType::kBF16) {
      ValueId x = v;
      if (!ir::IsFloat(from)) x = b_.Cast(v, ScalarType::kF64);
      x = b_.Unary(to == ir::DType::kF16 ? ExprOp::kRoundToF16 : ExprOp::kRoundToBF16, x);
      return b_.Cast(x, ScalarType::kF32);
    }
    return b_.Cast(v, ComputeType(to));
  }

  // The lowest / highest value of a compute type (identities of max / min).
  ValueId Extreme(ScalarType type, bool highest) {
    switch (type) {
      case ScalarType::kF32:
      case ScalarType::kF64:
        return b_.Float(type, highest ? std::numeric_limits<double>::infinity()
                                      : -std::numeric_limits<double>::infinity());
      default: {
        const IntLimits limits = LimitsOf(type);
        return b_.Int(type, highest ? limits.hi_bits : limits.lo_bits);
      }
    }
  }

  // ---- Node values ------------------------------------------------------------------------------

  // The value of node `id` at `idx` (an index into its shape), in its compute type.
  ValueId Value(NodeId id, const Idx& idx) {
    const ValueId linear = Linear(idx);
    const std::pair<NodeId, ValueId> key{id, linear};
    for (auto it = cache_.rbegin(); it != cache_.rend(); ++it) {
      if (auto found = it->find(key); found != it->end()) return found->second;
    }
    const ValueId value = Compute(id, idx);
    cache_.back()[key] = value;
    return value;
  }

  ValueId Compute(NodeId id, const Idx& idx) {
    const ir::Node& node = graph_.node(id);
    const ScalarType type = TypeOfNode(id);
    if (!nodes_.count(id)) {
      auto arg = input_args_.find(id);
      if (arg == input_args_.end()) {
        Fail(absl::StrCat("lowering: %", id, " ", ir::OpName(node.op),
                          " is neither computed by the group nor one of its inputs"));
        return Zero(type);
      }
      return b_.Load(arg->second, Linear(idx));
    }
    const auto in = [&](size_t i) { return node.inputs[i]; };
    const auto in_shape = [&](size_t i) -> const ir::Shape& {
      return graph_.node(node.inputs[i]).type.shape;
    };
    switch (ir::GetOpClass(node.op)) {
      case ir::OpClass::kLeaf:
        return Leaf(id, idx);
      case ir::OpClass::kUnary:
      case ir::OpClass::kBinary:
      case ir::OpClass::kCompare:
      case ir::OpClass::kLogical: {
        const ExprOp op = *ScalarFormOf(node.op);
        if (node.inputs.size() == 1) return b_.Unary(op, Value(in(0), idx));
        return b_.Binary(op, Value(in(0), idx), Value(in(1), idx));
      }
      case ir::OpClass::kSelect:
        return b_.Select(Value(in(0), idx), Value(in(1), idx), Value(in(2), idx));
      case ir::OpClass::kCast:
        return CastValue(Value(in(0), idx), graph_.node(in(0)).type.dtype, node.type.dtype);
      case ir::OpClass::kReduce:
      case ir::OpClass::kArgReduce:
        return ReduceAt(id, idx);
      case ir::OpClass::kMovement:
        switch (node.op) {
          case ir::Op::kReshape:
            return Value(in(0), Reshaped(idx, in_shape(0)));
          case ir::Op::kPermute:
            return Value(in(0), Permuted(idx, in_shape(0), node.attrs.axes));
          case ir::Op::kBroadcast:
            return Value(in(0), Broadcasted(idx, in_shape(0)));
          case ir::Op::kSlice:
            return Value(in(0), Sliced(idx, in_shape(0), node.attrs));
          case ir::Op::kFlip:
            return Value(in(0), Flipped(idx, node.attrs.axes));
          case ir::Op::kPad:
            return PadAt(id, idx);
          default:
            return ConcatAt(id, idx);
        }
      case ir::OpClass::kIndex:
        if (node.op == ir::Op::kGather) return GatherAt(id, idx);
        Fail(absl::StrCat("lowering: scatter_add %", id,
                          " can only be the root of its own kScatter group"));
        return Zero(type);
      case ir::OpClass::kContraction:
        return node.op == ir::Op::kMatMul ? MatMulAt(id, idx) : ConvAt(id, idx);
      case ir::OpClass::kWindow:
        return WindowAt(id, idx);
      case ir::OpClass::kSort:
        Fail(absl::StrCat("lowering: ", ir::OpName(node.op), " %", id,
                          " can only be the root of its own kScatter group"));
        return Zero(type);
    }
    return Zero(type);
  }

  ValueId Leaf(NodeId id, const Idx& idx) {
    const ir::Node& node = graph_.node(id);
    const ScalarType type = TypeOfNode(id);
    switch (node.op) {
      case ir::Op::kConstant: {
        const ir::TensorData& literal = *node.attrs.literal;
        if (literal.num_elements() == 0) return Zero(type);
        if (literal.dtype() == ir::DType::kI64) return b_.Int(type, literal.GetInt64(0));
        return b_.ConstantOf(type, literal.GetDouble(0));
      }
      case ir::Op::kFill:
        return StoredConstant(node.attrs.value, node.type.dtype);
      case ir::Op::kIota: {
        Idx copy = idx;
        const ValueId coord = Coord(copy, static_cast<int>(node.attrs.axes[0]));
        return CastValue(coord, ir::DType::kI64, node.type.dtype);
      }
      case ir::Op::kRandomUniform:
        return Uniform(node.attrs.seed, Linear(idx), node.type.dtype);
      case ir::Op::kRandomNormal:
        return Normal(node.attrs.seed, Linear(idx), node.type.dtype);
      default:  // A parameter listed as a node: read it.
        Fail(absl::StrCat("lowering: parameter %", id, " has no buffer in this group"));
        return Zero(type);
    }
  }

  // ---- Random numbers (ir/random.h in kernel IR) ------------------------------------------------

  std::array<ValueId, 4> Philox(uint64_t seed, ValueId linear) {
    const ValueId l64 = b_.Wrap(linear, ScalarType::kU64);
    const auto u32 = [&](ValueId v) { return b_.Wrap(v, ScalarType::kU32); };
    const auto u64 = [&](ValueId v) { return b_.Wrap(v, ScalarType::kU64); };
    const auto k32 = [&](uint32_t v) { return b_.Int(ScalarType::kU32, v); };
    const ValueId shift32 = b_.Int(ScalarType::kU64, 32);
    std::array<ValueId, 4> c = {u32(l64), u32(b_.Binary(ExprOp::kShr, l64, shift32)), k32(0),
                                k32(0)};
    uint32_t key0 = static_cast<uint32_t>(seed), key1 = static_cast<uint32_t>(seed >> 32);
    const ValueId m0 = b_.Int(ScalarType::kU64, 0xD2511F53u);
    const ValueId m1 = b_.Int(ScalarType::kU64, 0xCD9E8D57u);
    for (int round = 0; round < 10; ++round) {
      if (round > 0) {
        key0 += 0x9E3779B9u;
        key1 += 0xBB67AE85u;
      }
      const ValueId p0 = b_.Binary(ExprOp::kMul, u64(c[0]), m0);
      const ValueId p1 = b_.Binary(ExprOp::kMul, u64(c[2]), m1);
      c = {b_.Binary(ExprOp::kXor,
                     b_.Binary(ExprOp::kXor, u32(b_.Binary(ExprOp::kShr, p1, shift32)), c[1]),
                     k32(key0)),
           u32(p1),
           b_.Binary(ExprOp::kXor,
                     b_.Binary(ExprOp::kXor, u32(b_.Binary(ExprOp::kShr, p0, shift32)), c[3]),
                     k32(key1)),
           u32(p0)};
    }
    return c;
  }

  // (word >> (32 - bits)) * 2^-bits in `type` (exact).
  ValueId WordToUnit(ValueId word, int bits, ScalarType type) {
    const ValueId top = b_.Binary(ExprOp::kShr, word, b_.Int(ScalarType::kU32, 32 - bits));
    return b_.Binary(ExprOp::kMul, b_.Cast(top, type),
                     b_.Float(type, 1.0 / static_cast<double>(uint64_t{1} << bits)));
  }

  // The top 21 bits of `high` then all of `low`, times 2^-53, in f64 (exact).
  ValueId WordsToUnit53(ValueId high, ValueId low) {
    const ValueId top =
        b_.Wrap(b_.Binary(ExprOp::kShr, high, b_.Int(ScalarType::kU32, 11)), ScalarType::kU64);
    const ValueId bits =
        b_.Binary(ExprOp::kOr, b_.Binary(ExprOp::kShl, top, b_.Int(ScalarType::kU64, 32)),
                  b_.Wrap(low, ScalarType::kU64));
    return b_.Binary(ExprOp::kMul, b_.Cast(bits, ScalarType::kF64),
                     b_.Float(ScalarType::kF64, 0x1p-53));
  }

  ValueId Uniform(uint64_t seed, ValueId linear, ir::DType dtype) {
    const std::array<ValueId, 4> w = Philox(seed, linear);
    if (dtype == ir::DType::kF64) return WordsToUnit53(w[0], w[1]);
    return WordToUnit(w[0], ir::UniformBits(dtype), ScalarType::kF32);
  }

  ValueId Normal(uint64_t seed, ValueId linear, ir::DType dtype) {
    const std::array<ValueId, 4> w = Philox(seed, linear);
    const bool wide = dtype == ir::DType::kF64;
    const ScalarType f64 = ScalarType::kF64;
    const ValueId big_u1 = wide ? WordsToUnit53(w[0], w[1]) : WordToUnit(w[0], 24, f64);
    const ValueId u2 = wide ? WordsToUnit53(w[2], w[3]) : WordToUnit(w[1], 24, f64);
    const ValueId u1 = b_.Binary(ExprOp::kSub, b_.Float(f64, 1.0), big_u1);
    const ValueId radius = b_.Unary(
        ExprOp::kSqrt, b_.Binary(ExprOp::kMul, b_.Float(f64, -2.0), b_.Unary(ExprOp::kLog, u1)));
    const ValueId angle =
        b_.Unary(ExprOp::kCos, b_.Binary(ExprOp::kMul, b_.Float(f64, 2.0 * std::numbers::pi), u2));
    return CastValue(b_.Binary(ExprOp::kMul, radius, angle), ir::DType::kF64, dtype);
  }

  // ---- Movement with selects --------------------------------------------------------------------

  ValueId PadAt(NodeId id, const Idx& idx) {
    const ir::Node& node = graph_.node(id);
    const NodeId x = node.inputs[0];
    const ir::Shape& in = graph_.node(x).type.shape;
    const ValueId pad_value = StoredConstant(node.attrs.value, node.type.dtype);
    if (ir::NumElements(in) == 0) return pad_value;
    Idx out = idx;
    ValueId valid = b_.Bool(true);
    for (int axis = 0; axis < Rank(in); ++axis) {
      const int64_t low = node.attrs.low[static_cast<size_t>(axis)];
      const int64_t high = node.attrs.high[static_cast<size_t>(axis)];
      if (low == 0 && high == 0) continue;
      const ValueId c = Coord(out, axis);
      const ValueId inside = b_.Binary(ExprOp::kAnd, b_.Binary(ExprOp::kGe, c, b_.Index(low)),
                                       b_.Binary(ExprOp::kLt, c, b_.Index(low + Dim(in, axis))));
      valid = b_.Binary(ExprOp::kAnd, valid, inside);
      SetCoord(out, axis, b_.IClamp(b_.IAddConst(c, -low), 0, Dim(in, axis) - 1));
    }
    out.shape = in;
    return b_.Select(valid, Value(x, out), pad_value);
  }

  ValueId ConcatAt(NodeId id, const Idx& idx) {
    const ir::Node& node = graph_.node(id);
    const int axis = static_cast<int>(node.attrs.axes[0]);
    Idx at = idx;
    const ValueId c = Coord(at, axis);
    struct Part {
      NodeId node;
      int64_t offset;
      int64_t size;
    };
    std::vector<Part> parts;
    int64_t offset = 0;
    for (NodeId input : node.inputs) {
      const ir::Shape& shape = graph_.node(input).type.shape;
      if (ir::NumElements(shape) > 0) parts.push_back({input, offset, Dim(shape, axis)});
      offset += Dim(shape, axis);
    }
    if (parts.empty()) return Zero(TypeOfNode(id));
    const auto part_value = [&](const Part& part) {
      Idx x = at;
      x.shape = graph_.node(part.node).type.shape;
      SetCoord(x, axis, b_.IClamp(b_.IAddConst(c, -part.offset), 0, part.size - 1));
      return Value(part.node, x);
    };
    ValueId value = part_value(parts.back());
    for (size_t k = parts.size() - 1; k-- > 0;) {
      const ValueId before_next = b_.Binary(ExprOp::kLt, c, b_.Index(parts[k + 1].offset));
      value = b_.Select(before_next, part_value(parts[k]), value);
    }
    return value;
  }

  ValueId GatherAt(NodeId id, const Idx& idx) {
    const ir::Node& node = graph_.node(id);
    const NodeId x = node.inputs[0], index = node.inputs[1];
    const int axis = static_cast<int>(node.attrs.axes[0]);
    const ir::Shape& x_shape = graph_.node(x).type.shape;
    const int64_t size = Dim(x_shape, axis);
    const ValueId k = b_.Cast(Value(index, idx), ScalarType::kI64);
    const ValueId valid = b_.Binary(ExprOp::kAnd, b_.Binary(ExprOp::kGe, k, b_.Index(0)),
                                    b_.Binary(ExprOp::kLt, k, b_.Index(size)));
    CheckIndex(id, k, valid, axis, size);
    if (ir::NumElements(x_shape) == 0) return Zero(TypeOfNode(id));
    Idx at = idx;
    Isolate(at, axis);
    Idx data = Reinterpreted(at, x_shape);
    SetCoord(data, axis, b_.IClamp(k, 0, size - 1));
    return Value(x, data);
  }

  // Records an out-of-range index in the error flag (when `valid` is false).
  void CheckIndex(NodeId id, ValueId k, ValueId valid, int axis, int64_t size) {
    const ir::Node& node = graph_.node(id);
    std::string what = absl::StrCat("%", id, " = ", ir::OpName(node.op));
    if (std::string where = ir::LocationToString(node.loc); !where.empty()) {
      absl::StrAppend(&what, " (", where, ")");
    }
    absl::StrAppend(&what, ": index out of range for axis ", axis, " of size ", size);
    const ArgId flag = ErrorFlag(std::move(what));
    const ValueId bad = b_.Unary(ExprOp::kNot, valid);
    b_.Store(flag, b_.Index(0), b_.Int(ScalarType::kI64, 1), bad);
    b_.Store(flag, b_.Index(1), k, bad);
  }

  // ---- Reductions -------------------------------------------------------------------------------

  // Index into a reduction's input `in_shape` from the kept coordinates of `row` (an index into
  // the outer shape) and the reduced coordinates linearised in `r` (row-major over the axes).
  // With `last_run` given, the last reduced run's coordinate is `last_run` and `r` linearises
  // only the reduced runs before it.
  Idx ReducedInputIndex(const Idx& row, const ir::Shape& in_shape, const std::vector<int64_t>& axes,
                        ValueId r, ValueId last_run = kNoValue) {
    const std::set<int64_t> reduced(axes.begin(), axes.end());
    struct Run {
      int begin, end;
      bool reduced;
    };
    std::vector<Run> runs;
    for (int axis = 0; axis < Rank(in_shape); ++axis) {
      const bool red = reduced.count(axis) > 0;
      if (!runs.empty() && runs.back().reduced == red) {
        runs.back().end = axis + 1;
      } else {
        runs.push_back({axis, axis + 1, red});
      }
    }
    Idx kept = row;
    for (const Run& run : runs) {
      Cut(kept, run.begin);
      Cut(kept, run.end);
    }
    int last_reduced = -1;
    for (size_t i = 0; i < runs.size(); ++i) {
      if (runs[i].reduced) last_reduced = static_cast<int>(i);
    }
    int64_t reduced_after = 1;  // Product of the reduced runs after the current one.
    for (size_t i = 0; i < runs.size(); ++i) {
      const bool split_off = last_run != kNoValue && static_cast<int>(i) == last_reduced;
      if (runs[i].reduced && !split_off)
        reduced_after *= Prod(in_shape, runs[i].begin, runs[i].end);
    }
    Idx out{in_shape, {}};
    for (size_t i = 0; i < runs.size(); ++i) {
      const Run& run = runs[i];
      if (!run.reduced) {
        out.segs.push_back({run.begin, run.end, Merge(kept, run.begin, run.end)});
        continue;
      }
      if (last_run != kNoValue && static_cast<int>(i) == last_reduced) {
        out.segs.push_back({run.begin, run.end, last_run});
        continue;
      }
      const int64_t size = Prod(in_shape, run.begin, run.end);
      reduced_after /= std::max<int64_t>(size, 1);
      const ValueId v = b_.IModConst(b_.IDivConst(r, std::max<int64_t>(reduced_after, 1)),
                                     std::max<int64_t>(size, 1));
      out.segs.push_back({run.begin, run.end, v});
    }
    return out;
  }

  ValueId ReduceAt(NodeId id, const Idx& idx) {
    const ir::Node& node = graph_.node(id);
    const NodeId x = node.inputs[0];
    const ir::Shape& in_shape = graph_.node(x).type.shape;
    int64_t count = 1;
    for (int64_t axis : node.attrs.axes) count *= Dim(in_shape, static_cast<int>(axis));
    const ScalarType type = TypeOfNode(x);
    ReduceKind kind = ReduceKind::kSum;
    ValueId init = kNoValue;
    switch (node.op) {
      case ir::Op::kReduceSum:
        init = Zero(type);
        break;
      case ir::Op::kReduceProd:
        kind = ReduceKind::kProd;
        init = b_.ConstantOf(type, 1.0);
        break;
      case ir::Op::kReduceMax:
        kind = ReduceKind::kMax;
        init = Extreme(type, false);
        break;
      case ir::Op::kReduceMin:
        kind = ReduceKind::kMin;
        init = Extreme(type, true);
        break;
      case ir::Op::kArgMax:
        kind = ReduceKind::kArgMax;
        break;
      default:
        kind = ReduceKind::kArgMin;
        break;
    }
    // Reduced axes split by kept ones with the last reduced run innermost (a bias gradient: sum
    // of [N, C, H, W] over N, H and W): one flat loop would divide its counter into coordinates
    // at every element and read with a stride the vectoriser cannot follow. Nested instead, the
    // inner loop runs over the contiguous last run (a plain reassociable sum the vectoriser
    // splits into lanes) and the outer one over the rest.
    const int64_t inner = InnermostReducedRun(in_shape, node.attrs.axes);
    if (inner >= 16 && inner < count &&
        (kind == ReduceKind::kSum || kind == ReduceKind::kMax || kind == ReduceKind::kMin)) {
      const VarId r = b_.BeginReduce(kind, init, count / inner);
      PushScope();
      const VarId q = b_.BeginReduce(kind, init, inner);
      PushScope();
      const Idx input = ReducedInputIndex(idx, in_shape, node.attrs.axes, b_.Var(r), b_.Var(q));
      const ValueId value = Value(x, input);
      PopScope();
      const ValueId partial = b_.EndReduce(value);
      PopScope();
      return b_.EndReduce(partial);
    }
    const VarId r = b_.BeginReduce(kind, init, count);
    PushScope();
    const Idx input = ReducedInputIndex(idx, in_shape, node.attrs.axes, b_.Var(r));
    const ValueId value = Value(x, input);
    PopScope();
    return b_.EndReduce(value);
  }

  // The size of the last run of reduced axes when it ends at the last axis and both a kept axis
  // and a reduced axis (of sizes > 1) come before it; 0 otherwise. Runs under 16 elements (a
  // vector's worth) stay flat: nesting would only change the order of the sum.
  static int64_t InnermostReducedRun(const ir::Shape& in_shape, const std::vector<int64_t>& axes) {
    const std::set<int64_t> reduced(axes.begin(), axes.end());
    const int rank = Rank(in_shape);
    if (rank == 0 || !reduced.count(rank - 1)) return 0;
    int begin = rank - 1;
    while (begin > 0 && reduced.count(begin - 1)) --begin;
    bool kept_before = false;
    for (int axis = 0; axis < begin; ++axis) kept_before = kept_before || Dim(in_shape, axis) > 1;
    bool reduced_before = false;
    for (int axis = 0; axis < begin; ++axis) {
      reduced_before = reduced_before || (reduced.count(axis) && Dim(in_shape, axis) > 1);
    }
    if (!kept_before || !reduced_before) return 0;
    return Prod(in_shape, begin, rank);
  }

  ValueId MatMulAt(NodeId id, const Idx& idx) {
    const ir::Node& node = graph_.node(id);
    const NodeId a = node.inputs[0], bm = node.inputs[1];
    const ir::Shape& a_shape = graph_.node(a).type.shape;
    const ir::Shape& b_shape = graph_.node(bm).type.shape;
    const int rank = Rank(a_shape);
    Idx at = idx;
    Isolate(at, rank - 2);
    Isolate(at, rank - 1);
    const ValueId m = Coord(at, rank - 2), n = Coord(at, rank - 1);
    const ScalarType type = TypeOfNode(id);
    const VarId k = b_.BeginReduce(ReduceKind::kSum, Zero(type), Dim(a_shape, rank - 1));
    PushScope();
    Idx ai{a_shape, {}}, bi{b_shape, {}};
    if (rank > 2) {
      const ValueId batch = Merge(at, 0, rank - 2);
      ai.segs.push_back({0, rank - 2, batch});
      bi.segs.push_back({0, rank - 2, batch});
    }
    ai.segs.push_back({rank - 2, rank - 1, m});
    ai.segs.push_back({rank - 1, rank, b_.Var(k)});
    bi.segs.push_back({rank - 2, rank - 1, b_.Var(k)});
    bi.segs.push_back({rank - 1, rank, n});
    // An integer matmul {accumulate} converts each operand to the result type (exactly).
    const ValueId product =
        b_.Binary(ExprOp::kMul, CastValue(Value(a, ai), graph_.node(a).type.dtype, node.type.dtype),
                  CastValue(Value(bm, bi), graph_.node(bm).type.dtype, node.type.dtype));
    PopScope();
    return b_.EndReduce(product);
  }

  ValueId ConvAt(NodeId id, const Idx& idx) {
    const ir::Node& node = graph_.node(id);
    const ir::Attrs& attrs = node.attrs;
    const NodeId x = node.inputs[0], w = node.inputs[1];
    const ir::Shape& x_shape = graph_.node(x).type.shape;
    const ir::Shape& w_shape = graph_.node(w).type.shape;
    const int spatial = Rank(x_shape) - 2;
    const auto at = [](const std::vector<int64_t>& v, int i, int64_t fallback) {
      return v.empty() ? fallback : v[static_cast<size_t>(i)];
    };
    Idx out = AllSingles(idx);
    const ValueId n = Coord(out, 0), o = Coord(out, 1);
    const int64_t channels_per_group = Dim(w_shape, 1);
    const int64_t outputs_per_group = Dim(w_shape, 0) / attrs.groups;
    const ir::Shape kernel(w_shape.begin() + 2, w_shape.end());
    const int64_t kernel_size = ir::NumElements(kernel);
    const ScalarType type = TypeOfNode(id);
    const VarId r = b_.BeginReduce(ReduceKind::kSum, Zero(type), channels_per_group * kernel_size);
    PushScope();
    const ValueId rv = b_.Var(r);
    const ValueId c = b_.IDivConst(rv, std::max<int64_t>(kernel_size, 1));
    const ValueId kflat = b_.IModConst(rv, std::max<int64_t>(kernel_size, 1));
    Idx k_idx = AllSingles(Flat(kernel, kflat));
    const ValueId group = b_.IDivConst(o, std::max<int64_t>(outputs_per_group, 1));
    const ValueId channel = b_.IAdd(b_.IMulConst(group, channels_per_group), c);
    std::vector<ValueId> x_coords = {n, channel}, w_coords = {o, c};
    ValueId valid = b_.Bool(true);
    bool empty_input = false;
    for (int d = 0; d < spatial; ++d) {
      const ValueId kd = Coord(k_idx, d);
      w_coords.push_back(kd);
      const ValueId q =
          b_.IAdd(b_.IAddConst(b_.IMulConst(Coord(out, 2 + d), at(attrs.strides, d, 1)),
                               -at(attrs.low, d, 0)),
                  b_.IMulConst(kd, at(attrs.dilation, d, 1)));
      const int64_t input_dilation = at(attrs.input_dilation, d, 1);
      const int64_t size = Dim(x_shape, 2 + d);
      if (size == 0) empty_input = true;
      const ValueId q_pos = b_.Binary(ExprOp::kMax, q, b_.Index(0));
      const ValueId xq = b_.IDivConst(q_pos, input_dilation);
      valid = b_.Binary(ExprOp::kAnd, valid, b_.Binary(ExprOp::kGe, q, b_.Index(0)));
      valid = b_.Binary(ExprOp::kAnd, valid,
                        b_.Binary(ExprOp::kEq, b_.IModConst(q_pos, input_dilation), b_.Index(0)));
      valid = b_.Binary(ExprOp::kAnd, valid, b_.Binary(ExprOp::kLt, xq, b_.Index(size)));
      x_coords.push_back(b_.IClamp(xq, 0, std::max<int64_t>(size - 1, 0)));
    }
    ValueId product = Zero(type);
    if (!empty_input) {
      const ValueId xv = CastValue(Value(x, Singles(x_shape, x_coords)), graph_.node(x).type.dtype,
                                   node.type.dtype);
      const ValueId wv = CastValue(Value(w, Singles(w_shape, w_coords)), graph_.node(w).type.dtype,
                                   node.type.dtype);
      product = b_.Select(valid, b_.Binary(ExprOp::kMul, xv, wv), Zero(type));
    }
    PopScope();
    return b_.EndReduce(product);
  }

  ValueId WindowAt(NodeId id, const Idx& idx) {
    const ir::Node& node = graph_.node(id);
    const ir::Attrs& attrs = node.attrs;
    const NodeId x = node.inputs[0];
    const ir::Shape& x_shape = graph_.node(x).type.shape;
    const int rank = Rank(x_shape);
    const auto at = [](const std::vector<int64_t>& v, int i, int64_t fallback) {
      return v.empty() ? fallback : v[static_cast<size_t>(i)];
    };
    const ScalarType type = TypeOfNode(id);
    const bool is_sum = node.op == ir::Op::kWindowSum;
    const ValueId identity = is_sum ? Zero(type) : Extreme(type, false);
    Idx out = AllSingles(idx);
    const ir::Shape window(attrs.window.begin(), attrs.window.end());
    const VarId r = b_.BeginReduce(is_sum ? ReduceKind::kSum : ReduceKind::kMax, identity,
                                   ir::NumElements(window));
    PushScope();
    Idx k_idx = AllSingles(Flat(window, b_.Var(r)));
    ValueId valid = b_.Bool(true);
    std::vector<ValueId> coords;
    for (int d = 0; d < rank; ++d) {
      const ValueId q = b_.IAdd(
          b_.IAddConst(b_.IMulConst(Coord(out, d), at(attrs.strides, d, 1)), -at(attrs.low, d, 0)),
          b_.IMulConst(Coord(k_idx, d), at(attrs.dilation, d, 1)));
      const int64_t size = Dim(x_shape, d);
      valid = b_.Binary(ExprOp::kAnd, valid,
                        b_.Binary(ExprOp::kAnd, b_.Binary(ExprOp::kGe, q, b_.Index(0)),
                                  b_.Binary(ExprOp::kLt, q, b_.Index(size))));
      coords.push_back(b_.IClamp(q, 0, std::max<int64_t>(size - 1, 0)));
    }
    ValueId value = identity;
    if (ir::NumElements(x_shape) > 0) {
      value = b_.Select(valid, Value(x, Singles(x_shape, coords)), identity);
    }
    PopScope();
    return b_.EndReduce(value);
  }

  // ---- Group shapes -----------------------------------------------------------------------------

  absl::Status CheckCounts(int64_t count) {
    for (NodeId output : group_.outputs) {
      if (graph_.node(output).type.num_elements() != count) {
        return absl::InvalidArgumentError(
            absl::StrCat("lowering ", passes::FusionKindName(group_.kind), " group: output %",
                         output, " ", TypeOf(output), " has another element count than ", count));
      }
    }
    return absl::OkStatus();
  }

  // True when every node's value at an element depends only on the same element of the inputs
  // (no movement, no coordinates): the group runs flat.
  bool IsFlat() const {
    for (NodeId id : nodes_) {
      const ir::Op op = graph_.node(id).op;
      const bool flat_leaf = op == ir::Op::kFill || op == ir::Op::kConstant ||
                             op == ir::Op::kRandomUniform || op == ir::Op::kRandomNormal;
      if (!ir::IsElementwise(op) && !flat_leaf) return false;
    }
    return true;
  }

  void LowerElementwise() {
    if (group_.outputs.empty()) return;
    const ir::Shape& shape = graph_.node(group_.outputs.front()).type.shape;
    const int64_t count = ir::NumElements(shape);
    if (absl::Status s = CheckCounts(count); !s.ok()) {
      status_ = s;
      return;
    }
    const int rank = Rank(shape);
    const int64_t inner = rank >= 2 ? Dim(shape, rank - 1) : 0;
    if (IsFlat() || rank < 2 || count == 0 || inner <= 1) {
      parallel_extent_ = count;
      b_.SetParallelExtent(parallel_extent_);
      const ValueId gid = b_.Var(kGid);
      StoreOutputs(Flat(shape, gid), gid);
      return;
    }
    // Rows of the last axis: gid over the leading axes, an inner loop over the last one.
    parallel_extent_ = count / inner;
    b_.SetParallelExtent(parallel_extent_);
    const VarId j = BeginLoop(inner);
    Idx idx{shape, {{0, rank - 1, b_.Var(kGid)}, {rank - 1, rank, b_.Var(j)}}};
    StoreOutputs(idx, Linear(idx));
    EndLoop();
  }

  // An output that is only reshapes and permutes of another output of the group (autodiff makes
  // such permuted copies for weight gradients: dW's convolution reads g with N and C swapped):
  // the other output and the movement nodes from it up to this one, outermost first. Empty when
  // the output is not of that form.
  std::pair<NodeId, std::vector<NodeId>> MovedCopyOf(NodeId output) const {
    std::vector<NodeId> chain;
    NodeId id = output;
    while (nodes_.count(id)) {
      const ir::Node& node = graph_.node(id);
      if (node.op != ir::Op::kReshape && node.op != ir::Op::kPermute) break;
      chain.push_back(id);
      id = node.inputs[0];
      if (std::find(group_.outputs.begin(), group_.outputs.end(), id) != group_.outputs.end()) {
        return {id, chain};
      }
    }
    return {ir::kInvalidNode, {}};
  }

  // Stores every output at the loop's element `idx` (linear index `linear`; all outputs have the
  // same element count). A moved copy of another output is not evaluated again at its own
  // element, which would redo the whole chain at another index: the other output's value at
  // this element (computed once, cached) is stored where the movement takes it.
  void StoreOutputs(const Idx& idx, ValueId linear) {
    for (NodeId output : group_.outputs) {
      const auto [source, chain] = MovedCopyOf(output);
      if (source == ir::kInvalidNode) {
        b_.Store(output_args_[output], linear,
                 Value(output, Reshaped(idx, graph_.node(output).type.shape)));
        continue;
      }
      const Idx at_source = Reshaped(idx, graph_.node(source).type.shape);
      const ValueId value = Value(source, at_source);
      Idx moved = at_source;  // Forward through the chain: source's index -> output's index.
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        const ir::Node& node = graph_.node(*it);
        if (node.op == ir::Op::kReshape) {
          moved = Reshaped(moved, node.type.shape);
        } else {
          std::vector<int64_t> inverse(node.attrs.axes.size());
          for (size_t i = 0; i < inverse.size(); ++i) {
            inverse[static_cast<size_t>(node.attrs.axes[i])] = static_cast<int64_t>(i);
          }
          moved = Permuted(moved, node.type.shape, inverse);
        }
      }
      b_.Store(output_args_[output], Linear(moved), value);
    }
  }

  void LowerReduction() {
    const ir::Shape& outer = group_.outer_shape;
    const int64_t rows = ir::NumElements(outer);
    parallel_extent_ = rows;
    b_.SetParallelExtent(parallel_extent_);
    const Idx row = Flat(outer, b_.Var(kGid));
    // Each reduction once per row, in order, before anything reads it.
    std::map<int64_t, NodeId> reduction_of_count;
    for (NodeId id : group_.nodes) {
      const ir::Node& node = graph_.node(id);
      const ir::OpClass cls = ir::GetOpClass(node.op);
      if (cls != ir::OpClass::kReduce && cls != ir::OpClass::kArgReduce) continue;
      if (node.type.shape != outer) {
        status_ = absl::InvalidArgumentError(
            absl::StrCat("lowering reduction group: %", id, " ", TypeOf(id),
                         " does not keep the group's outer shape ", ir::ShapeToString(outer)));
        return;
      }
      Value(id, row);
      reduction_of_count.try_emplace(graph_.node(node.inputs[0]).type.num_elements(), id);
    }
    std::map<int64_t, std::vector<NodeId>> full_outputs;
    for (NodeId output : group_.outputs) {
      const ir::Shape& shape = graph_.node(output).type.shape;
      const int64_t count = ir::NumElements(shape);
      if (count == rows) {
        b_.Store(output_args_[output], b_.Var(kGid), Value(output, Reshaped(row, shape)));
      } else if (reduction_of_count.count(count)) {
        full_outputs[count].push_back(output);
      } else {
        status_ = absl::InvalidArgumentError(absl::StrCat(
            "lowering reduction group: output %", output, " ", TypeOf(output),
            " fits neither the rows ", ir::ShapeToString(outer), " nor a reduced input"));
        return;
      }
    }
    for (const auto& [count, outputs] : full_outputs) {
      const ir::Node& reduction = graph_.node(reduction_of_count[count]);
      const ir::Shape& in_shape = graph_.node(reduction.inputs[0]).type.shape;
      const VarId j = BeginLoop(rows == 0 ? 0 : count / rows);
      const Idx full = ReducedInputIndex(row, in_shape, reduction.attrs.axes, b_.Var(j));
      const ValueId linear = Linear(full);
      for (NodeId output : outputs) {
        b_.Store(output_args_[output], linear,
                 Value(output, Reshaped(full, graph_.node(output).type.shape)));
      }
      EndLoop();
    }
  }

  void LowerScatter() {
    const NodeId id = group_.root;
    const ir::Node& node = graph_.node(id);
    if (node.op != ir::Op::kScatterAdd || group_.outputs != std::vector<NodeId>{id}) {
      status_ = absl::InvalidArgumentError(
          absl::StrCat("lowering scatter group: root %", id, " is not its only output"));
      return;
    }
    const NodeId x = node.inputs[0], index = node.inputs[1], src = node.inputs[2];
    const ir::Shape& x_shape = node.type.shape;
    const ir::Shape& i_shape = graph_.node(index).type.shape;
    const int rank = Rank(x_shape);
    const int axis = static_cast<int>(node.attrs.axes[0]);
    const int64_t size = Dim(x_shape, axis);
    const ArgId out = output_args_[id];
    // gid runs over the fibres along `axis`: the other coordinates of x.
    const int64_t after = Prod(x_shape, axis + 1, rank);
    parallel_extent_ = Prod(x_shape, 0, axis) * after;
    b_.SetParallelExtent(parallel_extent_);
    const ValueId gid = b_.Var(kGid);
    const ValueId high = b_.IDivConst(gid, std::max<int64_t>(after, 1));
    const ValueId low = b_.IModConst(gid, std::max<int64_t>(after, 1));
    const auto fibre_index = [&](const ir::Shape& shape, ValueId along) {
      Idx idx{shape, {}};
      if (axis > 0) idx.segs.push_back({0, axis, high});
      idx.segs.push_back({axis, axis + 1, along});
      if (axis + 1 < rank) idx.segs.push_back({axis + 1, rank, low});
      return idx;
    };
    {  // out = x along the fibre.
      const VarId i = BeginLoop(size);
      const Idx at = fibre_index(x_shape, b_.Var(i));
      b_.Store(out, Linear(at), Value(x, at));
      EndLoop();
    }
    if (ir::NumElements(i_shape) == 0) return;
    // This fibre's coordinates inside index/src (clamped: the fibre may lie outside them).
    Idx x_fibre = AllSingles(fibre_index(x_shape, b_.Index(0)));
    std::vector<ValueId> coords;
    ValueId in_range = b_.Bool(true);
    for (int d = 0; d < rank; ++d) {
      const ValueId c = Coord(x_fibre, d);
      coords.push_back(c);
      if (d == axis) continue;
      in_range =
          b_.Binary(ExprOp::kAnd, in_range, b_.Binary(ExprOp::kLt, c, b_.Index(Dim(i_shape, d))));
    }
    const VarId j = BeginLoop(Dim(i_shape, axis));
    std::vector<ValueId> i_coords;
    for (int d = 0; d < rank; ++d) {
      i_coords.push_back(d == axis ? b_.Var(j)
                                   : b_.Binary(ExprOp::kMin, coords[static_cast<size_t>(d)],
                                               b_.Index(Dim(i_shape, d) - 1)));
    }
    const Idx i_idx = Singles(i_shape, i_coords);
    const ValueId k = b_.Cast(Value(index, i_idx), ScalarType::kI64);
    const ValueId valid = b_.Binary(ExprOp::kAnd, in_range,
                                    b_.Binary(ExprOp::kAnd, b_.Binary(ExprOp::kGe, k, b_.Index(0)),
                                              b_.Binary(ExprOp::kLt, k, b_.Index(size))));
    {
      std::string what = absl::StrCat("%", id, " = scatter_add");
      if (std::string where = ir::LocationToString(node.loc); !where.empty()) {
        absl::StrAppend(&what, " (", where, ")");
      }
      absl::StrAppend(&what, ": index out of range for axis ", axis, " of size ", size);
      const ArgId flag = ErrorFlag(std::move(what));
      const ValueId bad = b_.Binary(ExprOp::kAnd, in_range, b_.Unary(ExprOp::kNot, valid));
      b_.Store(flag, b_.Index(0), b_.Int(ScalarType::kI64, 1), bad);
      b_.Store(flag, b_.Index(1), k, bad);
    }
    if (size > 0) {
      std::vector<ValueId> p_coords = coords;
      p_coords[static_cast<size_t>(axis)] = b_.IClamp(k, 0, size - 1);
      const ValueId position = Linear(Singles(x_shape, p_coords));
      const ValueId old = b_.Load(out, position);
      b_.Let(old);
      b_.Store(out, position, b_.Binary(ExprOp::kAdd, old, Value(src, i_idx)), valid);
    }
    EndLoop();
  }

  // a < b in sort's total order: numbers ascending, NaN above +inf (x != x finds NaN).
  ValueId SortsBefore(ValueId a, ValueId b) {
    const ValueId less = b_.Binary(ExprOp::kLt, a, b);
    if (!IsFloatType(b_.type(a))) return less;
    const ValueId a_number = b_.Binary(ExprOp::kEq, a, a);
    const ValueId b_nan = b_.Binary(ExprOp::kNe, b, b);
    return b_.Binary(ExprOp::kOr, less, b_.Binary(ExprOp::kAnd, a_number, b_nan));
  }

  // sort/argsort as a rank count: gid runs over every element x_i; its rank in the fibre is
  // #{j : x_j sorts before x_i, or ties with it and j < i} (a Reduce sum over the fibre), and the
  // element (sort) or its position i (argsort) is stored at that rank. Ranks are a permutation
  // of the fibre, so every output element is written once and gids never collide. O(n^2) per
  // fibre of n, with no statement a backend lacks: a stable sort on every target.
  void LowerSort() {
    const NodeId id = group_.root;
    const ir::Node& node = graph_.node(id);
    if (group_.outputs != std::vector<NodeId>{id}) {
      status_ = absl::InvalidArgumentError(
          absl::StrCat("lowering sort group: root %", id, " is not its only output"));
      return;
    }
    const ir::Shape& shape = node.type.shape;
    const int rank = Rank(shape);
    const int axis = static_cast<int>(node.attrs.axes[0]);
    const int64_t size = Dim(shape, axis);
    const int64_t after = Prod(shape, axis + 1, rank);
    parallel_extent_ = ir::NumElements(shape);
    b_.SetParallelExtent(parallel_extent_);
    if (parallel_extent_ == 0) return;
    const ValueId gid = b_.Var(kGid);
    const ValueId high = b_.IDivConst(gid, size * after);
    const ValueId i = b_.IModConst(b_.IDivConst(gid, after), size);
    const ValueId low = b_.IModConst(gid, after);
    const auto fibre_index = [&](ValueId along) {
      Idx idx{shape, {}};
      if (axis > 0) idx.segs.push_back({0, axis, high});
      idx.segs.push_back({axis, axis + 1, along});
      if (axis + 1 < rank) idx.segs.push_back({axis + 1, rank, low});
      return idx;
    };
    const NodeId x = node.inputs[0];
    const ValueId xi = Value(x, fibre_index(i));
    const VarId r = b_.BeginReduce(ReduceKind::kSum, b_.Index(0), size);
    PushScope();
    const ValueId j = b_.Var(r);
    const ValueId xj = Value(x, fibre_index(j));
    // Before i in the fibre: j ties or sorts first; after i: j sorts strictly first.
    const ValueId first =
        b_.Select(b_.Binary(ExprOp::kLt, j, i), b_.Unary(ExprOp::kNot, SortsBefore(xi, xj)),
                  SortsBefore(xj, xi));
    PopScope();
    const ValueId place = b_.EndReduce(b_.Cast(first, ScalarType::kI64));
    const ValueId at = Linear(fibre_index(b_.IClamp(place, 0, size - 1)));
    b_.Store(output_args_[id], at, node.op == ir::Op::kArgsort ? i : xi);
  }

  const ir::Graph& graph_;
  const FusionGroup& group_;
  KernelBuilder b_;
  std::set<NodeId> nodes_;
  std::map<NodeId, ArgId> input_args_;
  std::map<NodeId, ArgId> output_args_;
  ArgId error_flag_ = -1;
  std::vector<std::string> checks_;
  std::vector<absl::flat_hash_map<std::pair<NodeId, ValueId>, ValueId>> cache_;
  int64_t parallel_extent_ = 0;
  absl::Status status_;
};

}  // namespace

absl::StatusOr<Kernel> LowerGroup(const ir::Graph& graph, const passes::FusionGroup& group,
                                  std::string name) {
  if (name.empty()) {
    name = absl::StrCat(passes::FusionKindName(group.kind), "_", group.root);
  }
  return Lowerer(graph, group, std::move(name)).Lower();
}

absl::StatusOr<Epilogue> LowerEpilogue(const ir::Graph& graph, const passes::FusionGroup& group) {
  if (group.kind != FusionKind::kContraction) {
    return absl::InvalidArgumentError(absl::StrCat("LowerEpilogue: group of %", group.root, " is ",
                                                   passes::FusionKindName(group.kind),
                                                   ", not a contraction"));
  }
  return Lowerer(graph, group, absl::StrCat("epilogue_", group.root)).LowerEpilogueKernel();
}

}  // namespace kiln::codegen
