#include "samplers/grid_labels.h"

namespace nala::samplers {

GridLabels default_grid_labels(int64_t num_classes) {
  GridLabels g;
  if (num_classes <= 16) {
    g.per_row = 8;
    for (int64_t c = 0; c < num_classes; ++c)
      for (int64_t k = 0; k < g.per_row; ++k) g.labels.push_back(c);
    return g;
  }
  g.per_row = 4;
  for (int64_t c : {207, 360, 387, 974, 88, 979, 417, 279}) g.labels.push_back(c % num_classes);  // DiT sample.py
  return g;
}

}  // namespace nala::samplers
