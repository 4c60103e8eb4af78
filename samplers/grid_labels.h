// The class labels of a sample grid when the user names none: every class in its own row of 8 for
// small label sets (Fashion-MNIST: 10 rows), DiT sample.py's eight ImageNet classes otherwise
// (docs/reference.md §5.1), 4 a row. Used by `nala sample` and the trainer's periodic grids.
#pragma once
#include <cstdint>
#include <vector>

namespace nala::samplers {

struct GridLabels {
  std::vector<int64_t> labels;
  int64_t per_row;
};

GridLabels default_grid_labels(int64_t num_classes);

}  // namespace nala::samplers
