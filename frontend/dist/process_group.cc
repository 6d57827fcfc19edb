#include "frontend/dist/process_group.h"

// MPI's C API only: Open MPI's deprecated C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/dtype.h"
#include "frontend/error.h"

namespace kiln::dist {
namespace {

// MPI counts are int: larger buffers go in pieces of this many elements (or bytes).
constexpr int64_t kMaxChunk = int64_t{1} << 30;

[[noreturn]] void Fail(const char* what, const std::string& message,
                       const std::source_location& loc, int rank = -1, int world_size = 0) {
  std::string who;
  if (rank >= 0) who = absl::StrCat("rank ", rank, " of ", world_size, ": ");
  detail::ThrowStatus(absl::InternalError(absl::StrCat("dist.", what, ": ", who, message)), loc);
}

std::string MpiErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) {
    return absl::StrCat("MPI error code ", code);
  }
  return std::string(text, static_cast<size_t>(length));
}

std::string TypeString(ir::DType dtype, const ir::Shape& shape) {
  return absl::StrCat(std::string(ir::DTypeName(dtype)), ir::ShapeToString(shape));
}

// What every rank sends before a collective, so that mismatched calls fail on every rank with
// one message instead of hanging or reading past a buffer.
enum Collective : int64_t { kAllReduce = 1, kBroadcast, kAllGather, kBarrier };
constexpr int kMaxHeaderDims = 8;
struct Header {
  int64_t collective;
  int64_t dtype;
  int64_t rank;
  int64_t num_elements;
  int64_t dims_hash;
  int64_t op;  // ReduceOp for all_reduce, root for broadcast
  int64_t dims[kMaxHeaderDims];
};
constexpr int kHeaderWords = sizeof(Header) / sizeof(int64_t);

const char* CollectiveName(int64_t c) {
  switch (c) {
    case kAllReduce:
      return "all_reduce";
    case kBroadcast:
      return "broadcast";
    case kAllGather:
      return "all_gather";
    case kBarrier:
      return "barrier";
    default:
      return "?";
  }
}

std::string DescribeHeader(const Header& h) {
  if (h.collective == kBarrier) return "barrier";
  ir::Shape shape;
  for (int64_t i = 0; i < std::min<int64_t>(h.rank, kMaxHeaderDims); ++i)
    shape.push_back(h.dims[i]);
  std::string text = absl::StrCat(CollectiveName(h.collective), " of ",
                                  TypeString(static_cast<ir::DType>(h.dtype), shape));
  if (h.rank > kMaxHeaderDims) absl::StrAppend(&text, " (rank ", h.rank, ")");
  if (h.collective == kAllReduce) {
    absl::StrAppend(&text, " (", ReduceOpName(static_cast<ReduceOp>(h.op)), ")");
  } else if (h.collective == kBroadcast) {
    absl::StrAppend(&text, " (root ", h.op, ")");
  }
  return text;
}

Header MakeHeader(Collective collective, const ir::TensorData* data, int64_t op) {
  Header h{};
  h.collective = collective;
  h.op = op;
  if (data != nullptr) {
    h.dtype = static_cast<int64_t>(data->dtype());
    h.rank = data->rank();
    h.num_elements = data->num_elements();
    uint64_t hash = 1469598103934665603ull;  // FNV-1a over the dims
    for (int64_t i = 0; i < data->rank(); ++i) {
      hash =
          (hash ^ static_cast<uint64_t>(data->shape()[static_cast<size_t>(i)])) * 1099511628211ull;
      if (i < kMaxHeaderDims) h.dims[i] = data->shape()[static_cast<size_t>(i)];
    }
    h.dims_hash = static_cast<int64_t>(hash);
  }
  return h;
}

bool SameCall(const Header& a, const Header& b) { return std::memcmp(&a, &b, sizeof(Header)) == 0; }

MPI_Datatype ReduceType(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kF32:
    case ir::DType::kF16:  // widened to f32 first
    case ir::DType::kBF16:
      return MPI_FLOAT;
    case ir::DType::kF64:
      return MPI_DOUBLE;
    case ir::DType::kI32:
      return MPI_INT32_T;
    case ir::DType::kI64:
      return MPI_INT64_T;
    case ir::DType::kU8:
    case ir::DType::kBool:
      return MPI_UINT8_T;
    case ir::DType::kI8:
      return MPI_INT8_T;
    case ir::DType::kI16:
      return MPI_INT16_T;
    case ir::DType::kU16:
      return MPI_UINT16_T;
    case ir::DType::kU32:
      return MPI_UINT32_T;
    case ir::DType::kU64:
      return MPI_UINT64_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op ReduceMpiOp(ir::DType dtype, ReduceOp op) {
  if (dtype == ir::DType::kBool) return op == ReduceOp::kMin ? MPI_LAND : MPI_LOR;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean:
      return MPI_SUM;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kMin:
      return MPI_MIN;
  }
  return MPI_OP_NULL;
}

template <class T>
void DivideBy(T* values, int64_t n, int world_size) {
  const T divisor = static_cast<T>(world_size);
  for (int64_t i = 0; i < n; ++i) values[i] /= divisor;
}

void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMean:
      return "mean";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "?";
}

ProcessGroup& ProcessGroup::Init(int* argc, char*** argv, Loc loc) {
  static std::mutex mutex;
  static ProcessGroup* group = nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  if (group != nullptr) return *group;

  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) Fail("init", "MPI was already finalized in this process", loc);
    int provided = 0;
    int rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) Fail("init", absl::StrCat("MPI_Init_thread: ", MpiErrorString(rc)), loc);
    std::atexit(FinalizeAtExit);
  }
  // Errors come back as codes (and become kiln::Error) instead of aborting the job.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  char name[MPI_MAX_PROCESSOR_NAME];
  int length = 0;
  if (MPI_Get_processor_name(name, &length) != MPI_SUCCESS) length = 0;
  group = new ProcessGroup(rank, size, std::string(name, static_cast<size_t>(length)));
  return *group;
}

ProcessGroup& ProcessGroup::World(Loc loc) { return Init(nullptr, nullptr, loc); }

namespace {

// Exchanges headers and throws on every rank when the calls differ.
void CheckSameCall(const char* what, const Header& mine, int rank, int world_size,
                   const std::source_location& loc) {
  std::vector<Header> all(static_cast<size_t>(world_size));
  int rc = MPI_Allgather(&mine, kHeaderWords, MPI_INT64_T, all.data(), kHeaderWords, MPI_INT64_T,
                         MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) {
    Fail(what, absl::StrCat("MPI_Allgather (call check): ", MpiErrorString(rc)), loc, rank,
         world_size);
  }
  std::string differ;
  for (int r = 1; r < world_size; ++r) {
    if (!SameCall(all[static_cast<size_t>(r)], all[0])) {
      absl::StrAppend(&differ, differ.empty() ? "" : ", ", "rank ", r, " called ",
                      DescribeHeader(all[static_cast<size_t>(r)]));
    }
  }
  if (!differ.empty()) {
    Fail(what,
         absl::StrCat("the ranks called different collectives: rank 0 called ",
                      DescribeHeader(all[0]), ", ", differ,
                      " (every rank must make the same calls, in the same order, with tensors "
                      "of the same dtype and shape)"),
         loc, rank, world_size);
  }
}

}  // namespace

void ProcessGroup::barrier(Loc loc) const {
  CheckSameCall("barrier", MakeHeader(kBarrier, nullptr, 0), rank_, world_size_, loc);
  int rc = MPI_Barrier(MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) {
    Fail("barrier", absl::StrCat("MPI_Barrier: ", MpiErrorString(rc)), loc, rank_, world_size_);
  }
}

void ProcessGroup::abort(const std::string& message, int code) const {
  // One write: mpirun interleaves the ranks' output at write() granularity.
  const std::string text =
      absl::StrCat("rank ", rank_, " of ", world_size_, " (", host_, "): ", message, "\n");
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();  // MPI_Abort does not return; should it, this process still must not go on
}

void ProcessGroup::all_reduce_data(ir::TensorData& data, ReduceOp op, Loc loc) const {
  const ir::DType dtype = data.dtype();
  if (op == ReduceOp::kMean && !ir::IsFloat(dtype)) {
    Fail("all_reduce",
         absl::StrCat("mean needs a float tensor, got ", TypeString(dtype, data.shape()),
                      " (reduce with sum and divide as you need)"),
         loc, rank_, world_size_);
  }
  CheckSameCall("all_reduce", MakeHeader(kAllReduce, &data, static_cast<int64_t>(op)), rank_,
                world_size_, loc);
  const int64_t n = data.num_elements();
  const bool half = dtype == ir::DType::kF16 || dtype == ir::DType::kBF16;
  // 8- and 16-bit integer sums go through u32: Open MPI 4.1's vectorised reductions (op/avx)
  // add MPI_UINT8_T with saturating instructions on long buffers (tests/dist caught 255 for 139),
  // where C and kiln wrap modulo 2^bits. u32 sums wrap modulo 2^32, which keeps the low bits.
  const bool wide_small = ir::IsInteger(dtype) && ir::DTypeSize(dtype) < 4 && op == ReduceOp::kSum;
  std::vector<float> widened;
  std::vector<uint32_t> widened_small;
  std::byte* buffer = data.data();
  int64_t element_size = ir::DTypeSize(dtype);
  MPI_Datatype type = ReduceType(dtype);
  if (wide_small) {
    widened_small.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      widened_small[static_cast<size_t>(i)] = static_cast<uint32_t>(data.GetInt64(i));
    }
    buffer = reinterpret_cast<std::byte*>(widened_small.data());
    element_size = sizeof(uint32_t);
    type = MPI_UINT32_T;
  }
  if (half) {
    widened.resize(static_cast<size_t>(n));
    const auto* bits = reinterpret_cast<const uint16_t*>(data.data());
    for (int64_t i = 0; i < n; ++i) {
      widened[static_cast<size_t>(i)] =
          dtype == ir::DType::kF16 ? base::HalfToFloat(bits[i]) : base::BFloat16ToFloat(bits[i]);
    }
    buffer = reinterpret_cast<std::byte*>(widened.data());
    element_size = sizeof(float);
  }
  const MPI_Op mpi_op = ReduceMpiOp(dtype, op);
  for (int64_t begin = 0; begin < n; begin += kMaxChunk) {
    const int count = static_cast<int>(std::min(kMaxChunk, n - begin));
    int rc = MPI_Allreduce(MPI_IN_PLACE, buffer + begin * element_size, count, type, mpi_op,
                           MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) {
      Fail("all_reduce",
           absl::StrCat("MPI_Allreduce of ", TypeString(dtype, data.shape()), ": ",
                        MpiErrorString(rc)),
           loc, rank_, world_size_);
    }
  }
  if (op == ReduceOp::kMean) {
    if (dtype == ir::DType::kF64) {
      DivideBy(reinterpret_cast<double*>(buffer), n, world_size_);
    } else {
      DivideBy(reinterpret_cast<float*>(buffer), n, world_size_);
    }
  }
  if (wide_small) {
    // The low bytes of the u32 sum (little-endian, as every kiln host): the wrapped result.
    const int64_t size = ir::DTypeSize(dtype);
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(data.data() + i * size, &widened_small[static_cast<size_t>(i)],
                  static_cast<size_t>(size));
    }
  }
  if (half) {
    auto* bits = reinterpret_cast<uint16_t*>(data.data());
    for (int64_t i = 0; i < n; ++i) {
      const float v = widened[static_cast<size_t>(i)];
      bits[i] = dtype == ir::DType::kF16 ? base::FloatToHalf(v) : base::FloatToBFloat16(v);
    }
  }
}

void ProcessGroup::broadcast_data(ir::TensorData& data, int root, Loc loc) const {
  if (root < 0 || root >= world_size_) {
    Fail("broadcast", absl::StrCat("root ", root, " is not a rank (world size ", world_size_, ")"),
         loc, rank_, world_size_);
  }
  CheckSameCall("broadcast", MakeHeader(kBroadcast, &data, root), rank_, world_size_, loc);
  const int64_t bytes = data.num_elements() * ir::DTypeSize(data.dtype());
  for (int64_t begin = 0; begin < bytes; begin += kMaxChunk) {
    const int count = static_cast<int>(std::min(kMaxChunk, bytes - begin));
    int rc = MPI_Bcast(data.data() + begin, count, MPI_BYTE, root, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) {
      Fail("broadcast",
           absl::StrCat("MPI_Bcast of ", TypeString(data.dtype(), data.shape()), " from rank ",
                        root, ": ", MpiErrorString(rc)),
           loc, rank_, world_size_);
    }
  }
}

ir::TensorData ProcessGroup::all_gather_data(const ir::TensorData& data, Loc loc) const {
  CheckSameCall("all_gather", MakeHeader(kAllGather, &data, 0), rank_, world_size_, loc);
  ir::Shape shape = data.shape();
  shape.insert(shape.begin(), world_size_);
  ir::TensorData out = ir::TensorData::Uninitialized(data.dtype(), shape);
  // The element count, not size_bytes(): an empty tensor still owns a few bytes of storage.
  const int64_t bytes = data.num_elements() * ir::DTypeSize(data.dtype());
  if (bytes <= INT_MAX) {
    int rc = MPI_Allgather(data.data(), static_cast<int>(bytes), MPI_BYTE, out.data(),
                           static_cast<int>(bytes), MPI_BYTE, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) {
      Fail("all_gather",
           absl::StrCat("MPI_Allgather of ", TypeString(data.dtype(), data.shape()), ": ",
                        MpiErrorString(rc)),
           loc, rank_, world_size_);
    }
    return out;
  }
  // Over 2 GiB per rank: each rank broadcasts its row in pieces.
  std::memcpy(out.data() + rank_ * bytes, data.data(), static_cast<size_t>(bytes));
  for (int root = 0; root < world_size_; ++root) {
    for (int64_t begin = 0; begin < bytes; begin += kMaxChunk) {
      const int count = static_cast<int>(std::min(kMaxChunk, bytes - begin));
      int rc = MPI_Bcast(out.data() + root * bytes + begin, count, MPI_BYTE, root, MPI_COMM_WORLD);
      if (rc != MPI_SUCCESS) {
        Fail("all_gather",
             absl::StrCat("MPI_Bcast of rank ", root, "'s ", TypeString(data.dtype(), data.shape()),
                          ": ", MpiErrorString(rc)),
             loc, rank_, world_size_);
      }
    }
  }
  return out;
}

}  // namespace kiln::dist
