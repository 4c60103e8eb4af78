// Sub-commands whose implementation has not landed yet. Each says so plainly and exits non-zero.
#include <iostream>

#include "cli/commands.h"

namespace nala::cli {
namespace {
int pending(const char* name) {
  std::cerr << "nala " << name << ": not built yet in this version of nala\n";
  return 2;
}
}  // namespace

int run_extract_latents(int, char**) { return pending("extract-latents"); }

}  // namespace nala::cli
