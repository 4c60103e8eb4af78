#include "io/npz.h"

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <ATen/ATen.h>
#include <unistd.h>
#include <zlib.h>

#include "io/atomic_file.h"

namespace nala::io {
namespace {

constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEocdSig = 0x06054b50;
constexpr uint32_t kZip64EocdSig = 0x06064b50, kZip64LocatorSig = 0x07064b50;
constexpr uint32_t k32 = 0xFFFFFFFFu;

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": invalid npz/npy file: " + what);
}

uint16_t rd16(const unsigned char* p) { return uint16_t(p[0] | (p[1] << 8)); }
uint32_t rd32(const unsigned char* p) { return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24); }
uint64_t rd64(const unsigned char* p) { return uint64_t(rd32(p)) | (uint64_t(rd32(p + 4)) << 32); }
void wr16(std::string& s, uint16_t v) { s.push_back(char(v & 0xff)); s.push_back(char(v >> 8)); }
void wr32(std::string& s, uint32_t v) { for (int i = 0; i < 4; ++i) s.push_back(char((v >> (8 * i)) & 0xff)); }
void wr64(std::string& s, uint64_t v) { for (int i = 0; i < 8; ++i) s.push_back(char((v >> (8 * i)) & 0xff)); }

void seek(std::FILE* f, uint64_t off, const std::string& path) {
  if (fseeko(f, static_cast<off_t>(off), SEEK_SET) != 0) bad(path, "cannot seek to offset " + std::to_string(off));
}
void read_exact(std::FILE* f, void* dst, size_t n, const std::string& path, const char* what) {
  if (n && std::fread(dst, 1, n, f) != n) bad(path, std::string("truncated while reading ") + what);
}

struct DtypeCode { const char* code; at::ScalarType type; };
const DtypeCode kDtypes[] = {{"u1", at::kByte}, {"i1", at::kChar}, {"b1", at::kBool},  {"i2", at::kShort},
                             {"i4", at::kInt},  {"i8", at::kLong}, {"f2", at::kHalf},  {"f4", at::kFloat},
                             {"f8", at::kDouble}};

std::string descr_of(at::ScalarType t) {
  for (auto& d : kDtypes)
    if (d.type == t) return std::string(at::elementSize(t) == 1 ? "|" : "<") + d.code;
  throw std::runtime_error(std::string("npy: unsupported dtype ") + c10::toString(t));
}

// Parses the Python-literal header dict written by numpy.lib.format.
void parse_npy_dict(const std::string& path, const std::string& h, at::ScalarType& dtype, std::vector<int64_t>& shape) {
  auto value_after = [&](const std::string& key) -> size_t {
    size_t k = h.find("'" + key + "'");
    if (k == std::string::npos) bad(path, "npy header lacks '" + key + "': " + h);
    size_t c = h.find(':', k);
    if (c == std::string::npos) bad(path, "npy header malformed: " + h);
    size_t v = h.find_first_not_of(" ", c + 1);
    if (v == std::string::npos) bad(path, "npy header malformed: " + h);
    return v;
  };
  size_t d = value_after("descr");
  if (h[d] != '\'') bad(path, "npy descr is not a simple string (structured dtypes are not supported): " + h);
  size_t de = h.find('\'', d + 1);
  if (de == std::string::npos) bad(path, "npy header malformed: " + h);
  std::string descr = h.substr(d + 1, de - d - 1);
  if (descr.size() != 3) bad(path, "unsupported npy dtype '" + descr + "'");
  char order = descr[0];
  std::string code = descr.substr(1);
  bool found = false;
  for (auto& x : kDtypes)
    if (code == x.code) { dtype = x.type; found = true; }
  if (!found) bad(path, "unsupported npy dtype '" + descr + "' (supported: u1 i1 b1 i2 i4 i8 f2 f4 f8)");
  if (order == '>' && at::elementSize(dtype) > 1) bad(path, "big-endian npy dtype '" + descr + "' is not supported");
  if (order != '<' && order != '|' && order != '=' && order != '>') bad(path, "npy dtype '" + descr + "' has unknown byte order");
  size_t f = value_after("fortran_order");
  if (h.compare(f, 4, "True") == 0) bad(path, "Fortran-order arrays are not supported (save with C order)");
  if (h.compare(f, 5, "False") != 0) bad(path, "npy fortran_order malformed: " + h);
  size_t s = value_after("shape");
  if (h[s] != '(') bad(path, "npy shape malformed: " + h);
  size_t se = h.find(')', s);
  if (se == std::string::npos) bad(path, "npy shape malformed: " + h);
  shape.clear();
  std::string body = h.substr(s + 1, se - s - 1);
  size_t pos = 0;
  while (pos < body.size()) {
    size_t comma = body.find(',', pos);
    std::string tok = body.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    tok.erase(0, tok.find_first_not_of(" "));
    tok.erase(tok.find_last_not_of(" L") + 1);
    if (!tok.empty()) {
      if (tok.find_first_not_of("0123456789") != std::string::npos || tok.size() > 18)
        bad(path, "npy shape entry '" + tok + "' is not a non-negative integer");
      shape.push_back(std::stoll(tok));
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
}

std::vector<ZipEntry> read_central_directory(std::FILE* f, const std::string& path) {
  if (fseeko(f, 0, SEEK_END) != 0) bad(path, "cannot seek");
  const uint64_t size = static_cast<uint64_t>(ftello(f));
  if (size < 22) bad(path, "file of " + std::to_string(size) + " bytes is too small to be a zip archive");
  const uint64_t tail = std::min<uint64_t>(size, 22 + 65535);
  std::vector<unsigned char> buf(tail);
  seek(f, size - tail, path);
  read_exact(f, buf.data(), tail, path, "the end of the archive");
  int64_t eocd = -1;
  for (int64_t i = int64_t(tail) - 22; i >= 0; --i)
    if (rd32(&buf[i]) == kEocdSig) { eocd = i; break; }
  if (eocd < 0) bad(path, "no zip end-of-central-directory record (not an npz, or truncated)");
  const unsigned char* e = &buf[eocd];
  uint64_t entries = rd16(e + 10), cd_size = rd32(e + 12), cd_offset = rd32(e + 16);
  const uint64_t eocd_pos = size - tail + eocd;
  if (entries == 0xFFFF || cd_size == k32 || cd_offset == k32) {
    if (eocd_pos < 20) bad(path, "ZIP64 locator missing");
    unsigned char loc[20];
    seek(f, eocd_pos - 20, path);
    read_exact(f, loc, 20, path, "the ZIP64 locator");
    if (rd32(loc) != kZip64LocatorSig) bad(path, "ZIP64 locator missing");
    const uint64_t rec = rd64(loc + 8);
    if (rec + 56 > size) bad(path, "ZIP64 record offset " + std::to_string(rec) + " outside the file");
    unsigned char r[56];
    seek(f, rec, path);
    read_exact(f, r, 56, path, "the ZIP64 record");
    if (rd32(r) != kZip64EocdSig) bad(path, "bad ZIP64 end-of-central-directory signature");
    entries = rd64(r + 32);
    cd_size = rd64(r + 40);
    cd_offset = rd64(r + 48);
  }
  if (cd_offset > size || cd_size > size - cd_offset)
    bad(path, "central directory [" + std::to_string(cd_offset) + ", +" + std::to_string(cd_size) + ") outside the file");
  if (entries > cd_size / 46) bad(path, "central directory claims " + std::to_string(entries) + " entries");
  std::vector<unsigned char> cd(cd_size);
  seek(f, cd_offset, path);
  read_exact(f, cd.data(), cd_size, path, "the central directory");
  std::vector<ZipEntry> out;
  uint64_t p = 0;
  for (uint64_t n = 0; n < entries; ++n) {
    if (p + 46 > cd_size || rd32(&cd[p]) != kCentralSig) bad(path, "corrupt central directory entry " + std::to_string(n));
    const unsigned char* c = &cd[p];
    ZipEntry z;
    z.method = rd16(c + 10);
    z.crc32 = rd32(c + 16);
    z.compressed_size = rd32(c + 20);
    z.uncompressed_size = rd32(c + 24);
    const uint16_t name_len = rd16(c + 28), extra_len = rd16(c + 30), comment_len = rd16(c + 32);
    z.local_header_offset = rd32(c + 42);
    if (p + 46 + name_len + extra_len + comment_len > cd_size) bad(path, "corrupt central directory entry " + std::to_string(n));
    z.name.assign(reinterpret_cast<const char*>(c + 46), name_len);
    // ZIP64 extra field: the 8-byte values present are those whose 32-bit field is 0xFFFFFFFF.
    const unsigned char* x = c + 46 + name_len;
    for (uint32_t q = 0; q + 4 <= extra_len;) {
      const uint16_t id = rd16(x + q), len = rd16(x + q + 2);
      if (q + 4 + len > extra_len) bad(path, "corrupt extra field in entry '" + z.name + "'");
      if (id == 0x0001) {
        const unsigned char* v = x + q + 4;
        uint32_t used = 0;
        auto take = [&](uint64_t& field) {
          if (field != k32) return;
          if (used + 8 > len) bad(path, "short ZIP64 field in entry '" + z.name + "'");
          field = rd64(v + used);
          used += 8;
        };
        take(z.uncompressed_size);
        take(z.compressed_size);
        take(z.local_header_offset);
      }
      q += 4 + len;
    }
    if (z.method != 0 && z.method != 8)
      bad(path, "entry '" + z.name + "' uses zip method " + std::to_string(z.method) + " (only stored and deflate are supported)");
    if (z.local_header_offset > size || z.compressed_size > size)
      bad(path, "entry '" + z.name + "' points outside the file");
    out.push_back(std::move(z));
    p += 46 + name_len + extra_len + comment_len;
  }
  return out;
}

std::string strip_npy(const std::string& name) {
  return name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0 ? name.substr(0, name.size() - 4) : name;
}

}  // namespace

std::string npy_header(at::ScalarType dtype, const std::vector<int64_t>& shape) {
  std::string dict = "{'descr': '" + descr_of(dtype) + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) dict += std::to_string(shape[i]) + (shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
  dict += "), }";
  // numpy pads with spaces and a final newline so that the data starts on a 64-byte boundary
  size_t pre = 10;
  bool v2 = dict.size() + 1 + pre > 65535;
  if (v2) pre = 12;
  size_t total = pre + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  std::string h = "\x93NUMPY";
  h.push_back(char(v2 ? 2 : 1));
  h.push_back(0);
  if (v2) wr32(h, uint32_t(dict.size())); else wr16(h, uint16_t(dict.size()));
  return h + dict;
}

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
    unsigned char lh[30];
    seek(file_, entry_.local_header_offset, path);
    read_exact(file_, lh, 30, path, "a local header");
    if (rd32(lh) != kLocalSig) bad(path, "bad local header signature for '" + entry_.name + "'");
    seek(file_, entry_.local_header_offset + 30 + rd16(lh + 26) + rd16(lh + 28), path);
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

at::Tensor load_npy(const std::string& path) {
  std::string s = read_file(path);
  if (s.size() < 10 || s.compare(0, 6, "\x93NUMPY") != 0) bad(path, "not an .npy file");
  const unsigned char* p = reinterpret_cast<const unsigned char*>(s.data());
  uint64_t hlen, start;
  if (p[6] == 1) { hlen = rd16(p + 8); start = 10; }
  else if ((p[6] == 2 || p[6] == 3) && s.size() >= 12) { hlen = rd32(p + 8); start = 12; }
  else bad(path, "unsupported .npy version");
  if (start + hlen > s.size()) bad(path, "truncated .npy header");
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  parse_npy_dict(path, s.substr(start, hlen), dtype, shape);
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(dtype));
  const uint64_t bytes = uint64_t(t.numel()) * t.element_size();
  if (start + hlen + bytes != s.size())
    bad(path, "data holds " + std::to_string(s.size() - start - hlen) + " bytes, the shape needs " + std::to_string(bytes));
  std::memcpy(t.data_ptr(), s.data() + start + hlen, bytes);
  return t;
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
  std::string lh;
  wr32(lh, kLocalSig);
  wr16(lh, cur_zip64_ ? 45 : 20);
  wr16(lh, 0);
  wr16(lh, cur_.method);
  wr16(lh, 0);
  wr16(lh, 0x21);  // 1980-01-01
  wr32(lh, 0);
  wr32(lh, cur_zip64_ ? k32 : 0);
  wr32(lh, cur_zip64_ ? k32 : 0);
  wr16(lh, uint16_t(cur_.name.size()));
  wr16(lh, cur_zip64_ ? 20 : 0);
  lh += cur_.name;
  if (cur_zip64_) {
    wr16(lh, 1);
    wr16(lh, 16);
    wr64(lh, 0);
    wr64(lh, 0);
  }
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
  const uint64_t data_start = cur_.local_header_offset + 30 + cur_.name.size() + (cur_zip64_ ? 20 : 0);
  cur_.uncompressed_size = written_bytes_;
  cur_.compressed_size = end - data_start;
  if (!cur_zip64_ && cur_.compressed_size >= k32)
    throw std::runtime_error(path_ + ": compressed member exceeds 4 GiB without ZIP64");
  std::string patch;
  wr32(patch, cur_.crc32);
  wr32(patch, cur_zip64_ ? k32 : uint32_t(cur_.compressed_size));
  wr32(patch, cur_zip64_ ? k32 : uint32_t(cur_.uncompressed_size));
  seek(file_, cur_.local_header_offset + 14, path_);
  write_raw(patch.data(), patch.size());
  if (cur_zip64_) {
    std::string z;
    wr64(z, cur_.uncompressed_size);
    wr64(z, cur_.compressed_size);
    seek(file_, cur_.local_header_offset + 30 + cur_.name.size() + 4, path_);
    write_raw(z.data(), z.size());
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
  for (const auto& e : entries_) {
    const bool z64 = e.uncompressed_size >= k32 || e.compressed_size >= k32 || e.local_header_offset >= k32;
    wr32(cd, kCentralSig);
    wr16(cd, z64 ? 45 : 20);
    wr16(cd, z64 ? 45 : 20);
    wr16(cd, 0);
    wr16(cd, e.method);
    wr16(cd, 0);
    wr16(cd, 0x21);
    wr32(cd, e.crc32);
    wr32(cd, z64 ? k32 : uint32_t(e.compressed_size));
    wr32(cd, z64 ? k32 : uint32_t(e.uncompressed_size));
    wr16(cd, uint16_t(e.name.size()));
    wr16(cd, z64 ? 28 : 0);
    wr16(cd, 0);
    wr16(cd, 0);
    wr16(cd, 0);
    wr32(cd, 0x01800000u);  // -rw------- as unix attributes, like Python's zipfile
    wr32(cd, z64 ? k32 : uint32_t(e.local_header_offset));
    cd += e.name;
    if (z64) {
      wr16(cd, 1);
      wr16(cd, 24);
      wr64(cd, e.uncompressed_size);
      wr64(cd, e.compressed_size);
      wr64(cd, e.local_header_offset);
    }
  }
  write_raw(cd.data(), cd.size());
  const uint64_t cd_end = cd_offset + cd.size();
  const bool z64 = cd_end >= k32 || entries_.size() >= 0xFFFF;
  std::string tail;
  if (z64) {
    wr32(tail, kZip64EocdSig);
    wr64(tail, 44);
    wr16(tail, 45);
    wr16(tail, 45);
    wr32(tail, 0);
    wr32(tail, 0);
    wr64(tail, entries_.size());
    wr64(tail, entries_.size());
    wr64(tail, cd.size());
    wr64(tail, cd_offset);
    wr32(tail, kZip64LocatorSig);
    wr32(tail, 0);
    wr64(tail, cd_end);
    wr32(tail, 1);
  }
  wr32(tail, kEocdSig);
  wr16(tail, 0);
  wr16(tail, 0);
  wr16(tail, z64 ? 0xFFFF : uint16_t(entries_.size()));
  wr16(tail, z64 ? 0xFFFF : uint16_t(entries_.size()));
  wr32(tail, z64 ? k32 : uint32_t(cd.size()));
  wr32(tail, z64 ? k32 : uint32_t(cd_offset));
  wr16(tail, 0);
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

void save_npy(const std::string& path, const at::Tensor& array) {
  at::Tensor a = array.detach().to(at::kCPU).contiguous();
  const std::string header = npy_header(a.scalar_type(), a.sizes().vec());
  write_file_atomic(path, [&](std::ostream& out) {
    out.write(header.data(), header.size());
    out.write(static_cast<const char*>(a.data_ptr()), a.numel() * a.element_size());
  });
}

}  // namespace nala::io
