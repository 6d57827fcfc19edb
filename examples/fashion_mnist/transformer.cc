// A small Transformer encoder classifier on Fashion-MNIST: each image is a sequence of its 28
// rows (28 pixels each), embedded to 64 dims plus sinusoidal positions, two pre-norm encoder
// layers (4 heads, feed-forward 128), mean-pooled, then a linear classifier. Adam would be the
// usual choice; the shared loop uses SGD with momentum, which trains this model well enough.
//   fashion_mnist_transformer [--epochs 1] [--dir runs/transformer] ...
#include "examples/fashion_mnist/common.h"

template <class B>
struct RowTransformer {
  kiln::nn::Linear<B> embed;
  kiln::nn::TransformerEncoder<B> encoder;
  kiln::nn::Linear<B> head;
  KILN_MODULE(RowTransformer, embed, encoder, head);

  kiln::Tensor<B, 2> forward(const kiln::Tensor<B, 3>& images) const {
    const int64_t rows = images.dim(1), d_model = embed.weight.dim(0);
    auto positions = kiln::nn::sinusoidal_positional_encoding<B>(rows, d_model, images.device())
                         .template unsqueeze<0>();
    auto x = embed.forward(images) + positions;  // [N, 28, 64]
    return head.forward(encoder.forward(x).mean(1));
  }
};

int main(int argc, char** argv) {
  using B = kiln::Cpu;
  try {
    const auto flags = fashion_mnist::ParseFlags(
        argc, argv, {.epochs = 1, .batch_size = 64, .lr = 0.02, .dir = "runs/transformer"});
    kiln::manual_seed(flags.seed);
    B::Device device;
    RowTransformer<B> model{
        kiln::nn::LinearConfig(28, 64).init<B>(device),
        kiln::nn::TransformerEncoderConfig(kiln::nn::TransformerEncoderLayerConfig(64, 4)
                                               .with_dim_feedforward(128)
                                               .with_dropout(0.0)
                                               .with_norm_first(true),
                                           2)
            .init<B>(device),
        kiln::nn::LinearConfig(64, 10).init<B>(device)};
    fashion_mnist::Train<B>(model, flags,
                            [](const RowTransformer<B>& m, const kiln::Tensor<B, 3>& images) {
                              return m.forward(images);
                            });
  } catch (const kiln::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
