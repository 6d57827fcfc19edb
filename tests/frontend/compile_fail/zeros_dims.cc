// A rank-2 tensor needs two sizes.
// expect: the dims list must have R entries
#include <kiln/kiln.h>

using B = kiln::Reference;

void Use(const kiln::Device& device) { auto a = kiln::Tensor<B, 2>::zeros({4}, device); }
