// `a == b` on tensors would read as a bool; kiln spells it a.eq(b).
// expect: operator==
#include <kiln/kiln.h>

using B = kiln::Reference;

void Use(const kiln::Device& device) {
  auto a = kiln::Tensor<B, 1>::zeros({3}, device);
  auto e = a == a;
}
