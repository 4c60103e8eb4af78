// safetensors read/write (https://github.com/huggingface/safetensors, format section):
//   [u64 little-endian header length N][N bytes of JSON header][raw tensor bytes]
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the byte buffer after the header) plus an optional "__metadata__" string map.
// Every header is validated before any data is trusted: length bound, JSON, known dtypes, shape ×
// element size = byte size, offsets inside the file, the buffer covered exactly with no overlap.
// Errors name the file and the tensor.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace nala::io {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;  // in file order

struct SafetensorsInfo {
  std::string name;
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;  // byte range in the data buffer
};

// Loads every tensor (CPU, contiguous). `metadata` receives "__metadata__" if given.
NamedTensors load_safetensors(const std::string& path,
                              std::map<std::string, std::string>* metadata = nullptr);

// Reads and validates only the header; `metadata` receives "__metadata__" if given.
std::vector<SafetensorsInfo> read_safetensors_header(const std::string& path,
                                                     std::map<std::string, std::string>* metadata = nullptr);

// Writes atomically (temporary file, then rename). Tensors are made contiguous on the CPU;
// names must be unique. Supported dtypes: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// "F32" etc. for a scalar type; throws for unsupported types.
std::string safetensors_dtype_name(at::ScalarType t);

}  // namespace nala::io
