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
#include <cmath>
#include <cstddef>
#include <cstdlib>
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
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Metadata.h"
#include "llvm/IR/Module.h"
#include "xxhash.h"

namespace kiln::codegen::cpu::gemm_internal {

using runtime::cpu::GemmActivation;
using runtime::cpu::gemm_internal::TileArgs;

namespace {

// Part of the disk-cache key: bump it whenever a change here changes the generated code.
constexpr int kGemmKernelVersion = 1;

// The IR reads TileArgs as {i64, i64, ptr, ptr, ptr, i64, double, double}.
static_assert(sizeof(void*) == 8, "the kernel ABI assumes 64-bit pointers");
static_assert(offsetof(TileArgs, row_bias) == 16 && offsetof(TileArgs, residual_ld) == 40 &&
                  offsetof(TileArgs, alpha) == 48 && offsetof(TileArgs, beta) == 56,
              "TileArgs no longer matches the struct type the kernel IR reads");

// Depth steps per iteration of the main loop; a remainder loop takes the rest.
constexpr int kUnroll = 4;

class KernelEmitter {
 public:
  KernelEmitter(llvm::Module& module, ir::DType dtype, const KernelShape& shape,
                const EpilogueVariant& variant)
      : module_(module),
        context_(module.getContext()),
        builder_(context_),
        shape_(shape),
        variant_(variant),
        is_f64_(dtype == ir::DType::kF64),
        scalar_(is_f64_ ? llvm::Type::getDoubleTy(context_) : llvm::Type::getFloatTy(context_)),
        vector_(llvm::FixedVectorType::get(scalar_, static_cast<unsigned>(shape.lanes))),
        i64_(llvm::Type::getInt64Ty(context_)),
        i32_(llvm::Type::getInt32Ty(context_)),
        ptr_(llvm::PointerType::get(context_, 0)),
        element_bytes_(is_f64_ ? 8 : 4) {
    llvm::FastMathFlags flags;
    flags.setAllowContract(true);
    builder_.setFastMathFlags(flags);
  }

  llvm::Function* Emit(const std::string& name);

 private:
  using Tile = std::vector<std::vector<llvm::Value*>>;  // [row][vector]

  llvm::Value* ScalarConst(double value) { return llvm::ConstantFP::get(scalar_, value); }
  llvm::Value* VectorConst(double value) { return llvm::ConstantFP::get(vector_, value); }
  llvm::Value* Splat(llvm::Value* scalar) {
    return builder_.CreateVectorSplat(static_cast<unsigned>(shape_.lanes), scalar);
  }
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
  // A vector at `ptr`, masked when `mask` is non-null (masked-off lanes read as 0).
  llvm::Value* LoadVector(llvm::Value* ptr, llvm::Value* mask, uint64_t align) {
    if (mask == nullptr) return builder_.CreateAlignedLoad(vector_, ptr, llvm::Align(align));
    return builder_.CreateMaskedLoad(vector_, ptr, llvm::Align(align), mask,
                                     llvm::Constant::getNullValue(vector_));
  }
  void StoreVector(llvm::Value* value, llvm::Value* ptr, llvm::Value* mask) {
    if (mask == nullptr) {
      builder_.CreateAlignedStore(value, ptr, llvm::Align(element_bytes_));
    } else {
      builder_.CreateMaskedStore(value, ptr, llvm::Align(element_bytes_), mask);
    }
  }
  llvm::Value* LoadArg(llvm::Value* args, int field, llvm::Type* type) {
    return builder_.CreateLoad(type, builder_.CreateStructGEP(args_type_, args, field));
  }

  // One depth step: acc[i][j] += A[k][i] * B[k][j*lanes : (j+1)*lanes].
  void EmitDepthStep(llvm::Value* a, llvm::Value* b, int step, Tile& acc);
  // Loads of the epilogue operands that do not depend on the row.
  std::vector<llvm::Value*> LoadColumnBias(llvm::Value* column_bias,
                                           const std::vector<llvm::Value*>& masks);
  // What the write-back loop reads; masks and column_bias are empty on the full-tile path.
  struct WriteBack {
    llvm::Type* tile_type = nullptr;
    llvm::Value* tile = nullptr;  // the accumulators, [MR][nr_vectors] vectors on the stack
    llvm::Value* c = nullptr;
    llvm::Value* ldc = nullptr;
    llvm::Value* m_valid = nullptr;
    llvm::Value* row_bias = nullptr;
    llvm::Value* residual = nullptr;
    llvm::Value* residual_ld = nullptr;
    llvm::Value* alpha = nullptr;
    llvm::Value* beta = nullptr;
    llvm::Value* beta_nonzero = nullptr;  // a vector of i1
    std::vector<llvm::Value*> masks;
    std::vector<llvm::Value*> column_bias;
  };
  // C = alpha * tile + beta * C, then the epilogue, for rows [0, rows); returns from the kernel.
  void EmitWriteBackLoop(llvm::Function* function, const WriteBack& write_back, llvm::Value* rows);

  llvm::Value* Exp(llvm::Value* x);
  llvm::Value* Sigmoid(llvm::Value* x);
  llvm::Value* Activation(llvm::Value* x);

  llvm::Module& module_;
  llvm::LLVMContext& context_;
  llvm::IRBuilder<> builder_;
  const KernelShape shape_;
  const EpilogueVariant variant_;
  const bool is_f64_;
  llvm::Type* const scalar_;
  llvm::FixedVectorType* const vector_;
  llvm::IntegerType* const i64_;
  llvm::IntegerType* const i32_;
  llvm::PointerType* const ptr_;
  const int element_bytes_;
  llvm::StructType* args_type_ = nullptr;
};

void KernelEmitter::EmitDepthStep(llvm::Value* a, llvm::Value* b, int step, Tile& acc) {
  const int mr = shape_.mr, nv = shape_.nr_vectors, lanes = shape_.lanes;
  const uint64_t vector_bytes = static_cast<uint64_t>(lanes) * element_bytes_;
  std::vector<llvm::Value*> bv(static_cast<size_t>(nv));
  for (int j = 0; j < nv; ++j) {
    bv[j] = LoadVector(ElementPtr(b, static_cast<int64_t>(step) * shape_.nr() + j * lanes), nullptr,
                       vector_bytes);
  }
  for (int i = 0; i < mr; ++i) {
    llvm::Value* element = builder_.CreateAlignedLoad(
        scalar_, ElementPtr(a, static_cast<int64_t>(step) * mr + i), llvm::Align(element_bytes_));
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
    bias.push_back(LoadVector(ElementPtr(column_bias, static_cast<int64_t>(j) * shape_.lanes),
                              masks.empty() ? nullptr : masks[j], element_bytes_));
  }
  return bias;
}

void KernelEmitter::EmitWriteBackLoop(llvm::Function* function, const WriteBack& wb,
                                      llvm::Value* rows) {
  auto* loop = llvm::BasicBlock::Create(context_, "write_back", function);
  auto* done = llvm::BasicBlock::Create(context_, "write_back_done", function);
  llvm::BasicBlock* before = builder_.GetInsertBlock();
  builder_.CreateCondBr(builder_.CreateICmpSGT(rows, builder_.getInt64(0)), loop, done);
  builder_.SetInsertPoint(loop);
  llvm::PHINode* row = builder_.CreatePHI(i64_, 2, "row");
  row->addIncoming(builder_.getInt64(0), before);
  const uint64_t vector_bytes = static_cast<uint64_t>(shape_.lanes) * element_bytes_;
  llvm::Value* c_row = ElementPtr(wb.c, builder_.CreateMul(wb.ldc, row));
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
    llvm::Value* acc = builder_.CreateAlignedLoad(
        vector_,
        builder_.CreateInBoundsGEP(wb.tile_type, wb.tile,
                                   {builder_.getInt64(0), row, builder_.getInt64(j)}),
        llvm::Align(vector_bytes));
    llvm::Value* c_ptr = ElementPtr(c_row, column);
    // C is always loaded (it is valid memory); with beta == 0 the select replaces it by 0 first,
    // so an uninitialised or NaN C never reaches the result.
    llvm::Value* old =
        builder_.CreateSelect(wb.beta_nonzero, LoadVector(c_ptr, mask, element_bytes_), zero);
    llvm::Value* v = Fma(wb.beta, old, builder_.CreateFMul(acc, wb.alpha));
    if (variant_.column_bias) v = builder_.CreateFAdd(v, wb.column_bias[j]);
    if (variant_.row_bias) v = builder_.CreateFAdd(v, bias_row);
    llvm::Value* residual_value = nullptr;
    if (variant_.residual) {
      residual_value = LoadVector(ElementPtr(residual_row, column), mask, element_bytes_);
      if (!variant_.residual_after_activation) v = builder_.CreateFAdd(v, residual_value);
    }
    v = Activation(v);
    if (variant_.residual && variant_.residual_after_activation) {
      v = builder_.CreateFAdd(v, residual_value);
    }
    StoreVector(v, c_ptr, mask);
  }
  llvm::Value* next = builder_.CreateAdd(row, builder_.getInt64(1));
  row->addIncoming(next, builder_.GetInsertBlock());
  llvm::BranchInst* branch = builder_.CreateCondBr(builder_.CreateICmpSLT(next, rows), loop, done);
  // Unrolling would bring back MR copies of the epilogue for nothing: this is not the hot loop.
  llvm::MDNode* disable =
      llvm::MDNode::get(context_, {llvm::MDString::get(context_, "llvm.loop.unroll.disable")});
  llvm::MDNode* loop_id = llvm::MDNode::getDistinct(context_, {nullptr, disable});
  loop_id->replaceOperandWith(0, loop_id);
  branch->setMetadata(llvm::LLVMContext::MD_loop, loop_id);
  builder_.SetInsertPoint(done);
  builder_.CreateRetVoid();
}

llvm::Function* KernelEmitter::Emit(const std::string& name) {
  const int mr = shape_.mr, nv = shape_.nr_vectors, nr = shape_.nr();
  args_type_ = llvm::StructType::get(
      context_, {i64_, i64_, ptr_, ptr_, ptr_, i64_, llvm::Type::getDoubleTy(context_),
                 llvm::Type::getDoubleTy(context_)});
  auto* type = llvm::FunctionType::get(llvm::Type::getVoidTy(context_),
                                       {i64_, ptr_, ptr_, ptr_, i64_, ptr_}, false);
  llvm::Function* function =
      llvm::Function::Create(type, llvm::Function::ExternalLinkage, name, module_);
  function->addFnAttr(llvm::Attribute::NoUnwind);
  // Without these, a target that prefers 256-bit vectors would split every 512-bit operation.
  const std::string bits = std::to_string(shape_.vector_bits);
  function->addFnAttr("min-legal-vector-width", bits);
  function->addFnAttr("prefer-vector-width", bits);
  for (unsigned packed : {1u, 2u}) {
    function->addParamAttr(packed, llvm::Attribute::NoAlias);
    function->addParamAttr(packed, llvm::Attribute::ReadOnly);
  }
  llvm::Value* kc = function->getArg(0);
  llvm::Value* a = function->getArg(1);
  llvm::Value* b = function->getArg(2);
  llvm::Value* c = function->getArg(3);
  llvm::Value* ldc = function->getArg(4);
  llvm::Value* args = function->getArg(5);
  kc->setName("kc");
  a->setName("a");
  b->setName("b");
  c->setName("c");
  ldc->setName("ldc");
  args->setName("args");

  auto* entry = llvm::BasicBlock::Create(context_, "entry", function);
  auto* main_loop = llvm::BasicBlock::Create(context_, "main_loop", function);
  auto* remainder_check = llvm::BasicBlock::Create(context_, "remainder_check", function);
  auto* remainder_loop = llvm::BasicBlock::Create(context_, "remainder_loop", function);
  auto* tail = llvm::BasicBlock::Create(context_, "tail", function);
  auto* store_full = llvm::BasicBlock::Create(context_, "store_full", function);
  auto* store_edge = llvm::BasicBlock::Create(context_, "store_edge", function);

  // entry: prefetch the C tile for writing (its rows are far apart and nothing else brings them
  // in before the stores at the end), then enter the unrolled loop if kc allows.
  builder_.SetInsertPoint(entry);
  const int lines_per_row = std::max(1, nr * element_bytes_ / 64);
  for (int i = 0; i < mr; ++i) {
    llvm::Value* row = ElementPtr(c, builder_.CreateMul(ldc, builder_.getInt64(i)));
    for (int line = 0; line < lines_per_row; ++line) {
      builder_.CreateIntrinsic(llvm::Intrinsic::prefetch, {ptr_},
                               {ElementPtr(row, static_cast<int64_t>(line) * 64 / element_bytes_),
                                builder_.getInt32(1), builder_.getInt32(3), builder_.getInt32(1)});
    }
  }
  llvm::Value* kc_main = builder_.CreateAnd(kc, builder_.getInt64(~int64_t{kUnroll - 1}));
  builder_.CreateCondBr(builder_.CreateICmpSGT(kc_main, builder_.getInt64(0)), main_loop,
                        remainder_check);

  llvm::Value* zero = llvm::Constant::getNullValue(vector_);
  auto make_phis = [&](llvm::BasicBlock* block, Tile& tile) {
    builder_.SetInsertPoint(block);
    tile.assign(static_cast<size_t>(mr), std::vector<llvm::Value*>(static_cast<size_t>(nv)));
    for (int i = 0; i < mr; ++i) {
      for (int j = 0; j < nv; ++j) tile[i][j] = builder_.CreatePHI(vector_, 2);
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
  for (int step = 0; step < kUnroll; ++step) EmitDepthStep(a_main, b_main, step, acc);
  llvm::Value* k_next = builder_.CreateAdd(k_main, builder_.getInt64(kUnroll));
  llvm::Value* a_next = ElementPtr(a_main, static_cast<int64_t>(kUnroll) * mr);
  llvm::Value* b_next = ElementPtr(b_main, static_cast<int64_t>(kUnroll) * nr);
  builder_.CreateCondBr(builder_.CreateICmpSLT(k_next, kc_main), main_loop, remainder_check);
  add_incoming(main_phis, zeros, entry);
  add_incoming(main_phis, acc, main_loop);
  k_main->addIncoming(builder_.getInt64(0), entry);
  k_main->addIncoming(k_next, main_loop);
  a_main->addIncoming(a, entry);
  a_main->addIncoming(a_next, main_loop);
  b_main->addIncoming(b, entry);
  b_main->addIncoming(b_next, main_loop);

  // remainder_check: the depth steps kc_main..kc one at a time.
  Tile check_phis;
  make_phis(remainder_check, check_phis);
  llvm::PHINode* k_check = builder_.CreatePHI(i64_, 2, "k_rest");
  llvm::PHINode* a_check = builder_.CreatePHI(ptr_, 2, "pa_rest");
  llvm::PHINode* b_check = builder_.CreatePHI(ptr_, 2, "pb_rest");
  add_incoming(check_phis, zeros, entry);
  add_incoming(check_phis, acc, main_loop);
  k_check->addIncoming(builder_.getInt64(0), entry);
  k_check->addIncoming(k_next, main_loop);
  a_check->addIncoming(a, entry);
  a_check->addIncoming(a_next, main_loop);
  b_check->addIncoming(b, entry);
  b_check->addIncoming(b_next, main_loop);
  builder_.CreateCondBr(builder_.CreateICmpSLT(k_check, kc), remainder_loop, tail);

  Tile rest_phis;
  make_phis(remainder_loop, rest_phis);
  llvm::PHINode* k_rest = builder_.CreatePHI(i64_, 2);
  llvm::PHINode* a_rest = builder_.CreatePHI(ptr_, 2);
  llvm::PHINode* b_rest = builder_.CreatePHI(ptr_, 2);
  Tile rest = rest_phis;
  EmitDepthStep(a_rest, b_rest, 0, rest);
  llvm::Value* k_rest_next = builder_.CreateAdd(k_rest, builder_.getInt64(1));
  llvm::Value* a_rest_next = ElementPtr(a_rest, mr);
  llvm::Value* b_rest_next = ElementPtr(b_rest, nr);
  builder_.CreateCondBr(builder_.CreateICmpSLT(k_rest_next, kc), remainder_loop, tail);
  add_incoming(rest_phis, check_phis, remainder_check);
  add_incoming(rest_phis, rest, remainder_loop);
  k_rest->addIncoming(k_check, remainder_check);
  k_rest->addIncoming(k_rest_next, remainder_loop);
  a_rest->addIncoming(a_check, remainder_check);
  a_rest->addIncoming(a_rest_next, remainder_loop);
  b_rest->addIncoming(b_check, remainder_check);
  b_rest->addIncoming(b_rest_next, remainder_loop);

  // tail: the finished accumulators go to a stack tile, and a loop over its rows writes C back:
  // one row's code (with the epilogue) instead of MR copies keeps the kernel small and quick to
  // compile. The loop runs once per tile, the depth loop kc times.
  Tile final_phis;
  make_phis(tail, final_phis);
  add_incoming(final_phis, check_phis, remainder_check);
  add_incoming(final_phis, rest, remainder_loop);
  llvm::Type* row_type = llvm::ArrayType::get(vector_, static_cast<uint64_t>(nv));
  llvm::Type* tile_type = llvm::ArrayType::get(row_type, static_cast<uint64_t>(mr));
  llvm::AllocaInst* tile_memory = nullptr;
  {
    llvm::IRBuilder<> entry_builder(entry, entry->begin());
    tile_memory = entry_builder.CreateAlloca(tile_type, nullptr, "tile");
    tile_memory->setAlignment(llvm::Align(64));
  }
  const uint64_t vector_bytes = static_cast<uint64_t>(shape_.lanes) * element_bytes_;
  for (int i = 0; i < mr; ++i) {
    for (int j = 0; j < nv; ++j) {
      builder_.CreateAlignedStore(
          final_phis[i][j],
          builder_.CreateInBoundsGEP(
              tile_type, tile_memory,
              {builder_.getInt64(0), builder_.getInt64(i), builder_.getInt64(j)}),
          llvm::Align(vector_bytes));
    }
  }
  WriteBack write_back;
  write_back.tile_type = tile_type;
  write_back.tile = tile_memory;
  write_back.c = c;
  write_back.ldc = ldc;
  write_back.m_valid = LoadArg(args, 0, i64_);
  llvm::Value* n_valid = LoadArg(args, 1, i64_);
  write_back.row_bias = variant_.row_bias ? LoadArg(args, 2, ptr_) : nullptr;
  llvm::Value* column_bias = variant_.column_bias ? LoadArg(args, 3, ptr_) : nullptr;
  write_back.residual = variant_.residual ? LoadArg(args, 4, ptr_) : nullptr;
  write_back.residual_ld = variant_.residual ? LoadArg(args, 5, i64_) : nullptr;
  llvm::Value* alpha = LoadArg(args, 6, llvm::Type::getDoubleTy(context_));
  llvm::Value* beta = LoadArg(args, 7, llvm::Type::getDoubleTy(context_));
  if (!is_f64_) {
    alpha = builder_.CreateFPTrunc(alpha, scalar_);
    beta = builder_.CreateFPTrunc(beta, scalar_);
  }
  write_back.alpha = Splat(alpha);
  write_back.beta = Splat(beta);
  write_back.beta_nonzero = Splat(builder_.CreateFCmpUNE(beta, ScalarConst(0.0)));
  llvm::Value* full =
      builder_.CreateAnd(builder_.CreateICmpEQ(write_back.m_valid, builder_.getInt64(mr)),
                         builder_.CreateICmpEQ(n_valid, builder_.getInt64(nr)));
  builder_.CreateCondBr(full, store_full, store_edge);

  builder_.SetInsertPoint(store_full);
  write_back.column_bias = LoadColumnBias(column_bias, write_back.masks);
  EmitWriteBackLoop(function, write_back, builder_.getInt64(mr));

  // store_edge: lanes past n_valid are masked off, rows past m_valid are not visited.
  builder_.SetInsertPoint(store_edge);
  llvm::Value* n_valid_lanes = builder_.CreateVectorSplat(static_cast<unsigned>(shape_.lanes),
                                                          builder_.CreateTrunc(n_valid, i32_));
  write_back.masks.clear();
  for (int j = 0; j < nv; ++j) {
    std::vector<llvm::Constant*> lanes;
    for (int l = 0; l < shape_.lanes; ++l) lanes.push_back(builder_.getInt32(j * shape_.lanes + l));
    write_back.masks.push_back(
        builder_.CreateICmpSLT(llvm::ConstantVector::get(lanes), n_valid_lanes));
  }
  write_back.column_bias = LoadColumnBias(column_bias, write_back.masks);
  EmitWriteBackLoop(function, write_back, write_back.m_valid);
  return function;
}

struct Generated {
  std::string name;
  ObjectCode code;
};

absl::StatusOr<Generated> Generate(ir::DType dtype, const KernelShape& shape,
                                   const EpilogueVariant& variant, bool want_text) {
  absl::StatusOr<LlvmJit*> jit = LlvmJit::Get();
  if (!jit.ok()) return jit.status();
  llvm::LLVMContext context;
  llvm::Module module("kiln_gemm", context);
  (*jit)->ConfigureModule(module);
  Generated generated;
  generated.name = EmitMicroKernel(module, dtype, shape, variant);
  absl::StatusOr<ObjectCode> code = (*jit)->Codegen(module, want_text);
  if (!code.ok()) return code.status();
  generated.code = *std::move(code);
  return generated;
}

absl::StatusOr<MicroKernelFn> GetJitMicroKernel(ir::DType dtype, const KernelShape& shape,
                                                const EpilogueVariant& variant) {
  struct Entry {
    std::unique_ptr<LoadedObject> object;
    MicroKernelFn function = nullptr;
  };
  // Never destroyed: kernels may be called during static destruction.
  static std::mutex* const mutex = new std::mutex;
  static auto* const cache = new std::map<std::string, Entry>;
  const std::string name = runtime::cpu::gemm_internal::MicroKernelName(dtype, shape, variant);
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
    absl::StatusOr<Generated> generated = Generate(dtype, shape, variant, /*want_text=*/false);
    if (!generated.ok()) return generated.status();
    absl::StatusOr<std::unique_ptr<LoadedObject>> fresh =
        (*jit)->Load(generated->code.object, generated->name);
    if (!fresh.ok()) return fresh.status();
    loaded = *std::move(fresh);
    // A cache that cannot be written costs the next process a compile, nothing more.
    if (disk.has_value()) disk->Store(key, generated->code.object).IgnoreError();
  }
  Entry entry;
  entry.function = reinterpret_cast<MicroKernelFn>(loaded->address());
  entry.object = std::move(loaded);
  const MicroKernelFn function = entry.function;
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
    return GetJitMicroKernel(dtype, shape, variant);
  }
};

}  // namespace

std::string EmitMicroKernel(llvm::Module& module, ir::DType dtype, const KernelShape& shape,
                            const EpilogueVariant& variant) {
  const std::string name = runtime::cpu::gemm_internal::MicroKernelName(dtype, shape, variant);
  KernelEmitter(module, dtype, shape, variant).Emit(name);
  return name;
}

TargetVectors VectorsFor(const HostTarget& target) {
  const std::string features = absl::StrCat(target.features, ",");
  const auto has = [&](const char* feature) {
    return absl::StrContains(features, absl::StrCat("+", feature, ","));
  };
  TargetVectors vectors;
  if (absl::StartsWith(target.triple, "aarch64") || absl::StartsWith(target.triple, "arm64")) {
    vectors.registers = 32;  // NEON: 32 x 128-bit, fma always
    vectors.fma = true;
  } else if (has("avx512f")) {
    vectors.bits = 512;
    vectors.registers = 32;
    vectors.fma = true;
  } else if (has("avx")) {
    vectors.bits = 256;
    vectors.fma = has("fma");
  } else {
    vectors.fma = has("fma");
  }
  return vectors;
}

absl::StatusOr<TargetVectors> HostVectors() {
  static const absl::StatusOr<TargetVectors>* const detected = [] {
    absl::StatusOr<LlvmJit*> jit = LlvmJit::Get();
    if (!jit.ok()) return new absl::StatusOr<TargetVectors>(jit.status());
    return new absl::StatusOr<TargetVectors>(VectorsFor((*jit)->host()));
  }();
  return *detected;
}

const MicroKernelProvider& JitMicroKernels() {
  static const JitProvider* const provider = new JitProvider();
  return *provider;
}

absl::StatusOr<KernelText> GenerateKernelText(ir::DType dtype, const KernelShape& shape,
                                              const EpilogueVariant& variant) {
  absl::StatusOr<Generated> generated = Generate(dtype, shape, variant, /*want_text=*/true);
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
