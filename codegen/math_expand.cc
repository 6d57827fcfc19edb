#include "codegen/math_expand.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "codegen/kernel_rewriter.h"

namespace kiln::codegen {
namespace {

constexpr ScalarType kF32 = ScalarType::kF32;
constexpr ScalarType kI32 = ScalarType::kI32;

bool IsExpandable(const Expr& e) {
  if (e.type != kF32) return false;
  switch (e.op) {
    case ExprOp::kExp:
    case ExprOp::kLog:
    case ExprOp::kTanh:
    case ExprOp::kErf:
      return true;
    default:
      return false;
  }
}

// Rebuilds the expression DAG in demand order (see kernel_rewriter.h), emitting the f32
// transcendental functions as their expansions.
class Expander : public KernelRewriter {
 public:
  using KernelRewriter::KernelRewriter;

 private:
  ValueId Rewrite(const Expr& e) override {
    if (auto x = MatchSigmoid(e)) return ScaledSigmoid(Get(*x), 1.0);
    // gelu_tanh's (y / 2)(1 + tanh(u)) = y sigmoid(2u): the halving and the doubling cancel.
    // Both are exact for normal values, so the bits are the unfolded product's; two fewer
    // multiplies per element in a loop bound by its arithmetic.
    if (auto half_product = MatchHalfTimesOnePlusTanh(e)) {
      return Bin(ExprOp::kMul, Get(half_product->first),
                 ScaledSigmoid(Doubled(half_product->second), 1.0));
    }
    // 1 + tanh(x) = 2 sigmoid(2x): one exp and one division, where tanh's expansion needs its
    // polynomial, the exp and the division, and adding 1 to tanh(x) near -1 cancels.
    if (auto x = MatchOnePlusTanh(e)) return ScaledSigmoid(Doubled(*x), 2.0);
    if (!IsExpandable(e)) return Copy(e);
    const ValueId x = Get(e.operands[0]);
    switch (e.op) {
      case ExprOp::kExp:
        return Exp(x);
      case ExprOp::kLog:
        return Log(x);
      case ExprOp::kTanh:
        return Tanh(x);
      default:
        return Erf(x);
    }
  }

  // reciprocal(add(exp(neg x), 1)) or div(1, add(...)) with either add order, all f32: returns x.
  std::optional<ValueId> MatchSigmoid(const Expr& e) const {
    if (e.type != kF32) return std::nullopt;
    ValueId sum;
    if (e.op == ExprOp::kReciprocal) {
      sum = e.operands[0];
    } else if (e.op == ExprOp::kDiv && IsConstant(e.operands[0], 1.0)) {
      sum = e.operands[1];
    } else {
      return std::nullopt;
    }
    const Expr& add = input().expr(sum);
    if (add.op != ExprOp::kAdd) return std::nullopt;
    ValueId exp_id;
    if (IsConstant(add.operands[1], 1.0)) {
      exp_id = add.operands[0];
    } else if (IsConstant(add.operands[0], 1.0)) {
      exp_id = add.operands[1];
    } else {
      return std::nullopt;
    }
    const Expr& exp = input().expr(exp_id);
    if (exp.op != ExprOp::kExp) return std::nullopt;
    const Expr& neg = input().expr(exp.operands[0]);
    if (neg.op != ExprOp::kNeg) return std::nullopt;
    return neg.operands[0];
  }

  // add(tanh(x), 1) or add(1, tanh(x)), all f32 (gelu_tanh's 0.5 y (1 + tanh(u))): returns x.
  std::optional<ValueId> MatchOnePlusTanh(const Expr& e) const {
    if (e.type != kF32 || e.op != ExprOp::kAdd) return std::nullopt;
    for (int k = 0; k < 2; ++k) {
      const Expr& tanh = input().expr(e.operands[static_cast<size_t>(k)]);
      if (tanh.op == ExprOp::kTanh && IsConstant(e.operands[static_cast<size_t>(1 - k)], 1.0)) {
        return tanh.operands[0];
      }
    }
    return std::nullopt;
  }

  // mul(mul(y, 1/2), 1 + tanh(u)) with either operand order in both products, all f32:
  // returns {y, u}.
  std::optional<std::pair<ValueId, ValueId>> MatchHalfTimesOnePlusTanh(const Expr& e) const {
    if (e.type != kF32 || e.op != ExprOp::kMul) return std::nullopt;
    for (int k = 0; k < 2; ++k) {
      const Expr& half = input().expr(e.operands[static_cast<size_t>(k)]);
      const std::optional<ValueId> u =
          MatchOnePlusTanh(input().expr(e.operands[static_cast<size_t>(1 - k)]));
      if (!u || half.op != ExprOp::kMul) continue;
      for (int h = 0; h < 2; ++h) {
        if (IsConstant(half.operands[static_cast<size_t>(h)], 0.5)) {
          return std::make_pair(half.operands[static_cast<size_t>(1 - h)], *u);
        }
      }
    }
    return std::nullopt;
  }

  // 2x: w (2c) when x is the product w c with an f32 constant (gelu_tanh's u = sqrt(2/pi)(...)):
  // doubling c is exact, and so w (2c) has the bits of 2 (w c) for normal values; else x + x.
  ValueId Doubled(ValueId x) {
    const Expr& product = input().expr(x);
    if (product.op == ExprOp::kMul && product.type == kF32) {
      for (int k = 0; k < 2; ++k) {
        const Expr& c = input().expr(product.operands[static_cast<size_t>(k)]);
        if (c.op == ExprOp::kConst && std::isfinite(static_cast<float>(2.0 * c.float_value))) {
          return Bin(ExprOp::kMul, Get(product.operands[static_cast<size_t>(1 - k)]),
                     F(2.0 * c.float_value));
        }
      }
    }
    const ValueId t = Get(x);
    return Bin(ExprOp::kAdd, t, t);
  }

  bool IsConstant(ValueId id, double value) const {
    const Expr& e = input().expr(id);
    return e.op == ExprOp::kConst && e.type == kF32 && e.float_value == value;
  }

  // ---- Building new expressions ---------------------------------------------------------------

  ValueId F(double value) { return FloatConst(kF32, value); }
  ValueId I(int64_t value) { return IntConst(kI32, static_cast<int32_t>(value)); }
  ValueId Fma(ValueId a, ValueId b, ValueId c) { return Op(ExprOp::kFma, TypeOf(a), {a, b, c}); }
  ValueId Bits(ValueId f) { return Op(ExprOp::kBitcast, kI32, {f}); }
  ValueId Float(ValueId i) { return Op(ExprOp::kBitcast, kF32, {i}); }

  // c[0] x^n + ... + c[n] by Horner's rule, one fma per coefficient.
  ValueId Horner(ValueId x, std::initializer_list<double> coefficients) {
    auto it = coefficients.begin();
    ValueId acc = F(*it++);
    for (; it != coefficients.end(); ++it) acc = Fma(acc, x, F(*it));
    return acc;
  }

  // |r| with the sign bit of x (r >= 0 or NaN): keeps tanh(-0) = -0.
  ValueId WithSignOf(ValueId r, ValueId x) {
    const ValueId sign = Bin(ExprOp::kAnd, Bits(x), I(std::numeric_limits<int32_t>::min()));
    return Float(Bin(ExprOp::kOr, Bits(r), sign));
  }

  // 2^k for integer k in [-126, 127], built in the exponent field.
  ValueId Pow2(ValueId k) { return Float(Bin(ExprOp::kShl, Bin(ExprOp::kAdd, k, I(127)), I(23))); }

  // ---- The expansions (coefficients and their sources: see math_expand.h) ---------------------

  // round(x log2 e) is -191 here, so that 2^(n + 64) below has a zero exponent field: +0.
  static constexpr double kZeroScaleOne = -132.39;
  // round(x log2 e) is -254 here, so that 2^(n/2) and 2^(n - n/2) are both +0.
  static constexpr double kZeroScaleTwo = -176.06;

  // exp(x); `nonpositive` promises x <= 0 or NaN (sigmoid's exp(-|x|)), which needs no upper clamp.
  ValueId Exp(ValueId x, bool nonpositive = false) {
    // Above 89 the result is inf and below -104 it is 0 anyway: the clamps keep n in the
    // exponent range. The lower one is where the scale factors below become exactly +0 (n = -191
    // for one scale, -254 for two), not -104: x beyond it (an attention mask's -3.4e38 or -1e4,
    // most of a padded batch's scores) then multiplies zeros, where clamping at -104 made every
    // such lane round a subnormal product, which x86 cores do in a microcode assist costing
    // about a hundred cycles (a quarter of all-MiniLM-L6-v2's time went to its softmax).
    // Between -104 and the clamp the products underflow to the 0 that exp(x) rounds to.
    // max/min propagate NaN, so NaN flows through to the polynomial.
    ValueId xc = Bin(ExprOp::kMax, x, F(nonpositive ? kZeroScaleOne : kZeroScaleTwo));
    if (!nonpositive) xc = Bin(ExprOp::kMin, xc, F(89.0));
    const ValueId n = Un(ExprOp::kRound, Bin(ExprOp::kMul, xc, F(1.44269504088896341)));
    // k = int(n) read from the low mantissa bits of n + 1.5 2^23 (exact: |n| <= 150), not by a
    // float-to-int conversion, which is a saturating one with NaN handling (several instructions
    // on x86). Adding the shifter to x log2 e directly would also round, but a GPU compiler may
    // fold (a + c) - c back to a. NaN gives a meaningless k, but y is NaN then.
    constexpr double kShifter = 12582912.0;  // 1.5 * 2^23, bits 0x4B400000
    const ValueId k = Bin(ExprOp::kSub, Bits(Bin(ExprOp::kAdd, n, F(kShifter))), I(0x4B400000));
    // Cody-Waite: ln2 = 0.693359375 - 2.12194440e-4 (the first part has 9 bits: n * it is exact).
    ValueId r = Fma(n, F(-0.693359375), xc);
    r = Fma(n, F(2.12194440e-4), r);
    // The polynomial by Estrin's scheme: as many fmas as Horner's rule, but three levels deep
    // instead of five, so an elementwise loop keeps more vectors in flight.
    const ValueId r2 = Bin(ExprOp::kMul, r, r);
    const ValueId p01 = Fma(F(1.9875691500E-4), r, F(1.3981999507E-3));
    const ValueId p23 = Fma(F(8.3334519073E-3), r, F(4.1665795894E-2));
    const ValueId p45 = Fma(F(1.6666665459E-1), r, F(5.0000001201E-1));
    const ValueId p = Fma(Fma(p01, r2, p23), r2, p45);
    const ValueId q = Fma(p, r2, r);  // exp(r) = 1 + q
    // n in [-254, 128]: scale in two steps, each by a normal float (or +0 at the clamp), so
    // subnormal results are rounded once (by the last multiply) and 2^128 * y can overflow.
    // (1 + q) 2^a is one fma: scaling by a power of two that keeps the result normal is exact,
    // so it rounds as adding 1 did, a step shorter. For x <= 0, n in [-191, 0]: 2^(n + 64) then
    // the constant 2^-64 (two integer operations instead of seven); otherwise 2^(n/2) then
    // 2^(n - n/2). Both give the bits of (1 + q) 2^n rounded once.
    if (nonpositive) {
      const ValueId scale = Pow2(Bin(ExprOp::kAdd, k, I(64)));
      return Bin(ExprOp::kMul, Fma(q, scale, scale), F(0x1p-64));
    }
    const ValueId k1 = Bin(ExprOp::kShr, k, I(1));
    const ValueId k2 = Bin(ExprOp::kSub, k, k1);
    const ValueId scale1 = Pow2(k1);
    return Bin(ExprOp::kMul, Fma(q, scale1, scale1), Pow2(k2));
  }

  ValueId Log(ValueId x) {
    // frexp: x = m 2^e with m in [0.5, 1); subnormals are first scaled by 2^23.
    const ValueId subnormal = Cmp(ExprOp::kLt, x, F(std::numeric_limits<float>::min()));
    const ValueId scaled = Sel(subnormal, Bin(ExprOp::kMul, x, F(8388608.0)), x);
    const ValueId bits = Bits(scaled);
    ValueId e =
        Bin(ExprOp::kSub, Bin(ExprOp::kAnd, Bin(ExprOp::kShr, bits, I(23)), I(0xff)), I(126));
    e = Bin(ExprOp::kSub, e, Sel(subnormal, I(23), I(0)));
    const ValueId m =
        Float(Bin(ExprOp::kOr, Bin(ExprOp::kAnd, bits, I(0x007fffff)), I(0x3f000000)));
    // Move m into [sqrt(1/2), sqrt(2)) so that t = m - 1 is small.
    const ValueId below = Cmp(ExprOp::kLt, m, F(0.707106781186547524));
    const ValueId ef = Op(ExprOp::kCast, kF32, {Bin(ExprOp::kSub, e, Sel(below, I(1), I(0)))});
    const ValueId t = Bin(ExprOp::kSub, Sel(below, Bin(ExprOp::kAdd, m, m), m), F(1.0));
    const ValueId z = Bin(ExprOp::kMul, t, t);
    ValueId y = Horner(
        t, {7.0376836292E-2, -1.1514610310E-1, 1.1676998740E-1, -1.2420140846E-1, 1.4249322787E-1,
            -1.6668057665E-1, 2.0000714765E-1, -2.4999993993E-1, 3.3333331174E-1});
    y = Bin(ExprOp::kMul, Bin(ExprOp::kMul, y, t), z);
    y = Fma(ef, F(-2.12194440e-4), y);
    y = Fma(z, F(-0.5), y);
    ValueId r = Fma(ef, F(0.693359375), Bin(ExprOp::kAdd, t, y));
    const double inf = std::numeric_limits<double>::infinity();
    r = Sel(Cmp(ExprOp::kEq, x, F(inf)), F(inf), r);
    r = Sel(Cmp(ExprOp::kEq, x, F(0.0)), F(-inf), r);
    r = Sel(Cmp(ExprOp::kLt, x, F(0.0)), F(std::numeric_limits<double>::quiet_NaN()), r);
    return Sel(Cmp(ExprOp::kNe, x, x), x, r);
  }

  ValueId Tanh(ValueId x) {
    const ValueId a = Un(ExprOp::kAbs, x);
    const ValueId z = Bin(ExprOp::kMul, x, x);
    const ValueId p = Horner(z, {-5.70498872745E-3, 2.06390887954E-2, -5.37397155531E-2,
                                 1.33314422036E-1, -3.33332819422E-1});
    const ValueId small = Fma(Bin(ExprOp::kMul, p, z), a, a);
    // exp(2|x|) overflows to inf for |x| > 44.4, giving exactly 1.
    const ValueId e = Exp(Bin(ExprOp::kAdd, a, a));
    const ValueId big =
        Bin(ExprOp::kSub, F(1.0), Bin(ExprOp::kDiv, F(2.0), Bin(ExprOp::kAdd, e, F(1.0))));
    return WithSignOf(Sel(Cmp(ExprOp::kLt, a, F(0.625)), small, big), x);
  }

  ValueId Erf(ValueId x) {
    const ValueId a = Un(ExprOp::kAbs, x);
    const ValueId x2 = Bin(ExprOp::kMul, x, x);
    const ValueId p = Horner(x2, {-0x1.3a1a82p-11, 0x1.473f48p-08, -0x1.b68bd2p-06, 0x1.ce1a46p-04,
                                  -0x1.8126e0p-02, 0x1.06eba6p-03});
    const ValueId small = Fma(p, x, x);
    // erf(|x|) = 1 - exp(-(|x| + |x| Q(|x|))); at |x| = 4 the result already rounds to 1.
    // min propagates NaN.
    const ValueId ac = Bin(ExprOp::kMin, a, F(4.0));
    ValueId q = Fma(F(0x1.222900p-16), ac, F(-0x1.91d2ccp-12));
    const ValueId u = Fma(F(0x1.fd1336p-9), ac, F(-0x1.8d6300p-6));
    q = Fma(q, Bin(ExprOp::kMul, ac, ac), u);
    q = Fma(q, ac, F(0x1.b55cb0p-4));
    q = Fma(q, ac, F(0x1.450aa0p-1));
    q = Fma(q, ac, F(0x1.079d0cp-3));
    q = Fma(q, ac, ac);
    const ValueId big = WithSignOf(Bin(ExprOp::kSub, F(1.0), Exp(Un(ExprOp::kNeg, q))), x);
    return Sel(Cmp(ExprOp::kLt, a, F(0.875)), small, big);
  }

  // scale * sigmoid(x) with scale a power of two (exact scaling): e = exp(-|x|), then
  // (x >= 0 ? scale : scale e) / (1 + e).
  ValueId ScaledSigmoid(ValueId x, double scale) {
    const ValueId e = Exp(Un(ExprOp::kNeg, Un(ExprOp::kAbs, x)), /*nonpositive=*/true);
    const ValueId scaled = scale == 1.0 ? e : Bin(ExprOp::kMul, e, F(scale));
    const ValueId numerator = Sel(Cmp(ExprOp::kGe, x, F(0.0)), F(scale), scaled);
    return Bin(ExprOp::kDiv, numerator, Bin(ExprOp::kAdd, F(1.0), e));
  }
};

}  // namespace

bool NeedsMathExpansion(const Kernel& kernel) {
  // Every pattern above has an exp or a tanh in it.
  for (const Expr& e : kernel.exprs) {
    if (IsExpandable(e)) return true;
  }
  return false;
}

Kernel ExpandMath(Kernel kernel) {
  if (!NeedsMathExpansion(kernel)) return kernel;
  return Expander(kernel).Run();
}

}  // namespace kiln::codegen
