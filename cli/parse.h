// The one way a sub-command reads its flags: cxxopts' parse, and a refusal of what it leaves over.
// cxxopts keeps words that are no flag (`nala sample extra --ckpt F`) in unmatched() and the command
// went on without them: a mistyped or unquoted value was silently dropped.
#pragma once
#include <stdexcept>
#include <string>

#include <cxxopts.hpp>

namespace nala::cli {

inline cxxopts::ParseResult parse_flags(cxxopts::Options& o, int argc, char** argv) {
  auto a = o.parse(argc, argv);
  if (!a.unmatched().empty())
    throw std::runtime_error(o.program() + ": unexpected argument '" + a.unmatched().front() + "' (options are --flags" +
                             (o.program() == "nala convert" ? std::string(", after IN and OUT") : std::string()) + "; " + o.program() +
                             " --help lists them)");
  return a;
}

}  // namespace nala::cli
