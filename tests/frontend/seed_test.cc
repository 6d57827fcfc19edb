// The seed program (examples/seed): an Mlp with Linear 4 -> 2 applied to [[1, 2, 3, 4]] with
// seed 0, checked against the same computation done with plain loops over the parameters.
#include <vector>

#include "gtest/gtest.h"
#include "tests/frontend/test_util.h"

namespace kiln::testing {
namespace {

// The same struct as examples/seed/main.cc.
template <class Backend>
struct Mlp {
  nn::Linear<Backend> fc;
  KILN_MODULE(Mlp, fc);
};

TEST(SeedTest, MlpForwardMatchesLoops) {
  manual_seed(0);
  B::Device device;
  Mlp<B> mlp{nn::LinearConfig(4, 2).init<B>(device)};
  auto input = TF<2>::from_data({{1.f, 2.f, 3.f, 4.f}}, device);
  auto output = mlp.fc.forward(input);
  EXPECT_EQ(output.shape(), (std::array<int64_t, 2>{1, 2}));
  const std::vector<float> w = mlp.fc.weight.to_vector();
  const std::vector<float> b = mlp.fc.bias->to_vector();
  const std::vector<float> x = {1, 2, 3, 4};
  std::vector<double> expected(2);
  for (int o = 0; o < 2; ++o) {
    expected[o] = b[o];
    for (int i = 0; i < 4; ++i) expected[o] += static_cast<double>(x[i]) * w[o * 4 + i];
  }
  ExpectAllClose(output.to_vector(), expected, 1e-6, 1e-7);
  EXPECT_EQ(mlp.num_params(), 10);
  // Reproducible: the same seed gives the same parameters.
  manual_seed(0);
  Mlp<B> again{nn::LinearConfig(4, 2).init<B>(device)};
  EXPECT_EQ(again.fc.weight.to_vector(), w);
}

}  // namespace
}  // namespace kiln::testing
