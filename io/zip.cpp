#include "io/zip.h"

#include <algorithm>
#include <stdexcept>

#include <sys/types.h>

namespace nala::io {

namespace detail {

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": invalid npz/npy file: " + what);
}

void seek(std::FILE* f, uint64_t off, const std::string& path) {
  if (fseeko(f, static_cast<off_t>(off), SEEK_SET) != 0) bad(path, "cannot seek to offset " + std::to_string(off));
}
void read_exact(std::FILE* f, void* dst, size_t n, const std::string& path, const char* what) {
  if (n && std::fread(dst, 1, n, f) != n) bad(path, std::string("truncated while reading ") + what);
}

}  // namespace detail

using namespace detail;

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

void seek_zip_member_data(std::FILE* f, const ZipEntry& e, const std::string& path) {
  unsigned char lh[30];
  seek(f, e.local_header_offset, path);
  read_exact(f, lh, 30, path, "a local header");
  if (rd32(lh) != kLocalSig) bad(path, "bad local header signature for '" + e.name + "'");
  seek(f, e.local_header_offset + 30 + rd16(lh + 26) + rd16(lh + 28), path);
}

std::string zip_local_header(const ZipEntry& e, bool zip64) {
  std::string lh;
  wr32(lh, kLocalSig);
  wr16(lh, zip64 ? 45 : 20);
  wr16(lh, 0);
  wr16(lh, e.method);
  wr16(lh, 0);
  wr16(lh, 0x21);  // 1980-01-01
  wr32(lh, 0);
  wr32(lh, zip64 ? k32 : 0);
  wr32(lh, zip64 ? k32 : 0);
  wr16(lh, uint16_t(e.name.size()));
  wr16(lh, zip64 ? 20 : 0);
  lh += e.name;
  if (zip64) {
    wr16(lh, 1);
    wr16(lh, 16);
    wr64(lh, 0);
    wr64(lh, 0);
  }
  return lh;
}

uint64_t zip_local_header_size(const ZipEntry& e, bool zip64) { return 30 + e.name.size() + (zip64 ? 20 : 0); }

std::vector<std::pair<uint64_t, std::string>> zip_local_header_patches(const ZipEntry& e, bool zip64) {
  std::vector<std::pair<uint64_t, std::string>> out;
  std::string patch;
  wr32(patch, e.crc32);
  wr32(patch, zip64 ? k32 : uint32_t(e.compressed_size));
  wr32(patch, zip64 ? k32 : uint32_t(e.uncompressed_size));
  out.emplace_back(e.local_header_offset + 14, std::move(patch));
  if (zip64) {
    std::string z;
    wr64(z, e.uncompressed_size);
    wr64(z, e.compressed_size);
    out.emplace_back(e.local_header_offset + 30 + e.name.size() + 4, std::move(z));
  }
  return out;
}

std::string zip_central_entry(const ZipEntry& e) {
  std::string cd;
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
  return cd;
}

std::string zip_end_records(uint64_t entries, uint64_t cd_size, uint64_t cd_offset) {
  const uint64_t cd_end = cd_offset + cd_size;
  const bool z64 = cd_end >= k32 || entries >= 0xFFFF;
  std::string tail;
  if (z64) {
    wr32(tail, kZip64EocdSig);
    wr64(tail, 44);
    wr16(tail, 45);
    wr16(tail, 45);
    wr32(tail, 0);
    wr32(tail, 0);
    wr64(tail, entries);
    wr64(tail, entries);
    wr64(tail, cd_size);
    wr64(tail, cd_offset);
    wr32(tail, kZip64LocatorSig);
    wr32(tail, 0);
    wr64(tail, cd_end);
    wr32(tail, 1);
  }
  wr32(tail, kEocdSig);
  wr16(tail, 0);
  wr16(tail, 0);
  wr16(tail, z64 ? 0xFFFF : uint16_t(entries));
  wr16(tail, z64 ? 0xFFFF : uint16_t(entries));
  wr32(tail, z64 ? k32 : uint32_t(cd_size));
  wr32(tail, z64 ? k32 : uint32_t(cd_offset));
  wr16(tail, 0);
  return tail;
}

}  // namespace nala::io
