// The GEMM micro-kernel as LLVM IR: MR x (nr_vectors * lanes) accumulators kept in vector
// registers across the whole depth loop (explicit <lanes x T> vectors, one fma per accumulator and
// depth step, the A element broadcast), then the C update and the fused epilogue on the tile.
//
// The packed panels are zero-padded, so every tile is computed whole; only the write-back
// differs: a full tile takes plain vector loads and stores, an edge tile masked ones (lanes past
// n_valid) over its first m_valid rows. The write-back is a loop over the rows of the
// accumulator tile spilled to the stack, so the epilogue's code exists once per path instead of
// MR times (compile time), at the cost of a few stores and loads per tile (not per depth step).
//
// The activations use exp with Cody-Waite range reduction (ln 2 split into a hi and lo part, fma)
// and a Taylor polynomial of degree 7 (f32) / 13 (f64) on |r| <= ln(2)/2, whose truncation error
// (0.347^8/8! = 5e-9, 0.347^14/14! = 4e-18) is below half an ulp; the result is within ~2 ulp of
// exp over the clamped range [-87, 88] (f32) / [-708, 709] (f64). sigmoid(x) = 1 / (1 + exp(-x)),
// gelu_tanh(x) = x * sigmoid(2 z), which equals 0.5 x (1 + tanh z) exactly in real arithmetic.

#include "codegen/cpu/gemm_kernel.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <numbers>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "codegen/cpu/gemm.h"
#include "codegen/cpu/llvm_jit.h"
#include "codegen/cpu/object_cache.h"
#include "llvm/IR/BasicBlock.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/DerivedTypes.h"
#include "llvm/IR/Function.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/Intrinsics.h"
#include "llvm/IR/IntrinsicsX86.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Metadata.h"
#include "llvm/IR/Module.h"
#include "passes/pass_manager.h"
#include "runtime/cpu/cpu_features.h"
#include "xxhash.h"

namespace kiln::codegen::cpu::gemm_internal {

using runtime::cpu::GemmActivation;
using runtime::cpu::Int8EpilogueOp;
using runtime::cpu::Int8Operand;
using runtime::cpu::kMaxInt8EpilogueSteps;
using runtime::cpu::gemm_internal::Int8TileArgs;
using runtime::cpu::gemm_internal::kAmxQuadSteps;
using runtime::cpu::gemm_internal::TileArgs;

namespace {

// Part of the disk-cache key: bump it whenever a change here changes the generated code.
constexpr int kGemmKernelVersion = 5;

// The IR reads TileArgs as {i64, i64, ptr, ptr, ptr, i64, double, double, i64}.
static_assert(sizeof(void*) == 8, "the kernel ABI assumes 64-bit pointers");
// The int8 kernels read Int8TileArgs as {i64, i64, [kMaxInt8EpilogueSteps x ptr], i64, i64}.
static_assert(offsetof(Int8TileArgs, operands) == 16 &&
                  offsetof(Int8TileArgs, panels) == 16 + 8 * kMaxInt8EpilogueSteps &&
                  sizeof(Int8TileArgs) == 32 + 8 * kMaxInt8EpilogueSteps,
              "Int8TileArgs no longer matches the struct type the int8 kernel IR reads");
static_assert(offsetof(TileArgs, row_bias) == 16 && offsetof(TileArgs, residual_ld) == 40 &&
                  offsetof(TileArgs, alpha) == 48 && offsetof(TileArgs, beta) == 56 &&
                  offsetof(TileArgs, a_ld) == 64,
              "TileArgs no longer matches the struct type the kernel IR reads");

// Depth steps per iteration of the main loop; a remainder loop takes the rest.
constexpr int kUnroll = 4;

// What every micro-kernel shares: the signature void(i64 depth, ptr a, ptr b, ptr c, i64 ldc,
// ptr args), the prefetch of the C tile, the depth loop keeping MR x nr_vectors accumulators in
// registers (kUnroll steps per iteration, then a remainder loop), and the write-back: the
// finished accumulators spilled to a stack tile, then a loop over its rows, once with plain
// vector stores (a full tile) and once with lanes past n_valid masked off (an edge tile), so the
// epilogue's code exists twice instead of 2 x MR times (compile time), at the cost of a few
// stores and loads per tile (not per depth step).
class SkeletonEmitter {
 public:
  using Tile = std::vector<std::vector<llvm::Value*>>;  // [row][vector]

 protected:
  // `accumulator`: the vector type of one accumulator; `c_bytes`: the size of an element of C.
  SkeletonEmitter(llvm::Module& module, const KernelShape& shape, llvm::Type* accumulator,
                  int c_bytes)
      : module_(module),
        context_(module.getContext()),
        builder_(context_),
        shape_(shape),
        accumulator_(accumulator),
        c_bytes_(c_bytes),
        i64_(llvm::Type::getInt64Ty(context_)),
        i32_(llvm::Type::getInt32Ty(context_)),
        ptr_(llvm::PointerType::get(context_, 0)) {}

  // The function `name` with the micro-kernel signature; its blocks follow.
  void CreateFunction(const std::string& name) {
    auto* type = llvm::FunctionType::get(llvm::Type::getVoidTy(context_),
                                         {i64_, ptr_, ptr_, ptr_, i64_, ptr_}, false);
    function_ = llvm::Function::Create(type, llvm::Function::ExternalLinkage, name, module_);
    function_->addFnAttr(llvm::Attribute::NoUnwind);
    // Without these, a target that prefers 256-bit vectors would split every 512-bit operation.
    const std::string bits = std::to_string(shape_.vector_bits);
    function_->addFnAttr("min-legal-vector-width", bits);
    function_->addFnAttr("prefer-vector-width", bits);
    for (unsigned packed : {1u, 2u}) {
      function_->addParamAttr(packed, llvm::Attribute::NoAlias);
      function_->addParamAttr(packed, llvm::Attribute::ReadOnly);
    }
    depth_ = function_->getArg(0);
    a_ = function_->getArg(1);
    b_ = function_->getArg(2);
    c_ = function_->getArg(3);
    ldc_ = function_->getArg(4);
    args_ = function_->getArg(5);
    depth_->setName("depth");
    a_->setName("a");
    b_->setName("b");
    c_->setName("c");
    ldc_->setName("ldc");
    args_->setName("args");
    entry_ = llvm::BasicBlock::Create(context_, "entry", function_);
    builder_.SetInsertPoint(entry_);
  }

  llvm::Value* BytePtr(llvm::Value* base, llvm::Value* bytes) {
    return builder_.CreateGEP(builder_.getInt8Ty(), base, bytes);
  }
  llvm::Value* BytePtr(llvm::Value* base, int64_t bytes) {
    return BytePtr(base, builder_.getInt64(bytes));
  }
  // Row `row` of C.
  llvm::Value* RowOfC(llvm::Value* row) {
    return BytePtr(c_,
                   builder_.CreateMul(builder_.CreateMul(ldc_, row), builder_.getInt64(c_bytes_)));
  }

  // In the entry block: prefetch the C tile for writing (its rows are far apart and nothing else
  // brings them in before the stores at the end).
  void PrefetchC() {
    const int lines_per_row = std::max(1, shape_.nr() * c_bytes_ / 64);
    for (int i = 0; i < shape_.mr; ++i) {
      llvm::Value* row = RowOfC(builder_.getInt64(i));
      for (int line = 0; line < lines_per_row; ++line) {
        builder_.CreateIntrinsic(
            llvm::Intrinsic::prefetch, {ptr_},
            {BytePtr(row, static_cast<int64_t>(line) * 64), builder_.getInt32(1),
             builder_.getInt32(3), builder_.getInt32(1)});
      }
    }
  }

  // The depth loop over `depth_` steps from the entry block: step(a, b, index, tile) emits one
  // step reading the panels at a and b (index: its place within the unrolled iteration), each
  // step advances a by a_step and b by b_step bytes. Returns the final tile, with the builder in
  // the block after the loop.
  // `unroll` steps per iteration of the main loop; `keep_unroll`: LLVM does not unroll it
  // further.
  Tile EmitDepthLoop(int64_t a_step, int64_t b_step,
                     const std::function<void(llvm::Value*, llvm::Value*, int, Tile&)>& step,
                     int unroll = kUnroll, bool keep_unroll = false) {
    const int mr = shape_.mr, nv = shape_.nr_vectors;
    auto* main_loop = llvm::BasicBlock::Create(context_, "main_loop", function_);
    auto* remainder_check = llvm::BasicBlock::Create(context_, "remainder_check", function_);
    auto* remainder_loop = llvm::BasicBlock::Create(context_, "remainder_loop", function_);
    auto* tail = llvm::BasicBlock::Create(context_, "tail", function_);
    llvm::Value* depth_main = builder_.CreateMul(
        builder_.CreateSDiv(depth_, builder_.getInt64(unroll)), builder_.getInt64(unroll));
    builder_.CreateCondBr(builder_.CreateICmpSGT(depth_main, builder_.getInt64(0)), main_loop,
                          remainder_check);

    llvm::Value* zero = llvm::Constant::getNullValue(accumulator_);
    auto make_phis = [&](llvm::BasicBlock* block, Tile& tile) {
      builder_.SetInsertPoint(block);
      tile.assign(static_cast<size_t>(mr), std::vector<llvm::Value*>(static_cast<size_t>(nv)));
      for (int i = 0; i < mr; ++i) {
        for (int j = 0; j < nv; ++j) tile[i][j] = builder_.CreatePHI(accumulator_, 2);
      }
    };
    auto add_incoming = [&](Tile& phis, const Tile& values, llvm::BasicBlock* from) {
      for (int i = 0; i < mr; ++i) {
        for (int j = 0; j < nv; ++j) {
          llvm::cast<llvm::PHINode>(phis[i][j])->addIncoming(values[i][j], from);
        }
      }
    };
    const Tile zeros(static_cast<size_t>(mr),
                     std::vector<llvm::Value*>(static_cast<size_t>(nv), zero));

    // main_loop: kUnroll depth steps per iteration.
    Tile main_phis;
    make_phis(main_loop, main_phis);
    llvm::PHINode* k_main = builder_.CreatePHI(i64_, 2, "k");
    llvm::PHINode* a_main = builder_.CreatePHI(ptr_, 2, "pa");
    llvm::PHINode* b_main = builder_.CreatePHI(ptr_, 2, "pb");
    Tile acc = main_phis;
    for (int s = 0; s < unroll; ++s) step(a_main, b_main, s, acc);
    llvm::Value* k_next = builder_.CreateAdd(k_main, builder_.getInt64(unroll));
    llvm::Value* a_next = BytePtr(a_main, unroll * a_step);
    llvm::Value* b_next = BytePtr(b_main, unroll * b_step);
    llvm::BranchInst* back = builder_.CreateCondBr(builder_.CreateICmpSLT(k_next, depth_main),
                                                   main_loop, remainder_check);
    if (keep_unroll) DisableUnrolling(back);
    // The main loop and the remainder check are both entered from the entry block (nothing done
    // yet) and from the main loop (after its iterations).
    const auto enter_from_entry_or_main = [&](Tile& phis, llvm::PHINode* k, llvm::PHINode* pa,
                                              llvm::PHINode* pb) {
      add_incoming(phis, zeros, entry_);
      add_incoming(phis, acc, main_loop);
      k->addIncoming(builder_.getInt64(0), entry_);
      k->addIncoming(k_next, main_loop);
      pa->addIncoming(a_, entry_);
      pa->addIncoming(a_next, main_loop);
      pb->addIncoming(b_, entry_);
      pb->addIncoming(b_next, main_loop);
    };
    enter_from_entry_or_main(main_phis, k_main, a_main, b_main);

    // remainder_check: the depth steps depth_main..depth one at a time.
    Tile check_phis;
    make_phis(remainder_check, check_phis);
    llvm::PHINode* k_check = builder_.CreatePHI(i64_, 2, "k_rest");
    llvm::PHINode* a_check = builder_.CreatePHI(ptr_, 2, "pa_rest");
    llvm::PHINode* b_check = builder_.CreatePHI(ptr_, 2, "pb_rest");
    enter_from_entry_or_main(check_phis, k_check, a_check, b_check);
    builder_.CreateCondBr(builder_.CreateICmpSLT(k_check, depth_), remainder_loop, tail);

    Tile rest_phis;
    make_phis(remainder_loop, rest_phis);
    llvm::PHINode* k_rest = builder_.CreatePHI(i64_, 2);
    llvm::PHINode* a_rest = builder_.CreatePHI(ptr_, 2);
    llvm::PHINode* b_rest = builder_.CreatePHI(ptr_, 2);
    Tile rest = rest_phis;
    step(a_rest, b_rest, 0, rest);
    llvm::Value* k_rest_next = builder_.CreateAdd(k_rest, builder_.getInt64(1));
    llvm::Value* a_rest_next = BytePtr(a_rest, a_step);
    llvm::Value* b_rest_next = BytePtr(b_rest, b_step);
    builder_.CreateCondBr(builder_.CreateICmpSLT(k_rest_next, depth_), remainder_loop, tail);
    add_incoming(rest_phis, check_phis, remainder_check);
    add_incoming(rest_phis, rest, remainder_loop);
    k_rest->addIncoming(k_check, remainder_check);
    k_rest->addIncoming(k_rest_next, remainder_loop);
    a_rest->addIncoming(a_check, remainder_check);
    a_rest->addIncoming(a_rest_next, remainder_loop);
    b_rest->addIncoming(b_check, remainder_check);
    b_rest->addIncoming(b_rest_next, remainder_loop);

    Tile final_phis;
    make_phis(tail, final_phis);
    add_incoming(final_phis, check_phis, remainder_check);
    add_incoming(final_phis, rest, remainder_loop);
    return final_phis;
  }

  // The stack tile the row loops read: MR rows of NR accumulator lanes, in the entry block.
  void AllocateTile() {
    llvm::Type* row_type =
        llvm::ArrayType::get(accumulator_, static_cast<uint64_t>(shape_.nr_vectors));
    tile_type_ = llvm::ArrayType::get(row_type, static_cast<uint64_t>(shape_.mr));
    llvm::IRBuilder<> entry_builder(entry_, entry_->begin());
    llvm::AllocaInst* alloca = entry_builder.CreateAlloca(tile_type_, nullptr, "tile");
    alloca->setAlignment(llvm::Align(64));
    tile_memory_ = alloca;
  }

  // Stores the finished tile to the stack tile for the row loops.
  void SpillTile(const Tile& tile) {
    const int mr = shape_.mr, nv = shape_.nr_vectors;
    AllocateTile();
    for (int i = 0; i < mr; ++i) {
      for (int j = 0; j < nv; ++j) {
        builder_.CreateAlignedStore(tile[i][j], TileVectorPtr(builder_.getInt64(i), j),
                                    llvm::Align(VectorBytes()));
      }
    }
  }
  llvm::Value* TileVectorPtr(llvm::Value* row, int j) {
    return builder_.CreateInBoundsGEP(tile_type_, tile_memory_,
                                      {builder_.getInt64(0), row, builder_.getInt64(j)});
  }
  // Accumulator vector j of tile row `row`.
  llvm::Value* LoadTileVector(llvm::Value* row, int j) {
    return builder_.CreateAlignedLoad(accumulator_, TileVectorPtr(row, j),
                                      llvm::Align(VectorBytes()));
  }
  uint64_t VectorBytes() const {
    return static_cast<uint64_t>(accumulator_->getPrimitiveSizeInBits().getFixedValue() / 8);
  }

  // Per vector of a row: the lanes below n_valid.
  std::vector<llvm::Value*> LaneMasks(llvm::Value* n_valid) {
    llvm::Value* n_valid_lanes = builder_.CreateVectorSplat(static_cast<unsigned>(shape_.lanes),
                                                            builder_.CreateTrunc(n_valid, i32_));
    std::vector<llvm::Value*> masks;
    for (int j = 0; j < shape_.nr_vectors; ++j) {
      std::vector<llvm::Constant*> lanes;
      for (int l = 0; l < shape_.lanes; ++l) {
        lanes.push_back(builder_.getInt32(j * shape_.lanes + l));
      }
      masks.push_back(builder_.CreateICmpSLT(llvm::ConstantVector::get(lanes), n_valid_lanes));
    }
    return masks;
  }

  // A loop running body(row) for rows [0, rows), then returning from the kernel. Not unrolled:
  // unrolling would bring back MR copies of the epilogue for nothing (this is not the hot loop).
  // With `after`, the loop branches there when done instead of returning.
  void EmitRowLoop(llvm::Value* rows, const std::function<void(llvm::Value*)>& body,
                   llvm::BasicBlock* after = nullptr) {
    auto* loop = llvm::BasicBlock::Create(context_, "write_back", function_);
    auto* done = llvm::BasicBlock::Create(context_, "write_back_done", function_);
    llvm::BasicBlock* before = builder_.GetInsertBlock();
    builder_.CreateCondBr(builder_.CreateICmpSGT(rows, builder_.getInt64(0)), loop, done);
    builder_.SetInsertPoint(loop);
    llvm::PHINode* row = builder_.CreatePHI(i64_, 2, "row");
    row->addIncoming(builder_.getInt64(0), before);
    body(row);
    llvm::Value* next = builder_.CreateAdd(row, builder_.getInt64(1));
    row->addIncoming(next, builder_.GetInsertBlock());
    DisableUnrolling(builder_.CreateCondBr(builder_.CreateICmpSLT(next, rows), loop, done));
    builder_.SetInsertPoint(done);
    if (after != nullptr) {
      builder_.CreateBr(after);
    } else {
      builder_.CreateRetVoid();
    }
  }

  // Marks the loop whose back edge is `branch` as not to be unrolled.
  void DisableUnrolling(llvm::BranchInst* branch) {
    llvm::MDNode* disable =
        llvm::MDNode::get(context_, {llvm::MDString::get(context_, "llvm.loop.unroll.disable")});
    llvm::MDNode* loop_id = llvm::MDNode::getDistinct(context_, {nullptr, disable});
    loop_id->replaceOperandWith(0, loop_id);
    branch->setMetadata(llvm::LLVMContext::MD_loop, loop_id);
  }

  // A vector of `type` at `ptr`, masked when `mask` is non-null (masked-off lanes read as 0).
  llvm::Value* LoadVector(llvm::Type* type, llvm::Value* ptr, llvm::Value* mask, uint64_t align) {
    if (mask == nullptr) return builder_.CreateAlignedLoad(type, ptr, llvm::Align(align));
    return builder_.CreateMaskedLoad(type, ptr, llvm::Align(align), mask,
                                     llvm::Constant::getNullValue(type));
  }
  void StoreVector(llvm::Value* value, llvm::Value* ptr, llvm::Value* mask, uint64_t align) {
    if (mask == nullptr) {
      builder_.CreateAlignedStore(value, ptr, llvm::Align(align));
    } else {
      builder_.CreateMaskedStore(value, ptr, llvm::Align(align), mask);
    }
  }
  llvm::Value* Splat(llvm::Value* scalar) {
    return builder_.CreateVectorSplat(static_cast<unsigned>(shape_.lanes), scalar);
  }

  llvm::Module& module_;
  llvm::LLVMContext& context_;
  llvm::IRBuilder<> builder_;
  const KernelShape shape_;
  llvm::Type* const accumulator_;
  const int c_bytes_;
  llvm::IntegerType* const i64_;
  llvm::IntegerType* const i32_;
  llvm::PointerType* const ptr_;
  llvm::Function* function_ = nullptr;
  llvm::BasicBlock* entry_ = nullptr;
  llvm::Value *depth_ = nullptr, *a_ = nullptr, *b_ = nullptr, *c_ = nullptr, *ldc_ = nullptr,
              *args_ = nullptr;
  llvm::Type* tile_type_ = nullptr;
  llvm::Value* tile_memory_ = nullptr;
};

// The f32 / f64 micro-kernel: explicit <lanes x T> vectors, one fma per accumulator and depth
// step with the A element broadcast, then C = alpha * tile + beta * C and the fused epilogue.
class KernelEmitter : public SkeletonEmitter {
 public:
  KernelEmitter(llvm::Module& module, ir::DType dtype, const KernelShape& shape,
                const EpilogueVariant& variant)
      : SkeletonEmitter(module, shape, VectorTypeOf(module.getContext(), dtype, shape),
                        dtype == ir::DType::kF64 ? 8 : 4),
        variant_(variant),
        is_f64_(dtype == ir::DType::kF64),
        scalar_(is_f64_ ? llvm::Type::getDoubleTy(context_) : llvm::Type::getFloatTy(context_)),
        vector_(llvm::cast<llvm::FixedVectorType>(accumulator_)),
        element_bytes_(is_f64_ ? 8 : 4) {
    llvm::FastMathFlags flags;
    flags.setAllowContract(true);
    builder_.setFastMathFlags(flags);
  }

  llvm::Function* Emit(const std::string& name);

 private:
  static llvm::Type* VectorTypeOf(llvm::LLVMContext& context, ir::DType dtype,
                                  const KernelShape& shape) {
    llvm::Type* scalar = dtype == ir::DType::kF64 ? llvm::Type::getDoubleTy(context)
                                                  : llvm::Type::getFloatTy(context);
    return llvm::FixedVectorType::get(scalar, static_cast<unsigned>(shape.lanes));
  }
  llvm::Value* ScalarConst(double value) { return llvm::ConstantFP::get(scalar_, value); }
  llvm::Value* VectorConst(double value) { return llvm::ConstantFP::get(vector_, value); }
  llvm::Value* Fma(llvm::Value* a, llvm::Value* b, llvm::Value* c) {
    // llvm.fmuladd fuses only where the target has fma; llvm.fma would become a libm call there.
    const auto id = shape_.fma ? llvm::Intrinsic::fma : llvm::Intrinsic::fmuladd;
    return builder_.CreateIntrinsic(id, {a->getType()}, {a, b, c});
  }
  llvm::Value* ElementPtr(llvm::Value* base, llvm::Value* index) {
    return builder_.CreateGEP(scalar_, base, index);
  }
  llvm::Value* ElementPtr(llvm::Value* base, int64_t index) {
    return ElementPtr(base, builder_.getInt64(index));
  }
  llvm::Value* LoadArg(llvm::Value* args, int field, llvm::Type* type) {
    return builder_.CreateLoad(type, builder_.CreateStructGEP(args_type_, args, field));
  }

  // One depth step: acc[i][j] += A[k][i] * B[k][j*lanes : (j+1)*lanes].
  void EmitDepthStep(llvm::Value* a, llvm::Value* b, int step, Tile& acc);
  // For a kernel reading A in place, in the entry block: the element offset of each tile row
  // from the tile's first element, min(i, m_valid - 1) * a_ld (rows past m_valid repeat the
  // last valid one: they are never stored, and reading them would leave A's bounds).
  void EmitRowOffsets(llvm::Value* m_valid);
  // Loads of the epilogue operands that do not depend on the row.
  std::vector<llvm::Value*> LoadColumnBias(llvm::Value* column_bias,
                                           const std::vector<llvm::Value*>& masks);
  // What a row of the write-back reads; masks and column_bias are empty on the full-tile path.
  struct WriteBack {
    llvm::Value* row_bias = nullptr;
    llvm::Value* residual = nullptr;
    llvm::Value* residual_ld = nullptr;
    llvm::Value* alpha = nullptr;
    llvm::Value* beta = nullptr;
    llvm::Value* beta_nonzero = nullptr;  // a vector of i1
    std::vector<llvm::Value*> masks;
    std::vector<llvm::Value*> column_bias;
  };
  // C = alpha * tile + beta * C, then the epilogue, for tile row `row`.
  void EmitWriteBackRow(const WriteBack& write_back, llvm::Value* row);

  llvm::Value* Exp(llvm::Value* x);
  llvm::Value* Sigmoid(llvm::Value* x);
  llvm::Value* Activation(llvm::Value* x);

  const EpilogueVariant variant_;
  const bool is_f64_;
  llvm::Type* const scalar_;
  llvm::FixedVectorType* const vector_;
  const int element_bytes_;
  llvm::StructType* args_type_ = nullptr;
  std::vector<llvm::Value*> a_row_offsets_;  // per tile row, from EmitRowOffsets
};

void KernelEmitter::EmitDepthStep(llvm::Value* a, llvm::Value* b, int step, Tile& acc) {
  const int mr = shape_.mr, nv = shape_.nr_vectors, lanes = shape_.lanes;
  const uint64_t vector_bytes = static_cast<uint64_t>(lanes) * element_bytes_;
  std::vector<llvm::Value*> bv(static_cast<size_t>(nv));
  for (int j = 0; j < nv; ++j) {
    bv[j] = LoadVector(vector_, ElementPtr(b, static_cast<int64_t>(step) * shape_.nr() + j * lanes),
                       nullptr, vector_bytes);
  }
  for (int i = 0; i < mr; ++i) {
    llvm::Value* address =
        shape_.a_in_place ? ElementPtr(ElementPtr(a, a_row_offsets_[static_cast<size_t>(i)]), step)
                          : ElementPtr(a, static_cast<int64_t>(step) * mr + i);
    llvm::Value* element =
        builder_.CreateAlignedLoad(scalar_, address, llvm::Align(element_bytes_));
    llvm::Value* broadcast = Splat(element);
    for (int j = 0; j < nv; ++j) acc[i][j] = Fma(broadcast, bv[j], acc[i][j]);
  }
}

llvm::Value* KernelEmitter::Exp(llvm::Value* x) {
  const long double ln2 = std::numbers::ln2_v<long double>;
  const double ln2_hi = is_f64_ ? static_cast<double>(ln2) : static_cast<float>(ln2);
  const double ln2_lo = is_f64_ ? static_cast<double>(ln2 - static_cast<long double>(ln2_hi))
                                : static_cast<float>(ln2 - static_cast<long double>(ln2_hi));
  // Clamped so that 2^n stays a normal number: the result saturates near the largest and smallest
  // normal values instead of overflowing to inf or flushing to 0.
  const double lo = is_f64_ ? -708.0 : -87.0, hi = is_f64_ ? 709.0 : 88.0;
  llvm::Value* clamped =
      builder_.CreateMinNum(builder_.CreateMaxNum(x, VectorConst(lo)), VectorConst(hi));
  llvm::Value* n = builder_.CreateUnaryIntrinsic(
      llvm::Intrinsic::rint,
      builder_.CreateFMul(clamped, VectorConst(std::numbers::log2e_v<double>)));
  llvm::Value* r = Fma(n, VectorConst(-ln2_hi), clamped);
  r = Fma(n, VectorConst(-ln2_lo), r);
  const int degree = is_f64_ ? 13 : 7;
  std::vector<double> coefficients(static_cast<size_t>(degree + 1));
  double factorial = 1;
  for (int i = 0; i <= degree; ++i) {
    if (i > 0) factorial *= i;
    coefficients[static_cast<size_t>(i)] = 1.0 / factorial;
  }
  llvm::Value* p = VectorConst(coefficients[static_cast<size_t>(degree)]);
  for (int i = degree - 1; i >= 0; --i) p = Fma(p, r, VectorConst(coefficients[i]));
  // 2^n from its bit pattern: (n + bias) << mantissa bits.
  llvm::IntegerType* int_type = is_f64_ ? i64_ : i32_;
  llvm::Type* int_vector =
      llvm::FixedVectorType::get(int_type, static_cast<unsigned>(shape_.lanes));
  llvm::Value* exponent =
      builder_.CreateAdd(builder_.CreateFPToSI(n, int_vector),
                         llvm::ConstantInt::get(int_vector, is_f64_ ? 1023 : 127));
  llvm::Value* scale = builder_.CreateBitCast(
      builder_.CreateShl(exponent, llvm::ConstantInt::get(int_vector, is_f64_ ? 52 : 23)), vector_);
  llvm::Value* result = builder_.CreateFMul(p, scale);
  return builder_.CreateSelect(builder_.CreateFCmpUNO(x, x), x, result);
}

llvm::Value* KernelEmitter::Sigmoid(llvm::Value* x) {
  llvm::Value* e = Exp(builder_.CreateFNeg(x));
  return builder_.CreateFDiv(VectorConst(1.0), builder_.CreateFAdd(VectorConst(1.0), e));
}

llvm::Value* KernelEmitter::Activation(llvm::Value* x) {
  switch (variant_.activation) {
    case GemmActivation::kNone:
      return x;
    case GemmActivation::kRelu:
      // select rather than maxnum: NaN stays NaN, as the IR's max propagates it.
      return builder_.CreateSelect(builder_.CreateFCmpOLT(x, VectorConst(0.0)), VectorConst(0.0),
                                   x);
    case GemmActivation::kSigmoid:
      return Sigmoid(x);
    case GemmActivation::kSilu:
      return builder_.CreateFMul(x, Sigmoid(x));
    case GemmActivation::kGeluTanh: {
      const double sqrt_2_over_pi = std::numbers::sqrt2 * std::numbers::inv_sqrtpi;
      llvm::Value* x2 = builder_.CreateFMul(x, x);
      llvm::Value* inner = Fma(builder_.CreateFMul(x2, VectorConst(0.044715)), x, x);
      llvm::Value* z2 = builder_.CreateFMul(inner, VectorConst(2.0 * sqrt_2_over_pi));
      return builder_.CreateFMul(x, Sigmoid(z2));
    }
  }
  return x;
}

std::vector<llvm::Value*> KernelEmitter::LoadColumnBias(llvm::Value* column_bias,
                                                        const std::vector<llvm::Value*>& masks) {
  std::vector<llvm::Value*> bias;
  if (!variant_.column_bias) return bias;
  for (int j = 0; j < shape_.nr_vectors; ++j) {
    bias.push_back(LoadVector(vector_,
                              ElementPtr(column_bias, static_cast<int64_t>(j) * shape_.lanes),
                              masks.empty() ? nullptr : masks[j], element_bytes_));
  }
  return bias;
}

void KernelEmitter::EmitWriteBackRow(const WriteBack& wb, llvm::Value* row) {
  llvm::Value* c_row = RowOfC(row);
  llvm::Value* bias_row = nullptr;
  if (variant_.row_bias) {
    bias_row = Splat(builder_.CreateAlignedLoad(scalar_, ElementPtr(wb.row_bias, row),
                                                llvm::Align(element_bytes_)));
  }
  llvm::Value* residual_row = nullptr;
  if (variant_.residual) {
    residual_row = ElementPtr(wb.residual, builder_.CreateMul(wb.residual_ld, row));
  }
  llvm::Value* zero = VectorConst(0.0);
  for (int j = 0; j < shape_.nr_vectors; ++j) {
    llvm::Value* mask = wb.masks.empty() ? nullptr : wb.masks[j];
    const int64_t column = static_cast<int64_t>(j) * shape_.lanes;
    llvm::Value* acc = LoadTileVector(row, j);
    llvm::Value* c_ptr = ElementPtr(c_row, column);
    // C is always loaded (it is valid memory); with beta == 0 the select replaces it by 0 first,
    // so an uninitialised or NaN C never reaches the result.
    llvm::Value* old = builder_.CreateSelect(
        wb.beta_nonzero, LoadVector(vector_, c_ptr, mask, element_bytes_), zero);
    llvm::Value* v = Fma(wb.beta, old, builder_.CreateFMul(acc, wb.alpha));
    if (variant_.column_bias) v = builder_.CreateFAdd(v, wb.column_bias[j]);
    if (variant_.row_bias) v = builder_.CreateFAdd(v, bias_row);
    llvm::Value* residual_value = nullptr;
    if (variant_.residual) {
      residual_value = LoadVector(vector_, ElementPtr(residual_row, column), mask, element_bytes_);
      if (!variant_.residual_after_activation) v = builder_.CreateFAdd(v, residual_value);
    }
    v = Activation(v);
    if (variant_.residual && variant_.residual_after_activation) {
      v = builder_.CreateFAdd(v, residual_value);
    }
    StoreVector(v, c_ptr, mask, element_bytes_);
  }
}

void KernelEmitter::EmitRowOffsets(llvm::Value* m_valid) {
  llvm::Value* a_ld = LoadArg(args_, 8, i64_);
  llvm::Value* last_row = builder_.CreateSub(m_valid, builder_.getInt64(1));
  a_row_offsets_.clear();
  for (int i = 0; i < shape_.mr; ++i) {
    llvm::Value* row = builder_.CreateSelect(builder_.CreateICmpSLT(builder_.getInt64(i), m_valid),
                                             builder_.getInt64(i), last_row);
    a_row_offsets_.push_back(builder_.CreateMul(row, a_ld));
  }
}

llvm::Function* KernelEmitter::Emit(const std::string& name) {
  const int mr = shape_.mr, nr = shape_.nr();
  args_type_ = llvm::StructType::get(
      context_, {i64_, i64_, ptr_, ptr_, ptr_, i64_, llvm::Type::getDoubleTy(context_),
                 llvm::Type::getDoubleTy(context_), i64_});
  CreateFunction(name);
  PrefetchC();
  llvm::Value* m_valid = LoadArg(args_, 0, i64_);
  if (shape_.a_in_place) EmitRowOffsets(m_valid);
  // In place, a depth step moves one element along each row of A; packed, one row of the panel.
  const int64_t a_step = shape_.a_in_place ? element_bytes_ : int64_t{mr} * element_bytes_;
  const Tile tile = EmitDepthLoop(
      a_step, int64_t{nr} * element_bytes_,
      [&](llvm::Value* a, llvm::Value* b, int step, Tile& acc) { EmitDepthStep(a, b, step, acc); });
  SpillTile(tile);
  WriteBack write_back;
  llvm::Value* n_valid = LoadArg(args_, 1, i64_);
  write_back.row_bias = variant_.row_bias ? LoadArg(args_, 2, ptr_) : nullptr;
  llvm::Value* column_bias = variant_.column_bias ? LoadArg(args_, 3, ptr_) : nullptr;
  write_back.residual = variant_.residual ? LoadArg(args_, 4, ptr_) : nullptr;
  write_back.residual_ld = variant_.residual ? LoadArg(args_, 5, i64_) : nullptr;
  llvm::Value* alpha = LoadArg(args_, 6, llvm::Type::getDoubleTy(context_));
  llvm::Value* beta = LoadArg(args_, 7, llvm::Type::getDoubleTy(context_));
  if (!is_f64_) {
    alpha = builder_.CreateFPTrunc(alpha, scalar_);
    beta = builder_.CreateFPTrunc(beta, scalar_);
  }
  write_back.alpha = Splat(alpha);
  write_back.beta = Splat(beta);
  write_back.beta_nonzero = Splat(builder_.CreateFCmpUNE(beta, ScalarConst(0.0)));
  auto* store_full = llvm::BasicBlock::Create(context_, "store_full", function_);
  auto* store_edge = llvm::BasicBlock::Create(context_, "store_edge", function_);
  llvm::Value* full = builder_.CreateAnd(builder_.CreateICmpEQ(m_valid, builder_.getInt64(mr)),
                                         builder_.CreateICmpEQ(n_valid, builder_.getInt64(nr)));
  builder_.CreateCondBr(full, store_full, store_edge);

  builder_.SetInsertPoint(store_full);
  write_back.column_bias = LoadColumnBias(column_bias, write_back.masks);
  EmitRowLoop(builder_.getInt64(mr), [&](llvm::Value* row) { EmitWriteBackRow(write_back, row); });

  // store_edge: lanes past n_valid are masked off, rows past m_valid are not visited.
  builder_.SetInsertPoint(store_edge);
  write_back.masks = LaneMasks(n_valid);
  write_back.column_bias = LoadColumnBias(column_bias, write_back.masks);
  EmitRowLoop(m_valid, [&](llvm::Value* row) { EmitWriteBackRow(write_back, row); });
  return function_;
}

// Whether LLVM's feature string ("+avx2,+fma,...") enables `feature`.
bool HasFeature(const std::string& features, const char* feature) {
  return absl::StrContains(absl::StrCat(features, ","), absl::StrCat("+", feature, ","));
}

// Whether an x86 target with these LLVM features ("+avx2,+avx512vnni,...") has vpdpbusd on
// vectors of `bits`: AVX-512 VNNI (with VL below 512 bits) or AVX-VNNI (VEX, up to 256 bits).
bool VnniAt(const std::string& features, int bits) {
  const auto has = [&](const char* f) { return HasFeature(features, f); };
  if (has("avx512vnni") && (bits == 512 || has("avx512vl"))) return true;
  return bits <= 256 && has("avxvnni");
}

// The int8 micro-kernel: i16 pairs of depth steps multiplied and summed into i32 lanes
// (Int8MicroKernelFn): pmaddwd on x86 (its intrinsic at the kernel's width; LLVM turns it and the
// accumulating add into vpdpwssd where the target has AVX-512 VNNI or AVX-VNNI, which computes
// the same non-saturating sum), and elsewhere plain IR of the same arithmetic (even and odd
// halves sign-extended, multiplied, added), which the target lowers as it can. The u8-quad
// variant (KernelShape::u8_quads) multiplies quads of u8 by i8 with pmaddubsw into i16 pair sums
// and adds those pairs with pmaddwd by ones: exact for B in [-64, 64], which the driver checks;
// with KernelShape::vnni, vpdpbusd multiplies the quads and adds them to the accumulators in one
// instruction without saturating, exact for every B; elsewhere the quad sums as plain IR (exact
// too). An i8 A comes as A + 128 and the kernel subtracts 128 x
// B's column sums (KernelShape::signed_a). The epilogue converts to f32 and applies its steps with
// plain IEEE operations (no contraction into fma: each step rounds, as the IR graph does).
class Int8KernelEmitter : public SkeletonEmitter {
 public:
  Int8KernelEmitter(llvm::Module& module, const KernelShape& shape,
                    const Int8EpilogueVariant& variant, const std::string& target_features)
      : SkeletonEmitter(module, shape,
                        llvm::FixedVectorType::get(llvm::Type::getInt32Ty(module.getContext()),
                                                   static_cast<unsigned>(shape.lanes)),
                        static_cast<int>(ir::DTypeSize(variant.output))),
        variant_(variant),
        f32_(llvm::Type::getFloatTy(context_)),
        floats_(llvm::FixedVectorType::get(f32_, static_cast<unsigned>(shape.lanes))),
        pairs_(llvm::FixedVectorType::get(builder_.getInt16Ty(),
                                          static_cast<unsigned>(2 * shape.lanes))),
        quads_(llvm::FixedVectorType::get(builder_.getInt8Ty(),
                                          static_cast<unsigned>(4 * shape.lanes))),
        pmaddwd_(X86MultiplyAdd(module, shape, target_features, /*bytes=*/false)),
        pmaddubsw_(X86MultiplyAdd(module, shape, target_features, /*bytes=*/true)),
        vpdpbusd_(shape.vnni ? X86DotQuads(module, shape, target_features)
                             : llvm::Intrinsic::not_intrinsic) {}

  llvm::Function* Emit(const std::string& name);

 private:
  // acc[i][j] += A pair (2 depth steps) or quad (4) of row i times B pairs / quads of vector j.
  void EmitDepthStep(llvm::Value* a, llvm::Value* b, int step, Tile& acc);
  // x.even * y.even + x.odd * y.odd per i32 lane of two vectors of i16 pairs.
  llvm::Value* MultiplyPairs(llvm::Value* x, llvm::Value* y);
  // The sum of the four products of u8 x and i8 y per i32 lane (y's values in [-64, 64] unless
  // the shape is vnni).
  llvm::Value* MultiplyQuads(llvm::Value* x, llvm::Value* y);
  // KernelShape::amx: the depth loop on AMX tiles into the stack tile (2 x 2 tiles of 16 x 16
  // i32; per kAmxQuadSteps quad steps, two A tiles from the tile-row panel and two B tiles from
  // the quad panel, 4 tdpbusd).
  void EmitAmxDepthLoop();
  // The operands of the epilogue steps that do not depend on the row: scalars splatted, column
  // vectors per vector of the row (masked on the edge path); row operands are null here.
  struct Operands {
    std::vector<llvm::Value*> scalar;                // per step
    std::vector<llvm::Value*> base;                  // per step: its pointer from the args
    std::vector<std::vector<llvm::Value*>> columns;  // per step, per vector
    std::vector<llvm::Value*> masks;                 // empty: a full tile
  };
  Operands LoadOperands(const std::vector<llvm::Value*>& masks);
  void EmitWriteBackRow(const Operands& operands, llvm::Value* row);
  llvm::Value* ApplyStep(Int8EpilogueOp op, llvm::Value* v, llvm::Value* x);
  llvm::Value* Operand(int step, const std::string& name);

  // The x86 intrinsic of vpdpbusd at this width when the target has it, else not_intrinsic.
  static llvm::Intrinsic::ID X86DotQuads(const llvm::Module& module, const KernelShape& shape,
                                         const std::string& features) {
    if (!absl::StartsWith(module.getTargetTriple(), "x86_64") ||
        !VnniAt(features, shape.vector_bits)) {
      return llvm::Intrinsic::not_intrinsic;
    }
    return shape.vector_bits == 512   ? llvm::Intrinsic::x86_avx512_vpdpbusd_512
           : shape.vector_bits == 256 ? llvm::Intrinsic::x86_avx512_vpdpbusd_256
                                      : llvm::Intrinsic::x86_avx512_vpdpbusd_128;
  }

  // The x86 intrinsic of pmaddwd (bytes: pmaddubsw) at this width when the target has it, else
  // not_intrinsic.
  static llvm::Intrinsic::ID X86MultiplyAdd(const llvm::Module& module, const KernelShape& shape,
                                            const std::string& features, bool bytes) {
    if (!absl::StartsWith(module.getTargetTriple(), "x86_64"))
      return llvm::Intrinsic::not_intrinsic;
    const auto has = [&](const char* f) { return HasFeature(features, f); };
    const auto if_has = [&](const char* f, llvm::Intrinsic::ID id) {
      return has(f) ? id : llvm::Intrinsic::not_intrinsic;
    };
    switch (shape.vector_bits) {
      case 128:  // pmaddwd is SSE2, x86-64's baseline
        return bytes ? if_has("ssse3", llvm::Intrinsic::x86_ssse3_pmadd_ub_sw_128)
                     : llvm::Intrinsic::x86_sse2_pmadd_wd;
      case 256:
        return if_has("avx2", bytes ? llvm::Intrinsic::x86_avx2_pmadd_ub_sw
                                    : llvm::Intrinsic::x86_avx2_pmadd_wd);
      case 512:
        return if_has("avx512bw", bytes ? llvm::Intrinsic::x86_avx512_pmaddubs_w_512
                                        : llvm::Intrinsic::x86_avx512_pmaddw_d_512);
      default:
        return llvm::Intrinsic::not_intrinsic;
    }
  }

  const Int8EpilogueVariant variant_;
  llvm::Type* const f32_;
  llvm::FixedVectorType* const floats_;
  llvm::FixedVectorType* const pairs_;
  llvm::FixedVectorType* const quads_;
  const llvm::Intrinsic::ID pmaddwd_;
  const llvm::Intrinsic::ID pmaddubsw_;
  const llvm::Intrinsic::ID vpdpbusd_;
  llvm::StructType* args_type_ = nullptr;
  // AMX: the current panel's byte offset into the column operands (null: none).
  llvm::Value* column_offset_ = nullptr;
  // The write-back of the tile (in the stack tile) to C, then `after` (null: return).
  void EmitWriteBack(llvm::Value* m_valid, llvm::Value* n_valid, llvm::BasicBlock* after);
  // KernelShape::amx: Int8TileArgs::panels panels, each the AMX depth loop and its write-back.
  void EmitAmxPanels();
  // For signed_a (A packed as A + 128): vector j of 128 x B's column sums, the row after the
  // panel's depth_ quads, which the kernel subtracts from its sums.
  llvm::Value* ColumnSums(int j) {
    llvm::Value* sums =
        BytePtr(b_, builder_.CreateMul(depth_, builder_.getInt64(int64_t{shape_.nr()} * 4)));
    return builder_.CreateAlignedLoad(accumulator_, BytePtr(sums, int64_t{j} * shape_.lanes * 4),
                                      llvm::Align(VectorBytes()));
  }
};

llvm::Value* Int8KernelEmitter::MultiplyPairs(llvm::Value* x, llvm::Value* y) {
  // On x86 the instruction itself: with one operand a broadcast pair, InstCombine rewrites the
  // generic form below into splats of the pair's halves and the backend no longer finds pmaddwd
  // in it (it emits vpmulld). The two compute the same bits.
  if (pmaddwd_ != llvm::Intrinsic::not_intrinsic) {
    return builder_.CreateIntrinsic(pmaddwd_, {}, {x, y});
  }
  std::vector<int> even, odd;
  for (int l = 0; l < shape_.lanes; ++l) {
    even.push_back(2 * l);
    odd.push_back(2 * l + 1);
  }
  auto half = [&](llvm::Value* v, const std::vector<int>& lanes) {
    return builder_.CreateSExt(builder_.CreateShuffleVector(v, lanes), accumulator_);
  };
  // |i16 x i16| <= 2^30: the products never overflow; their sum wraps as pmaddwd's does.
  llvm::Value* products_even = builder_.CreateNSWMul(half(x, even), half(y, even));
  llvm::Value* products_odd = builder_.CreateNSWMul(half(x, odd), half(y, odd));
  return builder_.CreateAdd(products_even, products_odd);
}

llvm::Value* Int8KernelEmitter::MultiplyQuads(llvm::Value* x, llvm::Value* y) {
  if (pmaddubsw_ != llvm::Intrinsic::not_intrinsic && !shape_.vnni) {
    // |255 x 64 x 2| = 32640: the i16 pair sums never saturate for B in [-64, 64] (for
    // b_unsigned, A: the unsigned bytes go first).
    llvm::Value* pair_sums = builder_.CreateIntrinsic(
        pmaddubsw_, {},
        shape_.b_unsigned ? std::vector<llvm::Value*>{y, x} : std::vector<llvm::Value*>{x, y});
    return builder_.CreateIntrinsic(pmaddwd_, {}, {pair_sums, llvm::ConstantInt::get(pairs_, 1)});
  }
  const int lanes = shape_.lanes;
  llvm::Type* wide = llvm::FixedVectorType::get(i32_, 4 * lanes);
  llvm::Value* products =
      shape_.b_unsigned
          ? builder_.CreateNSWMul(builder_.CreateSExt(x, wide), builder_.CreateZExt(y, wide))
          : builder_.CreateNSWMul(builder_.CreateZExt(x, wide), builder_.CreateSExt(y, wide));
  llvm::Value* sum = nullptr;
  for (int h = 0; h < 4; ++h) {
    std::vector<int> lane_h;
    for (int l = 0; l < lanes; ++l) lane_h.push_back(4 * l + h);
    llvm::Value* part = builder_.CreateShuffleVector(products, lane_h);
    sum = sum == nullptr ? part : builder_.CreateAdd(sum, part);
  }
  return sum;
}

void Int8KernelEmitter::EmitAmxDepthLoop() {
  constexpr int kTileRows = 16, kTileBytes = 64;  // one AMX tile: 16 rows of 64 bytes
  const int tiles_m = shape_.mr / kTileRows, tiles_n = shape_.nr() * 4 / kTileBytes;
  const int64_t b_row_bytes = int64_t{shape_.nr()} * 4;
  llvm::Type* amx = llvm::Type::getX86_AMXTy(context_);
  llvm::Value* rows = builder_.getInt16(kTileRows);
  llvm::Value* bytes = builder_.getInt16(kTileBytes);
  const auto intrinsic = [&](llvm::Intrinsic::ID id) {
    return llvm::Intrinsic::getDeclaration(&module_, id);
  };
  llvm::Function* zero = intrinsic(llvm::Intrinsic::x86_tilezero_internal);
  llvm::Function* load = intrinsic(llvm::Intrinsic::x86_tileloadd64_internal);
  // A's bytes unsigned and B's signed, or (b_unsigned) the other way round.
  llvm::Function* dot = intrinsic(shape_.b_unsigned ? llvm::Intrinsic::x86_tdpbsud_internal
                                                    : llvm::Intrinsic::x86_tdpbusd_internal);
  llvm::Function* store = intrinsic(llvm::Intrinsic::x86_tilestored64_internal);

  llvm::Value* chunks = builder_.CreateSDiv(depth_, builder_.getInt64(kAmxQuadSteps));
  Tile zeros(static_cast<size_t>(tiles_m), std::vector<llvm::Value*>(static_cast<size_t>(tiles_n)));
  for (auto& row : zeros) {
    for (auto& t : row) t = builder_.CreateCall(zero, {rows, bytes});
  }
  llvm::BasicBlock* entry = builder_.GetInsertBlock();
  auto* loop = llvm::BasicBlock::Create(context_, "amx_loop", function_);
  auto* done = llvm::BasicBlock::Create(context_, "amx_done", function_);
  builder_.CreateCondBr(builder_.CreateICmpSGT(chunks, builder_.getInt64(0)), loop, done);

  builder_.SetInsertPoint(loop);
  llvm::PHINode* chunk = builder_.CreatePHI(i64_, 2, "chunk");
  Tile acc = zeros;
  for (auto& row : acc) {
    for (auto& t : row) t = builder_.CreatePHI(amx, 2);
  }
  // A: per chunk, MR rows of 64 bytes (PackRowsAsTiles); B: per chunk, kAmxQuadSteps rows of the
  // quad panel, NR x 4 bytes each, a tile every 64 bytes across.
  llvm::Value* a_chunk =
      BytePtr(a_, builder_.CreateMul(chunk, builder_.getInt64(int64_t{shape_.mr} * kTileBytes)));
  llvm::Value* b_chunk =
      BytePtr(b_, builder_.CreateMul(chunk, builder_.getInt64(kAmxQuadSteps * b_row_bytes)));
  // Products start as soon as their tiles are in, and every load comes while the tile it could
  // share a register with is still to be read, so that LLVM gives the four inputs four registers
  // (tiles are not renamed: a load into a register waits for the products reading it). The order
  // for 2 x 2: A0 B0 (C00) B1 A1 (C01 C10 C11).
  const auto load_a = [&](int i) {
    return builder_.CreateCall(load,
                               {rows, bytes, BytePtr(a_chunk, int64_t{i} * kTileRows * kTileBytes),
                                builder_.getInt64(kTileBytes)});
  };
  const auto load_b = [&](int j) {
    return builder_.CreateCall(load, {rows, bytes, BytePtr(b_chunk, int64_t{j} * kTileBytes),
                                      builder_.getInt64(b_row_bytes)});
  };
  std::vector<llvm::Value*> a_tiles(static_cast<size_t>(tiles_m));
  std::vector<llvm::Value*> b_tiles(static_cast<size_t>(tiles_n));
  Tile next = acc;
  const auto product = [&](int i, int j) {
    next[i][j] = builder_.CreateCall(dot, {rows, bytes, bytes, acc[i][j], a_tiles[i], b_tiles[j]});
  };
  // The next chunk's B into L1 meanwhile (tile loads from L2 wait on its latency).
  for (int64_t line = 0; line < kAmxQuadSteps * b_row_bytes / 64; ++line) {
    builder_.CreateIntrinsic(llvm::Intrinsic::prefetch, {ptr_},
                             {BytePtr(b_chunk, kAmxQuadSteps * b_row_bytes + line * 64),
                              builder_.getInt32(0), builder_.getInt32(3), builder_.getInt32(1)});
  }
  a_tiles[0] = load_a(0);
  b_tiles[0] = load_b(0);
  product(0, 0);
  for (int j = 1; j < tiles_n; ++j) b_tiles[j] = load_b(j);
  for (int i = 1; i < tiles_m; ++i) a_tiles[i] = load_a(i);
  for (int i = 0; i < tiles_m; ++i) {
    for (int j = 0; j < tiles_n; ++j) {
      if (i != 0 || j != 0) product(i, j);
    }
  }
  llvm::Value* chunk_next = builder_.CreateAdd(chunk, builder_.getInt64(1));
  DisableUnrolling(builder_.CreateCondBr(builder_.CreateICmpSLT(chunk_next, chunks), loop, done));
  chunk->addIncoming(builder_.getInt64(0), entry);
  chunk->addIncoming(chunk_next, loop);
  for (int i = 0; i < tiles_m; ++i) {
    for (int j = 0; j < tiles_n; ++j) {
      llvm::cast<llvm::PHINode>(acc[i][j])->addIncoming(zeros[i][j], entry);
      llvm::cast<llvm::PHINode>(acc[i][j])->addIncoming(next[i][j], loop);
    }
  }

  builder_.SetInsertPoint(done);
  Tile result = zeros;
  for (int i = 0; i < tiles_m; ++i) {
    for (int j = 0; j < tiles_n; ++j) {
      llvm::PHINode* phi = builder_.CreatePHI(amx, 2);
      phi->addIncoming(zeros[i][j], entry);
      phi->addIncoming(next[i][j], loop);
      result[i][j] = phi;
    }
  }
  for (int i = 0; i < tiles_m; ++i) {
    for (int j = 0; j < tiles_n; ++j) {
      llvm::Value* at =
          BytePtr(tile_memory_, int64_t{i} * kTileRows * b_row_bytes + j * kTileBytes);
      builder_.CreateCall(store, {rows, bytes, at, builder_.getInt64(b_row_bytes), result[i][j]});
    }
  }
}

void Int8KernelEmitter::EmitDepthStep(llvm::Value* a, llvm::Value* b, int step, Tile& acc) {
  const int mr = shape_.mr, nv = shape_.nr_vectors, lanes = shape_.lanes;
  // One step is a pair of depth steps (two i16) or a quad (four bytes): 4 bytes per row of A,
  // per column of B.
  llvm::FixedVectorType* const vector = shape_.u8_quads ? quads_ : pairs_;
  std::vector<llvm::Value*> bv(static_cast<size_t>(nv));
  for (int j = 0; j < nv; ++j) {
    bv[j] = builder_.CreateAlignedLoad(
        vector, BytePtr(b, (static_cast<int64_t>(step) * shape_.nr() + j * lanes) * 4),
        llvm::Align(VectorBytes()));
  }
  for (int i = 0; i < mr; ++i) {
    llvm::Value* group = builder_.CreateAlignedLoad(
        i32_, BytePtr(a, (static_cast<int64_t>(step) * mr + i) * 4), llvm::Align(4));
    llvm::Value* broadcast = builder_.CreateBitCast(Splat(group), vector);
    for (int j = 0; j < nv; ++j) {
      if (vpdpbusd_ != llvm::Intrinsic::not_intrinsic) {
        // acc + the four products of u8 A and i8 B per lane, in i32 (no saturation).
        llvm::Function* dot = llvm::Intrinsic::getDeclaration(&module_, vpdpbusd_);
        llvm::Type* operand = dot->getFunctionType()->getParamType(1);
        // The unsigned bytes are the first operand: A's, or B's for b_unsigned.
        llvm::Value* a_bytes = builder_.CreateBitCast(broadcast, operand);
        llvm::Value* b_bytes = builder_.CreateBitCast(bv[j], operand);
        acc[i][j] = builder_.CreateCall(
            dot, shape_.b_unsigned ? std::vector<llvm::Value*>{acc[i][j], b_bytes, a_bytes}
                                   : std::vector<llvm::Value*>{acc[i][j], a_bytes, b_bytes});
        continue;
      }
      llvm::Value* products =
          shape_.u8_quads ? MultiplyQuads(broadcast, bv[j]) : MultiplyPairs(broadcast, bv[j]);
      acc[i][j] = builder_.CreateAdd(acc[i][j], products);
    }
  }
}

llvm::Value* Int8KernelEmitter::Operand(int step, const std::string& name) {
  llvm::Value* slot = builder_.CreateInBoundsGEP(
      args_type_, args_, {builder_.getInt32(0), builder_.getInt32(2), builder_.getInt32(step)});
  return builder_.CreateLoad(ptr_, slot, name);
}

Int8KernelEmitter::Operands Int8KernelEmitter::LoadOperands(
    const std::vector<llvm::Value*>& masks) {
  Operands operands;
  operands.masks = masks;
  const size_t steps = variant_.steps.size();
  operands.scalar.assign(steps, nullptr);
  operands.base.assign(steps, nullptr);
  operands.columns.assign(steps, {});
  for (size_t s = 0; s < steps; ++s) {
    const Int8Operand kind = variant_.steps[s].second;
    if (kind == Int8Operand::kNone) continue;
    llvm::Value* base = Operand(static_cast<int>(s), absl::StrCat("operand", s));
    if (kind == Int8Operand::kColumn && column_offset_ != nullptr) {
      base = BytePtr(base, column_offset_);
    }
    operands.base[s] = base;
    if (kind == Int8Operand::kScalar) {
      operands.scalar[s] = Splat(builder_.CreateAlignedLoad(f32_, base, llvm::Align(4)));
    } else if (kind == Int8Operand::kColumn) {
      for (int j = 0; j < shape_.nr_vectors; ++j) {
        operands.columns[s].push_back(LoadVector(floats_,
                                                 BytePtr(base, int64_t{j} * shape_.lanes * 4),
                                                 masks.empty() ? nullptr : masks[j], 4));
      }
    }
  }
  return operands;
}

llvm::Value* Int8KernelEmitter::ApplyStep(Int8EpilogueOp op, llvm::Value* v, llvm::Value* x) {
  // max(p, q) and min(p, q) as the IR's: p if p is NaN or q does not beat it, else q.
  auto max_of = [&](llvm::Value* p, llvm::Value* q) {
    return builder_.CreateSelect(
        builder_.CreateOr(builder_.CreateFCmpUNO(p, p), builder_.CreateFCmpOLE(q, p)), p, q);
  };
  auto min_of = [&](llvm::Value* p, llvm::Value* q) {
    return builder_.CreateSelect(
        builder_.CreateOr(builder_.CreateFCmpUNO(p, p), builder_.CreateFCmpOGE(q, p)), p, q);
  };
  switch (op) {
    case Int8EpilogueOp::kAdd:
      return builder_.CreateFAdd(v, x);
    case Int8EpilogueOp::kSub:
      return builder_.CreateFSub(v, x);
    case Int8EpilogueOp::kSubFrom:
      return builder_.CreateFSub(x, v);
    case Int8EpilogueOp::kMul:
      return builder_.CreateFMul(v, x);
    case Int8EpilogueOp::kDiv:
      return builder_.CreateFDiv(v, x);
    case Int8EpilogueOp::kDivInto:
      return builder_.CreateFDiv(x, v);
    case Int8EpilogueOp::kMax:
      return max_of(v, x);
    case Int8EpilogueOp::kMaxFrom:
      return max_of(x, v);
    case Int8EpilogueOp::kMin:
      return min_of(v, x);
    case Int8EpilogueOp::kMinFrom:
      return min_of(x, v);
    case Int8EpilogueOp::kRound:
      return builder_.CreateUnaryIntrinsic(llvm::Intrinsic::roundeven, v);
  }
  return v;
}

void Int8KernelEmitter::EmitWriteBackRow(const Operands& operands, llvm::Value* row) {
  llvm::Value* c_row = RowOfC(row);
  const size_t steps = variant_.steps.size();
  // Row operands: this row's value, splatted.
  std::vector<llvm::Value*> row_values(steps, nullptr);
  for (size_t s = 0; s < steps; ++s) {
    if (variant_.steps[s].second != Int8Operand::kRow) continue;
    row_values[s] = Splat(builder_.CreateAlignedLoad(
        f32_, BytePtr(operands.base[s], builder_.CreateMul(row, builder_.getInt64(4))),
        llvm::Align(4)));
  }
  const ir::DType output = variant_.output;
  for (int j = 0; j < shape_.nr_vectors; ++j) {
    llvm::Value* mask = operands.masks.empty() ? nullptr : operands.masks[j];
    llvm::Value* c_ptr = BytePtr(c_row, int64_t{j} * shape_.lanes * c_bytes_);
    llvm::Value* acc = LoadTileVector(row, j);
    if (output == ir::DType::kI32) {
      StoreVector(acc, c_ptr, mask, 4);
      continue;
    }
    // i32 -> f32 rounds to nearest even, as the IR's cast does.
    llvm::Value* v = builder_.CreateSIToFP(acc, floats_);
    for (size_t s = 0; s < steps; ++s) {
      const auto [op, kind] = variant_.steps[s];
      llvm::Value* x = kind == Int8Operand::kScalar   ? operands.scalar[s]
                       : kind == Int8Operand::kColumn ? operands.columns[s][j]
                       : kind == Int8Operand::kRow    ? row_values[s]
                                                      : nullptr;
      v = ApplyStep(op, v, x);
    }
    if (output == ir::DType::kF32) {
      StoreVector(v, c_ptr, mask, 4);
      continue;
    }
    // The IR's cast to u8 / i8: NaN -> 0, otherwise truncate toward zero and saturate.
    const bool is_u8 = output == ir::DType::kU8;
    llvm::Value* zero = llvm::ConstantFP::get(floats_, 0.0);
    llvm::Value* clean = builder_.CreateSelect(builder_.CreateFCmpUNO(v, v), zero, v);
    clean = builder_.CreateMaxNum(clean, llvm::ConstantFP::get(floats_, is_u8 ? 0.0 : -128.0));
    clean = builder_.CreateMinNum(clean, llvm::ConstantFP::get(floats_, is_u8 ? 255.0 : 127.0));
    llvm::Value* bytes = builder_.CreateTrunc(
        builder_.CreateFPToSI(clean, accumulator_),
        llvm::FixedVectorType::get(builder_.getInt8Ty(), static_cast<unsigned>(shape_.lanes)));
    StoreVector(bytes, c_ptr, mask, 1);
  }
}

llvm::Function* Int8KernelEmitter::Emit(const std::string& name) {
  const int mr = shape_.mr, nr = shape_.nr();
  llvm::Type* operands = llvm::ArrayType::get(ptr_, static_cast<uint64_t>(kMaxInt8EpilogueSteps));
  args_type_ = llvm::StructType::get(context_, {i64_, i64_, operands, i64_, i64_});
  CreateFunction(name);
  if (shape_.amx) {
    EmitAmxPanels();
    return function_;
  }
  PrefetchC();
  // A step is a pair or quad of depth steps: MR and NR i32 (two i16, four bytes) further on. One
  // step per iteration, not unrolled: integer adds reassociate, and across unrolled steps LLVM
  // sums the products of several steps before adding them to the accumulators, which needs more
  // registers than there are (spills in the hot loop).
  Tile tile = EmitDepthLoop(
      int64_t{mr} * 4, int64_t{nr} * 4,
      [&](llvm::Value* a, llvm::Value* b, int step, Tile& acc) { EmitDepthStep(a, b, step, acc); },
      /*unroll=*/2, /*keep_unroll=*/true);
  for (int j = 0; j < shape_.nr_vectors && shape_.signed_a; ++j) {
    llvm::Value* sums = ColumnSums(j);
    for (int i = 0; i < mr; ++i) tile[i][j] = builder_.CreateSub(tile[i][j], sums);
  }
  SpillTile(tile);
  EmitWriteBack(
      builder_.CreateLoad(i64_, builder_.CreateStructGEP(args_type_, args_, 0), "m_valid"),
      builder_.CreateLoad(i64_, builder_.CreateStructGEP(args_type_, args_, 1), "n_valid"),
      nullptr);
  return function_;
}

void Int8KernelEmitter::EmitWriteBack(llvm::Value* m_valid, llvm::Value* n_valid,
                                      llvm::BasicBlock* after) {
  const int mr = shape_.mr, nr = shape_.nr();
  auto* store_full = llvm::BasicBlock::Create(context_, "store_full", function_);
  auto* store_edge = llvm::BasicBlock::Create(context_, "store_edge", function_);
  llvm::Value* full = builder_.CreateAnd(builder_.CreateICmpEQ(m_valid, builder_.getInt64(mr)),
                                         builder_.CreateICmpEQ(n_valid, builder_.getInt64(nr)));
  builder_.CreateCondBr(full, store_full, store_edge);

  builder_.SetInsertPoint(store_full);
  const Operands full_operands = LoadOperands({});
  EmitRowLoop(
      builder_.getInt64(mr), [&](llvm::Value* row) { EmitWriteBackRow(full_operands, row); },
      after);

  builder_.SetInsertPoint(store_edge);
  const Operands edge_operands = LoadOperands(LaneMasks(n_valid));
  EmitRowLoop(
      m_valid, [&](llvm::Value* row) { EmitWriteBackRow(edge_operands, row); }, after);
}

void Int8KernelEmitter::EmitAmxPanels() {
  const int nr = shape_.nr();
  // One tile configuration (ldtilecfg, which LLVM puts in the entry block) for all the panels:
  // per call it cost about a quarter of a 1024^3 GEMM's time.
  AllocateTile();
  llvm::Value* m_valid =
      builder_.CreateLoad(i64_, builder_.CreateStructGEP(args_type_, args_, 0), "m_valid");
  llvm::Value* last_n_valid =
      builder_.CreateLoad(i64_, builder_.CreateStructGEP(args_type_, args_, 1), "n_valid");
  llvm::Value* panels =
      builder_.CreateLoad(i64_, builder_.CreateStructGEP(args_type_, args_, 3), "panels");
  llvm::Value* b_panel_bytes =
      builder_.CreateLoad(i64_, builder_.CreateStructGEP(args_type_, args_, 4), "b_panel_bytes");
  llvm::Value* const b_first = b_;
  llvm::Value* const c_first = c_;
  llvm::BasicBlock* entry = builder_.GetInsertBlock();
  auto* panel_loop = llvm::BasicBlock::Create(context_, "panel", function_);
  auto* panel_next = llvm::BasicBlock::Create(context_, "panel_next", function_);
  auto* exit = llvm::BasicBlock::Create(context_, "exit", function_);
  builder_.CreateBr(panel_loop);

  builder_.SetInsertPoint(panel_loop);
  llvm::PHINode* panel = builder_.CreatePHI(i64_, 2, "panel");
  b_ = BytePtr(b_first, builder_.CreateMul(panel, b_panel_bytes));
  c_ = BytePtr(c_first, builder_.CreateMul(panel, builder_.getInt64(int64_t{nr} * c_bytes_)));
  column_offset_ = builder_.CreateMul(panel, builder_.getInt64(int64_t{nr} * 4));
  PrefetchC();
  EmitAmxDepthLoop();
  for (int j = 0; j < shape_.nr_vectors && shape_.signed_a; ++j) {
    llvm::Value* sums = ColumnSums(j);
    for (int i = 0; i < shape_.mr; ++i) {
      llvm::Value* row = builder_.getInt64(i);
      builder_.CreateAlignedStore(builder_.CreateSub(LoadTileVector(row, j), sums),
                                  TileVectorPtr(row, j), llvm::Align(VectorBytes()));
    }
  }
  llvm::Value* next = builder_.CreateAdd(panel, builder_.getInt64(1));
  llvm::Value* n_valid = builder_.CreateSelect(builder_.CreateICmpSLT(next, panels),
                                               builder_.getInt64(nr), last_n_valid);
  EmitWriteBack(m_valid, n_valid, panel_next);

  builder_.SetInsertPoint(panel_next);
  DisableUnrolling(builder_.CreateCondBr(builder_.CreateICmpSLT(next, panels), panel_loop, exit));
  panel->addIncoming(builder_.getInt64(0), entry);
  panel->addIncoming(next, panel_next);
  builder_.SetInsertPoint(exit);
  builder_.CreateRetVoid();
  b_ = b_first;
  c_ = c_first;
  column_offset_ = nullptr;
}

struct Generated {
  std::string name;
  ObjectCode code;
};

// A micro-kernel to generate: its symbol, and what emits it into a module configured for the
// JIT's target.
struct KernelSource {
  std::string name;
  std::function<void(llvm::Module&)> emit;
  // The float emitters write the final IR (explicit FMAs over register tiles, the row loops of
  // the write-back): O3 took two thirds of each one's compile (27-37 ms each on the AVX2 Zen 3,
  // 10-14 ms without) and the products ran at the same speed (docs/performance.md). The int8
  // kernels keep O3: they measured 1-2% faster with it.
  LlvmJit::IrPipeline pipeline = LlvmJit::IrPipeline::kO3;
};

absl::StatusOr<Generated> Generate(const KernelSource& source, bool want_text) {
  absl::StatusOr<LlvmJit*> jit = LlvmJit::Get();
  if (!jit.ok()) return jit.status();
  llvm::LLVMContext context;
  llvm::Module module("kiln_gemm", context);
  (*jit)->ConfigureModule(module);
  Generated generated;
  generated.name = source.name;
  source.emit(module);
  absl::StatusOr<ObjectCode> code = (*jit)->Codegen(module, want_text, source.pipeline);
  if (!code.ok()) return code.status();
  generated.code = *std::move(code);
  return generated;
}

KernelSource FloatKernel(ir::DType dtype, const KernelShape& shape,
                         const EpilogueVariant& variant) {
  return {runtime::cpu::gemm_internal::MicroKernelName(dtype, shape, variant),
          [=](llvm::Module& module) { EmitMicroKernel(module, dtype, shape, variant); },
          LlvmJit::IrPipeline::kNone};
}

KernelSource Int8Kernel(const KernelShape& shape, const Int8EpilogueVariant& variant) {
  return {runtime::cpu::gemm_internal::Int8MicroKernelName(shape, variant),
          [=](llvm::Module& module) {
            absl::StatusOr<LlvmJit*> jit = LlvmJit::Get();  // Generate has checked it
            EmitInt8MicroKernel(module, shape, variant, (*jit)->host().features);
          }};
}

// The address of `source`'s kernel, generated on first use and kept for the process.
absl::StatusOr<void*> GetJitKernel(const KernelSource& source) {
  struct Entry {
    std::unique_ptr<LoadedObject> object;
    void* function = nullptr;
  };
  // Never destroyed: kernels may be called during static destruction.
  static std::mutex* const mutex = new std::mutex;
  static auto* const cache = new std::map<std::string, Entry>;
  const std::string& name = source.name;
  std::lock_guard<std::mutex> lock(*mutex);
  if (auto it = cache->find(name); it != cache->end()) return it->second.function;
  absl::StatusOr<LlvmJit*> jit = LlvmJit::Get();
  if (!jit.ok()) return jit.status();

  // The on-disk cache ($KILN_CACHE_DIR, shared with the kernel compiler): a later process loads
  // the object and skips LLVM. The key covers everything the machine code depends on.
  std::optional<ObjectDiskCache> disk;
  std::string key;
  if (const char* dir = std::getenv("KILN_CACHE_DIR"); dir != nullptr && *dir != '\0') {
    disk.emplace(dir);
    const HostTarget& host = (*jit)->host();
    const std::string identity = absl::StrCat(name, "|", kGemmKernelVersion, "|", host.triple, "|",
                                              host.cpu, "|", host.features);
    const XXH128_hash_t hash = XXH3_128bits(identity.data(), identity.size());
    key = absl::StrCat("gemm_", absl::Hex(hash.high64, absl::kZeroPad16),
                       absl::Hex(hash.low64, absl::kZeroPad16));
  }
  const auto start = std::chrono::steady_clock::now();
  const char* source_name = "disk cache";
  std::unique_ptr<LoadedObject> loaded;
  if (disk.has_value()) {
    if (std::optional<std::string> object = disk->Load(key); object.has_value()) {
      // An entry that fails to link is recompiled and overwritten below.
      if (auto from_disk = (*jit)->Load(*object, name); from_disk.ok()) {
        loaded = *std::move(from_disk);
      }
    }
  }
  if (loaded == nullptr) {
    absl::StatusOr<Generated> generated = Generate(source, /*want_text=*/false);
    if (!generated.ok()) return generated.status();
    absl::StatusOr<std::unique_ptr<LoadedObject>> fresh =
        (*jit)->Load(generated->code.object, generated->name);
    if (!fresh.ok()) return fresh.status();
    loaded = *std::move(fresh);
    // A cache that cannot be written costs the next process a compile, nothing more.
    if (disk.has_value()) disk->Store(key, generated->code.object).IgnoreError();
    source_name = "compiled";
  }
  // Micro-kernels are made on first use, while the first GEMM of their shape runs, so their time
  // is not in any graph's compile line: one line each.
  static const bool time_passes = passes::TimePassesFromEnv();
  if (time_passes) {
    std::fprintf(
        stderr, "kiln: cpu micro-kernel %-40s %9.3f ms  %s\n", name.c_str(),
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(),
        source_name);
  }
  Entry entry;
  entry.function = reinterpret_cast<void*>(loaded->address());
  entry.object = std::move(loaded);
  void* const function = entry.function;
  cache->emplace(name, std::move(entry));
  return function;
}

class JitProvider final : public MicroKernelProvider {
 public:
  TargetVectors vectors() const override {
    absl::StatusOr<TargetVectors> host = HostVectors();
    return host.ok() ? *host : TargetVectors{};
  }
  absl::StatusOr<MicroKernelFn> Get(ir::DType dtype, const KernelShape& shape,
                                    const EpilogueVariant& variant) const override {
    // The driver asks for shapes derived from vectors(); if the JIT is unusable it got the
    // fallback above and this reports the JIT's error.
    if (absl::StatusOr<TargetVectors> host = HostVectors(); !host.ok()) return host.status();
    absl::StatusOr<void*> kernel = GetJitKernel(FloatKernel(dtype, shape, variant));
    if (!kernel.ok()) return kernel.status();
    return reinterpret_cast<MicroKernelFn>(*kernel);
  }
  absl::StatusOr<Int8MicroKernelFn> GetInt8(const KernelShape& shape,
                                            const Int8EpilogueVariant& variant) const override {
    if (absl::StatusOr<TargetVectors> host = HostVectors(); !host.ok()) return host.status();
    absl::StatusOr<void*> kernel = GetJitKernel(Int8Kernel(shape, variant));
    if (!kernel.ok()) return kernel.status();
    return reinterpret_cast<Int8MicroKernelFn>(*kernel);
  }
};

}  // namespace

std::string EmitMicroKernel(llvm::Module& module, ir::DType dtype, const KernelShape& shape,
                            const EpilogueVariant& variant) {
  const std::string name = runtime::cpu::gemm_internal::MicroKernelName(dtype, shape, variant);
  KernelEmitter(module, dtype, shape, variant).Emit(name);
  return name;
}

std::string EmitInt8MicroKernel(llvm::Module& module, const KernelShape& shape,
                                const Int8EpilogueVariant& variant,
                                const std::string& target_features) {
  const std::string name = runtime::cpu::gemm_internal::Int8MicroKernelName(shape, variant);
  Int8KernelEmitter(module, shape, variant, target_features).Emit(name);
  return name;
}

TargetVectors VectorsFor(const HostTarget& target) {
  const auto has = [&](const char* feature) { return HasFeature(target.features, feature); };
  TargetVectors vectors;
  if (absl::StartsWith(target.triple, "aarch64") || absl::StartsWith(target.triple, "arm64")) {
    vectors.registers = 32;  // NEON: 32 x 128-bit, fma always
    vectors.fma = true;
  } else if (has("avx512f")) {
    vectors.bits = 512;
    vectors.registers = 32;
    vectors.fma = true;
    vectors.vnni = VnniAt(target.features, 512);
    vectors.amx = vectors.vnni && has("amx-tile") && has("amx-int8");
  } else if (has("avx")) {
    vectors.bits = 256;
    vectors.fma = has("fma");
    vectors.vnni = VnniAt(target.features, 256);
  } else {
    vectors.fma = has("fma");
    vectors.vnni = VnniAt(target.features, 128);
  }
  return vectors;
}

absl::StatusOr<TargetVectors> HostVectors() {
  static const absl::StatusOr<TargetVectors>* const detected = [] {
    absl::StatusOr<LlvmJit*> jit = LlvmJit::Get();
    if (!jit.ok()) return new absl::StatusOr<TargetVectors>(jit.status());
    TargetVectors vectors = VectorsFor((*jit)->host());
    // Without the kernel's permission the first tile instruction raises SIGILL.
    if (vectors.amx) vectors.amx = runtime::cpu::RequestAmxTileData();
    return new absl::StatusOr<TargetVectors>(vectors);
  }();
  return *detected;
}

const MicroKernelProvider& JitMicroKernels() {
  static const JitProvider* const provider = new JitProvider();
  return *provider;
}

absl::StatusOr<KernelText> GenerateKernelText(ir::DType dtype, const KernelShape& shape,
                                              const EpilogueVariant& variant) {
  absl::StatusOr<Generated> generated =
      Generate(FloatKernel(dtype, shape, variant), /*want_text=*/true);
  if (!generated.ok()) return generated.status();
  return KernelText{generated->name, std::move(generated->code.llvm_ir),
                    std::move(generated->code.assembly)};
}

absl::StatusOr<KernelText> GenerateInt8KernelText(const KernelShape& shape,
                                                  const Int8EpilogueVariant& variant) {
  absl::StatusOr<Generated> generated = Generate(Int8Kernel(shape, variant), /*want_text=*/true);
  if (!generated.ok()) return generated.status();
  return KernelText{generated->name, std::move(generated->code.llvm_ir),
                    std::move(generated->code.assembly)};
}

}  // namespace kiln::codegen::cpu::gemm_internal

namespace kiln::codegen::cpu {

absl::Status Gemm(const GemmParams& params, runtime::ThreadPool* pool) {
  return runtime::cpu::ExecuteGemm(params, gemm_internal::JitMicroKernels(), pool);
}

absl::Status Conv(const ConvParams& params, runtime::ThreadPool* pool) {
  return runtime::cpu::ExecuteConv(params, gemm_internal::JitMicroKernels(), pool);
}

absl::Status Int8Gemm(const Int8GemmParams& params, runtime::ThreadPool* pool) {
  return runtime::cpu::ExecuteInt8Gemm(params, gemm_internal::JitMicroKernels(), pool);
}

absl::Status Int8Conv(const Int8ConvParams& params, runtime::ThreadPool* pool) {
  return runtime::cpu::ExecuteInt8Conv(params, gemm_internal::JitMicroKernels(), pool);
}

absl::StatusOr<GemmKernelInfo> DescribeGemmKernel(ir::DType dtype, const GemmEpilogue& epilogue,
                                                  const GemmTuning& tuning) {
  absl::StatusOr<gemm_internal::TargetVectors> vectors = gemm_internal::HostVectors();
  if (!vectors.ok()) return vectors.status();
  absl::StatusOr<gemm_internal::KernelShape> shape =
      runtime::cpu::gemm_internal::ChooseKernelShape(dtype, tuning, *vectors);
  if (!shape.ok()) return shape.status();
  absl::StatusOr<gemm_internal::KernelText> text = gemm_internal::GenerateKernelText(
      dtype, *shape, gemm_internal::EpilogueVariant::Of(epilogue));
  if (!text.ok()) return text.status();
  GemmKernelInfo info;
  info.name = text->name;
  info.mr = shape->mr;
  info.nr = shape->nr();
  info.vector_bits = shape->vector_bits;
  info.llvm_ir = std::move(text->llvm_ir);
  info.assembly = std::move(text->assembly);
  const runtime::cpu::gemm_internal::Blocking blocking =
      runtime::cpu::gemm_internal::ChooseBlocking(*shape, dtype == ir::DType::kF64 ? 8 : 4, tuning);
  info.mc = blocking.mc;
  info.nc = blocking.nc;
  info.kc = blocking.kc;
  return info;
}

}  // namespace kiln::codegen::cpu
