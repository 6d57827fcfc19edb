// An Int tensor takes integer scalars.
// expect: an Int tensor takes integer scalars
#include <kiln/kiln.h>

using B = kiln::Reference;

void Use(const kiln::Device& device) {
  auto i = kiln::Tensor<B, 1, kiln::Int>::arange(0, 3, device);
  auto j = i * 1.5;
}
