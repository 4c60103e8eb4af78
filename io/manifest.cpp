#include "io/manifest.h"

#include <cstdio>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>
#include <zlib.h>

#include "io/atomic_file.h"

namespace nala::io {

std::string file_fingerprint(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot open '" + path + "' to fingerprint it");
  std::vector<unsigned char> buf(1 << 20);
  uLong crc = crc32(0L, Z_NULL, 0);
  uint64_t size = 0;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) {
    crc = crc32(crc, buf.data(), uInt(n));
    size += n;
  }
  const bool err = std::ferror(f);
  std::fclose(f);
  if (err) throw std::runtime_error("cannot read '" + path + "' to fingerprint it");
  char out[64];
  std::snprintf(out, sizeof out, "crc32:%08lx bytes:%llu", crc, static_cast<unsigned long long>(size));
  return out;
}

void check_or_write_manifest(const std::string& dir, const Settings& settings, bool resuming, const std::string& what) {
  const std::string path = dir + "/manifest.json";
  if (!file_exists(path)) {
    if (resuming)
      throw std::runtime_error(what + " holds finished parts but no " + path + " (written by an older nala?): their settings are unknown; "
                                      "remove " + dir + " to start over");
    nlohmann::ordered_json j(settings);
    write_file_atomic(path, [&](std::ostream& o) { o << j.dump(2) << "\n"; });
    return;
  }
  Settings before;
  try {
    before = nlohmann::json::parse(read_file(path)).get<Settings>();
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": unreadable manifest (" + e.what() + "); remove " + dir + " to start over");
  }
  std::string diff;
  for (const auto& [k, v] : settings) {
    auto it = before.find(k);
    const std::string old = it == before.end() ? "(not recorded)" : it->second;
    if (old != v) diff += "\n  " + k + ": " + old + " before, " + v + " now";
  }
  for (const auto& [k, v] : before)
    if (!settings.count(k)) diff += "\n  " + k + ": " + v + " before, (not given) now";
  if (!diff.empty())
    throw std::runtime_error(what + " was started with other settings (" + path + "):" + diff +
                             "\nresume with the same settings, or use another output (or remove " + dir + ")");
}

}  // namespace nala::io
