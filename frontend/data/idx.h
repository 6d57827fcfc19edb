// IDX files (the format of MNIST and Fashion-MNIST), raw or gzip-compressed.
//
// An IDX file is: two zero bytes, a type code (0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32,
// 0x0E f64), the number of dims, then each dim as a big-endian u32, then the elements,
// big-endian, row-major. The parsers take bytes from memory (tests/fuzz/ drives them with
// libFuzzer) and never read out of bounds: every error names the file and the byte offset.
//
// i8 and i16 are widened to i32 (kiln has neither dtype); u8, i32, f32 and f64 keep theirs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <source_location>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/tensor_data.h"

namespace kiln::data {

/// Limits that keep a hostile file from exhausting memory.
struct IdxLimits {
  /// Most dims an IDX header may declare.
  int max_rank = 8;
  /// Most bytes a gzip stream may inflate to (the Fashion-MNIST train images are 47 MB).
  int64_t max_decompressed_bytes = int64_t{1} << 32;
};

/// True when `bytes` starts with the gzip magic 1f 8b.
bool IsGzip(std::span<const std::byte> bytes);

/// Inflates a gzip stream; `name` is used in errors ("<name>: gzip: truncated stream after 812
/// compressed bytes").
absl::StatusOr<std::vector<std::byte>> Gunzip(std::span<const std::byte> bytes,
                                              std::string_view name, const IdxLimits& limits = {});

/// Parses an uncompressed IDX image; errors are InvalidArgument "<name>: idx: <what> at byte
/// <offset>".
absl::StatusOr<ir::TensorData> ParseIdx(std::span<const std::byte> bytes, std::string_view name,
                                        const IdxLimits& limits = {});

/// ParseIdx after Gunzip when the bytes are gzip (by magic, not by file name).
absl::StatusOr<ir::TensorData> ParseIdxMaybeGzip(std::span<const std::byte> bytes,
                                                 std::string_view name,
                                                 const IdxLimits& limits = {});

/// A whole file's bytes; NotFound naming the path when it cannot be opened.
absl::StatusOr<std::vector<std::byte>> ReadFileBytes(const std::string& path);

/// Reads an IDX file (raw or .gz). Throws kiln::Error naming the file (and byte offset).
ir::TensorData read_idx(const std::string& path,
                        std::source_location loc = std::source_location::current());

/// The bytes of an IDX file holding `data` (u8, i32, f32 or f64), uncompressed; for tests and
/// for writing datasets. Other dtypes give InvalidArgument.
absl::StatusOr<std::vector<std::byte>> EncodeIdx(const ir::TensorData& data);

}  // namespace kiln::data
