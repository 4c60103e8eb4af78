// A last word on a fatal signal: `nala` prints which signal ended it and the stack (the frames'
// library and symbol, as backtrace_symbols_fd(3) gives them; `c++filt` demangles), then dies of the
// same signal, so the exit status a scheduler sees is unchanged (128 + signal). Only
// async-signal-safe calls run in the handler: write(2), backtrace_symbols_fd, raise. backtrace(3)
// loads libgcc on its first call, which is not safe in a handler, so it is called once here first.
#include "cli/commands.h"

#include <csignal>
#include <cstring>

#include <execinfo.h>
#include <unistd.h>

namespace nala::cli {
namespace {

void write_str(const char* s) { (void)!::write(STDERR_FILENO, s, std::strlen(s)); }

void on_fatal_signal(int sig) {
  write_str("\nnala: fatal signal ");
  write_str(sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGFPE ? "SIGFPE" : sig == SIGILL ? "SIGILL" : "SIGABRT");
  write_str("; stack (innermost first):\n");
  void* frames[64];
  const int n = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, n, STDERR_FILENO);
  // SA_RESETHAND restored the default action: die of the same signal.
  ::raise(sig);
}

}  // namespace

void install_fatal_signal_handler() {
  void* warm[1];
  (void)::backtrace(warm, 1);
  struct sigaction sa {};
  sa.sa_handler = on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND | SA_NODEFER;
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::sigaction(sig, &sa, nullptr);
}

}  // namespace nala::cli
