#include "report/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <ATen/ATen.h>

namespace nala::report {
namespace {

// 5×7 glyphs (rows top to bottom, 5 bits each) for the characters labels need.
struct Glyph {
  char c;
  uint8_t rows[7];
};
const Glyph kFont[] = {
    {'0', {14, 17, 19, 21, 25, 17, 14}}, {'1', {4, 12, 4, 4, 4, 4, 14}},   {'2', {14, 17, 1, 2, 4, 8, 31}},
    {'3', {31, 2, 4, 2, 1, 17, 14}},     {'4', {2, 6, 10, 18, 31, 2, 2}},  {'5', {31, 16, 30, 1, 1, 17, 14}},
    {'6', {6, 8, 16, 30, 17, 17, 14}},   {'7', {31, 1, 2, 4, 8, 8, 8}},    {'8', {14, 17, 17, 14, 17, 17, 14}},
    {'9', {14, 17, 17, 15, 1, 2, 12}},   {'.', {0, 0, 0, 0, 0, 12, 12}},   {'-', {0, 0, 0, 31, 0, 0, 0}},
    {'e', {0, 0, 14, 17, 31, 16, 14}},   {'+', {0, 4, 4, 31, 4, 4, 0}},    {' ', {0, 0, 0, 0, 0, 0, 0}},
    {'l', {12, 4, 4, 4, 4, 4, 14}},      {'o', {0, 0, 14, 17, 17, 17, 14}}, {'s', {0, 0, 15, 16, 14, 1, 30}},
    {'t', {8, 8, 28, 8, 8, 9, 6}},       {'p', {0, 0, 30, 17, 30, 16, 16}}, {'=', {0, 0, 31, 0, 31, 0, 0}},
};

struct Canvas {
  at::Tensor img;
  uint8_t* p;
  int64_t w, h;
  void set(int64_t x, int64_t y, uint8_t r, uint8_t g, uint8_t b) {
    if (x < 0 || y < 0 || x >= w || y >= h) return;
    uint8_t* q = p + (y * w + x) * 3;
    q[0] = r;
    q[1] = g;
    q[2] = b;
  }
  void line(double x0, double y0, double x1, double y1, uint8_t r, uint8_t g, uint8_t b) {
    const int64_t n = int64_t(std::max(std::fabs(x1 - x0), std::fabs(y1 - y0))) + 1;
    for (int64_t i = 0; i <= n; ++i) {
      const double t = double(i) / double(n);
      set(int64_t(std::lround(x0 + t * (x1 - x0))), int64_t(std::lround(y0 + t * (y1 - y0))), r, g, b);
    }
  }
  void text(int64_t x, int64_t y, const std::string& s, int scale = 2) {
    for (char c : s) {
      for (const auto& gl : kFont)
        if (gl.c == c)
          for (int ry = 0; ry < 7; ++ry)
            for (int rx = 0; rx < 5; ++rx)
              if (gl.rows[ry] & (16 >> rx))
                for (int sy = 0; sy < scale; ++sy)
                  for (int sx = 0; sx < scale; ++sx) set(x + rx * scale + sx, y + ry * scale + sy, 0, 0, 0);
      x += 6 * scale;
    }
  }
};

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

}  // namespace

at::Tensor plot_series(const std::vector<double>& xs, const std::vector<double>& ys, const std::string& title, int64_t W, int64_t H, bool log_y) {
  Canvas c{at::full({H, W, 3}, 255, at::kByte), nullptr, W, H};
  c.p = c.img.data_ptr<uint8_t>();
  const int64_t L = 90, R = W - 20, T = 40, B = H - 50;
  c.line(L, T, L, B, 0, 0, 0);
  c.line(L, B, R, B, 0, 0, 0);
  c.text(L, 10, title);
  std::vector<double> yv;
  std::vector<double> xv;
  for (size_t i = 0; i < ys.size() && i < xs.size(); ++i)
    if (std::isfinite(ys[i]) && (!log_y || ys[i] > 0)) {
      yv.push_back(log_y ? std::log10(ys[i]) : ys[i]);
      xv.push_back(xs[i]);
    }
  if (yv.size() < 2) return c.img;
  const double x0 = *std::min_element(xv.begin(), xv.end()), x1 = std::max(*std::max_element(xv.begin(), xv.end()), x0 + 1);
  double y0 = *std::min_element(yv.begin(), yv.end()), y1 = *std::max_element(yv.begin(), yv.end());
  if (y1 - y0 < 1e-9) { y0 -= 0.5; y1 += 0.5; }
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * double(R - L); };
  auto py = [&](double y) { return B - (y - y0) / (y1 - y0) * double(B - T); };
  for (int k = 0; k <= 4; ++k) {  // ticks and labels
    const double yy = y0 + (y1 - y0) * k / 4, xx = x0 + (x1 - x0) * k / 4;
    c.line(L - 6, py(yy), L, py(yy), 0, 0, 0);
    c.text(4, int64_t(py(yy)) - 7, num(log_y ? std::pow(10.0, yy) : yy));
    c.line(px(xx), B, px(xx), B + 6, 0, 0, 0);
    c.text(int64_t(px(xx)) - 20, B + 12, num(xx));
  }
  for (size_t i = 1; i < yv.size(); ++i) c.line(px(xv[i - 1]), py(yv[i - 1]), px(xv[i]), py(yv[i]), 31, 119, 180);
  return c.img;
}

}  // namespace nala::report
