// Harness of docs/api.md's gradient fragment: a Cpu `device` and an input `x` [8, 4] (tiny.h).
#include "tiny.h"

int doc_run() {
  kiln::manual_seed(0);
  kiln::Cpu::Device device;
  auto x = TinyInputs(device);
  //@fragment
  return w.shape() == std::array<int64_t, 2>{4, 3} ? 0 : 1;
}
