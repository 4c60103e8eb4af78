#include "io/npz.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <ATen/ATen.h>
#include <unistd.h>
#include <zlib.h>

namespace nala::io {
using namespace detail;
namespace {

std::string strip_npy(const std::string& name) {
  return name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0 ? name.substr(0, name.size() - 4) : name;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
struct NpzArrayReader::Inflate {
  z_stream zs{};
  std::vector<unsigned char> in;
  bool ended = false;
  ~Inflate() { inflateEnd(&zs); }
};

NpzArrayReader::NpzArrayReader(const std::string& path, const std::string& key) : path_(path), key_(key) {
  file_ = std::fopen(path.c_str(), "rb");
  if (!file_) throw std::runtime_error("cannot open '" + path + "': " + std::strerror(errno));
  try {
    auto entries = read_central_directory(file_, path);
    bool found = false;
    std::string names;
    for (auto& e : entries) {
      names += (names.empty() ? "" : ", ") + strip_npy(e.name);
      if (strip_npy(e.name) == key) { entry_ = e; found = true; }
    }
    if (!found) throw std::runtime_error(path + ": no array '" + key + "' (arrays: " + names + ")");
    seek_zip_member_data(file_, entry_, path);
    if (entry_.method == 8) {
      inflate_ = std::make_unique<Inflate>();
      inflate_->in.resize(1 << 20);
      if (inflateInit2(&inflate_->zs, -15) != Z_OK) bad(path, "zlib init failed");
    }
    // the .npy header
    unsigned char pre[10];
    read_bytes(pre, 10);
    if (std::memcmp(pre, "\x93NUMPY", 6) != 0) bad(path, "member '" + entry_.name + "' is not an .npy array");
    uint32_t hlen = 0;
    if (pre[6] == 1) {
      hlen = rd16(pre + 8);
    } else if (pre[6] == 2 || pre[6] == 3) {
      unsigned char more[2];
      read_bytes(more, 2);
      hlen = rd16(pre + 8) | (uint32_t(rd16(more)) << 16);
    } else {
      bad(path, "unsupported .npy version " + std::to_string(pre[6]) + "." + std::to_string(pre[7]));
    }
    if (hlen > (1u << 24)) bad(path, "npy header length " + std::to_string(hlen) + " is absurd");
    std::string h(hlen, '\0');
    read_bytes(h.data(), hlen);
    parse_npy_dict(path, h, dtype_, shape_);
    uint64_t numel = 1;
    for (auto s : shape_) {
      if (s != 0 && numel > (1ull << 62) / uint64_t(s)) bad(path, "npy shape overflows");
      numel *= uint64_t(s);
    }
    if (member_read_ + numel * at::elementSize(dtype_) != entry_.uncompressed_size)
      bad(path, "array '" + key + "' needs " + std::to_string(numel * at::elementSize(dtype_)) +
                    " data bytes but the member holds " + std::to_string(entry_.uncompressed_size - member_read_));
  } catch (...) {
    std::fclose(file_);
    file_ = nullptr;
    throw;
  }
}

NpzArrayReader::~NpzArrayReader() {
  if (file_) std::fclose(file_);
}

void NpzArrayReader::read_bytes(void* dst, uint64_t n) {
  if (member_read_ + n > entry_.uncompressed_size) bad(path_, "member '" + entry_.name + "' is shorter than its array");
  if (!inflate_) {
    if (n && std::fread(dst, 1, n, file_) != n) bad(path_, "truncated data in '" + entry_.name + "'");
  } else {
    auto& z = *inflate_;
    z.zs.next_out = static_cast<Bytef*>(dst);
    uint64_t left = n;
    while (left > 0) {
      const uInt chunk = static_cast<uInt>(std::min<uint64_t>(left, 1u << 30));
      z.zs.avail_out = chunk;
      while (z.zs.avail_out > 0) {
        if (z.zs.avail_in == 0) {
          const uint64_t rem = entry_.compressed_size - comp_read_;
          if (rem == 0) bad(path_, "truncated deflate stream in '" + entry_.name + "'");
          const size_t want = static_cast<size_t>(std::min<uint64_t>(rem, z.in.size()));
          if (std::fread(z.in.data(), 1, want, file_) != want) bad(path_, "truncated data in '" + entry_.name + "'");
          comp_read_ += want;
          z.zs.next_in = z.in.data();
          z.zs.avail_in = static_cast<uInt>(want);
        }
        const int rc = ::inflate(&z.zs, Z_NO_FLUSH);
        if (rc == Z_STREAM_END && z.zs.avail_out > 0) bad(path_, "deflate stream of '" + entry_.name + "' ends early");
        if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
          bad(path_, "corrupt deflate data in '" + entry_.name + "' (zlib " + std::to_string(rc) + ")");
        if (rc == Z_BUF_ERROR && z.zs.avail_in > 0) bad(path_, "corrupt deflate data in '" + entry_.name + "'");
      }
      left -= chunk;
    }
  }
  crc_ = static_cast<uint32_t>(::crc32_z(crc_, static_cast<const Bytef*>(dst), static_cast<z_size_t>(n)));
  member_read_ += n;
  if (member_read_ == entry_.uncompressed_size && crc_ != entry_.crc32)
    bad(path_, "CRC mismatch in '" + entry_.name + "' (the file is corrupt)");
}

at::Tensor NpzArrayReader::read_rows(int64_t n) {
  n = std::max<int64_t>(0, std::min(n, rows_left()));
  std::vector<int64_t> shape = shape_;
  if (shape.empty()) {
    if (rows_read_ > 0) n = 0;
  } else {
    shape[0] = n;
  }
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(dtype_));
  const uint64_t bytes = uint64_t(t.numel()) * t.element_size();
  if (bytes) read_bytes(t.data_ptr(), bytes);
  rows_read_ += shape_.empty() ? 1 : n;
  if (dtype_ == at::kBool) {
    const uint8_t* p = static_cast<const uint8_t*>(t.data_ptr());
    for (int64_t i = 0; i < t.numel(); ++i)
      if (p[i] > 1) bad(path_, "bool array '" + key_ + "' holds a byte that is not 0 or 1");
  }
  return t;
}

std::vector<std::string> npz_keys(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot open '" + path + "': " + std::strerror(errno));
  std::vector<std::string> keys;
  try {
    for (auto& e : read_central_directory(f, path)) keys.push_back(strip_npy(e.name));
  } catch (...) {
    std::fclose(f);
    throw;
  }
  std::fclose(f);
  return keys;
}

NamedTensors load_npz(const std::string& path) {
  NamedTensors out;
  for (const auto& k : npz_keys(path)) {
    NpzArrayReader r(path, k);
    out.emplace_back(k, r.read_all());
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
struct NpzWriter::Deflate {
  z_stream zs{};
  std::vector<unsigned char> out = std::vector<unsigned char>(1 << 20);
  ~Deflate() { deflateEnd(&zs); }
};

NpzWriter::NpzWriter(const std::string& path, bool compress)
    : path_(path), tmp_(path + ".tmp." + std::to_string(::getpid())), compress_(compress) {
  file_ = std::fopen(tmp_.c_str(), "w+b");
  if (!file_) throw std::runtime_error("cannot open '" + tmp_ + "' for writing: " + std::strerror(errno));
}

NpzWriter::~NpzWriter() {
  if (file_) {
    std::fclose(file_);
    std::remove(tmp_.c_str());
  }
}

void NpzWriter::write_raw(const void* data, uint64_t n) {
  if (n && std::fwrite(data, 1, n, file_) != n)
    throw std::runtime_error("write to '" + path_ + "' failed (disk full?): " + std::strerror(errno));
}

void NpzWriter::begin(const std::string& key, at::ScalarType dtype, const std::vector<int64_t>& shape) {
  if (in_member_) throw std::runtime_error(path_ + ": begin('" + key + "') before the previous array was complete");
  for (auto& e : entries_)
    if (e.name == key + ".npy") throw std::runtime_error(path_ + ": duplicate array '" + key + "'");
  const std::string header = npy_header(dtype, shape);
  uint64_t numel = 1;
  for (auto s : shape) numel *= uint64_t(s);
  cur_ = ZipEntry{};
  cur_.name = key + ".npy";
  cur_.method = compress_ ? 8 : 0;
  cur_.local_header_offset = static_cast<uint64_t>(ftello(file_));
  expect_bytes_ = header.size() + numel * at::elementSize(dtype);
  written_bytes_ = 0;
  cur_zip64_ = expect_bytes_ >= 0xFFFF0000ull || cur_.local_header_offset >= 0xFFFF0000ull;
  cur_dtype_ = dtype;
  cur_shape_ = shape;
  // local header; CRC and sizes are patched in finish_member()
  const std::string lh = zip_local_header(cur_, cur_zip64_);
  write_raw(lh.data(), lh.size());
  in_member_ = true;
  if (compress_) {
    deflate_ = std::make_unique<Deflate>();
    if (deflateInit2(&deflate_->zs, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
      throw std::runtime_error(path_ + ": zlib init failed");
  }
  write_member_data(header.data(), header.size());  // the npy header is member data
  if (expect_bytes_ == written_bytes_) finish_member();
}

void NpzWriter::write_member_data(const void* data, uint64_t n) {
  const char* p = static_cast<const char*>(data);
  uint64_t left = n;
  while (left > 0) {  // CRC, then stored or deflated; zlib takes at most 4 GiB a call
    const uint64_t c = std::min<uint64_t>(left, 1u << 30);
    cur_.crc32 = static_cast<uint32_t>(::crc32_z(cur_.crc32, reinterpret_cast<const Bytef*>(p), static_cast<z_size_t>(c)));
    if (!compress_) {
      write_raw(p, c);
    } else {
      auto& d = *deflate_;
      d.zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(p));
      d.zs.avail_in = static_cast<uInt>(c);
      while (d.zs.avail_in > 0) {
        d.zs.next_out = d.out.data();
        d.zs.avail_out = static_cast<uInt>(d.out.size());
        deflate(&d.zs, Z_NO_FLUSH);
        write_raw(d.out.data(), d.out.size() - d.zs.avail_out);
      }
    }
    p += c;
    left -= c;
    written_bytes_ += c;
  }
}

void NpzWriter::append(const at::Tensor& rows_in) {
  if (!in_member_) throw std::runtime_error(path_ + ": append() without begin()");
  at::Tensor rows = rows_in.to(at::kCPU).to(cur_dtype_).contiguous();
  const uint64_t n = uint64_t(rows.numel()) * rows.element_size();
  if (written_bytes_ + n > expect_bytes_)
    throw std::runtime_error(path_ + ": append() of " + std::to_string(n) + " bytes overflows the declared shape");
  write_member_data(rows.data_ptr(), n);
  if (written_bytes_ == expect_bytes_) finish_member();
}

void NpzWriter::finish_member() {
  if (compress_) {
    auto& d = *deflate_;
    int rc;
    do {
      d.zs.next_out = d.out.data();
      d.zs.avail_out = static_cast<uInt>(d.out.size());
      rc = deflate(&d.zs, Z_FINISH);
      write_raw(d.out.data(), d.out.size() - d.zs.avail_out);
    } while (rc == Z_OK);
    if (rc != Z_STREAM_END) throw std::runtime_error(path_ + ": deflate failed");
    deflate_.reset();
  }
  const uint64_t end = static_cast<uint64_t>(ftello(file_));
  const uint64_t data_start = cur_.local_header_offset + zip_local_header_size(cur_, cur_zip64_);
  cur_.uncompressed_size = written_bytes_;
  cur_.compressed_size = end - data_start;
  if (!cur_zip64_ && cur_.compressed_size >= k32)
    throw std::runtime_error(path_ + ": compressed member exceeds 4 GiB without ZIP64");
  for (const auto& [offset, bytes] : zip_local_header_patches(cur_, cur_zip64_)) {
    seek(file_, offset, path_);
    write_raw(bytes.data(), bytes.size());
  }
  seek(file_, end, path_);
  entries_.push_back(cur_);
  in_member_ = false;
}

void NpzWriter::add(const std::string& key, const at::Tensor& array) {
  at::Tensor a = array.detach().to(at::kCPU).contiguous();
  begin(key, a.scalar_type(), a.sizes().vec());
  if (in_member_) append(a.dim() == 0 ? a.reshape({1}) : a);
}

void NpzWriter::close() {
  if (in_member_) throw std::runtime_error(path_ + ": close() with array '" + cur_.name + "' incomplete");
  const uint64_t cd_offset = static_cast<uint64_t>(ftello(file_));
  std::string cd;
  for (const auto& e : entries_) cd += zip_central_entry(e);
  write_raw(cd.data(), cd.size());
  const std::string tail = zip_end_records(entries_.size(), cd.size(), cd_offset);
  write_raw(tail.data(), tail.size());
  if (std::fflush(file_) != 0) throw std::runtime_error("write to '" + path_ + "' failed: " + std::strerror(errno));
  ::fsync(fileno(file_));
  if (std::fclose(file_) != 0) {
    file_ = nullptr;
    std::remove(tmp_.c_str());
    throw std::runtime_error("closing '" + path_ + "' failed: " + std::strerror(errno));
  }
  file_ = nullptr;
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    std::remove(tmp_.c_str());
    throw std::runtime_error("cannot rename '" + tmp_ + "' to '" + path_ + "': " + std::strerror(errno));
  }
}

void save_npz(const std::string& path, const NamedTensors& arrays, bool compress) {
  NpzWriter w(path, compress);
  for (const auto& [k, a] : arrays) w.add(k, a);
  w.close();
}

}  // namespace nala::io
