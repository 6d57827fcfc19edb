// libFuzzer target for runtime::cuda::ParseCudaPlan, the check that stands between a blob's CUDA
// plan and PTX (untrusted bytes) and the CUDA driver. Input: the plan's JSON up to the first NUL
// byte, the "cuda:ptx" payload after it (PTX holds no NUL, so any blob's pair maps to one input).
// The signature is fixed: one f32[16] input "x", one f32[16] output "y"; 4096 bytes of weights.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "runtime/blob.h"
#include "runtime/cuda/blob_cuda.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::byte* bytes = reinterpret_cast<const std::byte*>(data);
  const void* nul = std::memchr(data, 0, size);
  const size_t json_size = nul == nullptr ? size : static_cast<const uint8_t*>(nul) - data;
  const std::span<const std::byte> plan(bytes, json_size);
  const std::span<const std::byte> ptx =
      nul == nullptr ? std::span<const std::byte>()
                     : std::span(bytes + json_size + 1, size - json_size - 1);
  kiln::runtime::blob::Signature signature;
  signature.name = "fuzz";
  signature.inputs.push_back({"x", "f32", 4, {16}, 64});
  signature.outputs.push_back({"y", "f32", 4, {16}, 64});
  auto parsed = kiln::runtime::cuda::ParseCudaPlan(plan, signature, ptx, 4096, "plan");
  if (parsed.ok()) (void)(*parsed)->Describe();
  return 0;
}
