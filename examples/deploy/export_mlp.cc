// export_mlp: traces the Fashion-MNIST MLP (784-512-256-10, the architecture of
// examples/fashion_mnist/mlp.cc, initialised with seed 1) and writes an ahead-of-time blob that
// libkiln_runtime runs (examples/deploy/run_blob.c).
//
//   export_mlp mlp.kiln [--batch N] [--triple aarch64-linux-gnu] [--target vulkan]
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "codegen/aot/aot.h"
#include "kiln/kiln.h"

template <class B>
struct Mlp {
  kiln::nn::Linear<B> fc1, fc2, fc3;
  KILN_MODULE(Mlp, fc1, fc2, fc3);

  kiln::Tensor<B, 2> forward(const kiln::Tensor<B, 2>& x) const {
    return fc3.forward(kiln::activation::relu(fc2.forward(kiln::activation::relu(fc1.forward(x)))));
  }
};

int main(int argc, char** argv) {
  using B = kiln::Cpu;
  if (argc < 2 || std::string(argv[1]) == "--help") {
    std::cerr << "usage: export_mlp out.kiln [--batch N] [--triple T]... [--target vulkan]\n";
    return argc < 2 ? 1 : 0;
  }
  int64_t batch = 1;
  kiln::aot::CompileOptions options;
  options.name = "fashion_mnist_mlp";
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--batch") {
      batch = std::atoll(argv[i + 1]);
    } else if (flag == "--triple") {
      options.triples.push_back(argv[i + 1]);
    } else if (flag == "--target" && std::string(argv[i + 1]) == "vulkan") {
      options.vulkan = true;  // a Vulkan section beside the CPU code
    } else {
      std::cerr << "export_mlp: unknown flag " << flag << "\n";
      return 1;
    }
  }
  try {
    kiln::manual_seed(1);
    B::Device device;
    Mlp<B> model{kiln::nn::LinearConfig(784, 512).init<B>(device),
                 kiln::nn::LinearConfig(512, 256).init<B>(device),
                 kiln::nn::LinearConfig(256, 10).init<B>(device)};
    auto example = kiln::Tensor<B, 2>::zeros({batch, 784}, device);
    kiln::TracedGraph traced =
        kiln::trace_named(kiln::TraceNames{{"images"}, {"logits"}}, model, example);
    options.weights = traced.weights;
    if (absl::Status s = kiln::aot::CompileToFile(traced.graph, options, argv[1]); !s.ok()) {
      std::cerr << "export_mlp: " << s << "\n";
      return 1;
    }
    std::cout << "wrote " << argv[1] << " (" << traced.weights.size() << " weights)\n";
  } catch (const kiln::Error& e) {
    std::cerr << "export_mlp: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
