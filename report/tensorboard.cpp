// TensorBoard event files (report/tensorboard.h). The protocol buffers are encoded by hand, field
// by field, rather than with libprotobuf: LibTorch's libtorch_cpu.so carries its own protobuf
// (exported with its ONNX classes), and a second protobuf runtime in the same process risks
// clashing symbols and descriptor registrations; the GPU machine has no protobuf headers either.
// The messages and field numbers (tensorboard/compat/proto/event.proto, summary.proto):
//   Event      { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5;
//                SessionLog session_log = 7; }
//   SessionLog { enum SessionStatus status = 1; }            (START = 1)
//   Summary    { repeated Value value = 1; }
//   Value      { string tag = 1; float simple_value = 2; Image image = 4; }
//   Image      { int32 height = 1; int32 width = 2; int32 colorspace = 3; bytes encoded_image_string = 4; }
#include "report/tensorboard.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <unistd.h>

#include "io/atomic_file.h"

namespace nala::report {
namespace {

// ---- CRC-32C, reflected polynomial 0x82F63B78, one table of 256 entries ----
std::array<uint32_t, 256> crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

// ---- protocol buffer wire format: varints, fixed 32/64-bit, length-delimited ----
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& s, uint64_t v) {
  while (v >= 0x80) {
    s.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  s.push_back(char(uint8_t(v)));
}
void put_key(std::string& s, uint32_t field, WireType type) { put_varint(s, (uint64_t(field) << 3) | type); }
void put_int(std::string& s, uint32_t field, int64_t v) {  // int32 / int64 / enum: two's complement varint
  put_key(s, field, kVarint);
  put_varint(s, uint64_t(v));
}
void put_double(std::string& s, uint32_t field, double v) {
  put_key(s, field, kFixed64);
  char b[8];
  std::memcpy(b, &v, 8);  // little-endian hosts (x86-64, aarch64)
  s.append(b, 8);
}
void put_float(std::string& s, uint32_t field, float v) {
  put_key(s, field, kFixed32);
  char b[4];
  std::memcpy(b, &v, 4);
  s.append(b, 4);
}
void put_bytes(std::string& s, uint32_t field, const std::string& v) {
  put_key(s, field, kLengthDelimited);
  put_varint(s, v.size());
  s += v;
}

double unix_seconds() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

std::string event(int64_t step, uint32_t field, const std::string& message) {  // an Event with one message field
  std::string e;
  put_double(e, 1, unix_seconds());
  put_int(e, 2, step);
  put_bytes(e, field, message);
  return e;
}

bool get_varint(const std::string& s, size_t& i, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && i < s.size(); shift += 7) {
    const uint8_t b = uint8_t(s[i++]);
    v |= uint64_t(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

// The step of a serialized Event (field 2); false if the bytes do not parse as a message.
bool event_step(const std::string& e, int64_t& step, bool& has_step) {
  has_step = false;
  size_t i = 0;
  while (i < e.size()) {
    uint64_t key, v;
    if (!get_varint(e, i, key)) return false;
    switch (key & 7) {
      case kVarint:
        if (!get_varint(e, i, v)) return false;
        if ((key >> 3) == 2) {
          step = int64_t(v);
          has_step = true;
        }
        break;
      case kFixed64: i += 8; break;
      case kFixed32: i += 4; break;
      case kLengthDelimited:
        if (!get_varint(e, i, v) || v > e.size() - std::min(i, e.size())) return false;
        i += size_t(v);
        break;
      default: return false;
    }
  }
  return i == e.size();
}

std::string record(const std::string& data) {
  std::string r;
  char len[8];
  const uint64_t n = data.size();
  std::memcpy(len, &n, 8);
  const uint32_t len_crc = masked_crc32c(len, 8), data_crc = masked_crc32c(data.data(), data.size());
  r.append(len, 8);
  r.append(reinterpret_cast<const char*>(&len_crc), 4);
  r += data;
  r.append(reinterpret_cast<const char*>(&data_crc), 4);
  return r;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  static const std::array<uint32_t, 256> table = crc32c_table();
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::vector<EventRecord> read_event_file(const std::string& path, bool* complete) {
  const std::string s = io::read_file(path);
  std::vector<EventRecord> out;
  size_t i = 0;
  bool ok = true;
  while (i < s.size()) {
    uint64_t n;
    uint32_t len_crc, data_crc;
    if (s.size() - i < 12) { ok = false; break; }
    std::memcpy(&n, s.data() + i, 8);
    std::memcpy(&len_crc, s.data() + i + 8, 4);
    if (len_crc != masked_crc32c(s.data() + i, 8) || n > s.size() - i - 12 || s.size() - i - 12 - n < 4) { ok = false; break; }
    EventRecord r;
    r.data = s.substr(i + 12, size_t(n));
    std::memcpy(&data_crc, s.data() + i + 12 + n, 4);
    if (data_crc != masked_crc32c(r.data.data(), r.data.size()) || !event_step(r.data, r.step, r.has_step)) { ok = false; break; }
    out.push_back(std::move(r));
    i += 12 + size_t(n) + 4;
  }
  if (complete) *complete = ok;
  return out;
}

EventFileWriter::EventFileWriter(const std::string& dir, int64_t resume_step) {
  namespace fs = std::filesystem;
  io::make_dirs(dir);
  // earlier files: keep the events up to resume_step (the file-version header has step 0)
  std::vector<std::string> earlier;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) earlier.push_back(e.path().string());
  std::sort(earlier.begin(), earlier.end());
  for (const auto& f : earlier) {
    bool complete = true;
    std::vector<EventRecord> rs = read_event_file(f, &complete);
    const size_t before = rs.size();
    rs.erase(std::remove_if(rs.begin(), rs.end(), [&](const EventRecord& r) { return r.has_step && r.step > resume_step; }), rs.end());
    if (rs.size() == before && complete) continue;
    io::write_file_atomic(f, [&](std::ostream& o) {
      for (const auto& r : rs) o << record(r.data);
    });
  }
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  // TensorBoard reads a folder's files in name order, so the name starts with the time in
  // microseconds at a fixed width (a later file sorts later), moved on past any name already taken
  long long us = static_cast<long long>(unix_seconds() * 1e6);
  for (;; ++us) {
    char name[512];
    std::snprintf(name, sizeof name, "events.out.tfevents.%010lld.%06lld.%s.%d.nala", us / 1000000, us % 1000000, host, int(::getpid()));
    path_ = dir + "/" + name;
    if (!io::file_exists(path_)) break;
  }
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) throw std::runtime_error("cannot create the TensorBoard event file " + path_ + ": " + std::strerror(errno));
  std::string header;  // Event { wall_time, file_version: "brain.Event:2" }
  put_double(header, 1, unix_seconds());
  put_bytes(header, 3, "brain.Event:2");
  write_event(header);
  std::string start;  // SessionLog { status: START }
  put_int(start, 1, 1);
  write_event(event(resume_step + 1, 7, start));
  flush();
}

EventFileWriter::~EventFileWriter() {
  if (file_) std::fclose(file_);
}

void EventFileWriter::write_event(const std::string& e) {
  const std::string r = record(e);
  if (std::fwrite(r.data(), 1, r.size(), file_) != r.size())
    throw std::runtime_error("write to " + path_ + " failed (disk full?): " + std::strerror(errno));
}

void EventFileWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  std::string v;  // Summary.Value { tag, simple_value }
  put_bytes(v, 1, tag);
  put_float(v, 2, float(value));
  std::string summary;
  put_bytes(summary, 1, v);
  write_event(event(step, 5, summary));
}

void EventFileWriter::add_png(const std::string& tag, const std::string& png, int64_t height, int64_t width, int64_t step) {
  std::string image;  // Summary.Image { height, width, colorspace (3: RGB), encoded_image_string }
  put_int(image, 1, height);
  put_int(image, 2, width);
  put_int(image, 3, 3);
  put_bytes(image, 4, png);
  std::string v;
  put_bytes(v, 1, tag);
  put_bytes(v, 4, image);
  std::string summary;
  put_bytes(summary, 1, v);
  write_event(event(step, 5, summary));
}

void EventFileWriter::flush() {
  if (std::fflush(file_) != 0) throw std::runtime_error("write to " + path_ + " failed: " + std::strerror(errno));
}

}  // namespace nala::report
