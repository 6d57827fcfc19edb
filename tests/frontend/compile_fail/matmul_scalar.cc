// matmul needs rank >= 1 operands.
// expect: matmul needs operands of rank >= 1
#include <kiln/kiln.h>

using B = kiln::Reference;

void Use(const kiln::Device& device) {
  auto s = kiln::Tensor<B, 0>::zeros({}, device);
  auto p = s.matmul(s);
}
