// NumPy .npy read and write.
//   "\x93NUMPY", version (1.0: u16 header length; 2.0/3.0: u32), a Python-dict header
//   {'descr': '<f4', 'fortran_order': False, 'shape': (N, H, W, C), }, then C-order data.
//   The header is padded with spaces and a final newline so that the data starts on a 64-byte boundary.
// Supported dtypes: uint8, int8, bool, int16, int32, int64, float16, float32, float64 (little-endian).
// Errors throw std::runtime_error("<path>: invalid npz/npy file: ...").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace nala::io {

// Parses the Python-literal header dict written by numpy.lib.format (the text after the header
// length field) into `dtype` and `shape`; `path` names the file in errors.
void parse_npy_dict(const std::string& path, const std::string& dict, at::ScalarType& dtype, std::vector<int64_t>& shape);

// The .npy header for an array (used by the writers and by tests).
std::string npy_header(at::ScalarType dtype, const std::vector<int64_t>& shape);

// Reads a whole .npy file.
at::Tensor load_npy(const std::string& path);
// Writes an .npy file atomically.
void save_npy(const std::string& path, const at::Tensor& array);

}  // namespace nala::io
