// Binary ops need one kind: Float + Int must be converted explicitly.
// expect: binary ops need operands of one kind
#include <kiln/kiln.h>

using B = kiln::Reference;

void Use(const kiln::Device& device) {
  auto a = kiln::Tensor<B, 1>::zeros({3}, device);
  auto i = kiln::Tensor<B, 1, kiln::Int>::arange(0, 3, device);
  auto c = a * i;
}
