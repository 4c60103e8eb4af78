// The one way a sub-command reads its flags: cxxopts' parse, and a refusal of what it lets through.
// cxxopts keeps words that are no flag (`nala sample extra --ckpt F`) in unmatched() and the command
// went on without them: a mistyped or unquoted value was silently dropped. And it reads a number
// flag's value as far as it is a number: `--cfg-scale 1.5x` was 1.5.
#pragma once
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <typeinfo>

#include <cxxopts.hpp>

namespace nala::cli {

inline cxxopts::ParseResult parse_flags(cxxopts::Options& o, int argc, char** argv) {
  auto a = o.parse(argc, argv);
  if (!a.unmatched().empty())
    throw std::runtime_error(o.program() + ": unexpected argument '" + a.unmatched().front() + "' (options are --flags" +
                             (o.program() == "nala convert" ? std::string(", after IN and OUT") : std::string()) + "; " + o.program() +
                             " --help lists them)");
  for (const auto& kv : a.arguments()) {
    try {
      (void)a[kv.key()].as<double>();  // throws std::bad_cast unless the flag takes a number
    } catch (const std::bad_cast&) {
      continue;
    }
    const char* text = kv.value().c_str();
    char* end = nullptr;
    std::strtod(text, &end);
    if (end == text || *end != '\0') throw std::runtime_error("--" + kv.key() + ": '" + kv.value() + "' is not a number");
  }
  return a;
}

}  // namespace nala::cli
