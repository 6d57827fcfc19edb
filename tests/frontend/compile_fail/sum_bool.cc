// Bool tensors do not add up; convert to Int first.
// expect: sum needs a Float or Int tensor
#include <kiln/kiln.h>

using B = kiln::Reference;

void Use(const kiln::Device& device) {
  auto a = kiln::Tensor<B, 2>::zeros({2, 3}, device);
  auto n = (a > 0.f).sum();
}
