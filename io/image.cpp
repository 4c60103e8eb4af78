#include "io/image.h"

#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>

#include "io/atomic_file.h"

#define STB_IMAGE_IMPLEMENTATION
#define STBI_FAILURE_USERMSG
#include <stb_image.h>
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb_image_write.h>

namespace nala::io {

at::Tensor decode_image(const std::string& bytes, const std::string& name) {
  int w = 0, h = 0, c = 0;
  if (bytes.size() > size_t(INT32_MAX)) throw std::runtime_error(name + ": image file too large");
  unsigned char* px = stbi_load_from_memory(reinterpret_cast<const stbi_uc*>(bytes.data()), int(bytes.size()), &w, &h, &c, 3);
  if (!px) throw std::runtime_error(name + ": cannot decode image (" + stbi_failure_reason() + ")");
  at::Tensor t = at::empty({h, w, 3}, at::kByte);
  std::memcpy(t.data_ptr(), px, size_t(h) * w * 3);
  stbi_image_free(px);
  return t;
}

at::Tensor read_image(const std::string& path) { return decode_image(read_file(path), path); }

std::string encode_png(const at::Tensor& image, const std::string& name) {
  TORCH_CHECK(image.dim() == 3 && (image.size(2) == 3 || image.size(2) == 1) && image.scalar_type() == at::kByte,
              "PNG '", name, "': image must be uint8 (H, W, 3) or (H, W, 1), got ", image.sizes(), " ", image.scalar_type());
  at::Tensor img = image.contiguous().cpu();
  std::string buf;
  auto sink = [](void* ctx, void* data, int size) { static_cast<std::string*>(ctx)->append(static_cast<char*>(data), size); };
  const int w = int(img.size(1)), h = int(img.size(0)), c = int(img.size(2));
  if (!stbi_write_png_to_func(sink, &buf, w, h, c, img.data_ptr(), w * c)) throw std::runtime_error(name + ": PNG encoding failed");
  return buf;
}

void write_png(const std::string& path, const at::Tensor& image) {
  const std::string buf = encode_png(image, path);
  write_file_atomic(path, [&](std::ostream& out) { out.write(buf.data(), buf.size()); });
}

at::Tensor make_grid(const at::Tensor& images, int64_t nrow, int64_t padding, int pad_value) {
  TORCH_CHECK(images.dim() == 4 && images.scalar_type() == at::kByte, "make_grid: images must be uint8 (N, H, W, C), got ",
              images.sizes());
  const int64_t n = images.size(0), h = images.size(1), w = images.size(2), c = images.size(3);
  TORCH_CHECK(n > 0 && nrow > 0, "make_grid: need at least one image and nrow > 0");
  const int64_t cols = std::min(nrow, n), rows = (n + cols - 1) / cols;
  at::Tensor grid = at::full({rows * (h + padding) + padding, cols * (w + padding) + padding, c}, pad_value, at::kByte);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = i / cols, q = i % cols;
    grid.narrow(0, padding + r * (h + padding), h).narrow(1, padding + q * (w + padding), w).copy_(images[i]);
  }
  return grid;
}

// ---- Pillow-exact resampling ---------------------------------------------------------------
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // Pillow's PRECISION_BITS for 8-bit images

double filter_value(ResampleFilter f, double x) {
  switch (f) {
    case ResampleFilter::Box:
      return (x > -0.5 && x <= 0.5) ? 1.0 : 0.0;
    case ResampleFilter::Bilinear:
      x = std::fabs(x);
      return x < 1.0 ? 1.0 - x : 0.0;
    case ResampleFilter::Bicubic: {
      const double a = -0.5;  // Pillow's bicubic uses a = -0.5
      x = std::fabs(x);
      if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
      if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
      return 0.0;
    }
  }
  return 0.0;
}

double filter_support(ResampleFilter f) {
  return f == ResampleFilter::Box ? 0.5 : f == ResampleFilter::Bilinear ? 1.0 : 2.0;
}

struct Coeffs {
  int ksize;
  std::vector<int> bounds;   // (xmin, xcount) per output pixel
  std::vector<int32_t> k;    // fixed point, ksize per output pixel
};

// Pillow's precompute_coeffs + normalize_coeffs_8bpc.
Coeffs precompute(int in_size, int out_size, ResampleFilter f) {
  const double scale = double(in_size) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = filter_support(f) * filterscale;
  Coeffs c;
  c.ksize = int(std::ceil(support)) * 2 + 1;
  c.bounds.resize(size_t(out_size) * 2);
  c.k.assign(size_t(out_size) * c.ksize, 0);
  std::vector<double> pre(c.ksize);
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = int(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = int(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    int x = 0;
    for (; x < xmax; ++x) {
      const double w = filter_value(f, (x + xmin - center + 0.5) * ss);
      pre[x] = w;
      ww += w;
    }
    for (x = 0; x < xmax; ++x)
      if (ww != 0.0) pre[x] /= ww;
    for (; x < c.ksize; ++x) pre[x] = 0;
    for (x = 0; x < c.ksize; ++x) {
      const double v = pre[x] * (1 << kPrecisionBits);
      c.k[size_t(xx) * c.ksize + x] = int32_t(v < 0 ? -0.5 + v : 0.5 + v);
    }
    c.bounds[size_t(xx) * 2] = xmin;
    c.bounds[size_t(xx) * 2 + 1] = xmax;
  }
  return c;
}

inline uint8_t clip8(int64_t v) {
  v >>= kPrecisionBits;
  return uint8_t(v < 0 ? 0 : v > 255 ? 255 : v);
}

// One pass along axis `axis` (0 = rows/vertical, 1 = columns/horizontal) of an (H, W, C) image.
at::Tensor resample_axis(const at::Tensor& in, int64_t out_len, int axis, ResampleFilter f) {
  const int64_t H = in.size(0), W = in.size(1), C = in.size(2);
  const int64_t in_len = axis == 1 ? W : H;
  Coeffs co = precompute(int(in_len), int(out_len), f);
  at::Tensor out = axis == 1 ? at::empty({H, out_len, C}, at::kByte) : at::empty({out_len, W, C}, at::kByte);
  const uint8_t* src = in.data_ptr<uint8_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  if (axis == 1) {
    for (int64_t y = 0; y < H; ++y)
      for (int64_t xx = 0; xx < out_len; ++xx) {
        const int xmin = co.bounds[xx * 2], xcnt = co.bounds[xx * 2 + 1];
        const int32_t* k = &co.k[size_t(xx) * co.ksize];
        for (int64_t ch = 0; ch < C; ++ch) {
          int64_t ss = int64_t(1) << (kPrecisionBits - 1);
          for (int x = 0; x < xcnt; ++x) ss += int64_t(src[(y * W + xmin + x) * C + ch]) * k[x];
          dst[(y * out_len + xx) * C + ch] = clip8(ss);
        }
      }
  } else {
    for (int64_t yy = 0; yy < out_len; ++yy) {
      const int ymin = co.bounds[yy * 2], ycnt = co.bounds[yy * 2 + 1];
      const int32_t* k = &co.k[size_t(yy) * co.ksize];
      for (int64_t x = 0; x < W; ++x)
        for (int64_t ch = 0; ch < C; ++ch) {
          int64_t ss = int64_t(1) << (kPrecisionBits - 1);
          for (int y = 0; y < ycnt; ++y) ss += int64_t(src[((ymin + y) * W + x) * C + ch]) * k[y];
          dst[(yy * W + x) * C + ch] = clip8(ss);
        }
    }
  }
  return out;
}

}  // namespace

at::Tensor pil_resize(const at::Tensor& image, int64_t out_w, int64_t out_h, ResampleFilter filter) {
  TORCH_CHECK(image.dim() == 3 && image.scalar_type() == at::kByte, "pil_resize: image must be uint8 (H, W, C), got ",
              image.sizes());
  TORCH_CHECK(out_w > 0 && out_h > 0, "pil_resize: output size must be positive, got ", out_w, "x", out_h);
  at::Tensor x = image.contiguous();
  // Pillow (ImagingResampleInner): horizontal pass first, then vertical; each only when the size changes.
  if (out_w != x.size(1)) x = resample_axis(x, out_w, 1, filter);
  if (out_h != x.size(0)) x = resample_axis(x, out_h, 0, filter);
  return x.is_same(image) ? x.clone() : x;
}

at::Tensor center_crop_adm(const at::Tensor& image, int64_t size) {
  TORCH_CHECK(size > 0, "center_crop_adm: size must be positive, got ", size);
  at::Tensor x = image;
  while (std::min(x.size(0), x.size(1)) >= 2 * size)
    x = pil_resize(x, x.size(1) / 2, x.size(0) / 2, ResampleFilter::Box);
  const double scale = double(size) / std::min(x.size(0), x.size(1));
  // Python's round(): half to even (std::nearbyint under the default rounding mode)
  const int64_t w = int64_t(std::nearbyint(x.size(1) * scale)), h = int64_t(std::nearbyint(x.size(0) * scale));
  x = pil_resize(x, w, h, ResampleFilter::Bicubic);
  const int64_t top = (x.size(0) - size) / 2, left = (x.size(1) - size) / 2;
  return x.narrow(0, top, size).narrow(1, left, size).contiguous();
}

at::Tensor uint8_to_model(const at::Tensor& nhwc) {
  return nhwc.permute({0, 3, 1, 2}).to(at::kFloat).div(127.5).sub(1.0).contiguous();  // (N, C, H, W) in [-1, 1]
}

at::Tensor model_to_uint8(const at::Tensor& nchw) {
  return nchw.to(at::kFloat).mul(127.5).add(128.0).clamp(0, 255).to(at::kByte).permute({0, 2, 3, 1}).contiguous();  // (N, H, W, C)
}

}  // namespace nala::io
