// Buffer donation on kiln::Cpu (frontend/engine.h, DonatingExecutor; codegen/cpu/graph_compiler.h,
// CompileGraph): after a training step the new parameter and momentum are written into the old
// ones' buffers when nothing can observe the old values any more, and not when the user still
// holds them (or a loss's tape still reaches them). Values are checked against the same steps on
// the Reference backend, which ignores donation.
#include <kiln/kiln.h>

#include <cmath>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "codegen/cpu/graph_compiler.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

template <class B>
struct Model {
  Tensor<B, 2> w;   // [3, 2], requires a gradient
  Tensor<B, 1> b;   // [2], requires a gradient
  Tensor<B, 2> vw;  // momentum buffers
  Tensor<B, 1> vb;
};

template <class B>
Model<B> Init() {
  const typename B::Device device;
  Model<B> m{
      Tensor<B, 2>::from_data({{0.1, -0.2}, {0.3, 0.05}, {-0.4, 0.2}}, device).require_grad(),
      Tensor<B, 1>::from_data({0.01, -0.02}, device).require_grad(),
      Tensor<B, 2>::zeros({3, 2}, device), Tensor<B, 1>::zeros({2}, device)};
  realize(m.w, m.b, m.vw, m.vb);
  return m;
}

// One step of SGD with momentum 0.9 and lr 0.05 on a linear least-squares loss: forward,
// backward and update realized as one graph. With `keep_tape` the loss keeps its tape (it is not
// detached), so the old parameters stay reachable after the step. Returns the loss.
template <class B>
Tensor<B, 0> TrainStep(Model<B>& m, bool keep_tape = false, double lr = 0.05) {
  const typename B::Device device;
  const auto x =
      Tensor<B, 2>::from_data({{1, 2, -1}, {0.5, -1, 2}, {3, 0, 1}, {-2, 1, 0.5}}, device);
  const auto y = Tensor<B, 2>::from_data({{1, 0}, {0, 1}, {2, -1}, {-1, 3}}, device);
  Tensor<B, 0> loss = (x.matmul(m.w) + m.b.template unsqueeze<0>() - y).square().mean();
  {
    Gradients grads = loss.backward();
    NoGradGuard no_grad;
    m.vw = 0.9 * m.vw + *m.w.grad(grads);
    m.vb = 0.9 * m.vb + *m.b.grad(grads);
    m.w = (m.w - lr * m.vw).require_grad();
    m.b = (m.b - lr * m.vb).require_grad();
  }
  if (!keep_tape) loss = loss.detach();
  realize(m.w, m.b, m.vw, m.vb, loss);
  return loss;
}

template <class B, int R>
const void* Address(const Tensor<B, R>& t) {
  return detail::Data(t.ref(), std::source_location::current()).data();
}

template <int R>
void ExpectSameValues(const Tensor<Cpu, R>& actual, const Tensor<Reference, R>& expected) {
  const std::vector<double> a = actual.template to_vector<double>();
  const std::vector<double> e = expected.template to_vector<double>();
  ASSERT_EQ(a.size(), e.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], e[i], 1e-5 * (1 + std::abs(e[i]))) << "element " << i;
  }
}

void ExpectSameModel(const Model<Cpu>& cpu, const Model<Reference>& ref) {
  ExpectSameValues(cpu.w, ref.w);
  ExpectSameValues(cpu.b, ref.b);
  ExpectSameValues(cpu.vw, ref.vw);
  ExpectSameValues(cpu.vb, ref.vb);
}

TEST(Donation, DroppedParametersAreUpdatedInPlace) {
  Model<Cpu> cpu = Init<Cpu>();
  Model<Reference> ref = Init<Reference>();
  for (int step = 0; step < 4; ++step) {
    const void* w = Address(cpu.w);
    const void* b = Address(cpu.b);
    const void* vw = Address(cpu.vw);
    const void* vb = Address(cpu.vb);
    const int64_t donated_before = detail::GetEngineStats().arguments_donated;
    const int64_t compiles_before = codegen::cpu::GetGraphCacheStats().compiles;
    const Tensor<Cpu, 0> loss = TrainStep(cpu);
    const int64_t donated = detail::GetEngineStats().arguments_donated - donated_before;
    const Tensor<Reference, 0> expected_loss = TrainStep(ref);
    ExpectSameValues(loss, expected_loss);
    ExpectSameModel(cpu, ref);
    // The old values were dropped: the new ones live in their buffers (no copy, no allocation).
    EXPECT_EQ(Address(cpu.w), w) << "step " << step;
    EXPECT_EQ(Address(cpu.b), b) << "step " << step;
    EXPECT_EQ(Address(cpu.vw), vw) << "step " << step;
    EXPECT_EQ(Address(cpu.vb), vb) << "step " << step;
    EXPECT_EQ(donated, 4) << "step " << step;
    // Donation is part of the compile-cache key, and the same from step to step.
    if (step >= 1) {
      EXPECT_EQ(codegen::cpu::GetGraphCacheStats().compiles, compiles_before) << "step " << step;
    }
  }
}

// The updates that run in place are compiled only in that form: the CPU backend compiles a graph's
// kernels after donation has rebuilt them (KILN_TIME_PASSES prints a line per kernel compiled).
TEST(Donation, InPlaceKernelsAreCompiledOnce) {
  Model<Cpu> cpu = Init<Cpu>();
  ASSERT_EQ(::setenv("KILN_TIME_PASSES", "1", 1), 0);
  ::testing::internal::CaptureStderr();
  TrainStep(cpu, false, 0.0371);  // (a learning rate no other test uses: a graph of its own)
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(::unsetenv("KILN_TIME_PASSES"), 0);
  std::set<std::string> groups;
  int kernels = 0, in_place = 0;
  for (absl::string_view line : absl::StrSplit(err, '\n')) {
    if (!absl::StartsWith(line, "kiln: cpu kernel ")) continue;
    ++kernels;
    in_place += absl::StrContains(line, "kernel_in_place_");
    const size_t at = line.rfind("(group ");
    ASSERT_NE(at, absl::string_view::npos) << line;
    EXPECT_TRUE(groups.insert(std::string(line.substr(at))).second) << "compiled twice: " << line;
  }
  EXPECT_GE(in_place, 1) << err;
  EXPECT_EQ(kernels, static_cast<int>(groups.size())) << err;
  EXPECT_TRUE(absl::StrContains(err, "kiln: cpu graph ")) << err;
}

TEST(Donation, HeldParametersAreNotOverwritten) {
  Model<Cpu> cpu = Init<Cpu>();
  Model<Reference> ref = Init<Reference>();
  TrainStep(cpu);
  TrainStep(ref);
  // The user keeps the old parameter and momentum (e.g. for an exponential moving average).
  const Model<Cpu> old = cpu;
  const Model<Reference> old_ref = ref;
  const std::vector<double> old_w = old.w.to_vector<double>();
  const std::vector<double> old_vb = old.vb.to_vector<double>();
  const int64_t donated_before = detail::GetEngineStats().arguments_donated;
  TrainStep(cpu);
  EXPECT_EQ(detail::GetEngineStats().arguments_donated, donated_before);
  TrainStep(ref);
  ExpectSameModel(cpu, ref);
  EXPECT_NE(Address(cpu.w), Address(old.w));
  EXPECT_NE(Address(cpu.vb), Address(old.vb));
  // The held values are untouched.
  EXPECT_EQ(old.w.to_vector<double>(), old_w);
  EXPECT_EQ(old.vb.to_vector<double>(), old_vb);
  ExpectSameModel(old, old_ref);
}

TEST(Donation, ADetachedCopySharesTheDataAndBlocksDonation) {
  Model<Cpu> cpu = Init<Cpu>();
  Model<Reference> ref = Init<Reference>();
  TrainStep(cpu);
  TrainStep(ref);
  const Tensor<Cpu, 2> snapshot = cpu.w.detach();  // shares the buffer, not the node
  const std::vector<double> before = snapshot.to_vector<double>();
  const void* w = Address(cpu.w);
  TrainStep(cpu);
  TrainStep(ref);
  ExpectSameModel(cpu, ref);
  EXPECT_NE(Address(cpu.w), w);
  EXPECT_EQ(Address(snapshot), w);
  EXPECT_EQ(snapshot.to_vector<double>(), before);
}

TEST(Donation, ALossThatKeepsItsTapeKeepsTheOldParameters) {
  Model<Cpu> cpu = Init<Cpu>();
  Model<Reference> ref = Init<Reference>();
  TrainStep(cpu);
  TrainStep(ref);
  const void* w = Address(cpu.w);
  const std::vector<double> old_w = cpu.w.to_vector<double>();
  const int64_t donated_before = detail::GetEngineStats().arguments_donated;
  const void* vw = Address(cpu.vw);
  const Tensor<Cpu, 0> loss = TrainStep(cpu, /*keep_tape=*/true);
  // Only the momentum buffers, which the tape does not reach, were handed over.
  EXPECT_EQ(detail::GetEngineStats().arguments_donated - donated_before, 2);
  TrainStep(ref, /*keep_tape=*/true);
  ExpectSameModel(cpu, ref);
  EXPECT_NE(Address(cpu.w), w);
  // The old momentum's buffer went to one of the new values of its type.
  EXPECT_TRUE(Address(cpu.vw) == vw || Address(cpu.w) == vw);
  // The loss's tape still holds the old parameter (a second backward would read it): find the
  // realized [3, 2] leaf that requires a gradient behind the loss; its value is intact.
  std::vector<const detail::LazyNode*> stack = {loss.ref().get()};
  int found = 0;
  while (!stack.empty()) {
    const detail::LazyNode* node = stack.back();
    stack.pop_back();
    if (node->requires_grad && node->realized() && node->type.shape == ir::Shape{3, 2}) {
      ++found;
      EXPECT_EQ(node->data->data(), w);
      EXPECT_EQ(node->data->ToDoubles(), old_w);
    }
    for (const detail::TensorRef& in : node->inputs) stack.push_back(in.get());
  }
  EXPECT_GE(found, 1);
}

// Updates whose kernel reads the old value at other elements than it writes (a transpose, a
// flip, a row sum broadcast back) must not be written over it: each element would read values
// its neighbours already overwrote. The dropped old value is still donated; the values are
// checked against the Reference backend over several steps.
template <class B>
Tensor<B, 2> Shuffled(const Tensor<B, 2>& w) {
  return w.transpose() * 0.5 + w.flip({1}) * 0.25 - w.sum(1, keepdim) * 0.125;
}

TEST(Donation, KernelsReadingOtherElementsAreNotInPlace) {
  const Cpu::Device cpu_device;
  const Reference::Device ref_device;
  auto cpu = Tensor<Cpu, 2>::random_normal({64, 64}, 0, 1, cpu_device);
  cpu.realize();
  auto ref = Tensor<Reference, 2>::from_tensor_data(cpu.into_data(), ref_device);
  for (int step = 0; step < 3; ++step) {
    const void* before = Address(cpu);
    const int64_t donated_before = detail::GetEngineStats().arguments_donated;
    cpu = Shuffled(cpu);
    cpu.realize();
    ref = Shuffled(ref);
    ExpectSameValues(cpu, ref);
    EXPECT_EQ(detail::GetEngineStats().arguments_donated - donated_before, 1) << "step " << step;
    EXPECT_NE(Address(cpu), before) << "step " << step;
  }
}

}  // namespace
}  // namespace kiln
