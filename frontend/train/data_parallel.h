// The collectives the Learner's data-parallel mode needs (LearnerConfig::with_data_parallel).
// kiln_frontend links no MPI, so the Learner sees the process group only through this interface;
// kiln::dist::data_parallel(pg, DdpConfig) (frontend/dist/ddp.h, library kiln_dist) implements
// it over MPI:
//
//   auto& pg = kiln::dist::ProcessGroup::Init(&argc, &argv);
//   auto config = kiln::train::LearnerConfig().with_epochs(5).with_checkpoint_dir("runs/mlp")
//                     .with_data_parallel(kiln::dist::data_parallel(pg));
//
// Every call is collective: every rank makes the same calls in the same order.
#pragma once

#include <source_location>
#include <string>
#include <vector>

#include "frontend/autograd.h"
#include "frontend/engine.h"

namespace kiln::train {

class DataParallel {
 public:
  virtual ~DataParallel() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  /// `root`'s value of every ref (parameters and buffers), as new handles on each ref's device;
  /// one that required a gradient requires one again.
  virtual std::vector<detail::TensorRef> broadcast(const std::vector<detail::TensorRef>& refs,
                                                   int root,
                                                   const std::source_location& loc) const = 0;
  /// Realizes `also_realize` together with the gradients of `params`, then replaces each of those
  /// gradients in `grads` by its mean over the ranks.
  virtual void all_reduce_gradients(const std::vector<detail::TensorRef>& params, Gradients& grads,
                                    const std::vector<detail::TensorRef>& also_realize,
                                    const std::source_location& loc) const = 0;
  /// Replaces `values` by their element-wise sum over the ranks, in f64 (exact for the integer
  /// counts of metrics, below 2^53).
  virtual void all_reduce_sum(std::vector<double>& values,
                              const std::source_location& loc) const = 0;
  /// Replaces `bytes` on every rank by `root`'s (of any length).
  virtual void broadcast_bytes(std::string& bytes, int root,
                               const std::source_location& loc) const = 0;
  /// Prints `message` to stderr and ends every process of the job (MPI_Abort). For an error that
  /// only this rank knows of: the others would otherwise wait for it in their next collective
  /// forever.
  [[noreturn]] virtual void abort(const std::string& message) const = 0;
};

}  // namespace kiln::train
