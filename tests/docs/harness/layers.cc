// Harness of docs/training.md's layer fragment: `B` (Cpu), `device`, `x` [2, 1, 28, 28] and the
// unqualified names it uses (Tensor, activation); the pooled result must be [2, 32, 14, 14].
#include <kiln/kiln.h>

using kiln::Tensor;
namespace activation = kiln::activation;

int doc_run() {
  using B = kiln::Cpu;
  kiln::manual_seed(0);
  B::Device device;
  auto x = Tensor<B, 4>::random_normal({2, 1, 28, 28}, 0, 1, device);
  //@fragment
  y.realize();  // the layers compile and run on the Cpu backend
  return y.shape() == std::array<int64_t, 4>{2, 32, 14, 14} ? 0 : 1;
}
