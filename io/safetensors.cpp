#include "io/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "io/atomic_file.h"

namespace nala::io {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the reference library's bound (100 MB)

const std::vector<std::pair<std::string, at::ScalarType>>& dtype_table() {
  static const std::vector<std::pair<std::string, at::ScalarType>> table = {
      {"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf},  {"BF16", at::kBFloat16},
      {"I64", at::kLong},   {"I32", at::kInt},   {"I16", at::kShort}, {"I8", at::kChar},
      {"U8", at::kByte},    {"BOOL", at::kBool}};
  return table;
}

at::ScalarType parse_dtype(const std::string& path, const std::string& tensor, const std::string& s) {
  for (auto& [name, t] : dtype_table())
    if (name == s) return t;
  throw std::runtime_error(path + ": tensor '" + tensor + "' has unknown dtype '" + s + "'");
}

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": invalid safetensors file: " + what);
}

struct Header {
  std::vector<SafetensorsInfo> infos;
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;
};

Header parse_header(const std::string& path, std::ifstream& in) {
  in.seekg(0, std::ios::end);
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  if (file_size < 8) bad(path, "file has " + std::to_string(file_size) + " bytes, fewer than the 8-byte header length");
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > kMaxHeaderBytes) bad(path, "header length " + std::to_string(n) + " exceeds the 100 MB limit");
  if (n > file_size - 8)
    bad(path, "header length " + std::to_string(n) + " exceeds the file size " + std::to_string(file_size));
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  if (!in) bad(path, "cannot read the header");

  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    bad(path, std::string("header is not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object()) bad(path, "header is not a JSON object");

  Header h;
  h.data_start = 8 + n;
  const uint64_t data_size = file_size - h.data_start;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) bad(path, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) bad(path, "__metadata__ value '" + m.key() + "' is not a string");
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      bad(path, "tensor '" + name + "' lacks dtype, shape or data_offsets");
    if (!v["dtype"].is_string()) bad(path, "tensor '" + name + "': dtype is not a string");
    SafetensorsInfo info;
    info.name = name;
    info.dtype = parse_dtype(path, name, v["dtype"].get<std::string>());
    if (!v["shape"].is_array()) bad(path, "tensor '" + name + "': shape is not an array");
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
        bad(path, "tensor '" + name + "': shape entry " + d.dump() + " is not a non-negative integer");
      const uint64_t dim = d.get<uint64_t>();
      if (dim != 0 && numel > (1ull << 62) / dim) bad(path, "tensor '" + name + "': shape overflows");
      numel *= dim;
      info.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      bad(path, "tensor '" + name + "': data_offsets must be two non-negative integers, got " + off.dump());
    const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (b > e || e > data_size)
      bad(path, "tensor '" + name + "': data_offsets [" + std::to_string(b) + ", " + std::to_string(e) +
                    "] outside the data buffer of " + std::to_string(data_size) + " bytes");
    const uint64_t want = numel * at::elementSize(info.dtype);
    if (e - b != want)
      bad(path, "tensor '" + name + "': shape needs " + std::to_string(want) + " bytes but data_offsets give " +
                    std::to_string(e - b));
    info.begin = static_cast<int64_t>(b);
    info.end = static_cast<int64_t>(e);
    h.infos.push_back(std::move(info));
  }
  // The buffer must be covered exactly: sorted ranges, each starting where the previous ended.
  std::vector<const SafetensorsInfo*> sorted;
  for (auto& i : h.infos) sorted.push_back(&i);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  int64_t pos = 0;
  for (auto* i : sorted) {
    if (i->begin < pos) bad(path, "tensor '" + i->name + "' overlaps another tensor");
    if (i->begin > pos) bad(path, "hole in the data buffer before tensor '" + i->name + "'");
    pos = i->end;
  }
  if (static_cast<uint64_t>(pos) != data_size)
    bad(path, "data buffer has " + std::to_string(data_size) + " bytes but the tensors cover " + std::to_string(pos));
  // File order = order of data offsets (what writers produce).
  std::stable_sort(h.infos.begin(), h.infos.end(), [](auto& a, auto& b) { return a.begin < b.begin; });
  return h;
}

}  // namespace

std::string safetensors_dtype_name(at::ScalarType t) {
  for (auto& [name, s] : dtype_table())
    if (s == t) return name;
  throw std::runtime_error(std::string("safetensors: unsupported dtype ") + c10::toString(t));
}

std::vector<SafetensorsInfo> read_safetensors_header(const std::string& path, std::map<std::string, std::string>* metadata) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open '" + path + "'");
  Header h = parse_header(path, in);
  if (metadata) *metadata = h.metadata;
  return h.infos;
}

NamedTensors load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open '" + path + "'");
  Header h = parse_header(path, in);
  NamedTensors out;
  out.reserve(h.infos.size());
  for (const auto& info : h.infos) {
    at::Tensor t = at::empty(info.shape, at::TensorOptions().dtype(info.dtype));  // CPU, contiguous
    in.seekg(static_cast<std::streamoff>(h.data_start + info.begin));
    in.read(static_cast<char*>(t.data_ptr()), info.end - info.begin);
    if (!in) throw std::runtime_error(path + ": cannot read the data of tensor '" + info.name + "'");
    if (t.scalar_type() == at::kBool) {
      // any byte other than 0/1 would be undefined behaviour for bool
      const uint8_t* p = static_cast<const uint8_t*>(t.data_ptr());
      for (int64_t i = 0; i < t.numel(); ++i)
        if (p[i] > 1) throw std::runtime_error(path + ": tensor '" + info.name + "' has a BOOL byte that is not 0 or 1");
    }
    out.emplace_back(info.name, std::move(t));
  }
  if (metadata) *metadata = std::move(h.metadata);
  return out;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<at::Tensor> data;
  data.reserve(tensors.size());
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name == "__metadata__" || header.contains(name))
      throw std::runtime_error(path + ": duplicate or reserved tensor name '" + name + "'");
    at::Tensor t = tensor.detach().to(at::kCPU).contiguous();
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    header[name] = {{"dtype", safetensors_dtype_name(t.scalar_type())},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(std::move(t));
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // align the data to 8 bytes, as the reference writer does
  write_file_atomic(path, [&](std::ostream& out) {
    uint64_t n = text.size();
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& t : data) out.write(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
  });
}

}  // namespace nala::io
