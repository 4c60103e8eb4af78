// Data-parallel training on PyTorch's c10d process groups: Gloo for CPU tensors, NCCL for CUDA
// tensors. Launch with `torchrun --no-python --nproc-per-node N build/nala train ...` or any
// launcher that sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT. Under torchrun's agent
// store (TORCHELASTIC_USE_AGENT_STORE=True) every rank, rank 0 included, connects as a client to
// the agent's TCPStore, under the same "/worker/attempt_<n>" prefix torch.distributed uses.
// Every collective has a timeout: a rank that dies ends the others with an error, never a hang.
#pragma once
#include <chrono>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "io/safetensors.h"

namespace nala::train {

struct DistEnv {
  int64_t rank = 0, world_size = 1, local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool agent_store = false;
  std::string restart_count = "0";
};
// Reads the launcher's environment; world_size 1 when WORLD_SIZE is unset. Throws on bad values.
DistEnv dist_env_from_environment();

class ProcessGroup {
 public:
  // backend: "gloo" (CPU tensors) or "nccl" (CUDA tensors on `device`, this rank's GPU). Blocks until
  // every rank has joined (or the timeout).
  ProcessGroup(const DistEnv& env, const std::string& backend, std::chrono::milliseconds timeout, const c10::Device& device);
  ~ProcessGroup();
  int64_t rank() const { return env_.rank; }
  int64_t world_size() const { return env_.world_size; }

  // Starts a sum all-reduce of t in place and returns at once (on CUDA the collective runs on the
  // backend's stream after the work queued so far on the caller's stream); wait_started() waits for
  // every one started (on CUDA: the current stream waits, the host does not) and throws the clear
  // error of a dead rank. Every rank must start the same collectives in the same order.
  void start_allreduce_sum(const at::Tensor& t);
  void wait_started(const char* what);
  double allreduce_mean_scalar(double v);
  at::Tensor allreduce_max(const at::Tensor& t);   // returns the reduced tensor
  bool all_true(bool v);
  void broadcast(const io::NamedTensors& tensors);  // from rank 0, in place
  void barrier();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  DistEnv env_;
};

// "gloo" for a CPU device, "nccl" for CUDA (when built with it), else an error naming the device.
std::string default_backend(const c10::Device& device);

}  // namespace nala::train
