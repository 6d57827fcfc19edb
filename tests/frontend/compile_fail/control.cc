// Must compile: the correct forms of every misuse in this folder, with the same includes, so a
// broken include path cannot make the compile-fail checks pass vacuously.
#include <kiln/kiln.h>

using B = kiln::Reference;

void Use(const kiln::Device& device) {
  auto a = kiln::Tensor<B, 2>::zeros({2, 3}, device);
  auto b = kiln::Tensor<B, 3>::zeros({1, 2, 3}, device);
  auto sum = a.unsqueeze<0>() + b;
  auto reshaped = a.reshape<3>({2, 3, 1});
  auto v = kiln::Tensor<B, 1>::zeros({3}, device);
  auto m = a.transpose();
  auto product = a.matmul(v);
  auto squeezed = b.squeeze<0>();
  auto count = (a > 0.f).to_int().sum();
  auto i = kiln::Tensor<B, 1, kiln::Int>::arange(0, 3, device) + 2;
  auto f = a + i.to_float().unsqueeze<0>();
  auto e = a.eq(a);
  auto matrix = kiln::Tensor<B, 2>::from_data({{1.f, 2.f}}, device);
  (void)sum, (void)reshaped, (void)m, (void)product, (void)squeezed, (void)count, (void)f;
  (void)e, (void)matrix;
}
