// The seed program: a one-layer MLP (Linear 4 -> 2) applied to [[1, 2, 3, 4]] with seed 0.
// tests/frontend/seed_test.cc checks the same computation against plain loops, and
// seed_binary_cmake_only_test.cc checks what this program prints.
#include <kiln/kiln.h>

#include <iostream>
#include <string>

template <class B>
struct Mlp {
  kiln::nn::Linear<B> fc;
  KILN_MODULE(Mlp, fc);
};

int main() {
  using B = kiln::Reference;
  try {
    kiln::manual_seed(0);
    typename B::Device device;
    Mlp<B> mlp{kiln::nn::LinearConfig(4, 2).init<B>(device)};
    auto input = kiln::Tensor<B, 2>::from_data({{1.f, 2.f, 3.f, 4.f}}, device);
    auto output = mlp.fc.forward(input);        // lazy: nothing has run yet
    std::cout << "output: " << output << "\n";  // realize: run the graph, print
    std::cout << "parameters (" << mlp.num_params() << "):\n";
    mlp.visit([](const std::string& name, const auto& param) {
      std::cout << name << ": " << param << "\n";
    });
  } catch (const kiln::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
