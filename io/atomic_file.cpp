#include "io/atomic_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

namespace nala::io {
namespace {

std::string temp_name(const std::string& path) {
  return path + ".tmp." + std::to_string(::getpid());
}

void publish(const std::string& tmp, const std::string& path) {
  try {
    fsync_path(tmp);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(err));
  }
  fsync_parent_dir(path);
}

}  // namespace

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open '" + path + "' to flush it to the disk: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // EINVAL: the file system cannot fsync this kind of file (some pseudo file systems): nothing to lose
  if (rc != 0 && err != EINVAL) throw std::runtime_error("flushing '" + path + "' to the disk failed: " + std::strerror(err));
}

void fsync_parent_dir(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  fsync_path(dir.empty() ? "." : dir);
}

void check_parent_dir(const std::string& path, const std::string& option) {
  std::error_code ec;
  if (path.empty()) throw std::runtime_error(option + ": the path is empty");
  if (std::filesystem::is_directory(path, ec)) throw std::runtime_error(option + " '" + path + "' is a folder, not a file");
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) return;  // the working directory
  if (!std::filesystem::is_directory(dir, ec))
    throw std::runtime_error(option + " '" + path + "': the folder '" + dir + "' " +
                             (std::filesystem::exists(dir, ec) ? "is not a folder" : "does not exist"));
}

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

namespace {
thread_local std::string g_remove_error;  // nftw's callback has no context argument
int remove_entry(const char* p, const struct stat*, int, struct FTW*) {
  if (::remove(p) == 0 || errno == ENOENT) return 0;
  g_remove_error = "cannot remove '" + std::string(p) + "': " + std::strerror(errno);
  return 1;
}
}  // namespace

bool remove_tree(const std::string& path, std::string* error) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return true;
    if (error) *error = "cannot remove '" + path + "': " + std::strerror(errno);
    return false;
  }
  g_remove_error.clear();
  // depth first (a folder's entries before the folder), not across symbolic links or mounts
  const int rc = ::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
  if (rc == 0) return true;
  if (error) *error = g_remove_error.empty() ? "cannot remove '" + path + "': " + std::strerror(errno) : g_remove_error;
  return false;
}

}  // namespace nala::io
