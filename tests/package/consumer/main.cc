// Uses kiln as an installed package: only <kiln/kiln.h> and kiln::kiln.
#include <kiln/kiln.h>

#include <iostream>
#include <vector>

int main() {
  using B = kiln::Reference;
  try {
    typename B::Device device;
    auto x = kiln::Tensor<B, 1>::from_data({1.f, 2.f}, device);
    std::vector<float> y = (x + 1.f).to_vector();
    std::cout << "dtype " << kiln::ir::DTypeName(kiln::ir::DType::kF32) << ", x + 1 = [";
    for (size_t i = 0; i < y.size(); ++i) std::cout << (i ? ", " : "") << y[i];
    std::cout << "]\n";
    if (y != std::vector<float>{2.f, 3.f}) {
      std::cerr << "unexpected values\n";
      return 1;
    }
  } catch (const kiln::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  std::cout << "kiln consumer ok\n";
  return 0;
}
