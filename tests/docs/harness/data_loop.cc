// Harness of docs/training.md's data fragment, compiled only: it walks ten epochs of
// Fashion-MNIST's 60,000 training images (tests/frontend/data_test.cc and tests/cpu's
// fashion_mnist_mlp_test run the loader on the real files). Supplies a Cpu `device`.
#include <kiln/kiln.h>

int doc_run() {
  kiln::Cpu::Device device;
  //@fragment
  return 0;
}
