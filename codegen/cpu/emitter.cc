#include "codegen/cpu/emitter.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/hoist_checks.h"
#include "codegen/legalize.h"
#include "codegen/math_expand.h"
#include "codegen/reuse_reduced.h"
#include "codegen/scalar_limits.h"
#include "llvm/IR/Attributes.h"
#include "llvm/IR/BasicBlock.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/DerivedTypes.h"
#include "llvm/IR/Function.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Intrinsics.h"
#include "llvm/IR/Module.h"

namespace kiln::codegen::cpu {
namespace {

using llvm::Value;

bool IsSigned(ScalarType type) { return IsSignedType(type); }

// Collects the args some Store writes: Loads of them must not be reused across a Store.
void CollectStoredArgs(const std::vector<Stmt>& block, std::vector<bool>& stored) {
  for (const Stmt& stmt : block) {
    if (stmt.kind == StmtKind::kStore) stored[static_cast<size_t>(stmt.arg)] = true;
    CollectStoredArgs(stmt.body, stored);
  }
}

// ---- Prefetching the next row -------------------------------------------------------------
//
// A row kernel that passes over its row several times (softmax: max, then exp and sum, then
// scale) reads the row from memory in the first pass, which the hardware prefetcher streams
// while the FMA pipes idle, and then computes for a long time on a row in cache while memory
// idles. Prefetching the next row during the pass with the most arithmetic overlaps the two:
// softmax over 4096 x 4096 f32 on an AVX2 Zen 3 ran 11-19% faster in a hand-written model of
// the kernel and 12-16% in kiln (docs/performance.md, "After run 4"). Only for inputs that stream
// from memory, since the blocked loop sums each block before adding it to the row's total.

// A loop of the kernel's body that prefetches the next row of `arg` in blocks of `block`
// iterations, `row_stride` elements ahead of where `index` points for the block's first
// iteration.
struct RowPrefetch {
  const Stmt* loop = nullptr;
  ArgId arg = -1;
  ValueId index = kNoValue;
  int64_t row_stride = 0;
  int64_t block = 0;
};

constexpr int64_t kPrefetchMinInputBytes = int64_t{4} << 20;  // beyond a core's L2 many times
constexpr int64_t kPrefetchBlockBytes = 256;                  // four cache lines per block
constexpr int kPrefetchMinWork = 8;                           // an exp or a division

// The ids used by `block`'s statements (values, indices, predicates, nested bodies).
void CollectStatementValues(const std::vector<Stmt>& block, std::vector<ValueId>& roots) {
  for (const Stmt& stmt : block) {
    for (ValueId id : {stmt.value, stmt.index, stmt.predicate, stmt.init}) {
      if (id != kNoValue) roots.push_back(id);
    }
    CollectStatementValues(stmt.body, roots);
  }
}

// Arithmetic in `stmt`'s loop, transcendental ops and divisions weighted as kPrefetchMinWork,
// and the loads it makes.
struct LoopContents {
  int work = 0;
  std::vector<ValueId> loads;
};

LoopContents Contents(const Kernel& kernel, const Stmt& stmt) {
  std::vector<ValueId> stack;
  CollectStatementValues({stmt}, stack);
  std::vector<bool> seen(kernel.exprs.size(), false);
  LoopContents contents;
  while (!stack.empty()) {
    const ValueId id = stack.back();
    stack.pop_back();
    if (seen[static_cast<size_t>(id)]) continue;
    seen[static_cast<size_t>(id)] = true;
    const Expr& e = kernel.expr(id);
    if (e.op == ExprOp::kLoad) contents.loads.push_back(id);
    if (IsFloatType(e.type) && e.op != ExprOp::kConst && e.op != ExprOp::kLoad &&
        e.op != ExprOp::kAccumulator) {
      contents.work += IsTranscendental(e.op) || e.op == ExprOp::kDiv ? kPrefetchMinWork : 1;
    }
    for (ValueId operand : e.operands) stack.push_back(operand);
  }
  return contents;
}

// The row stride S when `index` is gid * S + var (in either order), else 0.
int64_t RowStrideOf(const Kernel& kernel, ValueId index, VarId var) {
  const Expr& add = kernel.expr(index);
  if (add.op != ExprOp::kAdd || add.operands.size() != 2) return 0;
  for (int side = 0; side < 2; ++side) {
    const Expr& term = kernel.expr(add.operands[static_cast<size_t>(side)]);
    const Expr& other = kernel.expr(add.operands[static_cast<size_t>(1 - side)]);
    if (other.op != ExprOp::kVar || other.var != var || term.op != ExprOp::kMul) continue;
    const Expr& a = kernel.expr(term.operands[0]);
    const Expr& b = kernel.expr(term.operands[1]);
    if (a.op == ExprOp::kVar && a.var == kGid && b.op == ExprOp::kConst) return b.int_value;
    if (b.op == ExprOp::kVar && b.var == kGid && a.op == ExprOp::kConst) return a.int_value;
  }
  return 0;
}

std::optional<RowPrefetch> PlanRowPrefetch(const Kernel& kernel) {
  if (kernel.parallel_extent < 2) return std::nullopt;
  // Passes over an input's rows: the top-level loops loading arg[gid * S + var].
  std::vector<int> passes(kernel.args.size(), 0);
  std::optional<RowPrefetch> best;
  int best_work = kPrefetchMinWork - 1;
  for (const Stmt& stmt : kernel.body) {
    if (stmt.kind != StmtKind::kLoop && stmt.kind != StmtKind::kReduce) continue;
    const LoopContents contents = Contents(kernel, stmt);
    std::vector<bool> counted(kernel.args.size(), false);
    for (ValueId load : contents.loads) {
      const Expr& e = kernel.expr(load);
      const KernelArg& arg = kernel.args[static_cast<size_t>(e.arg)];
      const int64_t stride = RowStrideOf(kernel, e.operands[0], stmt.var);
      const int64_t element = ir::DTypeSize(arg.dtype);
      if (arg.role != ArgRole::kInput || stride < stmt.extent ||
          arg.num_elements * element < kPrefetchMinInputBytes ||
          stmt.extent * element < 2 * kPrefetchBlockBytes) {
        continue;
      }
      if (!counted[static_cast<size_t>(e.arg)]) ++passes[static_cast<size_t>(e.arg)];
      counted[static_cast<size_t>(e.arg)] = true;
      if (contents.work > best_work) {
        best_work = contents.work;
        best = RowPrefetch{&stmt, e.arg, e.operands[0], stride, kPrefetchBlockBytes / element};
      }
    }
  }
  if (!best || passes[static_cast<size_t>(best->arg)] < 2) return std::nullopt;
  return best;
}

// What a loop asks of LLVM's loop passes (`llvm.loop` metadata).
struct LoopHints {
  // > 1: that many vector iterations in flight (the vectoriser's interleave count).
  int interleave = 1;
  // false: LLVM's unrollers leave the loop alone. A map loop (the gid loop, a Loop statement of
  // 64 or more elements) is vectorised and interleaved already; unrolling it again, which a
  // constant trip count turns into a full unroll of the vector loop (a 256-element row: 8 copies of
  // four vector iterations), made no kernel faster and doubled the LLVM time of small kernels: on
  // the AVX2 Zen 3, the MLP step's first-step graph took 315-319 ms of LLVM on one thread with
  // every loop unrolled and 212-235 without the map loops' unrolling, while gelu, silu, tanh,
  // softmax and layernorm kept their speed. Reduction loops keep it: without, softmax rows
  // took 7.4-8.1 ms against 6.7-6.8 and layernorm 1.01-1.11 against 0.72-0.84.
  bool unroll = true;
};

class Emitter {
 public:
  Emitter(const Kernel& kernel, llvm::Module& module, const EmitOptions& options)
      : kernel_(kernel),
        module_(module),
        context_(module.getContext()),
        builder_(module.getContext()),
        options_(options) {}

  absl::StatusOr<llvm::Function*> Run(const std::string& symbol) {
    if (absl::Status status = VerifyKernel(kernel_); !status.ok()) return status;
    if (module_.getFunction(symbol) != nullptr) {
      return absl::InternalError(absl::StrCat("cpu emitter: the module already defines ", symbol));
    }
    ClassifyExprs();

    llvm::Type* ptr = builder_.getPtrTy();
    llvm::Type* i64 = builder_.getInt64Ty();
    auto* abi_type = llvm::FunctionType::get(builder_.getVoidTy(), {ptr, i64, i64}, false);
    llvm::Function* entry =
        llvm::Function::Create(abi_type, llvm::Function::ExternalLinkage, symbol, module_);
    entry->addFnAttr(llvm::Attribute::NoUnwind);
    entry->addParamAttr(0, llvm::Attribute::NoCapture);
    entry->addParamAttr(0, llvm::Attribute::ReadOnly);

    // The body takes each buffer as its own noalias parameter; inlined into the entry, LLVM
    // turns those into alias scopes, which is what lets it vectorise without overlap checks.
    std::vector<llvm::Type*> body_params(kernel_.args.size(), ptr);
    body_params.push_back(i64);
    body_params.push_back(i64);
    auto* body_type = llvm::FunctionType::get(builder_.getVoidTy(), body_params, false);
    function_ = llvm::Function::Create(body_type, llvm::Function::InternalLinkage, symbol + ".body",
                                       module_);
    function_->addFnAttr(llvm::Attribute::AlwaysInline);
    function_->addFnAttr(llvm::Attribute::NoUnwind);
    for (size_t i = 0; i < kernel_.args.size(); ++i) {
      const KernelArg& arg = kernel_.args[i];
      const auto index = static_cast<unsigned>(i);
      const int64_t element_size = ir::DTypeSize(arg.dtype);
      const uint64_t bytes = static_cast<uint64_t>(arg.num_elements * element_size);
      function_->addParamAttr(index, llvm::Attribute::NoAlias);
      function_->addParamAttr(index, llvm::Attribute::NoCapture);
      if (arg.role == ArgRole::kInput) function_->addParamAttr(index, llvm::Attribute::ReadOnly);
      if (bytes > 0) {
        // Buffers are allocated aligned; a one-element arg may be a scalar slot (a pointer to
        // a value) or the error flag, which only have their type's alignment.
        const int64_t alignment = arg.num_elements > 1 && arg.role != ArgRole::kErrorFlag
                                      ? std::max<int64_t>(options_.assume_alignment, element_size)
                                      : element_size;
        function_->addParamAttr(
            index, llvm::Attribute::getWithAlignment(context_, llvm::Align(alignment)));
        function_->addDereferenceableParamAttr(index, bytes);
      }
      function_->getArg(index)->setName(absl::StrCat("arg", i));
    }

    builder_.SetInsertPoint(llvm::BasicBlock::Create(context_, "entry", entry));
    std::vector<Value*> call_args;
    for (size_t i = 0; i < kernel_.args.size(); ++i) {
      Value* slot = builder_.CreateConstInBoundsGEP1_64(ptr, entry->getArg(0), i);
      call_args.push_back(builder_.CreateLoad(ptr, slot, absl::StrCat("arg", i)));
    }
    call_args.push_back(entry->getArg(1));
    call_args.push_back(entry->getArg(2));
    builder_.CreateCall(function_, call_args);
    builder_.CreateRetVoid();

    builder_.SetInsertPoint(llvm::BasicBlock::Create(context_, "entry", function_));
    Value* begin = function_->getArg(static_cast<unsigned>(kernel_.args.size()));
    Value* end = function_->getArg(static_cast<unsigned>(kernel_.args.size() + 1));
    vars_.assign(static_cast<size_t>(std::max(kernel_.num_vars, 1)), nullptr);
    scopes_.emplace_back();
    CountedLoop(begin, end, /*may_be_empty=*/true, {},
                [&](Value* gid, const auto&) {
                  vars_[kGid] = gid;
                  Block(kernel_.body);
                  return std::vector<Value*>{};
                },
                {.interleave = OuterInterleave(), .unroll = false});
    scopes_.pop_back();
    builder_.CreateRetVoid();
    if (!error_.ok()) {
      entry->eraseFromParent();
      function_->eraseFromParent();
      return error_;
    }
    return entry;
  }

 private:
  // LLVM's vectoriser interleaves a loop only as far as its register-pressure model allows, which
  // gives a long elementwise body (an expanded exp, tanh or erf: 40-60 vector ops, nearly one
  // dependency chain) one iteration in flight, so it runs at the chain's latency, not at the
  // FMA ports' throughput. Four independent iterations fill the ports; the constants that no
  // longer fit in registers are reloaded from the stack, which costs loads only. On the AVX2 Zen
  // 3, 16M elements (`diag/kernel_only/eltwise/*`), against two iterations: gelu_tanh 6.0-6.1
  // against 6.7-7.1 ms, tanh 6.3 against 7.2, gelu with erf 10.0 against 10.7, silu 4.7-4.9
  // against 5.2-5.3 (and 5.3-5.4 with one); three were slower than two. Row kernels (with Loop
  // or Reduce statements) vectorise their inner loops, which LLVM interleaves itself.
  int OuterInterleave() const {
    constexpr int kLongBody = 20;
    for (const Stmt& stmt : kernel_.body) {
      if (stmt.kind == StmtKind::kLoop || stmt.kind == StmtKind::kReduce) return 1;
    }
    int float_ops = 0;
    for (const Expr& e : kernel_.exprs) {
      float_ops += IsFloatType(e.type) && e.op != ExprOp::kConst && e.op != ExprOp::kLoad;
    }
    return float_ops >= kLongBody ? 4 : 1;
  }

  // ---- Types --------------------------------------------------------------------------------

  llvm::Type* TypeOf(ScalarType type) {
    switch (type) {
      case ScalarType::kBool:
        return builder_.getInt1Ty();
      case ScalarType::kU8:
      case ScalarType::kI8:
        return builder_.getInt8Ty();
      case ScalarType::kI16:
      case ScalarType::kU16:
        return builder_.getInt16Ty();
      case ScalarType::kI32:
      case ScalarType::kU32:
        return builder_.getInt32Ty();
      case ScalarType::kI64:
      case ScalarType::kU64:
        return builder_.getInt64Ty();
      case ScalarType::kF32:
        return builder_.getFloatTy();
      case ScalarType::kF64:
        return builder_.getDoubleTy();
    }
    return builder_.getInt64Ty();
  }

  // How an element of `dtype` sits in memory: f16/bf16 as their 16-bit pattern, bool as a byte.
  llvm::Type* StorageTypeOf(ir::DType dtype) {
    switch (dtype) {
      case ir::DType::kF16:
      case ir::DType::kBF16:
        return builder_.getInt16Ty();
      case ir::DType::kBool:
        return builder_.getInt8Ty();
      default:
        return TypeOf(ComputeType(dtype));
    }
  }

  // ---- Expression bookkeeping -----------------------------------------------------------------

  // An expression is "volatile" when it depends on a Load of an arg that the kernel also stores
  // to: such values are never reused from an outer scope and are forgotten after every Store.
  void ClassifyExprs() {
    std::vector<bool> stored(kernel_.args.size(), false);
    CollectStoredArgs(kernel_.body, stored);
    volatile_.assign(kernel_.exprs.size(), false);
    for (size_t id = 0; id < kernel_.exprs.size(); ++id) {
      const Expr& e = kernel_.exprs[id];
      bool v = e.op == ExprOp::kLoad && stored[static_cast<size_t>(e.arg)];
      for (ValueId operand : e.operands) v = v || volatile_[static_cast<size_t>(operand)];
      volatile_[id] = v;
    }
  }

  void Fail(ValueId id, const std::string& why) {
    if (!error_.ok()) return;
    error_ = absl::InternalError(absl::StrCat("cpu emitter: kernel ", kernel_.name, ": v", id, " (",
                                              ExprOpName(kernel_.expr(id).op), ".",
                                              ScalarTypeName(kernel_.expr(id).type), "): ", why));
  }

  // The LLVM value of expression `id` at the current insertion point, computed on first use in
  // the scope. Values of enclosing scopes dominate the current block, so they are reused.
  Value* Get(ValueId id) {
    const auto key = static_cast<size_t>(id);
    if (volatile_[key]) {
      if (auto it = scopes_.back().find(id); it != scopes_.back().end()) return it->second;
    } else {
      for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope) {
        if (auto it = scope->find(id); it != scope->end()) return it->second;
      }
    }
    const Expr& e = kernel_.expr(id);
    std::vector<Value*> operands;
    operands.reserve(e.operands.size());
    for (ValueId operand : e.operands) operands.push_back(Get(operand));
    Value* value = Compute(id, e, operands);
    scopes_.back()[id] = value;
    return value;
  }

  // ---- Statements ---------------------------------------------------------------------------

  void Block(const std::vector<Stmt>& block) {
    for (const Stmt& stmt : block) {
      if (!error_.ok()) return;
      switch (stmt.kind) {
        case StmtKind::kLet:
          Get(stmt.value);
          break;
        case StmtKind::kStore:
          StoreStmt(stmt);
          break;
        case StmtKind::kLoop:
          LoopStmt(stmt);
          break;
        case StmtKind::kReduce:
          ReduceStmt(stmt);
          break;
      }
    }
  }

  void LoopStmt(const Stmt& stmt) {
    if (stmt.extent <= 0) return;
    StatementLoop(stmt, {}, [&](Value* index, const std::vector<Value*>&) {
      vars_[static_cast<size_t>(stmt.var)] = index;
      scopes_.emplace_back();
      Block(stmt.body);
      scopes_.pop_back();
      return std::vector<Value*>{};
    });
  }

  using LoopBody = std::function<std::vector<Value*>(Value*, const std::vector<Value*>&)>;

  // The loop of a Loop or Reduce statement over [0, extent) with positive extent. The loop that
  // PlanRowPrefetch chose runs in blocks, each of which first prefetches the same block of the
  // next row.
  std::vector<Value*> StatementLoop(const Stmt& stmt, const std::vector<Value*>& init,
                                    const LoopBody& body) {
    Value* extent = builder_.getInt64(static_cast<uint64_t>(stmt.extent));
    // A loop shorter than one interleaved vector body (four vectors of 16 lanes at most) gains
    // nothing from vectorising; LLVM unrolls it into straight-line code, as before, which keeps
    // the bits of small kernels (a 3-class softmax's backward) equal between graphs that fuse
    // them differently (Jit.SgdTrainingMatchesEagerSteps).
    constexpr int64_t kShortLoop = 64;
    const LoopHints hints{.unroll = stmt.kind == StmtKind::kReduce || stmt.extent < kShortLoop};
    if (!prefetch_ || prefetch_->loop != &stmt) {
      return CountedLoop(builder_.getInt64(0), extent, /*may_be_empty=*/false, init, body, hints);
    }
    const int64_t block = prefetch_->block;
    const int64_t whole = stmt.extent / block * block;  // at least two blocks
    std::vector<Value*> state = CountedLoop(
        builder_.getInt64(0), builder_.getInt64(static_cast<uint64_t>(whole / block)),
        /*may_be_empty=*/false, init,
        [&](Value* block_index, const std::vector<Value*>& carried) {
          Value* start = builder_.CreateMul(block_index, builder_.getInt64(block), "block.start",
                                            /*HasNUW=*/true, /*HasNSW=*/true);
          PrefetchNextRow(stmt, start);
          Value* end = builder_.CreateAdd(start, builder_.getInt64(block), "block.end",
                                          /*HasNUW=*/true, /*HasNSW=*/true);
          return CountedLoop(start, end, /*may_be_empty=*/false, carried, body, hints);
        },
        hints);
    if (whole < stmt.extent) {
      state = CountedLoop(builder_.getInt64(static_cast<uint64_t>(whole)), extent,
                          /*may_be_empty=*/false, state, body, hints);
    }
    return state;
  }

  // Prefetches the block starting at `start` of the next row (the next gid).
  void PrefetchNextRow(const Stmt& stmt, Value* start) {
    vars_[static_cast<size_t>(stmt.var)] = start;
    scopes_.emplace_back();
    Value* index = Get(prefetch_->index);
    scopes_.pop_back();
    if (!error_.ok()) return;
    const int64_t element = ir::DTypeSize(kernel_.args[static_cast<size_t>(prefetch_->arg)].dtype);
    Value* next = builder_.CreateAdd(index, builder_.getInt64(prefetch_->row_stride));
    // After the last row the address lies past the buffer: a GEP without inbounds, and a
    // prefetch never faults.
    Value* address = builder_.CreateGEP(builder_.getInt8Ty(), ArgPointer(prefetch_->arg),
                                        builder_.CreateMul(next, builder_.getInt64(element)));
    llvm::Function* prefetch =
        llvm::Intrinsic::getDeclaration(&module_, llvm::Intrinsic::prefetch, {builder_.getPtrTy()});
    constexpr int64_t kCacheLine = 64;
    for (int64_t line = 0; line < prefetch_->block * element; line += kCacheLine) {
      builder_.CreateCall(
          prefetch,
          {builder_.CreateConstGEP1_64(builder_.getInt8Ty(), address, static_cast<uint64_t>(line)),
           builder_.getInt32(0) /*read*/, builder_.getInt32(3) /*keep in every level*/,
           builder_.getInt32(1) /*data*/});
    }
  }

  void StoreStmt(const Stmt& stmt) {
    if (stmt.predicate == kNoValue) {
      StoreValue(stmt);
    } else {
      Value* predicate = Get(stmt.predicate);
      llvm::BasicBlock* then_block = llvm::BasicBlock::Create(context_, "store", function_);
      llvm::BasicBlock* done_block = llvm::BasicBlock::Create(context_, "store.done", function_);
      builder_.CreateCondBr(predicate, then_block, done_block);
      builder_.SetInsertPoint(then_block);
      // The index may be out of range when the predicate is false: compute it only here.
      scopes_.emplace_back();
      StoreValue(stmt);
      scopes_.pop_back();
      builder_.CreateBr(done_block);
      builder_.SetInsertPoint(done_block);
    }
    // Loads of a stored arg read memory "now": forget every value derived from one.
    for (auto& scope : scopes_) {
      for (auto it = scope.begin(); it != scope.end();) {
        if (volatile_[static_cast<size_t>(it->first)]) {
          scope.erase(it++);
        } else {
          ++it;
        }
      }
    }
  }

  void StoreValue(const Stmt& stmt) {
    const KernelArg& arg = kernel_.args[static_cast<size_t>(stmt.arg)];
    Value* index = Get(stmt.index);
    Value* value = Get(stmt.value);
    if (!error_.ok()) return;
    switch (arg.dtype) {
      case ir::DType::kF16:
        value = FloatToHalf(value);
        break;
      case ir::DType::kBF16:
        value = FloatToBFloat16(value);
        break;
      case ir::DType::kBool:
        value = builder_.CreateZExt(value, builder_.getInt8Ty());
        break;
      default:
        break;
    }
    llvm::Type* storage = StorageTypeOf(arg.dtype);
    Value* address = builder_.CreateInBoundsGEP(storage, ArgPointer(stmt.arg), index);
    llvm::StoreInst* store =
        builder_.CreateAlignedStore(value, address, llvm::Align(ir::DTypeSize(arg.dtype)));
    // Several threads may report an error at once: the runtime reads the flag after joining
    // them, and relaxed atomic stores make the concurrent writes well defined.
    if (arg.role == ArgRole::kErrorFlag) store->setAtomic(llvm::AtomicOrdering::Monotonic);
  }

  // acc = init; for var in [0, extent): { body; acc = combine(acc, value) }.
  void ReduceStmt(const Stmt& stmt) {
    const ReduceKind kind = stmt.reduce_kind;
    const bool arg_reduce = kind == ReduceKind::kArgMax || kind == ReduceKind::kArgMin;
    const ScalarType type = kernel_.expr(stmt.value).type;
    const bool is_float = IsFloatType(type);
    llvm::Type* llvm_type = TypeOf(type);

    // The carried state: {acc} for sum/prod and integer max/min; {max, saw_nan} for float
    // max/min; {best, index} for argmax/argmin.
    std::vector<Value*> init;
    if (arg_reduce) {
      const bool is_max = kind == ReduceKind::kArgMax;
      Value* start;
      if (is_float) {
        start = llvm::ConstantFP::getInfinity(llvm_type, /*Negative=*/is_max);
      } else {
        const IntLimits limits = LimitsOf(type);
        start = llvm::ConstantInt::get(
            llvm_type, static_cast<uint64_t>(is_max ? limits.lo_bits : limits.hi_bits));
      }
      init = {start, builder_.getInt64(0)};
    } else {
      Value* start = Get(stmt.init);
      init = {start};
      if (is_float && (kind == ReduceKind::kMax || kind == ReduceKind::kMin)) {
        init.push_back(builder_.CreateFCmpUNO(start, start));
      }
    }
    if (!error_.ok()) return;

    std::vector<Value*> final_state = init;
    if (stmt.extent > 0) {
      final_state = StatementLoop(stmt, init, [&](Value* index, const std::vector<Value*>& state) {
        vars_[static_cast<size_t>(stmt.var)] = index;
        scopes_.emplace_back();
        Block(stmt.body);
        Value* value = Get(stmt.value);
        scopes_.pop_back();
        if (!error_.ok()) return state;
        return Combine(kind, type, state, value, index);
      });
    }
    Value* result;
    if (arg_reduce) {
      result = final_state[1];
    } else if (is_float && (kind == ReduceKind::kMax || kind == ReduceKind::kMin)) {
      result = builder_.CreateSelect(final_state[1], llvm::ConstantFP::getNaN(llvm_type),
                                     final_state[0]);
    } else {
      result = final_state[0];
    }
    scopes_.back()[stmt.result] = result;
  }

  std::vector<Value*> Combine(ReduceKind kind, ScalarType type, const std::vector<Value*>& state,
                              Value* value, Value* index) {
    const bool is_float = IsFloatType(type);
    Value* acc = state[0];
    switch (kind) {
      case ReduceKind::kSum:
      case ReduceKind::kProd: {
        if (!is_float) {
          return {kind == ReduceKind::kSum ? builder_.CreateAdd(acc, value)
                                           : builder_.CreateMul(acc, value)};
        }
        llvm::FastMathFlags flags;
        flags.setAllowContract();
        flags.setAllowReassoc();
        flags.setNoSignedZeros();
        Value* r = kind == ReduceKind::kSum ? builder_.CreateFAdd(acc, value)
                                            : builder_.CreateFMul(acc, value);
        llvm::cast<llvm::Instruction>(r)->setFastMathFlags(flags);
        return {r};
      }
      case ReduceKind::kMax:
      case ReduceKind::kMin: {
        const bool is_max = kind == ReduceKind::kMax;
        if (is_float) {
          // maxnum/minnum are associative, so the vectoriser can split the reduction; the NaN
          // flag restores the IR's NaN propagation afterwards. LLVM 16 vectorises them only
          // with `nnan nsz`: after a NaN, `m` is poison, but then the flag is set and the final
          // select never reads `m` (a select does not propagate poison from the operand it does
          // not choose). nsz: which zero a max of -0 and +0 returns is unspecified anyway (the
          // reduction order is).
          Value* m = builder_.CreateBinaryIntrinsic(
              is_max ? llvm::Intrinsic::maxnum : llvm::Intrinsic::minnum, acc, value);
          llvm::FastMathFlags flags;
          flags.setNoNaNs();
          flags.setNoSignedZeros();
          llvm::cast<llvm::Instruction>(m)->setFastMathFlags(flags);
          Value* saw_nan = builder_.CreateOr(state[1], builder_.CreateFCmpUNO(value, value));
          return {m, saw_nan};
        }
        return {builder_.CreateBinaryIntrinsic(IntMinMax(type, is_max), acc, value)};
      }
      case ReduceKind::kArgMax:
      case ReduceKind::kArgMin: {
        const bool is_max = kind == ReduceKind::kArgMax;
        Value* take;
        if (is_float) {
          // Strictly better, or the first NaN (a NaN is more extreme than any number).
          Value* better =
              is_max ? builder_.CreateFCmpOGT(value, acc) : builder_.CreateFCmpOLT(value, acc);
          Value* first_nan = builder_.CreateAnd(builder_.CreateFCmpUNO(value, value),
                                                builder_.CreateFCmpORD(acc, acc));
          take = builder_.CreateOr(better, first_nan);
        } else {
          const bool is_signed = IsSigned(type);
          take = is_max ? (is_signed ? builder_.CreateICmpSGT(value, acc)
                                     : builder_.CreateICmpUGT(value, acc))
                        : (is_signed ? builder_.CreateICmpSLT(value, acc)
                                     : builder_.CreateICmpULT(value, acc));
        }
        return {builder_.CreateSelect(take, value, acc),
                builder_.CreateSelect(take, index, state[1])};
      }
    }
    return state;
  }

  // Emits `for (i = lo; i < hi; ++i)` with loop-carried values; `body` returns their next
  // values. Returns the values after the loop (`init` when it ran zero times).
  std::vector<Value*> CountedLoop(
      Value* lo, Value* hi, bool may_be_empty, const std::vector<Value*>& init,
      const std::function<std::vector<Value*>(Value*, const std::vector<Value*>&)>& body,
      const LoopHints& hints = {}) {
    llvm::BasicBlock* preheader = builder_.GetInsertBlock();
    llvm::BasicBlock* header = llvm::BasicBlock::Create(context_, "loop", function_);
    llvm::BasicBlock* exit = llvm::BasicBlock::Create(context_, "loop.exit", function_);
    if (may_be_empty) {
      builder_.CreateCondBr(builder_.CreateICmpSLT(lo, hi), header, exit);
    } else {
      builder_.CreateBr(header);
    }
    builder_.SetInsertPoint(header);
    llvm::PHINode* index = builder_.CreatePHI(builder_.getInt64Ty(), 2, "i");
    index->addIncoming(lo, preheader);
    std::vector<llvm::PHINode*> carried;
    std::vector<Value*> carried_values;
    for (Value* value : init) {
      llvm::PHINode* phi = builder_.CreatePHI(value->getType(), 2);
      phi->addIncoming(value, preheader);
      carried.push_back(phi);
      carried_values.push_back(phi);
    }
    std::vector<Value*> next = body(index, carried_values);
    llvm::BasicBlock* latch = builder_.GetInsertBlock();
    Value* next_index = builder_.CreateAdd(index, builder_.getInt64(1), "i.next",
                                           /*HasNUW=*/true, /*HasNSW=*/true);
    llvm::BranchInst* back =
        builder_.CreateCondBr(builder_.CreateICmpSLT(next_index, hi), header, exit);
    std::vector<llvm::Metadata*> loop_id = {nullptr};  // operand 0: the loop ID itself
    if (hints.interleave > 1) {
      llvm::Metadata* count[] = {llvm::MDString::get(context_, "llvm.loop.interleave.count"),
                                 llvm::ConstantAsMetadata::get(
                                     builder_.getInt32(static_cast<uint32_t>(hints.interleave)))};
      loop_id.push_back(llvm::MDNode::get(context_, count));
    }
    if (!hints.unroll) {
      loop_id.push_back(
          llvm::MDNode::get(context_, {llvm::MDString::get(context_, "llvm.loop.unroll.disable")}));
    }
    if (loop_id.size() > 1) {
      llvm::MDNode* self = llvm::MDNode::getDistinct(context_, loop_id);
      self->replaceOperandWith(0, self);
      back->setMetadata(llvm::LLVMContext::MD_loop, self);
    }
    index->addIncoming(next_index, latch);
    for (size_t k = 0; k < carried.size(); ++k) carried[k]->addIncoming(next[k], latch);
    builder_.SetInsertPoint(exit);
    if (!may_be_empty) return next;
    std::vector<Value*> result;
    for (size_t k = 0; k < init.size(); ++k) {
      llvm::PHINode* phi = builder_.CreatePHI(init[k]->getType(), 2);
      phi->addIncoming(init[k], preheader);
      phi->addIncoming(next[k], latch);
      result.push_back(phi);
    }
    return result;
  }

  Value* ArgPointer(ArgId arg) { return function_->getArg(static_cast<unsigned>(arg)); }

  // ---- Scalar ops ---------------------------------------------------------------------------

  llvm::Intrinsic::ID IntMinMax(ScalarType type, bool is_max) {
    if (IsSigned(type)) return is_max ? llvm::Intrinsic::smax : llvm::Intrinsic::smin;
    return is_max ? llvm::Intrinsic::umax : llvm::Intrinsic::umin;
  }

  Value* Contract(Value* v) {
    if (auto* instruction = llvm::dyn_cast<llvm::Instruction>(v)) {
      llvm::FastMathFlags flags;
      flags.setAllowContract();
      instruction->setFastMathFlags(flags);
    }
    return v;
  }

  Value* IntConstant(llvm::Type* type, __int128 value) {
    return llvm::ConstantInt::get(type, static_cast<uint64_t>(value));
  }

  Value* FloatConstant(llvm::Type* type, double value) {
    return llvm::ConstantFP::get(type, value);
  }

  // libm's double-precision function `name` (tanh, erf), declared as not touching memory
  // (errno is not used), so LLVM may hoist and combine calls.
  llvm::FunctionCallee LibmDouble(const char* name, int arity) {
    std::vector<llvm::Type*> params(static_cast<size_t>(arity), builder_.getDoubleTy());
    auto* type = llvm::FunctionType::get(builder_.getDoubleTy(), params, false);
    llvm::FunctionCallee callee = module_.getOrInsertFunction(name, type);
    if (auto* function = llvm::dyn_cast<llvm::Function>(callee.getCallee())) {
      function->setDoesNotAccessMemory();
      function->setDoesNotThrow();
      function->addFnAttr(llvm::Attribute::WillReturn);
    }
    return callee;
  }

  // A transcendental function of x (and y for pow) in double; f32 operands are widened and the
  // result rounded once, as kernel_eval does.
  Value* Transcendental(ExprOp op, Value* x, Value* y) {
    llvm::Type* type = x->getType();
    const bool narrow = type->isFloatTy();
    if (narrow) {
      x = builder_.CreateFPExt(x, builder_.getDoubleTy());
      if (y != nullptr) y = builder_.CreateFPExt(y, builder_.getDoubleTy());
    }
    Value* r;
    switch (op) {
      case ExprOp::kExp:
        r = builder_.CreateUnaryIntrinsic(llvm::Intrinsic::exp, x);
        break;
      case ExprOp::kLog:
        r = builder_.CreateUnaryIntrinsic(llvm::Intrinsic::log, x);
        break;
      case ExprOp::kSin:
        r = builder_.CreateUnaryIntrinsic(llvm::Intrinsic::sin, x);
        break;
      case ExprOp::kCos:
        r = builder_.CreateUnaryIntrinsic(llvm::Intrinsic::cos, x);
        break;
      case ExprOp::kPow:
        r = builder_.CreateBinaryIntrinsic(llvm::Intrinsic::pow, x, y);
        break;
      case ExprOp::kTanh:
        r = builder_.CreateCall(LibmDouble("tanh", 1), {x});
        break;
      case ExprOp::kErf:
        r = builder_.CreateCall(LibmDouble("erf", 1), {x});
        break;
      default: {  // kRsqrt
        Value* root = builder_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x);
        r = builder_.CreateFDiv(FloatConstant(x->getType(), 1.0), root);
        break;
      }
    }
    return narrow ? builder_.CreateFPTrunc(r, type) : r;
  }

  // NaN-propagating max/min exactly as the interpreter's MaxNaN/MinNaN: the result is b when b
  // is NaN or strictly beyond a, else a (so a NaN a stays, and equal values give a).
  Value* FloatMaxMin(Value* a, Value* b, bool is_max) {
    Value* beyond = is_max ? builder_.CreateFCmpOGT(b, a) : builder_.CreateFCmpOLT(b, a);
    Value* take_b = builder_.CreateOr(beyond, builder_.CreateFCmpUNO(b, b));
    return builder_.CreateSelect(take_b, b, a);
  }

  // Unsigned division or remainder with a zero divisor giving 0.
  Value* UnsignedDivRem(Value* a, Value* b, bool remainder) {
    llvm::Type* type = a->getType();
    Value* zero = llvm::ConstantInt::get(type, 0);
    Value* is_zero = builder_.CreateICmpEQ(b, zero);
    Value* safe = builder_.CreateSelect(is_zero, llvm::ConstantInt::get(type, 1), b);
    Value* r = remainder ? builder_.CreateURem(a, safe) : builder_.CreateUDiv(a, safe);
    return builder_.CreateSelect(is_zero, zero, r);
  }

  // Python's float %: fmod, then moved to the divisor's sign; a zero result takes b's sign.
  Value* FloatMod(Value* a, Value* b) {
    llvm::Type* type = a->getType();
    Value* zero = FloatConstant(type, 0.0);
    Value* r = builder_.CreateFRem(a, b);
    Value* signs_differ =
        builder_.CreateXor(builder_.CreateFCmpOLT(r, zero), builder_.CreateFCmpOLT(b, zero));
    Value* moved = builder_.CreateSelect(signs_differ, builder_.CreateFAdd(r, b), r);
    Value* signed_zero = builder_.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, zero, b);
    return builder_.CreateSelect(builder_.CreateFCmpOEQ(r, zero), signed_zero, moved);
  }

  Value* Shift(ExprOp op, ScalarType type, Value* a, Value* b) {
    llvm::Type* llvm_type = a->getType();
    const unsigned bits = llvm_type->getIntegerBitWidth();
    Value* in_range = builder_.CreateICmpULT(b, llvm::ConstantInt::get(llvm_type, bits));
    // Masking keeps the shift amount in range, so the shift itself is never poison.
    Value* amount = builder_.CreateAnd(b, llvm::ConstantInt::get(llvm_type, bits - 1));
    Value* zero = llvm::ConstantInt::get(llvm_type, 0);
    if (op == ExprOp::kShl) {
      return builder_.CreateSelect(in_range, builder_.CreateShl(a, amount), zero);
    }
    if (IsSigned(type)) {
      Value* sign_fill = builder_.CreateAShr(a, llvm::ConstantInt::get(llvm_type, bits - 1));
      return builder_.CreateSelect(in_range, builder_.CreateAShr(a, amount), sign_fill);
    }
    return builder_.CreateSelect(in_range, builder_.CreateLShr(a, amount), zero);
  }

  // A legal Cast (legalize.h): float -> float, or an integer (not bool) -> float; 64-bit
  // integers reach f32 through f64 in the kernel already.
  Value* Cast(Value* x, ScalarType from, ScalarType to) {
    llvm::Type* target = TypeOf(to);
    if (from == to) return x;
    if (IsFloatType(from)) {
      return to == ScalarType::kF32 ? builder_.CreateFPTrunc(x, target)
                                    : builder_.CreateFPExt(x, target);
    }
    return IsSigned(from) ? builder_.CreateSIToFP(x, target) : builder_.CreateUIToFP(x, target);
  }

  // Integer truncation or extension (sign extension from signed sources).
  Value* Resize(Value* x, ScalarType from, llvm::Type* target) {
    const unsigned from_bits = x->getType()->getIntegerBitWidth();
    const unsigned to_bits = target->getIntegerBitWidth();
    if (to_bits < from_bits) return builder_.CreateTrunc(x, target);
    if (to_bits > from_bits) {
      return IsSigned(from) ? builder_.CreateSExt(x, target) : builder_.CreateZExt(x, target);
    }
    return x;
  }

  // ---- f16 / bf16 conversions (bit-exact with ir/dtype.cc) ----------------------------------

  Value* HalfToFloat(Value* bits16) {
    llvm::Type* i32 = builder_.getInt32Ty();
    Value* h = builder_.CreateZExt(bits16, i32);
    Value* sign = builder_.CreateShl(builder_.CreateAnd(h, 0x8000u), 16);
    Value* exponent = builder_.CreateAnd(builder_.CreateLShr(h, 10), 0x1fu);
    Value* mantissa = builder_.CreateAnd(h, 0x3ffu);
    Value* shifted_mantissa = builder_.CreateShl(mantissa, 13);
    // Subnormal (or zero): mantissa * 2^-24, exact in float.
    Value* magnitude = builder_.CreateFMul(builder_.CreateUIToFP(mantissa, builder_.getFloatTy()),
                                           FloatConstant(builder_.getFloatTy(), 0x1p-24));
    Value* subnormal = builder_.CreateOr(builder_.CreateBitCast(magnitude, i32), sign);
    Value* special = builder_.CreateOr(builder_.CreateOr(sign, 0x7f800000u), shifted_mantissa);
    Value* normal = builder_.CreateOr(
        builder_.CreateOr(
            sign, builder_.CreateShl(builder_.CreateAdd(exponent, builder_.getInt32(112)), 23)),
        shifted_mantissa);
    Value* result = builder_.CreateSelect(
        builder_.CreateICmpEQ(exponent, builder_.getInt32(0)), subnormal,
        builder_.CreateSelect(builder_.CreateICmpEQ(exponent, builder_.getInt32(0x1f)), special,
                              normal));
    return builder_.CreateBitCast(result, builder_.getFloatTy());
  }

  Value* FloatToHalf(Value* value) {
    llvm::Type* i32 = builder_.getInt32Ty();
    Value* f = builder_.CreateBitCast(value, i32);
    Value* sign = builder_.CreateAnd(builder_.CreateLShr(f, 16), 0x8000u);
    Value* abs = builder_.CreateAnd(f, 0x7fffffffu);
    Value* inf_or_nan = builder_.CreateOr(
        builder_.CreateOr(sign, 0x7c00u),
        builder_.CreateSelect(builder_.CreateICmpUGT(abs, builder_.getInt32(0x7f800000u)),
                              builder_.getInt32(0x0200u), builder_.getInt32(0)));
    Value* overflow = builder_.CreateOr(sign, 0x7c00u);
    // Subnormal half: adding 0.5 (ulp 2^-24) makes the float adder round to nearest even.
    Value* scaled = builder_.CreateFAdd(builder_.CreateBitCast(abs, builder_.getFloatTy()),
                                        FloatConstant(builder_.getFloatTy(), 0.5));
    Value* subnormal = builder_.CreateOr(
        sign,
        builder_.CreateSub(builder_.CreateBitCast(scaled, i32), builder_.getInt32(0x3f000000u)));
    // Normal: rebias the exponent and round the 13 dropped bits to even (wrapping add).
    Value* odd = builder_.CreateAnd(builder_.CreateLShr(abs, 13), 1u);
    Value* rounded =
        builder_.CreateAdd(builder_.CreateAdd(abs, builder_.getInt32(0xc8000fffu)), odd);
    Value* normal = builder_.CreateOr(sign, builder_.CreateLShr(rounded, 13));
    Value* result = builder_.CreateSelect(
        builder_.CreateICmpUGE(abs, builder_.getInt32(0x7f800000u)), inf_or_nan,
        builder_.CreateSelect(
            builder_.CreateICmpUGE(abs, builder_.getInt32(0x477ff000u)), overflow,
            builder_.CreateSelect(builder_.CreateICmpULT(abs, builder_.getInt32(0x38800000u)),
                                  subnormal, normal)));
    return builder_.CreateTrunc(result, builder_.getInt16Ty());
  }

  Value* FloatToBFloat16(Value* value) {
    llvm::Type* i32 = builder_.getInt32Ty();
    Value* f = builder_.CreateBitCast(value, i32);
    Value* nan = builder_.CreateOr(builder_.CreateLShr(f, 16), 0x0040u);
    Value* lsb = builder_.CreateAnd(builder_.CreateLShr(f, 16), 1u);
    Value* rounded = builder_.CreateLShr(
        builder_.CreateAdd(builder_.CreateAdd(f, builder_.getInt32(0x7fffu)), lsb), 16);
    Value* is_nan =
        builder_.CreateICmpUGT(builder_.CreateAnd(f, 0x7fffffffu), builder_.getInt32(0x7f800000u));
    return builder_.CreateTrunc(builder_.CreateSelect(is_nan, nan, rounded), builder_.getInt16Ty());
  }

  // A double rounded toward zero to float, with the lowest mantissa bit set when inexact
  // ("round to odd"), as ir/dtype.cc's RoundToOddFloat: rounding that float to f16/bf16 gives
  // the correctly rounded result of the double. Values beyond the float range truncate to
  // ±FLT_MAX (whose last bit is odd); NaN and inf pass through.
  Value* RoundToOddFloat(Value* value) {
    llvm::Type* i32 = builder_.getInt32Ty();
    Value* rounded = builder_.CreateFPTrunc(value, builder_.getFloatTy());
    Value* back = builder_.CreateFPExt(rounded, builder_.getDoubleTy());
    Value* bits = builder_.CreateBitCast(rounded, i32);
    Value* too_far =
        builder_.CreateFCmpOGT(builder_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, back),
                               builder_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, value));
    // One step toward zero in magnitude (the sign bit is untouched).
    Value* truncated =
        builder_.CreateSelect(too_far, builder_.CreateSub(bits, builder_.getInt32(1)), bits);
    Value* odd = builder_.CreateOr(truncated, 1u);
    Value* keep = builder_.CreateOr(builder_.CreateFCmpOEQ(back, value),
                                    builder_.CreateFCmpUNO(value, value));
    return builder_.CreateBitCast(builder_.CreateSelect(keep, bits, odd), builder_.getFloatTy());
  }

  // RoundToF16 / RoundToBF16: the value rounded once to the 16-bit format, in its own type.
  Value* RoundTo16(Value* value, bool bfloat) {
    const bool is_double = value->getType()->isDoubleTy();
    Value* f = is_double ? RoundToOddFloat(value) : value;
    Value* widened;
    if (bfloat) {
      Value* bits = builder_.CreateZExt(FloatToBFloat16(f), builder_.getInt32Ty());
      widened = builder_.CreateBitCast(builder_.CreateShl(bits, 16), builder_.getFloatTy());
    } else {
      widened = HalfToFloat(FloatToHalf(f));
    }
    return is_double ? builder_.CreateFPExt(widened, builder_.getDoubleTy()) : widened;
  }

  // ---- One expression -----------------------------------------------------------------------

  Value* Compute(ValueId id, const Expr& e, const std::vector<Value*>& x) {
    llvm::Type* type = TypeOf(e.type);
    const bool is_float = IsFloatType(e.type);
    // Operand type (comparisons and casts differ from the result type).
    const ScalarType operand_type = e.operands.empty() ? e.type : kernel_.expr(e.operands[0]).type;
    const bool float_operands = IsFloatType(operand_type);
    auto unsupported = [&]() -> Value* {
      Fail(id, "unsupported for this type");
      return llvm::UndefValue::get(type);
    };
    switch (e.op) {
      case ExprOp::kConst:
        if (is_float) return FloatConstant(type, e.float_value);
        return IntConstant(type, e.int_value);
      case ExprOp::kVar: {
        Value* var = vars_[static_cast<size_t>(e.var)];
        if (var == nullptr) {
          Fail(id, "loop variable used outside its loop");
          return llvm::UndefValue::get(type);
        }
        return var;
      }
      case ExprOp::kAccumulator:
        Fail(id, "accumulator used before its reduce");
        return llvm::UndefValue::get(type);
      case ExprOp::kLoad: {
        const KernelArg& arg = kernel_.args[static_cast<size_t>(e.arg)];
        llvm::Type* storage = StorageTypeOf(arg.dtype);
        Value* address = builder_.CreateInBoundsGEP(storage, ArgPointer(e.arg), x[0]);
        Value* raw =
            builder_.CreateAlignedLoad(storage, address, llvm::Align(ir::DTypeSize(arg.dtype)));
        switch (arg.dtype) {
          case ir::DType::kF16:
            return HalfToFloat(raw);
          case ir::DType::kBF16:
            return builder_.CreateBitCast(
                builder_.CreateShl(builder_.CreateZExt(raw, builder_.getInt32Ty()), 16),
                builder_.getFloatTy());
          case ir::DType::kBool:
            return builder_.CreateICmpNE(raw, builder_.getInt8(0));
          default:
            return raw;
        }
      }
      case ExprOp::kNeg:
        return is_float ? builder_.CreateFNeg(x[0]) : builder_.CreateNeg(x[0]);
      case ExprOp::kAbs:
        if (is_float) return builder_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x[0]);
        if (IsSigned(e.type)) {
          return builder_.CreateBinaryIntrinsic(llvm::Intrinsic::abs, x[0], builder_.getFalse());
        }
        return x[0];
      case ExprOp::kSign: {
        if (is_float) {
          Value* zero = FloatConstant(type, 0.0);
          Value* inner = builder_.CreateSelect(builder_.CreateFCmpUNO(x[0], x[0]), x[0], zero);
          inner = builder_.CreateSelect(builder_.CreateFCmpOLT(x[0], zero),
                                        FloatConstant(type, -1.0), inner);
          return builder_.CreateSelect(builder_.CreateFCmpOGT(x[0], zero), FloatConstant(type, 1.0),
                                       inner);
        }
        Value* zero = llvm::ConstantInt::get(type, 0);
        if (!IsSigned(e.type)) {
          return builder_.CreateZExt(builder_.CreateICmpNE(x[0], zero), type);
        }
        Value* inner = builder_.CreateSelect(builder_.CreateICmpSLT(x[0], zero),
                                             llvm::ConstantInt::getSigned(type, -1), zero);
        return builder_.CreateSelect(builder_.CreateICmpSGT(x[0], zero),
                                     llvm::ConstantInt::get(type, 1), inner);
      }
      case ExprOp::kExp:
      case ExprOp::kLog:
      case ExprOp::kSin:
      case ExprOp::kCos:
      case ExprOp::kTanh:
      case ExprOp::kErf:
      case ExprOp::kRsqrt:
        if (!is_float) return unsupported();
        return Transcendental(e.op, x[0], nullptr);
      case ExprOp::kSqrt:
        if (!is_float) return unsupported();
        return builder_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x[0]);
      case ExprOp::kFloor:
      case ExprOp::kCeil:
      case ExprOp::kRound:
      case ExprOp::kTrunc: {
        if (!is_float) return unsupported();
        const llvm::Intrinsic::ID intrinsic = e.op == ExprOp::kFloor   ? llvm::Intrinsic::floor
                                              : e.op == ExprOp::kCeil  ? llvm::Intrinsic::ceil
                                              : e.op == ExprOp::kRound ? llvm::Intrinsic::roundeven
                                                                       : llvm::Intrinsic::trunc;
        return builder_.CreateUnaryIntrinsic(intrinsic, x[0]);
      }
      case ExprOp::kReciprocal:
        if (!is_float) return unsupported();
        return builder_.CreateFDiv(FloatConstant(type, 1.0), x[0]);
      case ExprOp::kNot:
        if (is_float) return unsupported();
        return builder_.CreateNot(x[0]);
      case ExprOp::kAdd:
        return is_float ? Contract(builder_.CreateFAdd(x[0], x[1]))
                        : builder_.CreateAdd(x[0], x[1]);
      case ExprOp::kSub:
        return is_float ? Contract(builder_.CreateFSub(x[0], x[1]))
                        : builder_.CreateSub(x[0], x[1]);
      case ExprOp::kMul:
        return is_float ? Contract(builder_.CreateFMul(x[0], x[1]))
                        : builder_.CreateMul(x[0], x[1]);
      case ExprOp::kDiv: {  // Integer div/mod arrive legalized as udiv/urem (legalize.h).
        if (!is_float) return unsupported();
        Value* quotient = builder_.CreateFDiv(x[0], x[1]);
        // Division by a Reduce's result (softmax's row sum, a mean pool's count) may become one
        // reciprocal before the loop and a multiply per element (LICM does it for `arcp`
        // divisions whose divisor the loop does not change), as PyTorch's and onnxruntime's
        // softmax kernels compute it: the division occupies the divider for 5 cycles per vector
        // on current x86 cores, a sixth of an AVX2 softmax row. It costs at most one more
        // rounding (1 ulp). Only for accumulators: QuantizeLinear's x / scale must round exactly,
        // and `arcp` on a constant divisor would let x / 3 become x * 0.333...
        auto* division = llvm::dyn_cast<llvm::Instruction>(quotient);
        if (division != nullptr && kernel_.expr(e.operands[1]).op == ExprOp::kAccumulator) {
          division->setHasAllowReciprocal(true);
        }
        return quotient;
      }
      case ExprOp::kMod:
        if (!is_float) return unsupported();
        return FloatMod(x[0], x[1]);
      case ExprOp::kPow:
        if (!is_float) return unsupported();
        return Transcendental(e.op, x[0], x[1]);
      case ExprOp::kMax:
      case ExprOp::kMin: {
        const bool is_max = e.op == ExprOp::kMax;
        if (is_float) return FloatMaxMin(x[0], x[1], is_max);
        return builder_.CreateBinaryIntrinsic(IntMinMax(e.type, is_max), x[0], x[1]);
      }
      case ExprOp::kEq:
      case ExprOp::kNe:
      case ExprOp::kLt:
      case ExprOp::kLe:
      case ExprOp::kGt:
      case ExprOp::kGe: {
        if (float_operands) {
          // IEEE: every comparison with NaN is false except !=.
          const llvm::CmpInst::Predicate predicate = e.op == ExprOp::kEq   ? llvm::CmpInst::FCMP_OEQ
                                                     : e.op == ExprOp::kNe ? llvm::CmpInst::FCMP_UNE
                                                     : e.op == ExprOp::kLt ? llvm::CmpInst::FCMP_OLT
                                                     : e.op == ExprOp::kLe ? llvm::CmpInst::FCMP_OLE
                                                     : e.op == ExprOp::kGt
                                                         ? llvm::CmpInst::FCMP_OGT
                                                         : llvm::CmpInst::FCMP_OGE;
          return builder_.CreateFCmp(predicate, x[0], x[1]);
        }
        const bool is_signed = IsSigned(operand_type);
        const llvm::CmpInst::Predicate predicate =
            e.op == ExprOp::kEq   ? llvm::CmpInst::ICMP_EQ
            : e.op == ExprOp::kNe ? llvm::CmpInst::ICMP_NE
            : e.op == ExprOp::kLt ? (is_signed ? llvm::CmpInst::ICMP_SLT : llvm::CmpInst::ICMP_ULT)
            : e.op == ExprOp::kLe ? (is_signed ? llvm::CmpInst::ICMP_SLE : llvm::CmpInst::ICMP_ULE)
            : e.op == ExprOp::kGt ? (is_signed ? llvm::CmpInst::ICMP_SGT : llvm::CmpInst::ICMP_UGT)
                                  : (is_signed ? llvm::CmpInst::ICMP_SGE : llvm::CmpInst::ICMP_UGE);
        return builder_.CreateICmp(predicate, x[0], x[1]);
      }
      case ExprOp::kAnd:
        if (is_float) return unsupported();
        return builder_.CreateAnd(x[0], x[1]);
      case ExprOp::kOr:
        if (is_float) return unsupported();
        return builder_.CreateOr(x[0], x[1]);
      case ExprOp::kXor:
        if (is_float) return unsupported();
        return builder_.CreateXor(x[0], x[1]);
      case ExprOp::kSelect:
        return builder_.CreateSelect(x[0], x[1], x[2]);
      case ExprOp::kCast:
        if (!IsLegal(kernel_, e)) return unsupported();
        return Cast(x[0], operand_type, e.type);
      case ExprOp::kConvert:
        if (!float_operands || is_float || e.type == ScalarType::kBool) return unsupported();
        return IsSigned(e.type) ? builder_.CreateFPToSI(x[0], type)
                                : builder_.CreateFPToUI(x[0], type);
      case ExprOp::kWrap:
        if (is_float || float_operands) return unsupported();
        return Resize(x[0], operand_type, type);
      case ExprOp::kBitcast:
        return builder_.CreateBitCast(x[0], type);
      case ExprOp::kFma:
        // The kernel IR's fma may round once or twice. llvm.fmuladd is the fma instruction where
        // the target has one and a vector multiply and add where it does not (x86-64-v2);
        // llvm.fma there is a scalar libm call per element, which made every exp of an SSE
        // host's softmax or gelu about 20 times slower than its vector code.
        if (!is_float) return unsupported();
        return builder_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {type}, {x[0], x[1], x[2]});
      case ExprOp::kShl:
      case ExprOp::kShr:
        if (is_float || e.type == ScalarType::kBool) return unsupported();
        return Shift(e.op, e.type, x[0], x[1]);
      case ExprOp::kUDiv:
      case ExprOp::kURem:
        if (is_float || e.type == ScalarType::kBool) return unsupported();
        return UnsignedDivRem(x[0], x[1], e.op == ExprOp::kURem);
      case ExprOp::kRoundToF16:
      case ExprOp::kRoundToBF16:
        if (!is_float) return unsupported();
        return RoundTo16(x[0], e.op == ExprOp::kRoundToBF16);
    }
    return unsupported();
  }

  const Kernel& kernel_;
  llvm::Module& module_;
  llvm::LLVMContext& context_;
  llvm::IRBuilder<> builder_;
  EmitOptions options_;
  llvm::Function* function_ = nullptr;
  absl::Status error_;
  std::vector<bool> volatile_;
  std::vector<Value*> vars_;
  std::vector<absl::flat_hash_map<ValueId, Value*>> scopes_;
  std::optional<RowPrefetch> prefetch_ = PlanRowPrefetch(kernel_);
};

}  // namespace

Kernel PrepareKernel(Kernel kernel, bool expand_math) {
  kernel = HoistInvariantChecks(std::move(kernel));
  kernel = ReuseReducedValues(std::move(kernel));
  return expand_math ? ExpandMath(std::move(kernel)) : kernel;
}

absl::StatusOr<llvm::Function*> EmitKernel(const Kernel& kernel, const std::string& symbol,
                                           llvm::Module& module, const EmitOptions& options) {
  // Floored division and saturating casts are spelled out once, in kernel IR (legalize.h).
  const Kernel legal = Legalize(kernel);
  return Emitter(legal, module, options).Run(symbol);
}

}  // namespace kiln::codegen::cpu
