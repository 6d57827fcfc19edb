// Large host blocks for tensor data, shared by the runtime's BufferPool (graph arenas and
// outputs) and ir::TensorData (realized values).
//
// A block of kHugePageMinBytes or more is aligned to 2 MiB and, on Linux, advised as a candidate
// for transparent huge pages (madvise MADV_HUGEPAGE), which matters where the system's THP mode
// is "madvise" (Ubuntu's default and many VMs'): a kernel streaming a 64 MiB tensor then walks 32
// pages, not 16,384, and the hardware prefetchers, which stop at page boundaries, run on (a STREAM
// triad over 64 MiB arrays: 29 -> 36 GB/s on a 2-core Xeon). PyTorch offers the same for its CPU
// allocator behind THP_MEM_ALLOC_ENABLE.
#pragma once

#include <cstddef>

namespace kiln::base {

/// Blocks from this size on get 2 MiB alignment and the huge-page advice.
inline constexpr size_t kHugePageMinBytes = size_t{4} << 20;

/// `bytes` (> 0) of uninitialised memory aligned to `alignment` (a power of two; more for large
/// blocks, above), or null when the system has none.
std::byte* AllocateHostBlock(size_t bytes, size_t alignment);

/// Frees a block from AllocateHostBlock, given the same `bytes` and `alignment`.
void FreeHostBlock(std::byte* block, size_t bytes, size_t alignment);

}  // namespace kiln::base
