// A small line-plot renderer for loss curves (no plotting library): white canvas, axes with tick
// marks, min/max labels in a 5×7 bitmap font, the series as a polyline. Returns (H, W, 3) uint8.
#pragma once
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace nala::report {

at::Tensor plot_series(const std::vector<double>& x, const std::vector<double>& y, const std::string& title, int64_t width = 800,
                       int64_t height = 480, bool log_y = true);

}  // namespace nala::report
