// reshape<3> given two sizes.
// expect: reshape<R2> needs exactly R2 sizes
#include <kiln/kiln.h>

using B = kiln::Reference;

void Use(const kiln::Device& device) {
  auto a = kiln::Tensor<B, 2>::zeros({2, 3}, device);
  auto r = a.reshape<3>({2, 3});
}
