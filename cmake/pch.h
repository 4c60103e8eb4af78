// Precompiled header for every C++ target (see CMakeLists.txt). Only stable, heavy third-party
// headers belong here; project headers never do.
#pragma once
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>
