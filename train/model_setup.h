// What a training run trains on and with: the data set, the autoencoder between images and model
// space (the SD VAE for online encoding of image folders, identity for pixel space and latents),
// and the ModelConfig resolved from the preset, the flags and the data's shape.
#pragma once
#include <memory>

#include <c10/core/Device.h>

#include "data/datasets.h"
#include "models/model_config.h"
#include "models/vae.h"
#include "train/train_config.h"

namespace nala::train {

struct ModelSetup {
  std::shared_ptr<data::Dataset> dataset;
  std::shared_ptr<models::Autoencoder> autoencoder;
  bool online_vae = false;   // the data are images encoded by the VAE every step
  models::ModelConfig model;
};

// cfg must be resolved (train_config.h). Throws naming the value for shapes the model cannot take.
ModelSetup setup_model(const TrainConfig& cfg, const c10::Device& device);

}  // namespace nala::train
