#include "passes/fusion.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln::passes {

const char* FusionKindName(FusionKind kind) {
  switch (kind) {
    case FusionKind::kElementwise:
      return "elementwise";
    case FusionKind::kReduction:
      return "reduction";
    case FusionKind::kContraction:
      return "contraction";
    case FusionKind::kScatter:
      return "scatter";
    case FusionKind::kCopy:
      return "copy";
  }
  return "?";
}

bool IsRecomputedLeaf(const ir::Node& node) {
  switch (node.op) {
    case ir::Op::kFill:
    case ir::Op::kIota:
    case ir::Op::kRandomUniform:
    case ir::Op::kRandomNormal:
      return true;
    case ir::Op::kConstant: {
      const ir::TensorData* literal = node.attrs.literal.get();
      if (literal == nullptr) return false;
      const int64_t n = literal->num_elements();
      if (n <= 1) return true;
      const int64_t size = ir::DTypeSize(literal->dtype());
      for (int64_t i = 1; i < n; ++i) {
        if (std::memcmp(literal->data(), literal->data() + i * size, static_cast<size_t>(size)) !=
            0) {
          return false;
        }
      }
      return true;
    }
    default:
      return false;
  }
}

namespace {

using ir::NodeId;

bool IsReduction(ir::Op op) {
  const ir::OpClass c = ir::GetOpClass(op);
  return c == ir::OpClass::kReduce || c == ir::OpClass::kArgReduce;
}

bool IsMovement(ir::Op op) { return ir::GetOpClass(op) == ir::OpClass::kMovement; }

// sort/argsort store each element at its rank: a kScatter group of their own, like scatter_add.
bool IsSort(ir::Op op) { return ir::GetOpClass(op) == ir::OpClass::kSort; }

// Elementwise or movement: pure index arithmetic and scalar math, no statements when lowered.
bool IsPure(ir::Op op) { return ir::IsElementwise(op) || IsMovement(op); }

// Ops that fuse into any consumer group as an expression at the consumer's index.
bool IsInjective(ir::Op op) {
  return IsPure(op) || op == ir::Op::kGather || ir::GetOpClass(op) == ir::OpClass::kWindow;
}

ir::Shape OuterShape(const ir::Node& reduction, const ir::Graph& graph) {
  ir::Shape shape = graph.node(reduction.inputs[0]).type.shape;
  for (int64_t axis : reduction.attrs.axes) shape[static_cast<size_t>(axis)] = 1;
  return shape;
}

std::string Ref(NodeId id) { return absl::StrCat("%", id); }

// Does `user` read every element of its operand `operand`? (So an out-of-range gather index
// anywhere in the operand is seen, as the interpreter sees it.)
bool ReadsAll(const ir::Graph& graph, NodeId user, NodeId operand) {
  const ir::Node& u = graph.node(user);
  switch (u.op) {
    case ir::Op::kSlice: {
      const ir::Shape& in = graph.node(operand).type.shape;
      for (size_t i = 0; i < in.size(); ++i) {
        const int64_t stride = u.attrs.strides.empty() ? 1 : u.attrs.strides[i];
        if (u.attrs.starts[i] != 0 || u.attrs.limits[i] != in[i] || (stride != 1 && in[i] > 1)) {
          return false;
        }
      }
      return true;
    }
    case ir::Op::kGather:
      return u.inputs[0] != operand;
    case ir::Op::kWindowSum:
    case ir::Op::kWindowMax:
      return false;
    default:
      return true;
  }
}

class Fuser {
 public:
  explicit Fuser(const ir::Graph& graph) : graph_(graph), n_(graph.num_nodes()) {}

  FusionPlan Run() {
    Analyze();
    for (NodeId id = n_ - 1; id >= 0; --id) {
      if (!needed_[id]) continue;
      const ir::Node& node = graph_.node(id);
      if (IsRecomputedLeaf(node)) {
        PlaceLeaf(id);
        continue;
      }
      if (node.op == ir::Op::kParameter || node.op == ir::Op::kConstant) continue;
      Place(id);
    }
    MergeSiblings();
    return Finish();
  }

 private:
  struct Work {
    bool alive = true;
    NodeId root = ir::kInvalidNode;
    std::set<NodeId> members;  // Nodes this group owns (computes and, if needed, stores).
    std::set<NodeId> clones;   // Recomputed leaves it uses.
    bool has_reduction = false;
    ir::Shape outer_shape;
    std::set<int64_t> full_counts;  // Element counts of its reductions' inputs.
    NodeId contraction = ir::kInvalidNode;
    NodeId scatter = ir::kInvalidNode;
    int64_t domain_count = 0;  // Elementwise groups: the outputs' element count.
  };

  void Analyze() {
    needed_.assign(static_cast<size_t>(n_), false);
    is_output_.assign(static_cast<size_t>(n_), false);
    users_.assign(static_cast<size_t>(n_), {});
    for (const ir::Output& output : graph_.outputs()) {
      needed_[output.node] = true;
      is_output_[output.node] = true;
    }
    for (NodeId id = n_ - 1; id >= 0; --id) {
      if (!needed_[id]) continue;
      for (NodeId input : graph_.node(id).inputs) {
        needed_[input] = true;
        auto& u = users_[input];
        if (std::find(u.begin(), u.end(), id) == u.end()) u.push_back(id);
      }
    }
    for (auto& u : users_) std::sort(u.begin(), u.end());
    in_group_.assign(static_cast<size_t>(n_), -1);
    covers_.assign(static_cast<size_t>(n_), false);
  }

  int64_t Count(NodeId id) const { return graph_.node(id).type.num_elements(); }

  void Decide(NodeId producer, NodeId consumer, bool fused, std::string reason) {
    decisions_.push_back({producer, consumer, fused, std::move(reason)});
  }

  void PlaceLeaf(NodeId id) {
    for (NodeId user : users_[id]) {
      const int g = in_group_[user];
      if (g >= 0) work_[static_cast<size_t>(g)].clones.insert(id);
    }
    if (is_output_[id]) NewGroup(id);
  }

  int NewGroup(NodeId id) {
    Work w;
    w.root = id;
    w.members.insert(id);
    const ir::Node& node = graph_.node(id);
    if (IsReduction(node.op)) {
      w.has_reduction = true;
      w.outer_shape = OuterShape(node, graph_);
      w.full_counts.insert(Count(node.inputs[0]));
    } else if (ir::GetOpClass(node.op) == ir::OpClass::kContraction) {
      w.contraction = id;
    } else if (node.op == ir::Op::kScatterAdd || IsSort(node.op)) {
      w.scatter = id;
    }
    w.domain_count = Count(id);
    work_.push_back(std::move(w));
    const int g = static_cast<int>(work_.size() - 1);
    in_group_[id] = g;
    covers_[id] = true;
    return g;
  }

  // The group's current outputs: members that are graph outputs or have users outside it.
  std::vector<NodeId> StoredNodes(const Work& w) const {
    std::vector<NodeId> stored;
    for (NodeId m : w.members) {
      bool outside = is_output_[m];
      for (NodeId u : users_[m]) outside = outside || !w.members.count(u);
      if (outside) stored.push_back(m);
    }
    return stored;
  }

  bool FitsReduction(int64_t count, const ir::Shape& outer, const std::set<int64_t>& full) const {
    return count == ir::NumElements(outer) || full.count(count) > 0;
  }

  // Members of `w` that depend on `id` through other members.
  std::set<NodeId> DependentsIn(const Work& w, NodeId id) const {
    std::set<NodeId> result;
    std::vector<NodeId> stack = {id};
    while (!stack.empty()) {
      const NodeId v = stack.back();
      stack.pop_back();
      for (NodeId u : users_[v]) {
        if (w.members.count(u) && result.insert(u).second) stack.push_back(u);
      }
    }
    return result;
  }

  // Why `id` cannot join `w` (all of its users are in w), or nullopt; sets *why_fused otherwise.
  std::optional<std::string> Refusal(NodeId id, const Work& w, std::string* why_fused) const {
    const ir::Node& node = graph_.node(id);
    const ir::OpClass cls = ir::GetOpClass(node.op);
    const std::vector<NodeId>& users = users_[id];
    if (node.op == ir::Op::kScatterAdd) {
      return "scatter_add needs its whole result before it can be read";
    }
    if (w.contraction != ir::kInvalidNode) {
      const char* what = graph_.node(w.contraction).op == ir::Op::kMatMul ? "matmul" : "conv";
      for (NodeId u : users) {
        if (u == w.contraction) {
          return absl::StrCat("consumer is a ", what, " operand: needs a materialized buffer");
        }
      }
      if (!IsPure(node.op)) {
        return absl::StrCat("the ", what, " epilogue takes only elementwise and movement ops (",
                            ir::OpName(node.op), " is not)");
      }
      if (is_output_[id]) {
        return absl::StrCat("the ", what, " epilogue stores only values computed from its result");
      }
      *why_fused = absl::StrCat("operand of the ", what, " epilogue");
      return std::nullopt;
    }
    if (w.scatter != ir::kInvalidNode) {
      if (IsSort(graph_.node(w.scatter).op)) {
        // The sort kernel reads each element of a fibre once per element of the fibre: a
        // fused elementwise producer would be recomputed that often; index arithmetic is free.
        if (!IsMovement(node.op)) {
          return absl::StrCat("sort fuses only movement producers (", ir::OpName(node.op),
                              " would be recomputed per comparison)");
        }
        if (is_output_[id]) return "a sort kernel stores only its result";
        *why_fused = "movement becomes index arithmetic of the sort";
        return std::nullopt;
      }
      if (!IsPure(node.op)) {
        return absl::StrCat("scatter_add fuses only elementwise and movement producers (",
                            ir::OpName(node.op), " is not)");
      }
      if (is_output_[id]) return "a scatter_add kernel stores only its result";
      *why_fused = "scatter_add operand computed in place";
      return std::nullopt;
    }
    if (IsReduction(node.op)) {
      for (NodeId u : users) {
        const ir::Op op = graph_.node(u).op;
        if (!ir::IsElementwise(op) && op != ir::Op::kBroadcast && op != ir::Op::kReshape) {
          return absl::StrCat("reduction result read through ", ir::OpName(op), " ", Ref(u),
                              ": its rows would not line up");
        }
      }
      const ir::Shape outer = OuterShape(node, graph_);
      if (w.has_reduction && w.outer_shape != outer) {
        return absl::StrCat("reduction outer shapes differ (", ir::ShapeToString(outer), " vs ",
                            ir::ShapeToString(w.outer_shape), ")");
      }
      std::set<int64_t> full = w.full_counts;
      full.insert(Count(node.inputs[0]));
      std::vector<NodeId> stored = StoredNodes(w);
      if (is_output_[id]) stored.push_back(id);
      for (NodeId s : stored) {
        if (!FitsReduction(Count(s), outer, full)) {
          return absl::StrCat("group output ", Ref(s), " ", ir::TypeToString(graph_.node(s).type),
                              " fits neither the rows ", ir::ShapeToString(outer),
                              " nor the reduced input");
        }
      }
      *why_fused = w.has_reduction ? absl::StrCat("reduction with the same outer shape ",
                                                  ir::ShapeToString(outer))
                                   : "reduction takes its elementwise consumers";
      return std::nullopt;
    }
    if (cls == ir::OpClass::kContraction) {
      const char* what = node.op == ir::Op::kMatMul ? "matmul" : "conv";
      if (w.has_reduction) {
        return absl::StrCat("a ", what, " epilogue cannot hold a reduction");
      }
      const std::set<NodeId> dependents = DependentsIn(w, id);
      for (NodeId d : dependents) {
        const ir::Node& dn = graph_.node(d);
        if (!ir::IsElementwise(dn.op) || dn.type.shape != node.type.shape) {
          return absl::StrCat("epilogue reads the ", what, " result through ", ir::OpName(dn.op),
                              " ", Ref(d), " (not an elementwise op of its shape)");
        }
      }
      for (NodeId m : w.members) {
        if (!dependents.count(m) && !IsPure(graph_.node(m).op)) {
          return absl::StrCat("the ", what, " epilogue takes only elementwise and movement ops (",
                              ir::OpName(graph_.node(m).op), " ", Ref(m), " is not)");
        }
      }
      for (NodeId s : StoredNodes(w)) {
        if (!dependents.count(s)) {
          return absl::StrCat("the ", what, " epilogue cannot store ", Ref(s),
                              ", which does not depend on its result");
        }
      }
      *why_fused = absl::StrCat("elementwise epilogue of the ", what);
      return std::nullopt;
    }
    if (!IsInjective(node.op)) {
      return absl::StrCat(ir::OpName(node.op), " does not fuse into its consumers");
    }
    if (is_output_[id]) {
      const int64_t count = Count(id);
      const bool fits = w.has_reduction ? FitsReduction(count, w.outer_shape, w.full_counts)
                                        : count == w.domain_count;
      if (!fits) {
        return absl::StrCat("graph output ", ir::TypeToString(node.type),
                            " does not fit the consumer's iteration space");
      }
    }
    if (cls == ir::OpClass::kWindow) {
      for (NodeId u : users) {
        if (ir::GetOpClass(graph_.node(u).op) == ir::OpClass::kWindow) {
          return "producer would be recomputed for each window position";
        }
      }
    }
    if (node.op == ir::Op::kGather && !Covered(id, users)) {
      return "gather's index checks must see every element; its consumers read only some";
    }
    if (ir::IsElementwise(node.op)) {
      *why_fused = "elementwise chain";
    } else if (IsMovement(node.op)) {
      *why_fused = "movement becomes index arithmetic of the consumer";
    } else if (node.op == ir::Op::kGather) {
      *why_fused = "gather reads its data at computed indices";
    } else {
      *why_fused = "window reduced per output element";
    }
    return std::nullopt;
  }

  // Whether every element of `id` is evaluated when its users' group computes its outputs.
  bool Covered(NodeId id, const std::vector<NodeId>& users) const {
    for (NodeId u : users) {
      if (covers_[u] && ReadsAll(graph_, u, id)) return true;
    }
    return false;
  }

  void Place(NodeId id) {
    const std::vector<NodeId>& users = users_[id];
    std::set<int> groups;
    for (NodeId u : users) groups.insert(in_group_[u]);
    if (groups.empty()) {  // A graph output no node uses.
      NewGroup(id);
      return;
    }
    if (groups.size() > 1) {
      const int g = NewGroup(id);
      for (NodeId u : users) {
        std::vector<std::string> others;
        for (NodeId v : users) {
          if (in_group_[v] != in_group_[u]) others.push_back(Ref(v));
        }
        Decide(id, u, false,
               absl::StrCat("producer has users outside the group (", absl::StrJoin(others, ", "),
                            ")"));
      }
      (void)g;
      return;
    }
    const int target = *groups.begin();
    Work& w = work_[static_cast<size_t>(target)];
    std::string why_fused;
    if (std::optional<std::string> refusal = Refusal(id, w, &why_fused)) {
      NewGroup(id);
      for (NodeId u : users) Decide(id, u, false, *refusal);
      return;
    }
    // Join.
    const ir::Node& node = graph_.node(id);
    covers_[id] = Covered(id, users) || is_output_[id];
    w.members.insert(id);
    in_group_[id] = target;
    if (IsReduction(node.op)) {
      w.has_reduction = true;
      w.outer_shape = OuterShape(node, graph_);
      w.full_counts.insert(Count(node.inputs[0]));
    } else if (ir::GetOpClass(node.op) == ir::OpClass::kContraction) {
      w.contraction = id;
    }
    for (NodeId u : users) Decide(id, u, true, why_fused);
  }

  // Groups whose outputs `g` reads (directly).
  std::set<int> Dependencies(int g) const {
    std::set<int> deps;
    const Work& w = work_[static_cast<size_t>(g)];
    for (NodeId m : w.members) {
      for (NodeId input : graph_.node(m).inputs) {
        const int h = in_group_[input];
        if (h >= 0 && h != g && !w.clones.count(input)) deps.insert(h);
      }
    }
    return deps;
  }

  bool Reaches(int from, int to) const {
    std::vector<int> stack = {from};
    std::set<int> seen;
    while (!stack.empty()) {
      const int g = stack.back();
      stack.pop_back();
      if (g == to) return true;
      if (!seen.insert(g).second) continue;
      for (int d : Dependencies(g)) stack.push_back(d);
    }
    return false;
  }

  // Buffers a group reads: parameters, non-splat constants, other groups' outputs.
  std::set<NodeId> BufferInputs(int g) const {
    std::set<NodeId> inputs;
    const Work& w = work_[static_cast<size_t>(g)];
    for (NodeId m : w.members) {
      for (NodeId input : graph_.node(m).inputs) {
        if (w.members.count(input) || w.clones.count(input)) continue;
        inputs.insert(input);
      }
    }
    return inputs;
  }

  // Whether two groups can share one kernel: same iteration space, and every stored value of
  // either fits it. Contraction and scatter groups never merge.
  bool Compatible(const Work& a, const Work& b) const {
    if (a.contraction != ir::kInvalidNode || b.contraction != ir::kInvalidNode) return false;
    if (a.scatter != ir::kInvalidNode || b.scatter != ir::kInvalidNode) return false;
    if (!a.has_reduction && !b.has_reduction) return a.domain_count == b.domain_count;
    if (a.has_reduction && b.has_reduction && a.outer_shape != b.outer_shape) return false;
    const Work& red = a.has_reduction ? a : b;
    std::set<int64_t> full = a.full_counts;
    full.insert(b.full_counts.begin(), b.full_counts.end());
    for (const Work* w : {&a, &b}) {
      for (NodeId s : StoredNodes(*w)) {
        if (!FitsReduction(Count(s), red.outer_shape, full)) return false;
      }
    }
    return true;
  }

  // Moves group b into group a.
  void Absorb(size_t a, size_t b) {
    Work& wa = work_[a];
    Work& wb = work_[b];
    for (NodeId m : wb.members) in_group_[m] = static_cast<int>(a);
    wa.members.insert(wb.members.begin(), wb.members.end());
    wa.clones.insert(wb.clones.begin(), wb.clones.end());
    wa.full_counts.insert(wb.full_counts.begin(), wb.full_counts.end());
    if (wb.has_reduction) {
      wa.has_reduction = true;
      wa.outer_shape = wb.outer_shape;
    }
    wa.root = std::max(wa.root, wb.root);
    wb.alive = false;
  }

  // Whether merging elementwise group p into reduction group c would evaluate p's values twice
  // per element: the reduction kernel computes them in its reduction loop and again in the loop
  // that stores them for their users outside c (the CNN's bias gradient sums the relu and
  // max-pool gradient that the weight-gradient conv also reads). A separate kernel computes them
  // once, over every element in parallel; the reduction then reads one buffer. Short chains are
  // cheaper to recompute than to store and reload.
  bool DuplicatesLongChain(int p, int c) const {
    constexpr int64_t kMaxRecomputedOps = 8;
    const Work& wp = work_[static_cast<size_t>(p)];
    if (wp.has_reduction || !work_[static_cast<size_t>(c)].has_reduction) return false;
    int64_t ops = 0;
    bool used_elsewhere = false;
    for (NodeId m : wp.members) {
      if (ir::IsElementwise(graph_.node(m).op)) ++ops;
      used_elsewhere = used_elsewhere || is_output_[m];
      for (NodeId u : users_[m]) {
        used_elsewhere = used_elsewhere || (in_group_[u] != p && in_group_[u] != c);
      }
    }
    return used_elsewhere && ops > kMaxRecomputedOps;
  }

  // Merges compatible groups: a producer group into its consumer group when no third group sits
  // between them (log-softmax's row statistics and their users), and siblings that read a
  // common buffer and do not depend on each other (a multi-output kernel).
  void MergeSiblings() {
    bool merged = true;
    while (merged) {
      merged = false;
      for (size_t c = 0; c < work_.size() && !merged; ++c) {
        if (!work_[c].alive) continue;
        const std::set<int> deps = Dependencies(static_cast<int>(c));
        for (int p : deps) {
          if (!Compatible(work_[static_cast<size_t>(p)], work_[c])) continue;
          if (DuplicatesLongChain(p, static_cast<int>(c))) continue;
          bool through_other = false;
          for (int d : deps) through_other = through_other || (d != p && Reaches(d, p));
          if (through_other) continue;
          // The edge that made p a separate group, for the record.
          NodeId producer = ir::kInvalidNode, consumer = ir::kInvalidNode;
          for (NodeId m : work_[c].members) {
            for (NodeId input : graph_.node(m).inputs) {
              if (in_group_[input] == p && producer == ir::kInvalidNode) {
                producer = input;
                consumer = m;
              }
            }
          }
          const Work& wp = work_[static_cast<size_t>(p)];
          std::string reason = absl::StrCat("producer kernel of ", Ref(wp.root),
                                            " merged into the consumer's (same iteration space");
          if (work_[c].has_reduction || wp.has_reduction) {
            absl::StrAppend(
                &reason, ": rows ",
                ir::ShapeToString(work_[c].has_reduction ? work_[c].outer_shape : wp.outer_shape));
          }
          absl::StrAppend(&reason, ")");
          Decide(producer, consumer, true, std::move(reason));
          Absorb(c, static_cast<size_t>(p));
          merged = true;
          break;
        }
      }
      for (size_t a = 0; a < work_.size() && !merged; ++a) {
        if (!work_[a].alive) continue;
        const std::set<NodeId> inputs_a = BufferInputs(static_cast<int>(a));
        for (size_t b = a + 1; b < work_.size() && !merged; ++b) {
          if (!work_[b].alive || !Compatible(work_[a], work_[b])) continue;
          NodeId shared = ir::kInvalidNode;
          for (NodeId input : BufferInputs(static_cast<int>(b))) {
            if (inputs_a.count(input)) {
              shared = input;
              break;
            }
          }
          if (shared == ir::kInvalidNode) continue;
          if (Reaches(static_cast<int>(a), static_cast<int>(b)) ||
              Reaches(static_cast<int>(b), static_cast<int>(a))) {
            continue;
          }
          Decide(shared, work_[b].root, true,
                 absl::StrCat("sibling of ", Ref(work_[a].root), ": both read ", Ref(shared),
                              "; one multi-output kernel"));
          Absorb(a, b);
          merged = true;
        }
      }
    }
  }

  FusionPlan Finish() {
    FusionPlan plan;
    plan.group_of.assign(static_cast<size_t>(n_), -1);
    // Topological order of the live groups (ties: the smallest root first).
    std::vector<int> live;
    for (size_t g = 0; g < work_.size(); ++g) {
      if (work_[g].alive) live.push_back(static_cast<int>(g));
    }
    std::vector<std::set<int>> deps(work_.size());
    for (int g : live) deps[static_cast<size_t>(g)] = Dependencies(g);
    std::vector<int> order;
    std::set<int> done;
    while (order.size() < live.size()) {
      int best = -1;
      for (int g : live) {
        if (done.count(g)) continue;
        bool ready = true;
        for (int d : deps[static_cast<size_t>(g)]) ready = ready && done.count(d);
        if (ready && (best < 0 ||
                      work_[static_cast<size_t>(g)].root < work_[static_cast<size_t>(best)].root)) {
          best = g;
        }
      }
      if (best < 0) break;  // Unreachable: merging never creates a cycle.
      order.push_back(best);
      done.insert(best);
    }
    std::vector<int> index_of(work_.size(), -1);
    for (int g : order) {
      index_of[static_cast<size_t>(g)] = static_cast<int>(plan.groups.size());
      const Work& w = work_[static_cast<size_t>(g)];
      FusionGroup group;
      std::set<NodeId> nodes = w.members;
      nodes.insert(w.clones.begin(), w.clones.end());
      group.nodes.assign(nodes.begin(), nodes.end());
      const std::set<NodeId> inputs = BufferInputs(g);
      group.inputs.assign(inputs.begin(), inputs.end());
      for (NodeId m : w.members) {
        bool used_outside = is_output_[m];
        for (NodeId u : users_[m]) used_outside = used_outside || in_group_[u] != g;
        if (used_outside) group.outputs.push_back(m);
      }
      bool movement_only = true;
      for (NodeId m : w.members) movement_only = movement_only && IsMovement(graph_.node(m).op);
      if (w.contraction != ir::kInvalidNode) {
        group.kind = FusionKind::kContraction;
        group.root = w.contraction;
      } else if (w.scatter != ir::kInvalidNode) {
        group.kind = FusionKind::kScatter;
        group.root = w.scatter;
      } else if (w.has_reduction) {
        group.kind = FusionKind::kReduction;
        group.root = w.root;
        group.outer_shape = w.outer_shape;
      } else {
        group.kind = movement_only ? FusionKind::kCopy : FusionKind::kElementwise;
        group.root = w.root;
      }
      plan.groups.push_back(std::move(group));
    }
    for (NodeId id = 0; id < n_; ++id) {
      const int g = in_group_[id];
      if (g >= 0) plan.group_of[id] = index_of[static_cast<size_t>(g)];
    }
    // Parameters and constants that are graph outputs are copied into their output buffers.
    std::set<NodeId> copied;
    for (const ir::Output& output : graph_.outputs()) {
      const ir::Node& node = graph_.node(output.node);
      const bool buffer = node.op == ir::Op::kParameter ||
                          (node.op == ir::Op::kConstant && !IsRecomputedLeaf(node));
      if (!buffer || !copied.insert(output.node).second) continue;
      FusionGroup group;
      group.kind = FusionKind::kCopy;
      group.inputs = {output.node};
      group.outputs = {output.node};
      group.root = output.node;
      plan.groups.push_back(std::move(group));
    }
    plan.decisions = std::move(decisions_);
    return plan;
  }

  const ir::Graph& graph_;
  const NodeId n_;
  std::vector<bool> needed_;
  std::vector<bool> is_output_;
  std::vector<std::vector<NodeId>> users_;
  std::vector<int> in_group_;
  std::vector<bool> covers_;
  std::vector<Work> work_;
  std::vector<FusionDecision> decisions_;
};

}  // namespace

FusionPlan Fuse(const ir::Graph& graph) { return Fuser(graph).Run(); }

std::string PrintFusionPlan(const ir::Graph& graph, const FusionPlan& plan) {
  std::string out = absl::StrCat("fusion plan: ", plan.groups.size(), " groups\n");
  const auto refs = [](const std::vector<NodeId>& ids) {
    std::vector<std::string> parts;
    for (NodeId id : ids) parts.push_back(Ref(id));
    return parts.empty() ? std::string("-") : absl::StrJoin(parts, ", ");
  };
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const FusionGroup& group = plan.groups[g];
    absl::StrAppend(&out, "group ", g, " ", FusionKindName(group.kind));
    if (group.kind == FusionKind::kReduction) {
      absl::StrAppend(&out, " outer=", ir::ShapeToString(group.outer_shape));
    }
    absl::StrAppend(&out, " root=", Ref(group.root), "\n  nodes:");
    for (NodeId id : group.nodes) {
      const ir::Node& node = graph.node(id);
      absl::StrAppend(&out, " ", Ref(id), " ", ir::OpName(node.op), " ",
                      ir::TypeToString(node.type), id == group.nodes.back() ? "" : ",");
    }
    if (group.nodes.empty()) absl::StrAppend(&out, " -");
    absl::StrAppend(&out, "\n  inputs: ", refs(group.inputs), "\n  outputs: ", refs(group.outputs),
                    "\n");
  }
  absl::StrAppend(&out, "decisions:\n");
  for (const FusionDecision& d : plan.decisions) {
    absl::StrAppend(&out, "  ", Ref(d.producer), " ", ir::OpName(graph.node(d.producer).op), " -> ",
                    Ref(d.consumer), " ", ir::OpName(graph.node(d.consumer).op), " ",
                    d.fused ? "fused" : "refused", ": ", d.reason, "\n");
  }
  return out;
}

}  // namespace kiln::passes
