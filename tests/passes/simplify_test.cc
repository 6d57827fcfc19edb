// LLVM-style tests of the simplify passes: hand-written IR in, one or more passes, the printed
// result compared with hand-written IR (after normalising white space). Every case also checks
// that the result computes the same outputs as the input, bit for bit, on random arguments
// (ExpectRewrite). One or more cases per rewrite rule, with the cases a rule must leave alone.
#include "passes/simplify.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "ir/printer.h"
#include "pass_test_util.h"

namespace kiln::passes {
namespace {

using testing::ExpectRewrite;
using testing::ExpectRewriteWith;
using ::testing::HasSubstr;
using testing::Parse;
using testing::RunPasses;

// ---- DCE ----------------------------------------------------------------------------------------

TEST(Dce, DropsUnusedNodesKeepsParameters) {
  ExpectRewrite("dce", R"(
    graph {
      %0 = parameter() {name="x"} : f32[2]
      %1 = parameter() {name="unused"} : i32[3]
      %2 = exp(%0) : f32[2]
      %3 = neg(%0) : f32[2]
      %4 = random_uniform() {seed=7} : f32[2]
      %5 = add(%2, %4) : f32[2]
      return %3 as "y"
    })",
                R"(
    graph {
      %0 = parameter() {name="x"} : f32[2]
      %1 = parameter() {name="unused"} : i32[3]
      %2 = neg(%0) : f32[2]
      return %2 as "y"
    })");
}

TEST(Dce, KeepsEveryOutputAndTheirNames) {
  ExpectRewrite("dce", R"(
    graph {
      %0 = parameter() {name="x"} : f32[2]
      %1 = exp(%0) : f32[2]
      %2 = log(%0) : f32[2]
      %3 = sqrt(%0) : f32[2]
      return %3 as "b", %1, %3 as "a"
    })",
                R"(
    graph {
      %0 = parameter() {name="x"} : f32[2]
      %1 = exp(%0) : f32[2]
      %2 = sqrt(%0) : f32[2]
      return %2 as "b", %1, %2 as "a"
    })");
}

// ---- CSE ----------------------------------------------------------------------------------------

TEST(Cse, MergesIdenticalNodesTransitively) {
  ExpectRewrite("cse,dce", R"(
    graph {
      %0 = parameter() {name="x"} : f32[2]
      %1 = neg(%0) : f32[2]
      %2 = exp(%1) : f32[2]
      %3 = neg(%0) : f32[2]
      %4 = exp(%3) : f32[2]
      %5 = add(%2, %4) : f32[2]
      return %5
    })",
                R"(
    graph {
      %0 = parameter() {name="x"} : f32[2]
      %1 = neg(%0) : f32[2]
      %2 = exp(%1) : f32[2]
      %3 = add(%2, %2) : f32[2]
      return %3
    })");
}

TEST(Cse, MergesEqualLeavesAndRandomOpsWithEqualSeeds) {
  ExpectRewrite("cse,dce", R"(
    graph {
      %0 = random_normal() {seed=3} : f32[4]
      %1 = random_normal() {seed=3} : f32[4]
      %2 = random_normal() {seed=4} : f32[4]
      %3 = constant() {literal=[1, 2, 3, 4]} : f32[4]
      %4 = constant() {literal=[1, 2, 3, 4]} : f32[4]
      %5 = sub(%0, %1) : f32[4]
      %6 = sub(%2, %0) : f32[4]
      %7 = mul(%3, %4) : f32[4]
      return %5, %6, %7
    })",
                R"(
    graph {
      %0 = random_normal() {seed=3} : f32[4]
      %1 = random_normal() {seed=4} : f32[4]
      %2 = constant() {literal=[1, 2, 3, 4]} : f32[4]
      %3 = sub(%0, %0) : f32[4]
      %4 = sub(%1, %0) : f32[4]
      %5 = mul(%2, %2) : f32[4]
      return %3, %4, %5
    })");
}

TEST(Cse, KeepsNodesThatDifferInAttributesTypeOrOperandOrder) {
  // fill 0 and fill -0 differ bit for bit; the reductions differ in axes; the fills in dtype;
  // the subs in operand order; the parameters in name.
  const char* kGraph = R"(
    graph {
      %0 = parameter() {name="x"} : f32[2,2]
      %1 = parameter() {name="y"} : f32[2,2]
      %2 = fill() : f32[2,2]
      %3 = fill() {value=-0} : f32[2,2]
      %4 = fill() : f64[2,2]
      %5 = sub(%0, %1) : f32[2,2]
      %6 = sub(%1, %0) : f32[2,2]
      %7 = reduce_sum(%5) {axes=[0]} : f32[1,2]
      %8 = reduce_sum(%5) {axes=[0,1]} : f32[1,1]
      return %2, %3, %4, %5, %6, %7, %8
    })";
  ExpectRewrite("cse", kGraph, kGraph);
}

// ---- Constant folding ---------------------------------------------------------------------------

TEST(ConstantFold, EvaluatesConstantOperands) {
  ExpectRewrite("constant_fold,dce", R"(
    graph {
      %0 = constant() {literal=[1, 2]} : f32[2]
      %1 = constant() {literal=[3, 4]} : f32[2]
      %2 = add(%0, %1) : f32[2]
      %3 = constant() {literal=[1, 2, 3, 4, 5, 6]} : i32[2,3]
      %4 = reduce_sum(%3) {axes=[1]} : i32[2,1]
      %5 = permute(%3) {axes=[1,0]} : i32[3,2]
      return %2, %4, %5
    })",
                R"(
    graph {
      %0 = constant() {literal=[4, 6]} : f32[2]
      %1 = constant() {literal=[6, 15]} : i32[2,1]
      %2 = constant() {literal=[1, 4, 2, 5, 3, 6]} : i32[3,2]
      return %0, %1, %2
    })");
}

TEST(ConstantFold, IotaAndFillOperandsFold) {
  ExpectRewrite("constant_fold,dce", R"(
    graph {
      %0 = iota() {axes=[1]} : i32[2,3]
      %1 = fill() {value=10} : i32[2,3]
      %2 = mul(%0, %1) : i32[2,3]
      %3 = cast(%0) : f32[2,3]
      return %2, %3
    })",
                R"(
    graph {
      %0 = constant() {literal=[0, 10, 20, 0, 10, 20]} : i32[2,3]
      %1 = constant() {literal=[0, 1, 2, 0, 1, 2]} : f32[2,3]
      return %0, %1
    })");
}

TEST(ConstantFold, ElementwiseOfFillsIsAFillAtAnySize) {
  // 10^4 elements, above the 4096-element limit for materialized constants.
  ExpectRewrite("constant_fold,dce", R"(
    graph {
      %0 = fill() {value=2} : f32[100,100]
      %1 = fill() {value=3} : f32[100,100]
      %2 = add(%0, %1) : f32[100,100]
      %3 = lt(%0, %1) : bool[100,100]
      %4 = cast(%2) : i32[100,100]
      %5 = fill() {value=1} : f32[100,100]
      %6 = div(%5, %1) : f32[100,100]
      return %2, %3, %4, %6
    })",
                R"(
    graph {
      %0 = fill() {value=5} : f32[100,100]
      %1 = fill() {value=1} : bool[100,100]
      %2 = fill() {value=5} : i32[100,100]
      %3 = fill() {value=0.3333333432674408} : f32[100,100]
      return %0, %1, %2, %3
    })");
}

TEST(ConstantFold, UniformConstantBecomesFillAndAFillStaysAFill) {
  ExpectRewrite("constant_fold", R"(
    graph {
      %0 = constant() {literal=[2.5, 2.5, 2.5]} : f32[3]
      %1 = constant() {literal=[-0, -0]} : f64[2]
      %2 = fill() {value=7} : i32[5]
      %3 = iota() {axes=[0]} : i32[5]
      return %0, %1, %2, %3
    })",
                R"(
    graph {
      %0 = fill() {value=2.5} : f32[3]
      %1 = fill() {value=-0} : f64[2]
      %2 = fill() {value=7} : i32[5]
      %3 = iota() {axes=[0]} : i32[5]
      return %0, %1, %2, %3
    })");
}

TEST(ConstantFold, UniformI64BeyondDoublePrecisionStaysAConstant) {
  // 2^53 + 1 has no double, so no fill can hold it.
  const char* kGraph = R"(
    graph {
      %0 = constant() {literal=[9007199254740993, 9007199254740993]} : i64[2]
      return %0
    })";
  ExpectRewrite("constant_fold", kGraph, kGraph);
}

TEST(ConstantFold, RandomValuesAreNotFolded) {
  const char* kGraph = R"(
    graph {
      %0 = random_uniform() {seed=1} : f32[4]
      %1 = fill() {value=1} : f32[4]
      %2 = add(%0, %1) : f32[4]
      return %2
    })";
  ExpectRewrite("constant_fold", kGraph, kGraph);
}

TEST(ConstantFold, ParametersAreNotFolded) {
  const char* kGraph = R"(
    graph {
      %0 = parameter() {name="x"} : f32[2]
      %1 = constant() {literal=[1, 2]} : f32[2]
      %2 = add(%0, %1) : f32[2]
      return %2
    })";
  ExpectRewrite("constant_fold", kGraph, kGraph);
}

TEST(ConstantFold, ResultsAboveTheElementLimitAreNotFolded) {
  // With a limit of 4 elements: the 4-element sum folds, the 5-element one does not.
  ConstantFolding fold(/*max_elements=*/4, ConstantFolding::kDefaultMaxWork);
  ExpectRewriteWith(fold, R"(
    graph {
      %0 = iota() {axes=[0]} : f32[4]
      %1 = exp(%0) : f32[4]
      %2 = iota() {axes=[0]} : f32[5]
      %3 = exp(%2) : f32[5]
      return %1, %3
    })",
                    R"(
    graph {
      %0 = iota() {axes=[0]} : f32[4]
      %1 = constant() {literal=[1, 2.7182817, 7.389056, 20.085537]} : f32[4]
      %2 = iota() {axes=[0]} : f32[5]
      %3 = exp(%2) : f32[5]
      return %1, %3
    })");
}

TEST(ConstantFold, DefaultElementLimitIs4096) {
  for (int64_t n : {4096, 4097}) {
    const std::string text = absl::StrCat("graph { %0 = iota() {axes=[0]} : f32[", n,
                                          "] %1 = exp(%0) : f32[", n, "] return %1 }");
    absl::StatusOr<ir::Graph> result = RunPasses("constant_fold", Parse(text));
    ASSERT_TRUE(result.ok()) << result.status();
    const ir::Op folded = result->node(result->outputs()[0].node).op;
    EXPECT_EQ(folded, n <= 4096 ? ir::Op::kConstant : ir::Op::kExp) << n;
  }
}

TEST(ConstantFold, ExpensiveEvaluationIsNotFolded) {
  // A 1x1 result, but 4096 multiply-adds plus 8192 operand elements exceed a work limit of 4096.
  ConstantFolding fold(ConstantFolding::kDefaultMaxElements, /*max_work=*/4096);
  const char* kGraph = R"(
    graph {
      %0 = fill() {value=1} : f32[1,4096]
      %1 = iota() {axes=[0]} : f32[4096,1]
      %2 = matmul(%0, %1) : f32[1,1]
      return %2
    })";
  ExpectRewriteWith(fold, kGraph, kGraph);
}

TEST(ConstantFold, OutOfRangeGatherIsLeftToFailAtRunTime) {
  const char* kGraph = R"(
    graph {
      %0 = constant() {literal=[1, 2, 3]} : f32[3]
      %1 = constant() {literal=[0, 5]} : i32[2]
      %2 = gather(%0, %1) {axes=[0]} : f32[2]
      return %2
    })";
  absl::StatusOr<ir::Graph> result = RunPasses("constant_fold", Parse(kGraph));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(testing::NormalizeWhitespace(ir::PrintGraph(*result)),
            testing::NormalizeWhitespace(kGraph));
}

// ---- Algebraic identities -----------------------------------------------------------------------

TEST(Algebraic, MultiplyByOneEitherSideFillOrConstant) {
  ExpectRewrite("algebraic,dce", R"(
    graph {
      %0 = parameter() {name="x"} : f32[3]
      %1 = fill() {value=1} : f32[3]
      %2 = mul(%0, %1) : f32[3]
      %3 = constant() {literal=[1, 1, 1]} : f32[3]
      %4 = mul(%3, %2) : f32[3]
      return %4
    })",
                R"(
    graph {
      %0 = parameter() {name="x"} : f32[3]
      return %0
    })");
}

TEST(Algebraic, MultiplyByAConstantThatIsNotAllOnesStays) {
  const char* kGraph = R"(
    graph {
      %0 = parameter() {name="x"} : f32[3]
      %1 = constant() {literal=[1, 1, 2]} : f32[3]
      %2 = mul(%0, %1) : f32[3]
      return %2
    })";
  ExpectRewrite("algebraic,dce", kGraph, kGraph);
}

TEST(Algebraic, IntegerAddAndSubtractZero) {
  ExpectRewrite("algebraic,dce", R"(
    graph {
      %0 = parameter() {name="x"} : i32[2]
      %1 = fill() : i32[2]
      %2 = add(%1, %0) : i32[2]
      %3 = add(%2, %1) : i32[2]
      %4 = sub(%3, %1) : i32[2]
      return %4
    })",
                R"(
    graph {
      %0 = parameter() {name="x"} : i32[2]
      return %0
    })");
}

TEST(Algebraic, FloatAddNegativeZeroAndSubtractPositiveZero) {
  ExpectRewrite("algebraic,dce", R"(
    graph {
      %0 = parameter() {name="x"} : f32[2]
      %1 = fill() {value=-0} : f32[2]
      %2 = add(%0, %1) : f32[2]
      %3 = fill() : f32[2]
      %4 = sub(%2, %3) : f32[2]
      return %4
    })",
                R"(
    graph {
      %0 = parameter() {name="x"} : f32[2]
      return %0
    })");
}

TEST(Algebraic, FloatAddPositiveZeroAndSubtractNegativeZeroStay) {
  // (-0) + (+0) = +0 and (-0) - (-0) = +0: neither returns x when x is -0.
  const char* kGraph = R"(
    graph {
      %0 = parameter() {name="x"} : f32[2]
      %1 = fill() : f32[2]
      %2 = add(%0, %1) : f32[2]
      %3 = fill() {value=-0} : f32[2]
      %4 = sub(%2, %3) : f32[2]
      return %4
    })";
  ExpectRewrite("algebraic,dce", kGraph, kGraph);
}

TEST(Algebraic, DivideByOne) {
  ExpectRewrite("algebraic,dce", R"(
    graph {
      %0 = parameter() {name="x"} : f64[2]
      %1 = parameter() {name="n"} : i64[2]
      %2 = fill() {value=1} : f64[2]
      %3 = div(%0, %2) : f64[2]
      %4 = constant() {literal=[1, 1]} : i64[2]
      %5 = div(%1, %4) : i64[2]
      return %3, %5
    })",
                R"(
    graph {
      %0 = parameter() {name="x"} : f64[2]
      %1 = parameter() {name="n"} : i64[2]
      return %0, %1
    })");
}

TEST(Algebraic, IntegerTimesZeroIsZero) {
  ExpectRewrite("algebraic,dce", R"(
    graph {
      %0 = parameter() {name="x"} : i32[2]
      %1 = fill() : i32[2]
      %2 = mul(%0, %1) : i32[2]
      %3 = mul(%1, %0) : i32[2]
      return %2, %3
    })",
                R"(
    graph {
      %0 = parameter() {name="x"} : i32[2]
      %1 = fill() : i32[2]
      return %1, %1
    })");
}

TEST(Algebraic, FloatTimesZeroStays) {
  // NaN * 0 and inf * 0 are NaN, and -1 * 0 is -0.
  const char* kGraph = R"(
    graph {
      %0 = parameter() {name="x"} : f32[2]
      %1 = fill() : f32[2]
      %2 = mul(%0, %1) : f32[2]
      return %2
    })";
  ExpectRewrite("algebraic,dce", kGraph, kGraph);
}

TEST(Algebraic, DoubleNegationAndDoubleNot) {
  ExpectRewrite("algebraic,dce", R"(
    graph {
      %0 = parameter() {name="x"} : f32[2]
      %1 = parameter() {name="b"} : bool[2]
      %2 = parameter() {name="i"} : i32[2]
      %3 = neg(%0) : f32[2]
      %4 = neg(%3) : f32[2]
      %5 = neg(%4) : f32[2]
      %6 = neg(%5) : f32[2]
      %7 = not(%1) : bool[2]
      %8 = not(%7) : bool[2]
      %9 = not(%2) : i32[2]
      %10 = not(%9) : i32[2]
      %11 = neg(%0) : f32[2]
      return %6, %8, %10, %11
    })",
                R"(
    graph {
      %0 = parameter() {name="x"} : f32[2]
      %1 = parameter() {name="b"} : bool[2]
      %2 = parameter() {name="i"} : i32[2]
      %3 = neg(%0) : f32[2]
      return %0, %1, %2, %3
    })");
}

TEST(Algebraic, IdentityCastReshapeBroadcastPermuteSlicePadFlipConcat) {
  ExpectRewrite("algebraic,dce", R"(
    graph {
      %0 = parameter() {name="x"} : f32[2,1,3]
      %1 = cast(%0) : f32[2,1,3]
      %2 = reshape(%1) : f32[2,1,3]
      %3 = broadcast(%2) : f32[2,1,3]
      %4 = permute(%3) {axes=[0,1,2]} : f32[2,1,3]
      %5 = slice(%4) {starts=[0,0,0], limits=[2,1,3], strides=[1,5,1]} : f32[2,1,3]
      %6 = pad(%5) {low=[0,0,0], high=[0,0,0], value=7} : f32[2,1,3]
      %7 = flip(%6) {axes=[1]} : f32[2,1,3]
      %8 = concat(%7) {axes=[2]} : f32[2,1,3]
      return %8
    })",
                R"(
    graph {
      %0 = parameter() {name="x"} : f32[2,1,3]
      return %0
    })");
}

TEST(Algebraic, NonIdentityMovementAndCastsStay) {
  const char* kGraph = R"(
    graph {
      %0 = parameter() {name="x"} : f32[2,1,3]
      %1 = cast(%0) : f64[2,1,3]
      %2 = permute(%0) {axes=[1,0,2]} : f32[1,2,3]
      %3 = slice(%0) {starts=[0,0,1], limits=[2,1,3]} : f32[2,1,2]
      %4 = flip(%0) {axes=[1,2]} : f32[2,1,3]
      %5 = pad(%0) {low=[0,0,1], high=[0,0,0]} : f32[2,1,4]
      return %1, %2, %3, %4, %5
    })";
  ExpectRewrite("algebraic,dce", kGraph, kGraph);
}

TEST(Algebraic, SelectWithUniformConditionOrEqualBranches) {
  ExpectRewrite("algebraic,dce", R"(
    graph {
      %0 = parameter() {name="a"} : f32[3]
      %1 = parameter() {name="b"} : f32[3]
      %2 = parameter() {name="c"} : bool[3]
      %3 = fill() {value=1} : bool[3]
      %4 = select(%3, %0, %1) : f32[3]
      %5 = constant() {literal=[false, false, false]} : bool[3]
      %6 = select(%5, %0, %1) : f32[3]
      %7 = select(%2, %1, %1) : f32[3]
      %8 = select(%2, %0, %1) : f32[3]
      return %4, %6, %7, %8
    })",
                R"(
    graph {
      %0 = parameter() {name="a"} : f32[3]
      %1 = parameter() {name="b"} : f32[3]
      %2 = parameter() {name="c"} : bool[3]
      %3 = select(%2, %0, %1) : f32[3]
      return %0, %1, %1, %3
    })");
}

TEST(Algebraic, PermuteOfSizeOneAxesWithUnchangedTypeIsIdentity) {
  // [1,3,1] with axes [2,1,0] is [1,3,1] again, and the 3-long axis does not move.
  ExpectRewrite("algebraic,dce", R"(
    graph {
      %0 = parameter() {name="x"} : f32[1,3,1]
      %1 = permute(%0) {axes=[2,1,0]} : f32[1,3,1]
      %2 = parameter() {name="y"} : f32[3,3]
      %3 = permute(%2) {axes=[1,0]} : f32[3,3]
      return %1, %3
    })",
                R"(
    graph {
      %0 = parameter() {name="x"} : f32[1,3,1]
      %1 = parameter() {name="y"} : f32[3,3]
      %2 = permute(%1) {axes=[1,0]} : f32[3,3]
      return %0, %2
    })");
}

TEST(Algebraic, ReductionsOfSingleElements) {
  ExpectRewrite("algebraic,dce", R"(
    graph {
      %0 = parameter() {name="x"} : f32[2,1,3]
      %1 = reduce_max(%0) {axes=[1]} : f32[2,1,3]
      %2 = reduce_min(%1) : f32[2,1,3]
      %3 = reduce_prod(%2) {axes=[1]} : f32[2,1,3]
      %4 = argmax(%3) {axes=[1]} : i64[2,1,3]
      %5 = parameter() {name="n"} : i32[1,2]
      %6 = reduce_sum(%5) {axes=[0]} : i32[1,2]
      return %3, %4, %6
    })",
                R"(
    graph {
      %0 = parameter() {name="x"} : f32[2,1,3]
      %1 = fill() : i64[2,1,3]
      %2 = parameter() {name="n"} : i32[1,2]
      return %0, %1, %2
    })");
}

TEST(Algebraic, FloatSumOfOneElementAndRealReductionsStay) {
  // 0 + (-0) is +0, so a float sum over a size-1 axis is not x.
  const char* kGraph = R"(
    graph {
      %0 = parameter() {name="x"} : f32[2,1]
      %1 = reduce_sum(%0) {axes=[1]} : f32[2,1]
      %2 = reduce_max(%0) {axes=[0]} : f32[1,1]
      %3 = argmin(%0) {axes=[0]} : i64[1,1]
      return %1, %2, %3
    })";
  ExpectRewrite("algebraic,dce", kGraph, kGraph);
}

// ---- Movement folding ---------------------------------------------------------------------------

TEST(MovementFold, ReshapeOfReshape) {
  ExpectRewrite("movement_fold,dce", R"(
    graph {
      %0 = parameter() {name="x"} : f32[2,6]
      %1 = reshape(%0) : f32[3,4]
      %2 = reshape(%1) : f32[12]
      %3 = reshape(%1) : f32[2,6]
      return %2, %3
    })",
                R"(
    graph {
      %0 = parameter() {name="x"} : f32[2,6]
      %1 = reshape(%0) : f32[12]
      return %1, %0
    })");
}

TEST(MovementFold, PermuteOfPermuteComposes) {
  // Output axis i of the outer permute reads inner axis q[i], which reads x axis p[q[i]]:
  // p = [1,2,0], q = [2,0,1] gives [0,1,2] (the identity); q = [1,0,2] gives [2,1,0].
  ExpectRewrite("movement_fold,dce", R"(
    graph {
      %0 = parameter() {name="x"} : f32[2,3,4]
      %1 = permute(%0) {axes=[1,2,0]} : f32[3,4,2]
      %2 = permute(%1) {axes=[2,0,1]} : f32[2,3,4]
      %3 = permute(%1) {axes=[1,0,2]} : f32[4,3,2]
      return %2, %3
    })",
                R"(
    graph {
      %0 = parameter() {name="x"} : f32[2,3,4]
      %1 = permute(%0) {axes=[2,1,0]} : f32[4,3,2]
      return %0, %1
    })");
}

TEST(MovementFold, BroadcastOfBroadcast) {
  ExpectRewrite("movement_fold,dce", R"(
    graph {
      %0 = parameter() {name="x"} : f32[1,1,3]
      %1 = broadcast(%0) : f32[1,4,3]
      %2 = broadcast(%1) : f32[5,4,3]
      return %2
    })",
                R"(
    graph {
      %0 = parameter() {name="x"} : f32[1,1,3]
      %1 = broadcast(%0) : f32[5,4,3]
      return %1
    })");
}

TEST(MovementFold, MovementOfAFillIsAFill) {
  ExpectRewrite("movement_fold,dce", R"(
    graph {
      %0 = fill() {value=3} : f32[2,3]
      %1 = reshape(%0) : f32[3,2]
      %2 = permute(%0) {axes=[1,0]} : f32[3,2]
      %3 = slice(%0) {starts=[0,1], limits=[2,3]} : f32[2,2]
      %4 = flip(%0) {axes=[1]} : f32[2,3]
      %5 = reshape(%0) : f32[1,6]
      %6 = broadcast(%5) : f32[4,6]
      %7 = pad(%0) {low=[1,0], high=[0,0], value=3} : f32[3,3]
      %8 = concat(%0, %0) {axes=[0]} : f32[4,3]
      return %1, %2, %3, %4, %6, %7, %8
    })",
                R"(
    graph {
      %0 = fill() {value=3} : f32[3,2]
      %1 = fill() {value=3} : f32[3,2]
      %2 = fill() {value=3} : f32[2,2]
      %3 = fill() {value=3} : f32[2,3]
      %4 = fill() {value=3} : f32[4,6]
      %5 = fill() {value=3} : f32[3,3]
      %6 = fill() {value=3} : f32[4,3]
      return %0, %1, %2, %3, %4, %5, %6
    })");
}

TEST(MovementFold, BroadcastOfAScalarConstantIsAFill) {
  ExpectRewrite("movement_fold,dce", R"(
    graph {
      %0 = constant() {literal=[0.5]} : f32[]
      %1 = reshape(%0) : f32[1,1]
      %2 = broadcast(%1) : f32[300,400]
      return %2
    })",
                R"(
    graph {
      %0 = fill() {value=0.5} : f32[300,400]
      return %0
    })");
}

TEST(MovementFold, PadOrConcatWithADifferentValueStays) {
  const char* kGraph = R"(
    graph {
      %0 = fill() {value=3} : f32[2]
      %1 = pad(%0) {low=[1], high=[0], value=4} : f32[3]
      %2 = fill() {value=4} : f32[2]
      %3 = concat(%0, %2) {axes=[0]} : f32[4]
      return %1, %3
    })";
  ExpectRewrite("movement_fold,dce", kGraph, kGraph);
}

TEST(MovementFold, SliceOfSliceComposesStartsAndStrides) {
  // Inner: x[1:10:2] = x[1,3,5,7,9]; outer: that [1:5:3] = elements 1 and 4 = x[3], x[9].
  // One slice: start 1 + 1*2 = 3, stride 2*3 = 6, two elements: limit 3 + 6 + 1 = 10.
  ExpectRewrite("movement_fold,dce", R"(
    graph {
      %0 = parameter() {name="x"} : f32[12,4]
      %1 = slice(%0) {starts=[1,0], limits=[10,4], strides=[2,1]} : f32[5,4]
      %2 = slice(%1) {starts=[1,1], limits=[5,3]} : f32[4,2]
      %3 = slice(%1) {starts=[1,0], limits=[5,4], strides=[3,1]} : f32[2,4]
      return %2, %3
    })",
                R"(
    graph {
      %0 = parameter() {name="x"} : f32[12,4]
      %1 = slice(%0) {starts=[3,1], limits=[10,3], strides=[2,1]} : f32[4,2]
      %2 = slice(%0) {starts=[3,0], limits=[10,4], strides=[6,1]} : f32[2,4]
      return %1, %2
    })");
}

TEST(MovementFold, FlipOfFlip) {
  ExpectRewrite("movement_fold,dce", R"(
    graph {
      %0 = parameter() {name="x"} : f32[2,3,4]
      %1 = flip(%0) {axes=[0,2]} : f32[2,3,4]
      %2 = flip(%1) {axes=[0,2]} : f32[2,3,4]
      %3 = flip(%1) {axes=[1,2]} : f32[2,3,4]
      return %2, %3
    })",
                R"(
    graph {
      %0 = parameter() {name="x"} : f32[2,3,4]
      %1 = flip(%0) {axes=[0,1]} : f32[2,3,4]
      return %0, %1
    })");
}

TEST(MovementFold, PermuteOfSizeOneAxesIsAReshape) {
  ExpectRewrite("movement_fold,dce", R"(
    graph {
      %0 = parameter() {name="x"} : f32[1,3,1,4]
      %1 = permute(%0) {axes=[1,0,3,2]} : f32[3,1,4,1]
      %2 = permute(%0) {axes=[2,1,0,3]} : f32[1,3,1,4]
      %3 = permute(%0) {axes=[3,1,0,2]} : f32[4,3,1,1]
      return %1, %2, %3
    })",
                R"(
    graph {
      %0 = parameter() {name="x"} : f32[1,3,1,4]
      %1 = reshape(%0) : f32[3,1,4,1]
      %2 = permute(%0) {axes=[3,1,0,2]} : f32[4,3,1,1]
      return %1, %0, %2
    })");
}

TEST(MovementFold, DifferentMovementOpsDoNotCompose) {
  const char* kGraph = R"(
    graph {
      %0 = parameter() {name="x"} : f32[2,3]
      %1 = permute(%0) {axes=[1,0]} : f32[3,2]
      %2 = reshape(%1) : f32[6]
      %3 = reshape(%0) : f32[1,6]
      %4 = broadcast(%3) : f32[2,6]
      return %2, %4
    })";
  ExpectRewrite("movement_fold,dce", kGraph, kGraph);
}

TEST(MovementFold, TransposedProductOfAutodiffsWeightGradient) {
  // y = x W^T: autodiff's dW is permute(matmul(permute(x), dy)); it becomes matmul(permute(dy),
  // x) (the operand permutes cancel or are new), so dW comes out in W's layout.
  ExpectRewrite("movement_fold,dce", R"(
    graph {
      %0 = parameter() {name="x"} : f32[4,3]
      %1 = parameter() {name="dy"} : f32[4,2]
      %2 = permute(%0) {axes=[1,0]} : f32[3,4]
      %3 = matmul(%2, %1) : f32[3,2]
      %4 = permute(%3) {axes=[1,0]} : f32[2,3]
      return %4
    })",
                R"(
    graph {
      %0 = parameter() {name="x"} : f32[4,3]
      %1 = parameter() {name="dy"} : f32[4,2]
      %2 = permute(%1) {axes=[1,0]} : f32[2,4]
      %3 = matmul(%2, %0) : f32[2,3]
      return %3
    })");
}

TEST(MovementFold, TransposedBatchedProduct) {
  ExpectRewrite("movement_fold,dce", R"(
    graph {
      %0 = parameter() {name="a"} : f32[5,2,3]
      %1 = parameter() {name="b"} : f32[5,3,4]
      %2 = matmul(%0, %1) : f32[5,2,4]
      %3 = permute(%2) {axes=[0,2,1]} : f32[5,4,2]
      return %3
    })",
                R"(
    graph {
      %0 = parameter() {name="a"} : f32[5,2,3]
      %1 = parameter() {name="b"} : f32[5,3,4]
      %2 = permute(%1) {axes=[0,2,1]} : f32[5,4,3]
      %3 = permute(%0) {axes=[0,2,1]} : f32[5,3,2]
      %4 = matmul(%2, %3) : f32[5,4,2]
      return %4
    })");
}

TEST(MovementFold, TransposedProductStaysWhenTheProductIsUsedElsewhere) {
  // Swapping would compute the product twice (or, for an output, keep both).
  const char* kUsedTwice = R"(
    graph {
      %0 = parameter() {name="a"} : f32[2,3]
      %1 = parameter() {name="b"} : f32[3,4]
      %2 = matmul(%0, %1) : f32[2,4]
      %3 = permute(%2) {axes=[1,0]} : f32[4,2]
      %4 = exp(%2) : f32[2,4]
      return %3, %4
    })";
  ExpectRewrite("movement_fold,dce", kUsedTwice, kUsedTwice);
  const char* kOutput = R"(
    graph {
      %0 = parameter() {name="a"} : f32[2,3]
      %1 = parameter() {name="b"} : f32[3,4]
      %2 = matmul(%0, %1) : f32[2,4]
      %3 = permute(%2) {axes=[1,0]} : f32[4,2]
      return %3, %2
    })";
  ExpectRewrite("movement_fold,dce", kOutput, kOutput);
  // A permute that moves a batch axis is not a transpose of the product.
  const char* kBatchAxis = R"(
    graph {
      %0 = parameter() {name="a"} : f32[5,2,3]
      %1 = parameter() {name="b"} : f32[5,3,4]
      %2 = matmul(%0, %1) : f32[5,2,4]
      %3 = permute(%2) {axes=[2,1,0]} : f32[4,2,5]
      return %3
    })";
  ExpectRewrite("movement_fold,dce", kBatchAxis, kBatchAxis);
}

// ---- The pipeline -------------------------------------------------------------------------------

TEST(Simplify, PipelineReachesAFixedPoint) {
  // Folding makes the 1 that algebraic needs; CSE merges the two exps; DCE drops the rest.
  const ir::Graph input = Parse(R"(
    graph {
      %0 = parameter() {name="x"} : f32[4]
      %1 = fill() {value=0.5} : f32[4]
      %2 = fill() {value=2} : f32[4]
      %3 = mul(%1, %2) : f32[4]
      %4 = exp(%0) : f32[4]
      %5 = mul(%4, %3) : f32[4]
      %6 = exp(%0) : f32[4]
      %7 = reshape(%6) : f32[2,2]
      %8 = reshape(%7) : f32[4]
      %9 = neg(%8) : f32[4]
      %10 = neg(%9) : f32[4]
      %11 = add(%5, %10) : f32[4]
      return %11 as "y"
    })");
  PassManager pm(testing::QuietOptions());
  AddSimplifyPasses(pm);
  absl::StatusOr<ir::Graph> result = pm.Run(input);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(testing::NormalizeWhitespace(ir::PrintGraph(*result)), testing::NormalizeWhitespace(R"(
    graph {
      %0 = parameter() {name="x"} : f32[4]
      %1 = exp(%0) : f32[4]
      %2 = add(%1, %1) : f32[4]
      return %2 as "y"
    })"));
  testing::ExpectSameOutputs(input, *result, 1);
  // One round simplifies, a second confirms nothing changes.
  EXPECT_EQ(pm.last_run().size(), 10u);
  EXPECT_EQ(pm.ToString(), "(cse, constant_fold, algebraic, movement_fold, dce)x8");
}

TEST(Simplify, MakeSimplifyPassKnowsEveryPass) {
  for (const char* name : {"cse", "dce", "constant_fold", "algebraic", "movement_fold"}) {
    absl::StatusOr<std::unique_ptr<Pass>> pass = MakeSimplifyPass(name);
    ASSERT_TRUE(pass.ok()) << name;
    EXPECT_STREQ((*pass)->name(), name);
  }
  EXPECT_THAT(MakeSimplifyPass("inline").status().message(), HasSubstr("no simplify pass"));
}

TEST(Simplify, KeepsSourceLocations) {
  ir::Builder b;
  const ir::NodeId x = b.Parameter("x", {ir::DType::kF32, {2}});
  const ir::NodeId one = b.Fill(1, {ir::DType::kF32, {2}});
  const int line = __LINE__ + 1;
  const ir::NodeId e = b.Unary(ir::Op::kExp, b.Binary(ir::Op::kMul, x, one));
  b.Output(b.Binary(ir::Op::kAdd, e, e));
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok());
  PassManager pm(testing::QuietOptions());
  AddSimplifyPasses(pm);
  absl::StatusOr<ir::Graph> result = pm.Run(*graph);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->num_nodes(), 3);
  EXPECT_EQ(result->node(1).op, ir::Op::kExp);
  EXPECT_EQ(result->node(1).loc.line(), static_cast<uint32_t>(line));
  EXPECT_THAT(ir::PrintGraph(*result, {.locations = true}),
              HasSubstr(absl::StrCat("simplify_test.cc:", line)));
}

}  // namespace
}  // namespace kiln::passes
