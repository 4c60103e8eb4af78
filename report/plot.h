// A small line-plot renderer for training curves (no plotting library: the trainer must draw on
// the GPU machine, which has none, and a 5x7 bitmap font is all a curve needs). White canvas, light
// grid lines at tick values a person would choose (1-2-5 steps; decades on a log axis), labels
// with thousands separators or "k", axis titles, the raw series in a light colour and its smoothed
// line (TensorBoard's debiased exponential moving average) over it. Returns (H, W, 3) uint8.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace nala::report {

struct PlotOptions {
  std::string title;               // above the plot, e.g. "training loss"
  std::string x_label = "step";
  std::string y_label = "loss";
  int64_t width = 800, height = 480;
  bool log_y = true;
  double smoothing = 0.6;          // EMA weight of the smoothed line, as TensorBoard's slider; 0: none
};

at::Tensor plot_series(const std::vector<double>& x, const std::vector<double>& y, const PlotOptions& options);

// Tick values for a linear axis over [lo, hi]: multiples of 1, 2 or 5 x 10^k, about `target` of them.
std::vector<double> linear_ticks(double lo, double hi, int target = 5);
// Tick values for a log axis over [lo, hi] (lo > 0): powers of ten, with 2 and 5 between them when
// the range spans few decades; linear ticks when it spans less than one.
std::vector<double> log_ticks(double lo, double hi);
// A tick's label: as many decimals as the tick spacing needs, thousands separators ("1,500") below
// 10,000 and "k" from there ("12.5k"), so neighbouring labels differ and stay short.
std::string tick_label(double value, const std::vector<double>& ticks);

}  // namespace nala::report
