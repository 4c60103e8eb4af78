// One writer per output: an advisory lock (flock(2), exclusive, non-blocking) on a lock file inside
// a run directory, a sample batch's parts folder or a latent folder. The kernel releases it when the
// holder exits in any way, SIGKILL included, so a lock is never stale. The holder writes its pid into
// the file so a refused process can say who holds it.
#pragma once
#include <string>

namespace nala::io {

class OutputLock {
 public:
  // Creates `dir` if needed and locks dir/.nala.lock. If another process holds it, throws an error
  // naming `what` (e.g. "run directory runs/x"), the lock file and the holder's pid.
  OutputLock(const std::string& dir, const std::string& what);
  ~OutputLock();  // releases the lock (the file stays: removing it would race with a new holder)
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

  static std::string lock_path(const std::string& dir) { return dir + "/.nala.lock"; }

 private:
  int fd_ = -1;
};

}  // namespace nala::io
