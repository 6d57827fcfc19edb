// A small CNN on Fashion-MNIST with the CPU backend: conv 1->32 3x3, ReLU, maxpool 2, conv 32->64
// 3x3, ReLU, maxpool 2, linear 1600->128, ReLU, linear 128->10; batch 64.
//   fashion_mnist_cnn [--epochs 1] [--dir runs/cnn] ...
#include "examples/fashion_mnist/common.h"

template <class B>
struct Cnn {
  kiln::nn::Conv2d<B> conv1, conv2;
  kiln::nn::Linear<B> fc1, fc2;
  KILN_MODULE(Cnn, conv1, conv2, fc1, fc2);

  kiln::Tensor<B, 2> forward(const kiln::Tensor<B, 4>& x) const {
    using kiln::activation::relu;
    auto h = kiln::nn::max_pool2d(relu(conv1.forward(x)), {2, 2});
    h = kiln::nn::max_pool2d(relu(conv2.forward(h)), {2, 2});
    return fc2.forward(relu(fc1.forward(h.template reshape<2>({h.dim(0), 1600}))));
  }
};

int main(int argc, char** argv) {
  using B = kiln::Cpu;
  try {
    const auto flags =
        fashion_mnist::ParseFlags(argc, argv, {.epochs = 1, .batch_size = 64, .dir = "runs/cnn"});
    kiln::manual_seed(flags.seed);
    B::Device device;
    Cnn<B> model{kiln::nn::Conv2dConfig(1, 32, {3, 3}).init<B>(device),
                 kiln::nn::Conv2dConfig(32, 64, {3, 3}).init<B>(device),
                 kiln::nn::LinearConfig(1600, 128).init<B>(device),
                 kiln::nn::LinearConfig(128, 10).init<B>(device)};
    const auto to_logits = [](const Cnn<B>& m, const kiln::Tensor<B, 3>& images) {
      return m.forward(images.unsqueeze<1>());
    };
    fashion_mnist::Train<B>(model, flags, to_logits);
    if (flags.int8) fashion_mnist::EvaluateInt8<B>(model, flags, to_logits);
  } catch (const kiln::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
