// N class-conditional samples to one .npz for FID (arr_0 uint8 (N, H, W, 3), arr_1 labels (N,), the
// ADM evaluator's layout, docs/reference.md §5.2), resumable: batch b's noise and labels come from
// (seed, b) alone and each finished batch is kept as OUT.npz.parts/batch_<b>.npz, so an interrupted
// run finishes with exactly the samples of an uninterrupted one. Also the model-space -> image step
// that grids and batches share.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "io/manifest.h"
#include "models/dit.h"
#include "models/vae.h"
#include "samplers/sampler_table.h"

namespace nala::samplers {

// Model-space samples (N, C, h, w) -> uint8 (N, H, W, 3) through the autoencoder (gray repeated to RGB).
at::Tensor decode_to_images(models::Autoencoder& ae, const at::Tensor& x, const c10::Device& device);

// Noise (N, C, h, w) and labels (N,) of batch `b` of a sampling run seeded with `seed`.
std::pair<at::Tensor, at::Tensor> batch_noise_and_labels(uint64_t seed, int64_t b, int64_t n, int64_t channels, int64_t size, int64_t num_classes);
// The generator of the noise drawn inside stochastic samplers for batch `b`.
at::Generator sampler_generator(uint64_t seed, int64_t b);

struct FidBatchOptions {
  int64_t num_samples = 50000;
  int64_t batch_size = 64;
  uint64_t seed = 0;
  bool progress = true;  // a progress bar on stderr
  std::function<void(int64_t batch)> on_batch;  // called after each batch is saved (it may throw to stop)
  // Settings the library cannot see (the caller's weights and VAE files' fingerprints, say); the
  // sampling options, sizes, seed, dtype and device are added to the manifest here.
  io::Settings manifest;
};

// Throws when `npz` exists: a finished batch is neither sampled again nor replaced.
void refuse_finished_npz(const std::string& npz);

// so must be resolved against the model (generate.h). Refuses an existing `npz` (refuse_finished_npz). Writes `npz` atomically and removes the parts.
// OUT.npz.parts/manifest.json records every setting that changes the samples; a resume with another
// setting is refused, naming it (io/manifest.h). The parts folder is locked (io/output_lock.h).
void sample_fid_batches(models::DiT& model, models::Autoencoder& ae, const SamplingOptions& so, const FidBatchOptions& o,
                        const std::string& npz, const c10::Device& device);

}  // namespace nala::samplers
