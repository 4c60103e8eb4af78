// report/plot.h: tick values a person would choose (properties over many random ranges: 1-2-5
// steps, inside the range, a readable count, distinct labels) and a plot with nothing cut at the
// canvas edge.
#include <cmath>
#include <random>
#include <set>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "report/plot.h"

namespace nala::report {
namespace {

bool is_125(double step) {  // step = m * 10^k with m in {1, 2, 5}
  const double m = step / std::pow(10.0, std::floor(std::log10(step) + 1e-12));
  return std::fabs(m - 1) < 1e-6 || std::fabs(m - 2) < 1e-6 || std::fabs(m - 5) < 1e-6;
}

TEST(PlotTicks, LinearTicksAreOneTwoFiveStepsInsideTheRange) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 2000; ++trial) {
    const double scale = std::pow(10.0, -4 + 10 * u(rng)), lo = scale * (u(rng) * 3 - 1), hi = lo + scale * (0.01 + 5 * u(rng));
    const std::vector<double> t = linear_ticks(lo, hi, 6);
    ASSERT_GE(t.size(), 3u) << lo << " " << hi;
    ASSERT_LE(t.size(), 12u) << lo << " " << hi;
    const double step = t[1] - t[0];
    EXPECT_TRUE(is_125(step)) << step;
    for (size_t i = 0; i < t.size(); ++i) {
      EXPECT_GE(t[i], lo - 1e-9 * step);
      EXPECT_LE(t[i], hi + 1e-9 * step);
      EXPECT_NEAR(t[i] / step, std::round(t[i] / step), 1e-6);  // multiples of the step
    }
    std::set<std::string> labels;
    for (double v : t) labels.insert(tick_label(v, t));
    EXPECT_EQ(labels.size(), t.size()) << "labels repeat for " << lo << ".." << hi;
  }
}

TEST(PlotTicks, LogTicksAreDecadesAndOneTwoFive) {
  std::mt19937_64 rng(8);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 1000; ++trial) {
    const double lo = std::pow(10.0, -5 + 6 * u(rng)), hi = lo * std::pow(10.0, 0.05 + 6 * u(rng));
    const std::vector<double> t = log_ticks(lo, hi);
    ASSERT_GE(t.size(), 2u) << lo << " " << hi;
    ASSERT_LE(t.size(), 12u) << lo << " " << hi;
    std::set<std::string> labels;
    for (double v : t) {
      EXPECT_GE(v, lo * (1 - 1e-9));
      EXPECT_LE(v, hi * (1 + 1e-9));
      if (std::log10(hi / lo) >= 1) EXPECT_TRUE(is_125(v)) << v;
      labels.insert(tick_label(v, t));
    }
    EXPECT_EQ(labels.size(), t.size()) << "labels repeat for " << lo << ".." << hi;
  }
}

TEST(PlotTicks, LabelsUseThousandsSeparatorsThenK) {
  const std::vector<double> steps = linear_ticks(0, 1350, 6);  // 0, 200, ..., 1,200
  EXPECT_EQ(tick_label(1200, steps), "1,200");
  EXPECT_EQ(tick_label(0, steps), "0");
  const std::vector<double> big = linear_ticks(0, 37000, 6);  // 5,000 apart
  EXPECT_EQ(tick_label(35000, big), "35k");
  const std::vector<double> half = linear_ticks(10000, 13000, 6);  // 500 apart
  EXPECT_EQ(tick_label(12500, half), "12.5k");
  EXPECT_EQ(tick_label(0.05, log_ticks(0.03, 2)), "0.05");
  EXPECT_EQ(tick_label(1, log_ticks(0.03, 2)), "1");
}

TEST(Plot, NothingIsCutAtTheCanvasEdge) {
  std::mt19937_64 rng(9);
  for (int64_t last : {900, 1350, 20000, 123457}) {
    std::vector<double> x, y;
    for (int64_t s = 50; s <= last; s += std::max<int64_t>(1, last / 60)) {
      x.push_back(double(s));
      y.push_back(0.05 + 1.0 / std::sqrt(double(s)) * (1 + 0.2 * std::uniform_real_distribution<double>(-1, 1)(rng)));
    }
    PlotOptions o;
    o.title = "training loss";
    const at::Tensor img = plot_series(x, y, o);  // (H, W, 3)
    ASSERT_EQ(img.sizes(), (at::IntArrayRef{480, 800, 3}));
    // a one-pixel border with nothing drawn on it: no label or line runs off the canvas
    EXPECT_TRUE(img.narrow(0, 0, 1).eq(255).all().item<bool>()) << last;
    EXPECT_TRUE(img.narrow(0, 479, 1).eq(255).all().item<bool>()) << last;
    EXPECT_TRUE(img.narrow(1, 0, 1).eq(255).all().item<bool>()) << last;
    EXPECT_TRUE(img.narrow(1, 799, 1).eq(255).all().item<bool>()) << last;
    // the smoothed line's colour is drawn, and the raw line's
    auto has = [&](int r, int g, int b) {
      return (img.select(2, 0).eq(r) & img.select(2, 1).eq(g) & img.select(2, 2).eq(b)).any().item<bool>();
    };
    EXPECT_TRUE(has(31, 119, 180));
    EXPECT_TRUE(has(166, 206, 227));
  }
}

}  // namespace
}  // namespace nala::report
