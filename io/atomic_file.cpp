#include "io/atomic_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <fcntl.h>
#include <unistd.h>

namespace nala::io {
namespace {

std::string temp_name(const std::string& path) {
  return path + ".tmp." + std::to_string(::getpid());
}

// Flushes file contents to the disk so that the rename never publishes an empty file after a crash.
void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void publish(const std::string& tmp, const std::string& path) {
  fsync_path(tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(err));
  }
}

}  // namespace

void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& write) {
  const std::string tmp = temp_name(path);
  try {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("cannot open '" + tmp + "' for writing: " + std::strerror(errno));
    write(out);
    out.flush();
    if (!out) throw std::runtime_error("write to '" + path + "' failed (disk full?)");
    out.close();
    if (out.fail()) throw std::runtime_error("closing '" + path + "' failed (disk full?)");
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  publish(tmp, path);
}

void write_file_atomic_c(const std::string& path, const std::function<void(std::FILE*)>& write) {
  const std::string tmp = temp_name(path);
  std::FILE* f = std::fopen(tmp.c_str(), "w+b");
  if (!f) throw std::runtime_error("cannot open '" + tmp + "' for writing: " + std::strerror(errno));
  try {
    write(f);
    if (std::fflush(f) != 0 || std::ferror(f))
      throw std::runtime_error("write to '" + path + "' failed: " + std::strerror(errno));
  } catch (...) {
    std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  if (std::fclose(f) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error("closing '" + path + "' failed: " + std::strerror(errno));
  }
  publish(tmp, path);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open '" + path + "': " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw std::runtime_error("cannot read '" + path + "'");
  return ss.str();
}

bool file_exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

void make_dirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) throw std::runtime_error("cannot create directory '" + path + "': " + ec.message());
}

}  // namespace nala::io
