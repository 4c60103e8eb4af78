// Built into libnala_io only in a sanitizer build (-DNALA_SANITIZE=..., cmake/sanitize.cmake): the
// sanitizers' options for every nala program and test, however it is started (CTest, the Python
// tests' subprocesses, a person), so no environment has to be set. The runtimes look these
// functions up when they start (the sanitizer interface's documented hooks).
extern "C" {

// Stop at the first error, with a stack, and catch use-after-return as well.
const char* __asan_default_options() { return "halt_on_error=1:detect_stack_use_after_return=1:strict_init_order=1"; }
const char* __ubsan_default_options() { return "print_stacktrace=1:halt_on_error=1"; }

// LibTorch allocates process-lifetime singletons (operator registrations, the thread pools, the
// dispatcher's tables) that it never frees; reports of those are not ours. nala's own leaks still
// show: their stacks run through libnala_*.so frames below any LibTorch frame.
const char* __lsan_default_suppressions() {
  return "leak:libtorch_cpu.so\n"
         "leak:libc10.so\n"
         "leak:libgomp\n";
}

}  // extern "C"
