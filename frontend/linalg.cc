// torch.matmul semantics on the ir's equal-rank batched matmul.
#include "absl/strings/str_cat.h"
#include "frontend/amp/autocast.h"
#include "frontend/ops_internal.h"
#include "frontend/tensor_ops.h"

namespace kiln::detail {

TensorRef MatMul(const TensorRef& a_in, const TensorRef& b_in, const Loc& loc) {
  const TensorRef a = AutocastToLow(a_in, "matmul", loc);
  const TensorRef b = AutocastToLow(b_in, "matmul", loc);
  const ir::TensorType& ta = a->type;
  const ir::TensorType& tb = b->type;
  if (ta.rank() < 1 || tb.rank() < 1) {
    ThrowOpError("matmul", "needs operands of rank >= 1", {ta, tb}, loc);
  }
  if (ir::IsBool(ta.dtype) || ir::IsBool(tb.dtype)) {
    ThrowOpError("matmul", "needs numeric operands", {ta, tb}, loc);
  }
  const ir::DType dtype = PromoteDTypes(ta.dtype, tb.dtype, "matmul", {ta, tb}, loc);
  // A vector is a one-row matrix on the left and a one-column matrix on the right.
  ir::Shape sa = ta.shape, sb = tb.shape;
  if (ta.rank() == 1) sa.insert(sa.begin(), 1);
  if (tb.rank() == 1) sb.push_back(1);
  const int64_t m = sa[sa.size() - 2], k = sa.back();
  const int64_t kb = sb[sb.size() - 2], n = sb.back();
  if (k != kb) {
    ThrowOpError("matmul", absl::StrCat("contracting dims differ (", k, " vs ", kb, ")"), {ta, tb},
                 loc);
  }
  const ir::Shape batch =
      BroadcastShapes(ir::Shape(sa.begin(), sa.end() - 2), ir::Shape(sb.begin(), sb.end() - 2),
                      "matmul", {ta, tb}, loc);
  ir::Shape full_a = batch, full_b = batch;
  full_a.insert(full_a.end(), {m, k});
  full_b.insert(full_b.end(), {k, n});
  const TensorRef x = BroadcastTo(ReshapeTo(CastTo(a, dtype, "matmul", loc), sa, "matmul", loc),
                                  full_a, "matmul", loc);
  const TensorRef y = BroadcastTo(ReshapeTo(CastTo(b, dtype, "matmul", loc), sb, "matmul", loc),
                                  full_b, "matmul", loc);
  const TensorRef product = Prim(ir::Op::kMatMul, {x, y}, "matmul", loc);
  ir::Shape out = batch;
  if (ta.rank() > 1) out.push_back(m);
  if (tb.rank() > 1) out.push_back(n);
  return ReshapeTo(product, std::move(out), "matmul", loc);
}

}  // namespace kiln::detail
