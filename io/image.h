// Images: decode (JPEG/PNG/BMP/... through stb_image), PNG encode, grids, and the ADM centre crop.
// Layout everywhere in this file: uint8 tensors (H, W, 3), RGB, contiguous, on the CPU.
#pragma once
#include <string>

#include <ATen/core/Tensor.h>

namespace nala::io {

// Decodes an image file; gray and RGBA become RGB (alpha is dropped). Throws naming the file.
at::Tensor read_image(const std::string& path);                       // (H, W, 3) uint8
at::Tensor decode_image(const std::string& bytes, const std::string& name);

// The PNG file's bytes of (H, W, 3) or (H, W, 1) uint8; `name` is for the error message.
std::string encode_png(const at::Tensor& image, const std::string& name);
// Writes a PNG atomically. Accepts (H, W, 3) or (H, W, 1) uint8.
void write_png(const std::string& path, const at::Tensor& image);

// Tiles a batch (N, H, W, C) uint8 into one image with `nrow` images per row and `padding` pixels
// of `pad_value` between and around them (torchvision.utils.make_grid's layout).
at::Tensor make_grid(const at::Tensor& images, int64_t nrow, int64_t padding = 2, int pad_value = 0);

// Pillow's separable resampling (ImagingResample in Pillow's Resample.c), reproduced exactly for
// 8-bit images: per-axis coefficients from the filter, 22-bit fixed point, horizontal pass then
// vertical pass, each rounding to uint8.
enum class ResampleFilter { Box, Bilinear, Bicubic };
at::Tensor pil_resize(const at::Tensor& image, int64_t out_w, int64_t out_h, ResampleFilter filter);

// ADM's center_crop_arr (guided-diffusion image_datasets.py; DiT train.py:85-103): halve with BOX
// while the short side is >= 2*size, resize with BICUBIC so the short side is `size` (Python
// round), then crop the centre size x size.
at::Tensor center_crop_adm(const at::Tensor& image, int64_t size);

// uint8 (N, H, W, C) <-> float (N, C, H, W) in [-1, 1]; to_uint8 uses the reference samplers'
// clamp(127.5 x + 128, 0, 255) truncated (DiT sample_ddp.py:132).
at::Tensor uint8_to_model(const at::Tensor& nhwc);
at::Tensor model_to_uint8(const at::Tensor& nchw);

}  // namespace nala::io
