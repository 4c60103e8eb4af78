// The zip container of .npz files: reading the central directory, and the records a writer emits.
// All fields are little-endian. An archive is, in order:
//   per member: a local header (30 bytes: signature 0x04034b50, versions, method, CRC-32, 32-bit sizes,
//               name and extra lengths; then the name and the extra field), then the member data;
//   the central directory: one entry per member (46 bytes + name + extra + comment, signature 0x02014b50);
//   ZIP64 only: the ZIP64 end-of-central-directory record (56 bytes) and its locator (20 bytes);
//   the end-of-central-directory record (22 bytes + a comment of at most 65535 bytes).
// A 32-bit size or offset of 0xFFFFFFFF (an entry count of 0xFFFF) means the real value is in the ZIP64
// extra field (id 0x0001) or the ZIP64 record. Only methods 0 (stored) and 8 (raw deflate) are supported.
// Errors throw std::runtime_error("<path>: invalid npz/npy file: ...").
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace nala::io {

struct ZipEntry {
  std::string name;
  uint16_t method = 0;  // 0 stored, 8 deflate
  uint32_t crc32 = 0;
  uint64_t compressed_size = 0, uncompressed_size = 0, local_header_offset = 0;
};

// Reads the central directory (ZIP64 included) of the open archive `f`; `path` names it in errors.
std::vector<ZipEntry> read_central_directory(std::FILE* f, const std::string& path);

// Reads the local header of `e` and leaves `f` positioned at the first byte of its data.
void seek_zip_member_data(std::FILE* f, const ZipEntry& e, const std::string& path);

// The local header of a member about to be written (name and method from `e`). CRC and sizes are
// written as 0 (0xFFFFFFFF plus a ZIP64 extra field of zero sizes if `zip64`) and patched once
// the data is written, with zip_local_header_patches().
std::string zip_local_header(const ZipEntry& e, bool zip64);
// Length of what zip_local_header() returns: the member data starts this far after local_header_offset.
uint64_t zip_local_header_size(const ZipEntry& e, bool zip64);
// The CRC-32 and sizes of a finished member, as (file offset, bytes) to overwrite in its local header.
std::vector<std::pair<uint64_t, std::string>> zip_local_header_patches(const ZipEntry& e, bool zip64);

// The central directory entry of `e`; with a ZIP64 extra field when a size or the offset needs 64 bits.
std::string zip_central_entry(const ZipEntry& e);

// The records after a central directory of `entries` entries and `cd_size` bytes at `cd_offset`:
// the end-of-central-directory record, preceded by the ZIP64 record and locator when needed.
std::string zip_end_records(uint64_t entries, uint64_t cd_size, uint64_t cd_offset);

// Helpers shared by the zip, .npy and .npz code.
namespace detail {

constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEocdSig = 0x06054b50;
constexpr uint32_t kZip64EocdSig = 0x06064b50, kZip64LocatorSig = 0x07064b50;
constexpr uint32_t k32 = 0xFFFFFFFFu;

// Throws std::runtime_error("<path>: invalid npz/npy file: <what>").
[[noreturn]] void bad(const std::string& path, const std::string& what);

inline uint16_t rd16(const unsigned char* p) { return uint16_t(p[0] | (p[1] << 8)); }
inline uint32_t rd32(const unsigned char* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}
inline uint64_t rd64(const unsigned char* p) { return uint64_t(rd32(p)) | (uint64_t(rd32(p + 4)) << 32); }
inline void wr16(std::string& s, uint16_t v) { s.push_back(char(v & 0xff)); s.push_back(char(v >> 8)); }
inline void wr32(std::string& s, uint32_t v) { for (int i = 0; i < 4; ++i) s.push_back(char((v >> (8 * i)) & 0xff)); }
inline void wr64(std::string& s, uint64_t v) { for (int i = 0; i < 8; ++i) s.push_back(char((v >> (8 * i)) & 0xff)); }

// fseeko to an absolute offset / fread exactly n bytes, or bad(path, ...).
void seek(std::FILE* f, uint64_t off, const std::string& path);
void read_exact(std::FILE* f, void* dst, size_t n, const std::string& path, const char* what);

}  // namespace detail
}  // namespace nala::io
