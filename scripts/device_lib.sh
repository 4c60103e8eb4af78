# Shared by the GPU machine's scripts (sourced, not run): scripts/device_build.sh and the curves
# steps in scripts/device_steps/.

# A prebuilt (scripts/prepare_prebuilt.sh, device_build.sh's `prebuilt` step) finds its layer
# libraries and this machine's torch through LD_LIBRARY_PATH: its RUNPATH names the CPU machine's.
# Sets it when build-device holds a prebuilt; ROOT is the repository root.
device_library_path() {
  local root=$1 torch_lib
  [ -f "$root/build-device/prebuilt.txt" ] || return 0
  # torch's libraries, the CUDA runtime it loads (the wheel's nvidia/cu13/lib), the toolkit's
  torch_lib=$(python3 -c 'import os, torch; t = os.path.dirname(torch.__file__); print(":".join([os.path.join(t, "lib"), os.path.join(os.path.dirname(t), "nvidia", "cu13", "lib"), "/usr/local/cuda/lib64"]))') ||
    { echo "device_library_path: python3 cannot import torch" >&2; return 1; }
  case ":${LD_LIBRARY_PATH:-}:" in *":$root/build-device/lib:"*) return 0 ;; esac
  export LD_LIBRARY_PATH="$root/build-device/lib:$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# 0 when a process on this machine has a command line (its argv joined by spaces, read from /proc:
# the machine may lack pgrep) matching the extended regex REGEX, anchored by the caller at argv[0].
# `pgrep -f PATTERN` would also match the shell whose own command line holds the pattern, its
# caller: a device call that waited on `pgrep -f "nala train"` never ended (2026-12-04, 600 s of
# device time).
process_running() {
  local f
  for f in /proc/[0-9]*/cmdline; do
    tr '\0' ' ' < "$f" 2> /dev/null | grep -qE "$1" && return 0
  done
  return 1
}

# 0 when a curves run (scripts/device_steps/curves.sh) is running on this machine: its own process,
# not a command line that names it
curves_running() { process_running '^(/usr)?(/bin/)?bash [^ ]*device_steps/curves\.sh( |$)'; }

# 0 while one of nala's trainings runs on this machine: argv[0] ends in /nala, argv[1] is train
nala_training() { process_running '^[^ ]*/nala train( |$)'; }
