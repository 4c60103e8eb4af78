#include "report/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <ATen/ATen.h>

namespace nala::report {
namespace {

// 5x7 glyphs: rows top to bottom, 5 bits each (16 = the leftmost column).
struct Glyph {
  char c;
  uint8_t rows[7];
};
const Glyph kFont[] = {
    {'0', {14, 17, 19, 21, 25, 17, 14}}, {'1', {4, 12, 4, 4, 4, 4, 14}},    {'2', {14, 17, 1, 2, 4, 8, 31}},
    {'3', {31, 2, 4, 2, 1, 17, 14}},     {'4', {2, 6, 10, 18, 31, 2, 2}},   {'5', {31, 16, 30, 1, 1, 17, 14}},
    {'6', {6, 8, 16, 30, 17, 17, 14}},   {'7', {31, 1, 2, 4, 8, 8, 8}},     {'8', {14, 17, 17, 14, 17, 17, 14}},
    {'9', {14, 17, 17, 15, 1, 2, 12}},   {'.', {0, 0, 0, 0, 0, 12, 12}},    {',', {0, 0, 0, 0, 12, 4, 8}},
    {'-', {0, 0, 0, 31, 0, 0, 0}},       {'+', {0, 4, 4, 31, 4, 4, 0}},     {' ', {0, 0, 0, 0, 0, 0, 0}},
    {'(', {2, 4, 8, 8, 8, 4, 2}},        {')', {8, 4, 2, 2, 2, 4, 8}},      {'/', {0, 1, 2, 4, 8, 16, 0}},
    {':', {0, 12, 12, 0, 12, 12, 0}},    {'=', {0, 0, 31, 0, 31, 0, 0}},    {'_', {0, 0, 0, 0, 0, 0, 31}},
    {'%', {24, 25, 2, 4, 8, 19, 3}},     {'M', {17, 27, 21, 21, 17, 17, 17}},
    {'a', {0, 0, 14, 1, 15, 17, 15}},    {'b', {16, 16, 22, 25, 17, 17, 30}}, {'c', {0, 0, 14, 16, 16, 17, 14}},
    {'d', {1, 1, 13, 19, 17, 17, 15}},   {'e', {0, 0, 14, 17, 31, 16, 14}},   {'f', {6, 9, 8, 28, 8, 8, 8}},
    {'g', {0, 0, 15, 17, 15, 1, 14}},   {'h', {16, 16, 22, 25, 17, 17, 17}}, {'i', {4, 0, 12, 4, 4, 4, 14}},
    {'j', {2, 0, 6, 2, 2, 18, 12}},      {'k', {16, 16, 18, 20, 24, 20, 18}}, {'l', {12, 4, 4, 4, 4, 4, 14}},
    {'m', {0, 0, 26, 21, 21, 17, 17}},   {'n', {0, 0, 22, 25, 17, 17, 17}},   {'o', {0, 0, 14, 17, 17, 17, 14}},
    {'p', {0, 0, 30, 17, 30, 16, 16}},   {'q', {0, 0, 13, 19, 15, 1, 1}},     {'r', {0, 0, 22, 25, 16, 16, 16}},
    {'s', {0, 0, 14, 16, 14, 1, 30}},    {'t', {8, 8, 28, 8, 8, 9, 6}},       {'u', {0, 0, 17, 17, 17, 19, 13}},
    {'v', {0, 0, 17, 17, 17, 10, 4}},    {'w', {0, 0, 17, 17, 21, 21, 10}},   {'x', {0, 0, 17, 10, 4, 10, 17}},
    {'y', {0, 0, 17, 17, 15, 1, 14}},    {'z', {0, 0, 31, 2, 4, 8, 31}},
};
constexpr int kScale = 2;                   // font pixels a glyph pixel
constexpr int kCharW = 6 * kScale, kCharH = 7 * kScale;

struct Rgb {
  uint8_t r, g, b;
};
constexpr Rgb kBlack{0, 0, 0}, kGrid{228, 228, 228}, kRaw{166, 206, 227}, kSmooth{31, 119, 180};

struct Canvas {
  at::Tensor img;
  uint8_t* p;
  int64_t w, h;
  void set(int64_t x, int64_t y, Rgb c) {
    if (x < 0 || y < 0 || x >= w || y >= h) return;
    uint8_t* q = p + (y * w + x) * 3;
    q[0] = c.r;
    q[1] = c.g;
    q[2] = c.b;
  }
  void line(double x0, double y0, double x1, double y1, Rgb c, int thickness = 1) {
    const int64_t n = int64_t(std::max(std::fabs(x1 - x0), std::fabs(y1 - y0))) + 1;
    for (int64_t i = 0; i <= n; ++i) {
      const double t = double(i) / double(n);
      const int64_t x = std::lround(x0 + t * (x1 - x0)), y = std::lround(y0 + t * (y1 - y0));
      for (int d = 0; d < thickness; ++d) set(x, y + d, c);
    }
  }
  static int64_t width_of(const std::string& s) { return int64_t(s.size()) * kCharW - kScale; }
  void text(int64_t x, int64_t y, const std::string& s) {
    for (char c : s) {
      for (const auto& gl : kFont)
        if (gl.c == c)
          for (int ry = 0; ry < 7; ++ry)
            for (int rx = 0; rx < 5; ++rx)
              if (gl.rows[ry] & (16 >> rx))
                for (int sy = 0; sy < kScale; ++sy)
                  for (int sx = 0; sx < kScale; ++sx) set(x + rx * kScale + sx, y + ry * kScale + sy, kBlack);
      x += kCharW;
    }
  }
  // Text centred on x, moved inwards where it would cross the canvas edge.
  void text_centred(double x, int64_t y, const std::string& s) {
    const int64_t tw = width_of(s);
    text(std::clamp<int64_t>(std::lround(x) - tw / 2, 2, std::max<int64_t>(2, w - 2 - tw)), y, s);
  }
};

std::string with_thousands(std::string s) {  // "12345.5" -> "12,345.5"
  const size_t start = (!s.empty() && s[0] == '-') ? 1 : 0;
  size_t end = s.find('.');
  if (end == std::string::npos) end = s.size();
  for (int64_t i = int64_t(end) - 3; i > int64_t(start); i -= 3) s.insert(size_t(i), ",");
  return s;
}

bool evenly_spaced(const std::vector<double>& t) {
  if (t.size() < 3) return true;
  const double d = t[1] - t[0];
  for (size_t i = 2; i < t.size(); ++i)
    if (std::fabs((t[i] - t[i - 1]) - d) > 1e-6 * std::fabs(d)) return false;
  return true;
}

int decimals_for(double spacing) { return std::max(0, int(-std::floor(std::log10(spacing) + 1e-9))); }

// TensorBoard's smoothing: an exponential moving average divided by its weights' sum (debiased).
std::vector<double> smoothed(const std::vector<double>& y, double weight) {
  std::vector<double> out(y.size());
  double last = 0, norm = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    last = last * weight + (1 - weight) * y[i];
    norm = norm * weight + (1 - weight);
    out[i] = last / norm;
  }
  return out;
}

}  // namespace

std::vector<double> linear_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  const double step = (norm < 1.5 ? 1 : norm < 3.5 ? 2 : norm < 7.5 ? 5 : 10) * mag;
  std::vector<double> t;
  for (double k = std::ceil(lo / step - 1e-9); k * step <= hi + 1e-9 * step; k += 1) t.push_back(k == 0 ? 0.0 : k * step);
  return t;
}

std::vector<double> log_ticks(double lo, double hi) {
  const double dlo = std::log10(lo), dhi = std::log10(hi);
  if (dhi - dlo < 1) return linear_ticks(lo, hi, 4);
  const double decades = dhi - dlo;
  const std::vector<double> mantissas = decades <= 3 ? std::vector<double>{1, 2, 5} : std::vector<double>{1};
  const int every = decades > 8 ? 2 : 1;
  std::vector<double> t;
  for (int k = int(std::floor(dlo)); k <= int(std::ceil(dhi)); ++k) {
    if (k % every != 0) continue;
    for (double m : mantissas) {
      const double v = m * std::pow(10.0, k);
      if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) t.push_back(v);
    }
  }
  return t;
}

std::string tick_label(double v, const std::vector<double>& ticks) {
  double maxabs = 0, spacing = 0;
  for (double t : ticks) maxabs = std::max(maxabs, std::fabs(t));
  const bool even = evenly_spaced(ticks);
  if (even && ticks.size() >= 2) spacing = std::fabs(ticks[1] - ticks[0]);
  char buf[64];
  if (even) {  // one format for the axis: thousands as "k" from 10,000, decimals from the spacing
    if (maxabs >= 10000) {
      std::snprintf(buf, sizeof buf, "%.*f", spacing > 0 ? decimals_for(spacing / 1000) : 1, v / 1000);
      return with_thousands(buf) + "k";
    }
    std::snprintf(buf, sizeof buf, "%.*f", spacing > 0 ? decimals_for(spacing) : 0, v);
    return with_thousands(buf);
  }
  // 1-2-5 ticks of a log axis: each value by its own magnitude
  if (std::fabs(v) >= 10000) {
    std::snprintf(buf, sizeof buf, "%.*f", decimals_for(std::fabs(v) / 1000), v / 1000);
    return with_thousands(buf) + "k";
  }
  std::snprintf(buf, sizeof buf, "%.*f", v != 0 ? decimals_for(std::fabs(v)) : 0, v);
  return with_thousands(buf);
}

at::Tensor plot_series(const std::vector<double>& xs, const std::vector<double>& ys, const PlotOptions& o) {
  const int64_t W = o.width, H = o.height;
  Canvas c{at::full({H, W, 3}, 255, at::kByte), nullptr, W, H};
  c.p = c.img.data_ptr<uint8_t>();
  std::vector<double> xv, yv;  // the points that can be drawn (finite; positive on a log axis)
  for (size_t i = 0; i < ys.size() && i < xs.size(); ++i)
    if (std::isfinite(ys[i]) && std::isfinite(xs[i]) && (!o.log_y || ys[i] > 0)) {
      xv.push_back(xs[i]);
      yv.push_back(ys[i]);
    }
  c.text_centred(W / 2.0, 8, o.title);
  if (xv.size() < 2) {
    c.text_centred(W / 2.0, H / 2, "not enough points yet");
    return c.img;
  }
  // ranges: x as logged, y padded by 5 % (in the axis's own scale) so the line clears the frame
  const double x0 = *std::min_element(xv.begin(), xv.end()), x1 = std::max(*std::max_element(xv.begin(), xv.end()), x0 + 1);
  auto to_axis = [&](double y) { return o.log_y ? std::log10(y) : y; };
  double y0 = to_axis(*std::min_element(yv.begin(), yv.end())), y1 = to_axis(*std::max_element(yv.begin(), yv.end()));
  if (y1 - y0 < 1e-9) {
    const double pad = o.log_y ? 0.05 : std::max(std::fabs(y0) * 0.1, 1e-3);
    y0 -= pad;
    y1 += pad;
  }
  const double ypad = 0.05 * (y1 - y0);
  y0 -= ypad;
  y1 += ypad;
  const std::vector<double> xt = linear_ticks(x0, x1, 6);
  const std::vector<double> yt = o.log_y ? log_ticks(std::pow(10.0, y0), std::pow(10.0, y1)) : linear_ticks(y0, y1, 5);
  std::vector<std::string> xl, yl;
  int64_t ylw = 0;
  for (double t : xt) xl.push_back(tick_label(t, xt));
  for (double t : yt) {
    yl.push_back(tick_label(t, yt));
    ylw = std::max(ylw, Canvas::width_of(yl.back()));
  }
  // the frame: room for the y labels on the left, half the last x label on the right
  const int64_t L = ylw + 18, T = 40 + kCharH, B = H - 2 * kCharH - 30;
  const int64_t R = W - std::max<int64_t>(16, (xl.empty() ? 0 : Canvas::width_of(xl.back()) / 2) + 6);
  auto px = [&](double x) { return double(L) + (x - x0) / (x1 - x0) * double(R - L); };
  auto py = [&](double y) { return double(B) - (to_axis(y) - y0) / (y1 - y0) * double(B - T); };
  for (size_t k = 0; k < xt.size(); ++k) {
    c.line(px(xt[k]), T, px(xt[k]), B, kGrid);
    c.line(px(xt[k]), B, px(xt[k]), B + 5, kBlack);
    c.text_centred(px(xt[k]), B + 10, xl[k]);
  }
  for (size_t k = 0; k < yt.size(); ++k) {
    c.line(L, py(yt[k]), R, py(yt[k]), kGrid);
    c.line(L - 5, py(yt[k]), L, py(yt[k]), kBlack);
    c.text(L - 9 - Canvas::width_of(yl[k]), std::lround(py(yt[k])) - kCharH / 2, yl[k]);
  }
  c.line(L, T, L, B, kBlack);
  c.line(L, B, R, B, kBlack);
  c.text_centred((L + R) / 2.0, B + 16 + kCharH, o.x_label);  // axis titles
  c.text(std::max<int64_t>(2, L - Canvas::width_of(o.y_label) / 2), T - kCharH - 8, o.y_label);
  for (size_t i = 1; i < yv.size(); ++i) c.line(px(xv[i - 1]), py(yv[i - 1]), px(xv[i]), py(yv[i]), o.smoothing > 0 ? kRaw : kSmooth);
  if (o.smoothing > 0) {
    const std::vector<double> s = smoothed(yv, o.smoothing);
    for (size_t i = 1; i < s.size(); ++i) c.line(px(xv[i - 1]), py(s[i - 1]), px(xv[i]), py(s[i]), kSmooth, 2);
    // legend, top right inside the frame
    const std::string raw = "raw", smooth = "smoothed";
    const int64_t lx = R - Canvas::width_of(smooth) - 40, ly = T + 8;
    c.line(lx, ly + kCharH / 2, lx + 24, ly + kCharH / 2, kRaw, 2);
    c.text(lx + 32, ly, raw);
    c.line(lx, ly + kCharH * 2, lx + 24, ly + kCharH * 2, kSmooth, 2);
    c.text(lx + 32, ly + kCharH * 3 / 2, smooth);
  }
  return c.img;
}

}  // namespace nala::report
