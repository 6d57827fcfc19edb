// Harness of docs/api.md's KILN_MODULE fragment, a struct at namespace scope: builds one and
// checks the dotted parameter names the page states.
#include <kiln/kiln.h>

#include <iostream>

//@fragment

int doc_run() {
  using B = kiln::Reference;
  B::Device device;
  Net<B> net{kiln::nn::LinearConfig(2, 2).init<B>(device),
             {kiln::nn::LinearConfig(2, 2).init<B>(device)},
             kiln::Tensor<B, 1>::ones({2}, device),
             kiln::Tensor<B, 2>::zeros({3, 2}, device)};
  std::vector<std::string> names;
  net.visit([&](const auto& name, const auto&) { names.emplace_back(name); });
  const std::vector<std::string> want = {"fc1.weight",    "fc1.bias", "layers.0.weight",
                                         "layers.0.bias", "scale",    "embedding"};
  if (names != want) {
    for (const std::string& n : names) std::cerr << n << "\n";
    return 1;
  }
  return 0;
}
