#include "train/metrics_log.h"

#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>

#include "io/atomic_file.h"
#include "io/image.h"
#include "report/plot.h"

namespace nala::train {

MetricsLog::MetricsLog(std::string run_dir) : path_(run_dir + "/metrics.jsonl"), plot_path_(run_dir + "/loss.png") {}

void MetricsLog::keep_until(int64_t step) {
  lines_.clear();
  if (!io::file_exists(path_)) return;
  std::istringstream in(io::read_file(path_));
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) {
      std::cerr << "warning: " << path_ << " line " << number << " is not a metrics record; dropped\n";
      continue;
    }
    if (j["step"].get<int64_t>() <= step) lines_.push_back(j);
  }
  io::write_file_atomic(path_, [&](std::ostream& o) {
    for (auto& j : lines_) o << j.dump() << "\n";
  });
}

void MetricsLog::append(const nlohmann::json& line) {
  lines_.push_back(line);
  std::ofstream out(path_, std::ios::app);
  out << line.dump() << "\n";
  if (!out) throw std::runtime_error("cannot append to " + path_);
  std::vector<double> xs, ys;
  for (auto& j : lines_) {
    xs.push_back(j.at("step").get<double>());
    ys.push_back(j["loss"].is_number() ? j["loss"].get<double>() : NAN);  // a NaN loss is stored as null
  }
  report::PlotOptions po;
  po.title = "training loss (mean of each log window)";
  io::write_png(plot_path_, report::plot_series(xs, ys, po));
}

}  // namespace nala::train
