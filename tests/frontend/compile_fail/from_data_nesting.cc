// from_data's nesting depth must equal the rank: a flat list is not a rank-2 tensor.
// expect: cannot convert.*NestedList<double, 2>
#include <kiln/kiln.h>

using B = kiln::Reference;

void Use(const kiln::Device& device) {
  auto a = kiln::Tensor<B, 2>::from_data({1.f, 2.f, 3.f}, device);
}
