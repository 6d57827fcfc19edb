#include "base/host_memory.h"

#include <algorithm>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace kiln::base {
namespace {

constexpr size_t kHugePageBytes = size_t{2} << 20;

size_t BlockAlignment(size_t bytes, size_t alignment) {
  return bytes >= kHugePageMinBytes ? std::max(alignment, kHugePageBytes) : alignment;
}

}  // namespace

std::byte* AllocateHostBlock(size_t bytes, size_t alignment) {
  const size_t block_alignment = BlockAlignment(bytes, alignment);
  auto* block = static_cast<std::byte*>(
      ::operator new (bytes, std::align_val_t{block_alignment}, std::nothrow));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Advice only: where THP is off ("never") or the kernel lacks it, the call fails and the block
  // keeps ordinary pages.
  if (block != nullptr && bytes >= kHugePageMinBytes) {
    (void)madvise(block, bytes - bytes % kHugePageBytes, MADV_HUGEPAGE);
  }
#endif
  return block;
}

void FreeHostBlock(std::byte* block, size_t bytes, size_t alignment) {
  ::operator delete (block, std::align_val_t{BlockAlignment(bytes, alignment)});
}

}  // namespace kiln::base
