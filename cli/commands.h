// The sub-commands of `nala`, one file each. Each takes the arguments after the command name
// (argv[0] is "nala <command>") and returns the process exit code.
#pragma once

namespace nala::cli {

int run_train(int argc, char** argv);
int run_sample(int argc, char** argv);
int run_eval(int argc, char** argv);
int run_extract_latents(int argc, char** argv);
int run_forward(int argc, char** argv);
int run_convert(int argc, char** argv);
int run_bench(int argc, char** argv);

// On SIGSEGV, SIGBUS, SIGFPE, SIGILL or SIGABRT: prints the signal and the stack to stderr, then
// dies of the same signal (cli/fatal_signal.cpp).
void install_fatal_signal_handler();

// Prints "nala <version>, LibTorch <version>, CUDA: ..." for --version.
void print_version();

}  // namespace nala::cli
