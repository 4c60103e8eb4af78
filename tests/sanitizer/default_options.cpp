// Built into every nala executable in a sanitizer build (-DNALA_SANITIZE=..., cmake/sanitize.cmake):
// the sanitizers' options for every run, however it is started (CTest, the Python tests'
// subprocesses, a person), so no environment has to be set. The runtimes call these hooks (the
// sanitizer interface's documented ones) when they start; an ASAN_OPTIONS / UBSAN_OPTIONS variable
// still overrides them.
extern "C" {

// Catch use-after-return too, and check the order of static initialisers.
const char* __asan_default_options() { return "detect_stack_use_after_return=1:strict_init_order=1"; }
// A stack with every report (the build already stops at the first: -fno-sanitize-recover=all).
const char* __ubsan_default_options() { return "print_stacktrace=1"; }

}  // extern "C"
