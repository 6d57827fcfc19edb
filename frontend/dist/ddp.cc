#include "frontend/dist/ddp.h"

#include <cstring>
#include <span>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "frontend/error.h"

namespace kiln::dist::detail {

std::vector<TensorRef> BroadcastRefs(const ProcessGroup& pg, const std::vector<TensorRef>& refs,
                                     int root, const std::source_location& loc) {
  kiln::detail::Realize(refs, loc);
  std::vector<TensorRef> out;
  out.reserve(refs.size());
  for (const TensorRef& ref : refs) {
    ir::TensorData data = kiln::detail::Data(ref, loc);
    pg.broadcast_data(data, root, loc);
    TensorRef value = kiln::detail::FromTensorData(std::move(data), kiln::detail::DeviceOf(ref));
    if (kiln::detail::RequiresGrad(ref)) value = kiln::detail::SetRequireGrad(value, true, loc);
    out.push_back(std::move(value));
  }
  return out;
}

GradientSyncStats AllReduceGradients(const ProcessGroup& pg, const std::vector<TensorRef>& params,
                                     Gradients& grads, const DdpConfig& config,
                                     const std::vector<TensorRef>& also_realize,
                                     const std::source_location& loc) {
  if (!(config.bucket_cap_mb > 0)) {
    kiln::detail::ThrowStatus(
        absl::InvalidArgumentError(absl::StrCat("dist.all_reduce_gradients: bucket_cap_mb ",
                                                config.bucket_cap_mb, " must be > 0")),
        loc);
  }
  struct Item {
    TensorRef param;
    TensorRef grad;
  };
  std::vector<Item> items;
  std::vector<TensorRef> to_realize = also_realize;
  for (const TensorRef& p : params) {
    TensorRef g = grads.get(p);
    if (!g) continue;  // not in the loss on this rank: the call check names the difference
    items.push_back({p, g});
    to_realize.push_back(g);
  }
  // One graph: the forward and backward pass run once, not once per bucket.
  kiln::detail::Realize(to_realize, loc);

  const auto cap = static_cast<int64_t>(config.bucket_cap_mb * 1024 * 1024);
  GradientSyncStats stats;
  size_t begin = 0;
  while (begin < items.size()) {
    const ir::TensorType& first = kiln::detail::TypeOf(items[begin].grad);
    const int64_t element = ir::DTypeSize(first.dtype);
    int64_t elements = first.num_elements();
    size_t end = begin + 1;
    while (end < items.size()) {
      const ir::TensorType& t = kiln::detail::TypeOf(items[end].grad);
      if (t.dtype != first.dtype || (elements + t.num_elements()) * element > cap) break;
      elements += t.num_elements();
      ++end;
    }
    ir::TensorData bucket = ir::TensorData::Uninitialized(first.dtype, {elements});
    int64_t offset = 0;
    for (size_t i = begin; i < end; ++i) {
      const ir::TensorData& g = kiln::detail::Data(items[i].grad, loc);
      const int64_t bytes = g.num_elements() * element;
      std::memcpy(bucket.data() + offset, g.data(), static_cast<size_t>(bytes));
      offset += bytes;
    }
    pg.all_reduce_data(bucket, ReduceOp::kMean, loc);
    offset = 0;
    for (size_t i = begin; i < end; ++i) {
      const ir::TensorType& t = kiln::detail::TypeOf(items[i].grad);
      ir::TensorData g = ir::TensorData::Uninitialized(t.dtype, t.shape);
      const int64_t bytes = t.num_elements() * element;
      std::memcpy(g.data(), bucket.data() + offset, static_cast<size_t>(bytes));
      offset += bytes;
      grads.set(items[i].param,
                kiln::detail::FromTensorData(std::move(g), kiln::detail::DeviceOf(items[i].grad)),
                loc);
    }
    stats.buckets += 1;
    stats.tensors += static_cast<int64_t>(end - begin);
    stats.bytes += elements * element;
    begin = end;
  }
  return stats;
}

}  // namespace kiln::dist::detail
