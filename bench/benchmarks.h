// The benchmarks behind `nala bench <name>`; each prints a markdown table and asserts nothing.
#pragma once

namespace nala::bench {

int bench_attention(int argc, char** argv);
int bench_tail(int argc, char** argv);
int bench_train(int argc, char** argv);
int bench_sample(int argc, char** argv);
int bench_eval(int argc, char** argv);

}  // namespace nala::bench
