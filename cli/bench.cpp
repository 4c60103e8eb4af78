// nala bench <name> [options]: the benchmarks of bench/, as tables.
#include <cstring>
#include <iostream>

#include "bench/benchmarks.h"
#include "cli/commands.h"

namespace nala::cli {

int run_bench(int argc, char** argv) {
  const char* usage =
      "usage: nala bench <benchmark> [options]   (nala bench <benchmark> --help)\n"
      "  attention   NaLa attention (CUDA kernels or the CPU path) vs the reference and softmax SDPA\n"
      "  tail        the gated NaLa block's tail (LePE + LayerNorm + SiLU gate): fused vs the plain composition\n"
      "  train       training-step img/s of DiT / NaLaDiT models\n"
      "  sample      DDPM + CFG sampling img/s\n"
      "  eval        Inception feature extraction and VAE encode/decode img/s\n";
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::cout << usage;
    return argc < 2 ? 2 : 0;
  }
  const std::string which = argv[1];
  if (which == "attention") return bench::bench_attention(argc - 1, argv + 1);
  if (which == "tail") return bench::bench_tail(argc - 1, argv + 1);
  if (which == "train") return bench::bench_train(argc - 1, argv + 1);
  if (which == "sample") return bench::bench_sample(argc - 1, argv + 1);
  if (which == "eval") return bench::bench_eval(argc - 1, argv + 1);
  std::cerr << "nala bench: unknown benchmark '" << which << "'\n" << usage;
  return 2;
}

}  // namespace nala::cli
