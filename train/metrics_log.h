// metrics.jsonl (one JSON line per log interval: step, loss, grad_norm, lr, steps_per_s, img_per_s,
// images_seen, epoch, nonfinite, peak_mib on CUDA) and loss.png, the curve redrawn at every line.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nala::train {

class MetricsLog {
 public:
  explicit MetricsLog(std::string run_dir);
  // Keeps the lines of steps <= step (a resumed run logs the later ones again) and rewrites the file.
  // A line that is not a metrics record (a write cut short by a kill) is dropped with a warning
  // naming the file and the line.
  void keep_until(int64_t step);
  void append(const nlohmann::json& line);  // and redraws loss.png

 private:
  std::string path_, plot_path_;
  std::vector<nlohmann::json> lines_;
};

}  // namespace nala::train
