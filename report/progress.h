// A terminal progress bar with rate and ETA, redrawn in place on a TTY and printed as a line
// every few seconds otherwise (logs, CI). Writes to stderr.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace nala::report {

class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total, std::string unit = "it");
  // Sets the absolute progress and an optional status text (e.g. "loss 0.123").
  void update(int64_t done, const std::string& status = "", int64_t units_per_step = 1);
  void finish(const std::string& status = "");
  double rate() const;  // units per second since the start (or the first update)
  // A time budget in seconds from now: the ETA shown is never past it.
  void set_deadline(double seconds);

 private:
  void draw(bool final);
  std::string label_, unit_, status_;
  int64_t total_, done_ = 0, start_done_ = -1, units_ = 1;
  std::chrono::steady_clock::time_point start_, last_draw_;
  bool tty_;
  std::chrono::steady_clock::time_point deadline_{};
  bool has_deadline_ = false;
};

std::string format_duration(double seconds);

}  // namespace nala::report
