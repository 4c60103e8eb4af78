#include "report/progress.h"

#include <cstdio>
#include <unistd.h>

namespace nala::report {

std::string format_duration(double s) {
  if (!(s >= 0) || s > 1e8) return "?";
  char buf[32];
  const int64_t t = int64_t(s + 0.5);
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else if (t >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

ProgressBar::ProgressBar(std::string label, int64_t total, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total), start_(std::chrono::steady_clock::now()),
      last_draw_(start_ - std::chrono::hours(1)), tty_(::isatty(2)) {}

double ProgressBar::rate() const {
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  return secs > 0 && start_done_ >= 0 ? double(done_ - start_done_) * units_ / secs : 0.0;
}

void ProgressBar::set_deadline(double seconds) {
  deadline_ = std::chrono::steady_clock::now() + std::chrono::microseconds(int64_t(seconds * 1e6));
  has_deadline_ = true;
}

void ProgressBar::update(int64_t done, const std::string& status, int64_t units_per_step) {
  if (start_done_ < 0) {
    start_done_ = done;  // a resumed run measures its rate from where it started
    start_ = std::chrono::steady_clock::now();
  }
  done_ = done;
  status_ = status;
  units_ = units_per_step;
  const auto now = std::chrono::steady_clock::now();
  const double since = std::chrono::duration<double>(now - last_draw_).count();
  if (since >= (tty_ ? 0.2 : 10.0) || done == total_) {
    last_draw_ = now;
    draw(false);
  }
}

void ProgressBar::finish(const std::string& status) {
  if (!status.empty()) status_ = status;
  draw(true);
}

void ProgressBar::draw(bool final) {
  const double frac = total_ > 0 ? double(done_) / double(total_) : 1.0;
  const double r = rate();
  double eta = r > 0 ? double(total_ - done_) * units_ / r : -1;
  if (has_deadline_) {
    const double left = std::chrono::duration<double>(deadline_ - std::chrono::steady_clock::now()).count();
    eta = eta < 0 ? left : std::min(eta, std::max(0.0, left));
  }
  char bar[32];
  const int width = 24, filled = int(frac * width);
  for (int i = 0; i < width; ++i) bar[i] = i < filled ? '#' : '.';
  bar[width] = 0;
  std::fprintf(stderr, "%s%s [%s] %ld/%ld %3.0f%% %.1f %s/s ETA %s %s%s", tty_ ? "\r\033[K" : "", label_.c_str(), bar, done_, total_,
               100 * frac, r, unit_.c_str(), final ? "0s" : format_duration(eta).c_str(), status_.c_str(), (tty_ && !final) ? "" : "\n");
  std::fflush(stderr);
}

}  // namespace nala::report
