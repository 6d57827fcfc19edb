#include "frontend/dist/ddp.h"

#include <cstring>
#include <memory>
#include <span>
#include <string>
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

namespace {

class MpiDataParallel final : public train::DataParallel {
 public:
  MpiDataParallel(const ProcessGroup& pg, DdpConfig config) : pg_(pg), config_(config) {}

  int rank() const override { return pg_.rank(); }
  int world_size() const override { return pg_.world_size(); }

  std::vector<TensorRef> broadcast(const std::vector<TensorRef>& refs, int root,
                                   const std::source_location& loc) const override {
    return BroadcastRefs(pg_, refs, root, loc);
  }
  void all_reduce_gradients(const std::vector<TensorRef>& params, Gradients& grads,
                            const std::vector<TensorRef>& also_realize,
                            const std::source_location& loc) const override {
    AllReduceGradients(pg_, params, grads, config_, also_realize, loc);
  }
  void all_reduce_sum(std::vector<double>& values, const std::source_location& loc) const override {
    ir::TensorData data =
        ir::TensorData::Uninitialized(ir::DType::kF64, {static_cast<int64_t>(values.size())});
    std::memcpy(data.data(), values.data(), values.size() * sizeof(double));
    pg_.all_reduce_data(data, ReduceOp::kSum, loc);
    std::memcpy(values.data(), data.data(), values.size() * sizeof(double));
  }
  void broadcast_bytes(std::string& bytes, int root,
                       const std::source_location& loc) const override {
    // The length first: broadcast_data needs the same shape on every rank.
    ir::TensorData size = ir::TensorData::Uninitialized(ir::DType::kI64, {1});
    const auto length = static_cast<int64_t>(bytes.size());
    std::memcpy(size.data(), &length, sizeof(length));
    pg_.broadcast_data(size, root, loc);
    int64_t root_length = 0;
    std::memcpy(&root_length, size.data(), sizeof(root_length));
    ir::TensorData data = ir::TensorData::Uninitialized(ir::DType::kU8, {root_length});
    if (pg_.rank() == root && root_length > 0) {
      std::memcpy(data.data(), bytes.data(), static_cast<size_t>(root_length));
    }
    pg_.broadcast_data(data, root, loc);
    bytes.assign(reinterpret_cast<const char*>(data.data()), static_cast<size_t>(root_length));
  }
  [[noreturn]] void abort(const std::string& message) const override { pg_.abort(message); }

 private:
  const ProcessGroup& pg_;
  DdpConfig config_;
};

}  // namespace
}  // namespace kiln::dist::detail

namespace kiln::dist {

std::shared_ptr<const train::DataParallel> data_parallel(const ProcessGroup& pg, DdpConfig config) {
  if (!(config.bucket_cap_mb > 0)) {
    kiln::detail::ThrowStatus(
        absl::InvalidArgumentError(absl::StrCat("dist.data_parallel: bucket_cap_mb ",
                                                config.bucket_cap_mb, " must be > 0")),
        std::source_location::current());
  }
  return std::make_shared<detail::MpiDataParallel>(pg, config);
}

}  // namespace kiln::dist
