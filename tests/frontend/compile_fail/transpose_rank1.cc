// transpose swaps the last two dims: rank 1 has only one.
// expect: transpose needs rank >= 2
#include <kiln/kiln.h>

using B = kiln::Reference;

void Use(const kiln::Device& device) {
  auto v = kiln::Tensor<B, 1>::zeros({3}, device);
  auto t = v.transpose();
}
