// NumPy .npz read and write: a zip archive (io/zip.h) of "<key>.npy" members (io/npy.h), stored or
// deflate-compressed, with ZIP64 records when sizes exceed 4 GiB (numpy always writes the ZIP64 extra field).
// Large members are streamed: NpzArrayReader reads rows of the first axis on demand, and
// NpzWriter appends rows, so a 50,000-image sample batch is never held twice in memory.
// Supported dtypes: uint8, int8, bool, int16, int32, int64, float16, float32, float64.
// Including this header also declares the .npy functions (npy_header, load_npy, save_npy) and ZipEntry.
#pragma once
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "io/npy.h"
#include "io/safetensors.h"  // NamedTensors
#include "io/zip.h"

namespace nala::io {

// Reads one array member of an .npz sequentially along its first axis.
class NpzArrayReader {
 public:
  NpzArrayReader(const std::string& path, const std::string& key);  // key without ".npy"
  ~NpzArrayReader();
  NpzArrayReader(const NpzArrayReader&) = delete;
  NpzArrayReader& operator=(const NpzArrayReader&) = delete;

  const std::vector<int64_t>& shape() const { return shape_; }
  at::ScalarType dtype() const { return dtype_; }
  int64_t rows_left() const { return rows_total() - rows_read_; }
  int64_t rows_total() const { return shape_.empty() ? 1 : shape_[0]; }
  // Next `n` rows (fewer at the end) as a CPU tensor of shape (n, shape[1:]...).
  at::Tensor read_rows(int64_t n);
  // Everything that is left.
  at::Tensor read_all() { return read_rows(rows_left()); }

 private:
  void read_bytes(void* dst, uint64_t n);
  std::string path_, key_;
  std::FILE* file_ = nullptr;
  ZipEntry entry_;
  std::vector<int64_t> shape_;
  at::ScalarType dtype_;
  int64_t rows_read_ = 0;
  uint64_t member_read_ = 0;  // uncompressed bytes consumed (header included)
  uint64_t comp_read_ = 0;    // compressed bytes consumed
  uint32_t crc_ = 0;
  struct Inflate;
  std::unique_ptr<Inflate> inflate_;
};

// Lists the keys (member names without ".npy") of an .npz.
std::vector<std::string> npz_keys(const std::string& path);

// Loads every member.
NamedTensors load_npz(const std::string& path);

// Writes an .npz atomically: members go to "<path>.tmp.<pid>", close() renames.
class NpzWriter {
 public:
  NpzWriter(const std::string& path, bool compress = false);
  ~NpzWriter();  // without close(): the temporary file is removed, `path` untouched
  NpzWriter(const NpzWriter&) = delete;
  NpzWriter& operator=(const NpzWriter&) = delete;

  void add(const std::string& key, const at::Tensor& array);
  // Streaming: begin() with the full shape, append() rows along axis 0 until the shape is filled.
  void begin(const std::string& key, at::ScalarType dtype, const std::vector<int64_t>& shape);
  void append(const at::Tensor& rows);
  void close();

 private:
  void write_raw(const void* data, uint64_t n);
  void write_member_data(const void* data, uint64_t n);
  void finish_member();
  std::string path_, tmp_;
  bool compress_;
  std::FILE* file_ = nullptr;
  std::vector<ZipEntry> entries_;
  bool in_member_ = false;
  ZipEntry cur_;
  bool cur_zip64_ = false;
  uint64_t expect_bytes_ = 0, written_bytes_ = 0;
  at::ScalarType cur_dtype_;
  std::vector<int64_t> cur_shape_;
  struct Deflate;
  std::unique_ptr<Deflate> deflate_;
};

void save_npz(const std::string& path, const NamedTensors& arrays, bool compress = false);

}  // namespace nala::io
