// Writing files so that a crash, a full disk or a kill never leaves a half-written file under the
// final name: write "<path>.tmp.<pid>", flush and fsync, then rename over the target (POSIX rename
// is atomic within a file system), then fsync the directory so the new name is durable too. On any
// failure (fsync's included) the temporary file is removed and the target is left exactly as it was.
#pragma once
#include <functional>
#include <iosfwd>
#include <string>

namespace nala::io {

// Calls `write(out)` on a stream to a temporary file, then renames it to `path`. Throws
// std::runtime_error naming `path` if writing, flushing or renaming fails.
void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& write);

// Same, for a writer that needs a seekable C FILE* (zip writers patch headers after the data).
void write_file_atomic_c(const std::string& path, const std::function<void(std::FILE*)>& write);

// Reads a whole file; throws naming the path if it cannot be opened or read.
std::string read_file(const std::string& path);

// True if `path` exists (any kind of file).
bool file_exists(const std::string& path);

// fsync of a file or directory; an fsync error is an error (naming the path).
void fsync_path(const std::string& path);
// fsync of the directory holding `path`, so that a rename or a new name in it survives a crash.
void fsync_parent_dir(const std::string& path);

// Throws "<option> '<path>': the folder '<dir>' does not exist" (or is not a folder), and for an
// empty path or one that is itself a folder, before a long computation whose result would go to `path`.
void check_parent_dir(const std::string& path, const std::string& option);

// Creates a directory and its parents; throws naming the path on failure.
void make_dirs(const std::string& path);

// Removes a file or a folder with everything in it (symbolic links removed, not followed); a path
// that does not exist is no error. On failure: false, and *error (if given) names the path and the
// reason. Written on POSIX nftw(3), not std::filesystem::remove_all: the torch wheel's libtorch*.so
// export their own static copy of libstdc++'s std::filesystem, whose remove_all calls a weak symbol
// that no system libstdc++.so defines (std::filesystem::recursive_directory_iterator::__erase), so
// wherever the dynamic linker binds a program's remove_all to LibTorch's copy it jumps to address 0
// (the GPU machine: `nala sample --npz` and checkpoint pruning died of SIGSEGV; docs/guide.md).
bool remove_tree(const std::string& path, std::string* error = nullptr);

}  // namespace nala::io
