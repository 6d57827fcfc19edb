// kiln::dist collectives, run by CTest on 1 rank (no mpirun: Open MPI's singleton), 2 and 3
// ranks (mpirun -np N). Every rank builds every rank's input from (rank, dtype, size), so each
// one computes the expected result locally and compares it with what MPI delivered.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "frontend/dist/process_group.h"
#include "frontend/error.h"
#include "ir/tensor_data.h"
#include "kiln/kiln.h"

namespace kiln::dist {
namespace {

using ir::DType;

const ProcessGroup& Pg() { return ProcessGroup::World(); }

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Small integers (in [-8, 8], or [0, 16] for u32 and u64; the 8- and 16-bit integer dtypes
// over their whole range, so sums wrap; bool: true one time in four): every sum over up to 3
// ranks is exact in every dtype, so MPI's reduction order cannot matter and sum, max and min
// are compared exactly.
int64_t IntValue(int rank, DType dtype, int64_t i, uint64_t salt) {
  const uint64_t h =
      Mix(Mix(static_cast<uint64_t>(rank) * 1000003 + salt) ^ static_cast<uint64_t>(i));
  if (dtype == DType::kBool) return h % 4 == 0 ? 1 : 0;
  if (ir::IsInteger(dtype) && ir::DTypeSize(dtype) < 4) {
    const int64_t range = int64_t{1} << (8 * ir::DTypeSize(dtype));
    const auto v = static_cast<int64_t>(h % static_cast<uint64_t>(range));
    return ir::IsSignedInteger(dtype) ? v - range / 2 : v;
  }
  if (ir::IsUnsignedInteger(dtype)) return static_cast<int64_t>(h % 17);
  return static_cast<int64_t>(h % 17) - 8;
}

// A sum wrapped to the width of an 8- or 16-bit integer dtype (others are unchanged).
int64_t WrapSum(int64_t sum, DType dtype) {
  if (!ir::IsInteger(dtype) || ir::DTypeSize(dtype) >= 4) return sum;
  const int64_t range = int64_t{1} << (8 * ir::DTypeSize(dtype));
  int64_t v = ((sum % range) + range) % range;
  if (ir::IsSignedInteger(dtype) && v >= range / 2) v -= range;
  return v;
}

ir::TensorData Input(int rank, DType dtype, const ir::Shape& shape, uint64_t salt) {
  ir::TensorData data(dtype, shape);
  for (int64_t i = 0; i < data.num_elements(); ++i) {
    data.SetInt64(i, IntValue(rank, dtype, i, salt));
  }
  return data;
}

// One unit in the last place at 1.0, for a float dtype.
double Ulp(DType dtype) {
  switch (dtype) {
    case DType::kF64:
      return std::ldexp(1.0, -52);
    case DType::kF32:
      return std::ldexp(1.0, -23);
    case DType::kF16:
      return std::ldexp(1.0, -10);
    default:
      return std::ldexp(1.0, -7);  // bf16
  }
}

std::string Name(DType dtype, int64_t n) {
  return std::string(ir::DTypeName(dtype)) + "[" + std::to_string(n) + "]";
}

const int64_t kSizes[] = {1, 7, 1000003};

TEST(DistCollectives, WorldSizeAndRank) {
  EXPECT_GE(Pg().world_size(), 1);
  EXPECT_GE(Pg().rank(), 0);
  EXPECT_LT(Pg().rank(), Pg().world_size());
  // The launcher's idea of the world: mpirun exports OMPI_COMM_WORLD_SIZE; a singleton has none.
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  EXPECT_EQ(Pg().world_size(), size != nullptr ? std::atoi(size) : 1);
  const char* expected = std::getenv("KILN_TEST_WORLD_SIZE");
  if (expected != nullptr) {
    EXPECT_EQ(Pg().world_size(), std::atoi(expected));
  }
}

TEST(DistCollectives, AllReduceSumMaxMinEveryDtypeAndSize) {
  const int ws = Pg().world_size();
  for (DType dtype : base::kAllDTypes) {
    for (int64_t n : kSizes) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
        SCOPED_TRACE(Name(dtype, n) + " " + ReduceOpName(op));
        const uint64_t salt = static_cast<uint64_t>(op) * 31 + static_cast<uint64_t>(n);
        ir::TensorData data = Input(Pg().rank(), dtype, {n}, salt);
        Pg().all_reduce_data(data, op);
        ASSERT_EQ(data.dtype(), dtype);
        ASSERT_EQ(data.shape(), ir::Shape({n}));
        int64_t wrong = 0;
        for (int64_t i = 0; i < n; ++i) {
          int64_t want = IntValue(0, dtype, i, salt);
          for (int r = 1; r < ws; ++r) {
            const int64_t v = IntValue(r, dtype, i, salt);
            if (op == ReduceOp::kSum) {
              want = dtype == DType::kBool ? (want | v) : want + v;
            } else if (op == ReduceOp::kMax) {
              want = std::max(want, v);
            } else {
              want = std::min(want, v);
            }
          }
          if (op == ReduceOp::kSum) want = WrapSum(want, dtype);
          if (data.GetInt64(i) != want && wrong++ < 5) {
            ADD_FAILURE() << "element " << i << ": got " << data.GetInt64(i) << ", want " << want;
          }
        }
        EXPECT_EQ(wrong, 0);
      }
    }
  }
}

TEST(DistCollectives, AllReduceMeanEveryFloatDtypeAndSize) {
  const int ws = Pg().world_size();
  for (DType dtype : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16}) {
    for (int64_t n : kSizes) {
      SCOPED_TRACE(Name(dtype, n));
      ir::TensorData data = Input(Pg().rank(), dtype, {n}, 7);
      Pg().all_reduce_data(data, ReduceOp::kMean);
      int64_t wrong = 0;
      for (int64_t i = 0; i < n; ++i) {
        double sum = 0;
        for (int r = 0; r < ws; ++r) sum += static_cast<double>(IntValue(r, dtype, i, 7));
        const double exact = sum / ws;
        // A mean rounds (f16/bf16: in f32, then once to 16 bits): within one ulp of the exact
        // mean.
        const double tolerance = Ulp(dtype) * std::max(1.0, std::abs(exact));
        if (std::abs(data.GetDouble(i) - exact) > tolerance && wrong++ < 5) {
          ADD_FAILURE() << "element " << i << ": got " << data.GetDouble(i) << ", want " << exact;
        }
      }
      EXPECT_EQ(wrong, 0);
    }
  }
}

TEST(DistCollectives, AllReduceSumOfArbitraryFloatsWithinReductionOrderTolerance) {
  // Values that do not add exactly: MPI may add in any order, so f32 agrees with the f64 sum
  // within ws-1 roundings of the partial sums' size.
  const int ws = Pg().world_size();
  const int64_t n = 1000003;
  auto value = [](int r, int64_t i) {
    return static_cast<float>(static_cast<double>(Mix(Mix(r + 17) ^ i) >> 11) * 0x1.0p-53 * 2 - 1);
  };
  ir::TensorData data(DType::kF32, {n});
  for (int64_t i = 0; i < n; ++i) data.SetDouble(i, value(Pg().rank(), i));
  Pg().all_reduce_data(data, ReduceOp::kSum);
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0, magnitude = 0;
    for (int r = 0; r < ws; ++r) {
      sum += value(r, i);
      magnitude += std::abs(value(r, i));
    }
    if (std::abs(data.GetDouble(i) - sum) > (ws - 1) * 0x1.0p-24 * magnitude && wrong++ < 5) {
      ADD_FAILURE() << "element " << i << ": got " << data.GetDouble(i) << ", want " << sum;
    }
  }
  EXPECT_EQ(wrong, 0);
}

TEST(DistCollectives, BroadcastFromEveryRootEveryDtypeAndSize) {
  for (int root = 0; root < Pg().world_size(); ++root) {
    for (DType dtype : base::kAllDTypes) {
      for (int64_t n : kSizes) {
        SCOPED_TRACE(Name(dtype, n) + " root " + std::to_string(root));
        ir::TensorData data = Input(Pg().rank(), dtype, {n}, 3);
        Pg().broadcast_data(data, root);
        EXPECT_TRUE(data == Input(root, dtype, {n}, 3));
      }
    }
  }
}

TEST(DistCollectives, AllGatherEveryDtypeAndSize) {
  const int ws = Pg().world_size();
  for (DType dtype : base::kAllDTypes) {
    for (int64_t n : kSizes) {
      SCOPED_TRACE(Name(dtype, n));
      const ir::TensorData out = Pg().all_gather_data(Input(Pg().rank(), dtype, {n}, 5));
      ASSERT_EQ(out.shape(), ir::Shape({ws, n}));
      ASSERT_EQ(out.dtype(), dtype);
      ir::TensorData want(dtype, {ws, n});
      for (int r = 0; r < ws; ++r) {
        for (int64_t i = 0; i < n; ++i) want.SetInt64(r * n + i, IntValue(r, dtype, i, 5));
      }
      EXPECT_TRUE(out == want);
    }
  }
}

TEST(DistCollectives, BarrierAndEmptyTensors) {
  Pg().barrier();
  ir::TensorData empty(DType::kF32, {0, 3});
  Pg().all_reduce_data(empty, ReduceOp::kSum);
  EXPECT_EQ(empty.shape(), ir::Shape({0, 3}));
  Pg().broadcast_data(empty, 0);
  EXPECT_EQ(Pg().all_gather_data(empty).shape(), ir::Shape({Pg().world_size(), 0, 3}));
  Pg().barrier();
}

// ---- Tensors of each backend -------------------------------------------------------------------

template <class B>
void CheckTensorCollectives() {
  typename B::Device device;
  const int ws = Pg().world_size();
  const int rank = Pg().rank();
  // Pending (computed) input: the collective realizes it first.
  auto x = Tensor<B, 2>::full({2, 3}, 1.0 + rank, device) * 2.0;
  auto sum = Pg().all_reduce(x, ReduceOp::kSum);
  EXPECT_EQ(sum.device(), x.device());
  EXPECT_EQ(sum.shape(), (std::array<int64_t, 2>{2, 3}));
  const double want_sum = 2.0 * ws * (ws + 1) / 2.0;
  for (float v : sum.template to_vector<float>()) EXPECT_EQ(v, want_sum);
  auto mean = Pg().all_reduce(x, ReduceOp::kMean);
  for (float v : mean.template to_vector<float>()) EXPECT_FLOAT_EQ(v, want_sum / ws);

  auto ids = Tensor<B, 1, Int>::from_vector(std::vector<int64_t>{rank, 10 * rank}, {2}, device);
  auto max = Pg().all_reduce(ids, ReduceOp::kMax);
  EXPECT_EQ(max.to_vector(), (std::vector<int64_t>{ws - 1, 10 * (ws - 1)}));
  auto root_ids = Pg().broadcast(ids, ws - 1);
  EXPECT_EQ(root_ids.to_vector(), (std::vector<int64_t>{ws - 1, 10 * (ws - 1)}));
  auto gathered = Pg().all_gather(ids);
  EXPECT_EQ(gathered.shape(), (std::array<int64_t, 2>{ws, 2}));
  std::vector<int64_t> want;
  for (int r = 0; r < ws; ++r) {
    want.push_back(r);
    want.push_back(10 * r);
  }
  EXPECT_EQ(gathered.to_vector(), want);
  // Results are ordinary tensors of the backend: they compute further.
  EXPECT_EQ((gathered.sum() * 1).item(), 11 * ws * (ws - 1) / 2);

  auto scalar = Tensor<B, 0>::from_data(0.5 * rank, device);
  EXPECT_EQ(Pg().all_gather(scalar).shape(), (std::array<int64_t, 1>{ws}));
  auto flags = Tensor<B, 1, Bool>::from_data({rank == 0, true}, device);
  EXPECT_EQ(Pg().all_reduce(flags, ReduceOp::kMin).to_vector(), (std::vector<bool>{ws == 1, true}));
}

// On kiln::Reference: the collectives only call into_data and from_tensor_data, which every
// backend implements (host values, or device buffers read back and uploaded when used).
TEST(DistCollectives, TensorsOnReference) { CheckTensorCollectives<Reference>(); }

// ---- Errors ------------------------------------------------------------------------------------

TEST(DistCollectives, MismatchedCallsFailOnEveryRankNamingTheRanks) {
  if (Pg().world_size() == 1) GTEST_SKIP() << "needs 2 ranks";
  ir::TensorData data(DType::kF32, {Pg().rank() == 0 ? int64_t{3} : int64_t{4}});
  try {
    Pg().all_reduce_data(data, ReduceOp::kSum);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("collectives_test.cc:"), std::string::npos) << m;
    EXPECT_NE(m.find("dist.all_reduce: rank " + std::to_string(Pg().rank()) + " of "),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("rank 0 called all_reduce of f32[3] (sum)"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 1 called all_reduce of f32[4] (sum)"), std::string::npos) << m;
  }
  // One rank in a barrier, the others broadcasting: also caught, and the group still works.
  try {
    if (Pg().rank() == 0) {
      Pg().barrier();
    } else {
      Pg().broadcast_data(data, 0);
    }
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 called barrier, rank 1 called broadcast of f32[4]"
                                         " (root 0)"),
              std::string::npos)
        << e.what();
  }
  Pg().barrier();
}

TEST(DistCollectives, BadArgumentsAreErrors) {
  ir::TensorData ints(DType::kI32, {2});
  try {
    Pg().all_reduce_data(ints, ReduceOp::kMean);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mean needs a float tensor, got i32[2]"),
              std::string::npos)
        << e.what();
  }
  try {
    Pg().broadcast_data(ints, Pg().world_size());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dist.broadcast: rank " + std::to_string(Pg().rank()) +
                                         " of " + std::to_string(Pg().world_size()) + ": root " +
                                         std::to_string(Pg().world_size()) + " is not a rank"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kiln::dist
