// The one seed-derivation function: every random stream of nala (a training step's noise, the data
// order of an epoch, a sampling batch's noise and labels) is seeded from (user seed, stream, index)
// by splitmix64 (Steele, Lea & Flood 2014), so neighbouring seeds and indices give unrelated streams
// and any step or batch can be regenerated alone (resume, data-parallel ranks).
#pragma once
#include <cstdint>

namespace nala::diffusion {

enum class SeedStream : uint64_t {
  TrainStep = 1,    // index: the training step
  DataOrder = 2,    // index: the epoch
  SampleBatch = 3,  // index: the batch of a sampling run
  SamplerNoise = 4, // index: the batch of a sampling run (noise drawn inside stochastic samplers)
  PreviewGrid = 5,  // index: 0 (the trainer's periodic sample grids)
  LatentShard = 6,  // index: the shard of extract-latents (posterior samples)
};

constexpr uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A non-negative 63-bit seed (torch::manual_seed and at::make_generator take it as is).
constexpr uint64_t derive_seed(uint64_t seed, SeedStream stream, uint64_t index) {
  return splitmix64(splitmix64(splitmix64(seed) ^ uint64_t(stream)) + index) & 0x7FFFFFFFFFFFFFFFull;
}

}  // namespace nala::diffusion
