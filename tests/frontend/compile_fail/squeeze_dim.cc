// squeeze<D> on a dim the rank does not have.
// expect: squeeze<D> needs D in
#include <kiln/kiln.h>

using B = kiln::Reference;

void Use(const kiln::Device& device) {
  auto a = kiln::Tensor<B, 2>::zeros({1, 3}, device);
  auto s = a.squeeze<2>();
}
