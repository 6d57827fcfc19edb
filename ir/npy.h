// NumPy .npy files (format versions 1.0, 2.0 and 3.0) to and from ir::TensorData.
//
// The format: the magic "\x93NUMPY", a major and minor version byte, the header length (2 bytes
// little-endian in version 1, 4 bytes in versions 2 and 3), then the header: a Python dict literal
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with spaces to a multiple of
// 64 bytes and ended by '\n' (latin-1 in versions 1-2, UTF-8 in version 3), then the raw elements.
// https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html
//
// Dtypes: f4, f8, f2, i4, i8, u1 and b1 (kiln's f32, f64, f16, i32, i64, u8, bool), little- or
// big-endian ('<', '>', and '|' for one-byte types); big-endian data is byte-swapped on reading.
// numpy has no bfloat16, so a bf16 tensor cannot be written (cast it first).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/tensor_data.h"

namespace kiln::ir {

/// Parses the bytes of a .npy file. `name` (usually the path) starts every error message, which
/// then gives the byte offset and the problem, e.g.
///   "x.npy: npy: byte 10: fortran_order True is not supported (save a C-order array:
///    np.ascontiguousarray)".
/// Strict: the header must be exactly the dict numpy writes (keys descr, fortran_order and shape,
/// each once), the data must be exactly the size the shape says (no missing or trailing bytes),
/// and bool bytes must be 0 or 1. Structured, object, string and other dtypes kiln lacks are
/// refused by their descr. Untrusted input is safe: memory is bounded by the input's size.
absl::StatusOr<TensorData> ParseNpy(std::span<const std::byte> bytes, std::string_view name);

/// Reads and parses the file at `path` (errors name the path).
absl::StatusOr<TensorData> ReadNpy(const std::string& path);

/// The .npy bytes of `tensor`: version 1.0, little-endian, C order, the header padded so the data
/// starts at a multiple of 64 bytes: byte for byte what numpy 1.24's np.save writes. Fails for
/// bf16, which numpy cannot represent, and for ranks above 64.
absl::StatusOr<std::vector<std::byte>> EncodeNpy(const TensorData& tensor);

/// Writes EncodeNpy(tensor) to `path` (replacing the file). Errors name the path.
absl::Status WriteNpy(const std::string& path, const TensorData& tensor);

}  // namespace kiln::ir
