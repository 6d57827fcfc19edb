// Binary ops need equal ranks: broadcasting applies to sizes, not rank.
// expect: binary ops need operands of equal rank
#include <kiln/kiln.h>

using B = kiln::Reference;

void Use(const kiln::Device& device) {
  auto a = kiln::Tensor<B, 2>::zeros({2, 3}, device);
  auto b = kiln::Tensor<B, 3>::zeros({1, 2, 3}, device);
  auto c = a + b;
}
