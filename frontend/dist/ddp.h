// Data-parallel training over a ProcessGroup (torch's DistributedDataParallel, without hooks):
//
//   auto& pg = kiln::dist::ProcessGroup::Init(&argc, &argv);
//   kiln::dist::broadcast_parameters(pg, model);             // every rank starts from rank 0's
//   auto loader = data::DataLoaderConfig(64).with_shuffle(seed)
//                     .with_sampler(data::DistributedSampler(pg.world_size(), pg.rank()))
//                     .init(dataset);
//   for (data::Batch& batch : loader.epoch(epoch)) {
//     auto loss = ...;
//     kiln::Gradients grads = loss.backward();
//     kiln::dist::all_reduce_gradients(pg, model, grads, {}, loss);   // mean over the ranks
//     optimizer.step(model, grads);
//     ...
//   }
//
// With the same seed on every rank, equal shard sizes (the sampler pads) and a loss that is a
// mean over the batch, a step on R ranks with batch b each computes the gradient of the mean
// loss over the R*b examples, as one process with batch R*b would, up to the order of the f32
// additions (tests/dist/ddp_test.cc checks the parameters after 10 SGD steps).
//
// The Learner does all of this in its data-parallel mode: LearnerConfig().with_data_parallel(
// data_parallel(pg, config)) (frontend/train/learner.h, docs/training.md "Data-parallel training").
//
// Gradients are reduced in buckets: consecutive parameters (in visit() order) of one dtype are
// packed into one host buffer of at most bucket_cap_mb (a parameter larger than the cap is a
// bucket of its own), and each bucket is one all_reduce. Fewer, larger messages amortise MPI's
// per-message latency; the cap bounds the staging memory. The step's gradients (and whatever is
// passed to be realized with them, e.g. the loss) are realized in one graph before the first
// bucket is sent, so the forward and backward pass run once; this splits a training step into
// two graphs (forward + backward, then the optimizer's update) where a single process has one.
#pragma once

#include <memory>
#include <source_location>
#include <vector>

#include "frontend/autograd.h"
#include "frontend/dist/process_group.h"
#include "frontend/engine.h"
#include "frontend/train/data_parallel.h"

namespace kiln::dist {

/// all_reduce_gradients settings.
struct DdpConfig {
  /// Largest bucket in MiB (torch's bucket_cap_mb, same default).
  DdpConfig& with_bucket_cap_mb(double value) {
    bucket_cap_mb = value;
    return *this;
  }
  double bucket_cap_mb = 25;
};

/// What one all_reduce_gradients call did (for tests and logs).
struct GradientSyncStats {
  int64_t buckets = 0;
  int64_t tensors = 0;
  int64_t bytes = 0;
};

namespace detail {
using kiln::detail::TensorRef;
/// Broadcasts each value from `root`; returns the new values (a parameter that required a
/// gradient requires one again).
std::vector<TensorRef> BroadcastRefs(const ProcessGroup& pg, const std::vector<TensorRef>& refs,
                                     int root, const std::source_location& loc);
/// Replaces the gradient of each of `params` in `grads` by its mean over the ranks.
GradientSyncStats AllReduceGradients(const ProcessGroup& pg, const std::vector<TensorRef>& params,
                                     Gradients& grads, const DdpConfig& config,
                                     const std::vector<TensorRef>& also_realize,
                                     const std::source_location& loc);
}  // namespace detail

/// Replaces every parameter and buffer of `module` by rank `root`'s (call it on every rank after
/// building the model, before training, so that the ranks start from the same weights).
template <class Module>
void broadcast_parameters(const ProcessGroup& pg, Module& module, int root = 0,
                          std::source_location loc = std::source_location::current()) {
  std::vector<detail::TensorRef> refs;
  const auto collect = [&refs](const std::string&, const auto& t) { refs.push_back(t.ref()); };
  module.visit(collect);
  module.visit_buffers(collect);
  std::vector<detail::TensorRef> values = detail::BroadcastRefs(pg, refs, root, loc);
  size_t i = 0;
  const auto replace = [&](const std::string&, auto& t) {
    t = std::decay_t<decltype(t)>(values[i++], loc);
  };
  module.visit(replace);
  module.visit_buffers(replace);
}

/// Replaces the gradient of every parameter of `module` in `grads` by its mean over the ranks,
/// in buckets of at most config.bucket_cap_mb. `also_realize` (tensors, e.g. the loss) are
/// realized in the same graph as the gradients.
template <class Module, class... Tensors>
GradientSyncStats all_reduce_gradients(const ProcessGroup& pg, const Module& module,
                                       Gradients& grads, const DdpConfig& config,
                                       const Tensors&... also_realize) {
  std::vector<detail::TensorRef> params;
  module.visit([&params](const std::string&, const auto& t) { params.push_back(t.ref()); });
  return detail::AllReduceGradients(pg, params, grads, config, {also_realize.ref()...},
                                    std::source_location::current());
}

/// The Learner's data-parallel mode over `pg`
/// (kiln::train::LearnerConfig().with_data_parallel(kiln::dist::data_parallel(pg))): parameters
/// broadcast from rank 0, gradients averaged as all_reduce_gradients does with `config`'s
/// buckets, metrics summed in f64, checkpoints sent from rank 0, and ProcessGroup::abort for an
/// error on one rank. `pg` must outlive the Learner (the process group lives until exit).
std::shared_ptr<const train::DataParallel> data_parallel(const ProcessGroup& pg,
                                                         DdpConfig config = {});

}  // namespace kiln::dist
