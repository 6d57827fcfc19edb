// kiln::dist: collectives across processes (and machines) over MPI, for data-parallel training.
//
//   int main(int argc, char** argv) {
//     auto& pg = kiln::dist::ProcessGroup::Init(&argc, &argv);   // or World(): lazy init
//     auto x = Tensor<Cpu, 1>::full({4}, pg.rank(), device);
//     auto sum = pg.all_reduce(x, kiln::dist::ReduceOp::kSum);   // every rank: 0 + 1 + ...
//   }
//
//   mpirun -np 2 ./program     (without mpirun: world size 1, Open MPI's singleton mode)
//
// Library kiln_dist (CMake) / //frontend/dist:kiln_dist (Bazel): only programs that link it
// need MPI. This header includes no MPI header.
//
// Every collective works on tensors of any backend through host staging: the tensor is realized
// and read to the host (into_data), the bytes go through MPI, and the result is a new tensor on
// the input's device (from_tensor_data; on a device-memory backend it is uploaded when first
// used). Results carry no tape (as torch.distributed's collectives), so a parameter that is
// broadcast must be marked again with require_grad: broadcast_parameters (ddp.h) does.
//
// Every rank must call the same collectives in the same order with tensors of the same dtype
// and shape. Each collective first exchanges a small header (collective, dtype, shape, op, root)
// and throws kiln::Error on every rank when they disagree, naming the ranks and their tensors,
// instead of hanging or corrupting memory. MPI failures throw kiln::Error with MPI's error string
// and this process's rank (MPI_ERRORS_RETURN is set on the communicator).
//
// Dtypes: f32 -> MPI_FLOAT, f64 -> MPI_DOUBLE, i32 -> MPI_INT32_T, i64 -> MPI_INT64_T,
// u8 -> MPI_UINT8_T (sums are reduced as MPI_UINT32_T and wrap modulo 256, like kiln's u8
// arithmetic: Open MPI 4.1's vectorised MPI_UINT8_T sum saturates on long buffers), bool ->
// MPI_UINT8_T with logical ops (sum and max are "any", min is "all"). f16 and bf16 are reduced in
// f32: every rank widens its values to f32, MPI reduces f32 (MPI_FLOAT), and the result is rounded
// once back to the 16-bit dtype. This costs twice the bytes of a 16-bit reduction but rounds once,
// instead of once per hop as a user-defined MPI_UINT16_T sum would, so the result does not depend
// on the number of ranks or on MPI's reduction tree beyond f32 rounding. Mean is the sum divided by
// the world size in the reduction dtype (f32 for f16/bf16); it is refused for integer and bool
// tensors (an integer mean has no one obvious rounding). broadcast and all_gather move bytes
// (MPI_BYTE), so every dtype is copied exactly.
#pragma once

#include <cstdint>
#include <source_location>
#include <string>

#include "frontend/tensor.h"
#include "ir/tensor_data.h"

namespace kiln::dist {

/// The reduction of all_reduce.
enum class ReduceOp { kSum, kMean, kMax, kMin };

/// "sum", "mean", "max", "min".
const char* ReduceOpName(ReduceOp op);

/// The process group of every process of the job (MPI_COMM_WORLD). One per process.
class ProcessGroup {
 public:
  using Loc = std::source_location;

  /// Initializes MPI (MPI_Init_thread, MPI_THREAD_SERIALIZED) unless it is already initialized,
  /// and returns the group. `argc`/`argv` may be null. MPI is finalized at exit (std::atexit)
  /// when this call initialized it. A program started without mpirun is a world of one process.
  static ProcessGroup& Init(int* argc, char*** argv, Loc loc = Loc::current());
  /// The group, initializing MPI without arguments on first use.
  static ProcessGroup& World(Loc loc = Loc::current());

  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  /// This process's index in [0, world_size()).
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  /// The host name MPI reports (MPI_Get_processor_name), for messages.
  const std::string& host() const { return host_; }

  /// Waits until every rank reaches the barrier.
  void barrier(Loc loc = Loc::current()) const;

  /// Prints "rank R of N (host): <message>" to stderr and ends every process of the job
  /// (MPI_Abort with `code`; mpirun then stops the other ranks). For an error this rank alone
  /// has: a rank that just exits leaves the others waiting in their next collective, and Open
  /// MPI's MPI_Finalize itself waits for them.
  [[noreturn]] void abort(const std::string& message, int code = 1) const;

  // ---- Host data (what the tensor collectives stage through) ------------------------------------

  /// Replaces `data` by the reduction of every rank's `data` (same dtype and shape everywhere).
  void all_reduce_data(ir::TensorData& data, ReduceOp op, Loc loc = Loc::current()) const;
  /// Replaces `data` on every rank by `root`'s (same dtype and shape everywhere).
  void broadcast_data(ir::TensorData& data, int root, Loc loc = Loc::current()) const;
  /// Every rank's `data` stacked along a new leading axis: shape [world_size, ...data's shape],
  /// row r from rank r.
  ir::TensorData all_gather_data(const ir::TensorData& data, Loc loc = Loc::current()) const;

  // ---- Tensors ----------------------------------------------------------------------------------

  /// The reduction of every rank's `x`, as a new tensor on x's device.
  template <class B, int R, class K>
  Tensor<B, R, K> all_reduce(const Tensor<B, R, K>& x, ReduceOp op = ReduceOp::kSum,
                             Loc loc = Loc::current()) const {
    ir::TensorData data = x.into_data(loc);
    all_reduce_data(data, op, loc);
    return Tensor<B, R, K>::from_tensor_data(std::move(data), x.device(), loc);
  }
  /// `root`'s `x` on every rank, as a new tensor on x's device.
  template <class B, int R, class K>
  Tensor<B, R, K> broadcast(const Tensor<B, R, K>& x, int root = 0,
                            Loc loc = Loc::current()) const {
    ir::TensorData data = x.into_data(loc);
    broadcast_data(data, root, loc);
    return Tensor<B, R, K>::from_tensor_data(std::move(data), x.device(), loc);
  }
  /// Every rank's `x` stacked along a new axis 0: [world_size, ...x's shape].
  template <class B, int R, class K>
  Tensor<B, R + 1, K> all_gather(const Tensor<B, R, K>& x, Loc loc = Loc::current()) const {
    return Tensor<B, R + 1, K>::from_tensor_data(all_gather_data(x.into_data(loc), loc), x.device(),
                                                 loc);
  }

 private:
  ProcessGroup(int rank, int world_size, std::string host)
      : rank_(rank), world_size_(world_size), host_(std::move(host)) {}

  int rank_;
  int world_size_;
  std::string host_;
};

}  // namespace kiln::dist
