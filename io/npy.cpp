#include "io/npy.h"

#include <cstring>
#include <ostream>
#include <stdexcept>

#include <ATen/ATen.h>

#include "io/atomic_file.h"
#include "io/zip.h"  // bad() and the little-endian byte helpers

namespace nala::io {
using namespace detail;
namespace {

struct DtypeCode { const char* code; at::ScalarType type; };
const DtypeCode kDtypes[] = {{"u1", at::kByte}, {"i1", at::kChar}, {"b1", at::kBool},  {"i2", at::kShort},
                             {"i4", at::kInt},  {"i8", at::kLong}, {"f2", at::kHalf},  {"f4", at::kFloat},
                             {"f8", at::kDouble}};

std::string descr_of(at::ScalarType t) {
  for (auto& d : kDtypes)
    if (d.type == t) return std::string(at::elementSize(t) == 1 ? "|" : "<") + d.code;
  throw std::runtime_error(std::string("npy: unsupported dtype ") + c10::toString(t));
}

}  // namespace

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

std::string npy_header(at::ScalarType dtype, const std::vector<int64_t>& shape) {
  std::string dict = "{'descr': '" + descr_of(dtype) + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i)
    dict += std::to_string(shape[i]) + (shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
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

void save_npy(const std::string& path, const at::Tensor& array) {
  at::Tensor a = array.detach().to(at::kCPU).contiguous();
  const std::string header = npy_header(a.scalar_type(), a.sizes().vec());
  write_file_atomic(path, [&](std::ostream& out) {
    out.write(header.data(), header.size());
    out.write(static_cast<const char*>(a.data_ptr()), a.numel() * a.element_size());
  });
}

}  // namespace nala::io
