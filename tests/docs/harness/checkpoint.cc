// Harness of docs/training.md's checkpoint fragment: `model` (tiny.h) and a "torch.safetensors"
// holding its state dict (written here with kiln, under the names PyTorch uses); the epoch must
// come back from the checkpoint.
#include "frontend/train/checkpoint.h"

#include <filesystem>

#include "tiny.h"

int doc_run() {
  kiln::manual_seed(0);
  kiln::Cpu::Device device;
  auto model = TinyModel(device);
  std::filesystem::create_directories("run");
  kiln::train::save_checkpoint("torch.safetensors", model);
  //@fragment
  return back.epoch == 3 ? 0 : 1;
}
