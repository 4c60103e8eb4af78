#include "train/distributed.h"

#include <cstdlib>
#include <stdexcept>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef NALA_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace nala::train {
namespace {

std::string env_or(const char* k, const std::string& dflt) {
  const char* v = std::getenv(k);
  return v && *v ? std::string(v) : dflt;
}

int64_t env_int(const char* k, int64_t dflt) {
  const std::string v = env_or(k, "");
  if (v.empty()) return dflt;
  try {
    size_t pos = 0;
    const int64_t x = std::stoll(v, &pos);
    if (pos != v.size()) throw std::invalid_argument(v);
    return x;
  } catch (...) {
    throw std::runtime_error(std::string("environment variable ") + k + "='" + v + "' is not an integer");
  }
}

// Waits for a collective; a dead or unreachable rank becomes one clear error (never a hang: the
// backend's timeout bounds the wait).
void wait(const c10::intrusive_ptr<c10d::Work>& work, std::chrono::milliseconds timeout, int64_t rank, const char* what) {
  try {
    if (!work->wait(timeout)) throw std::runtime_error("timed out");
  } catch (const std::exception& e) {
    std::string msg = e.what();
    if (msg.size() > 300) msg = msg.substr(0, 300) + "...";
    throw std::runtime_error("rank " + std::to_string(rank) + ": " + what + " failed after waiting at most " +
                             std::to_string(timeout.count() / 1000) + " s: another rank died or became unreachable (" + msg + ")");
  }
}

}  // namespace

DistEnv dist_env_from_environment() {
  DistEnv e;
  e.world_size = env_int("WORLD_SIZE", 1);
  e.rank = env_int("RANK", 0);
  e.local_rank = env_int("LOCAL_RANK", e.rank);
  e.master_addr = env_or("MASTER_ADDR", "127.0.0.1");
  e.master_port = int(env_int("MASTER_PORT", 29500));
  e.agent_store = env_or("TORCHELASTIC_USE_AGENT_STORE", "") == "True";
  e.restart_count = env_or("TORCHELASTIC_RESTART_COUNT", "0");
  if (e.world_size < 1 || e.rank < 0 || e.rank >= e.world_size)
    throw std::runtime_error("bad launcher environment: RANK=" + std::to_string(e.rank) + " WORLD_SIZE=" + std::to_string(e.world_size));
  return e;
}

std::string default_backend(const c10::Device& device) {
  if (!device.is_cuda()) return "gloo";
#ifdef NALA_WITH_NCCL
  return "nccl";
#else
  throw std::runtime_error("multi-GPU training needs NCCL, and this nala was built without it");
#endif
}

struct ProcessGroup::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> pg;
  std::chrono::milliseconds timeout;
  c10::Device device = c10::Device("cpu");  // where the small control tensors live
  std::vector<c10::intrusive_ptr<c10d::Work>> started;
};

ProcessGroup::ProcessGroup(const DistEnv& env, const std::string& backend, std::chrono::milliseconds timeout, const c10::Device& device)
    : impl_(std::make_unique<Impl>()), env_(env) {
  impl_->device = backend == "nccl" ? device : c10::Device("cpu");
  c10d::TCPStoreOptions so;
  so.port = uint16_t(env.master_port);
  so.isServer = env.rank == 0 && !env.agent_store;
  so.numWorkers = env.agent_store ? std::nullopt : std::optional<std::size_t>(size_t(env.world_size));
  so.waitWorkers = false;
  so.timeout = timeout;
  c10::intrusive_ptr<c10d::Store> tcp;
  try {
    tcp = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
  } catch (const std::exception& e) {
    throw std::runtime_error("rank " + std::to_string(env.rank) + ": cannot reach the rendezvous store at " + env.master_addr + ":" +
                             std::to_string(env.master_port) + " (" + e.what() + ")");
  }
  // torch.distributed's env:// rendezvous puts the group's keys under this prefix with an agent store
  if (env.agent_store) impl_->store = c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + env.restart_count, tcp);
  else impl_->store = tcp;
  impl_->timeout = timeout;
  if (backend == "gloo") {
    auto opts = c10d::ProcessGroupGloo::Options::create();
    opts->timeout = timeout;
    opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    impl_->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, int(env.rank), int(env.world_size), opts);
  } else if (backend == "nccl") {
#ifdef NALA_WITH_NCCL
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = timeout;
    impl_->pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(impl_->store, int(env.rank), int(env.world_size), opts);
#else
    throw std::runtime_error("this nala was built without NCCL");
#endif
  } else {
    throw std::runtime_error("unknown distributed backend '" + backend + "' (known: gloo, nccl)");
  }
  barrier();
}

ProcessGroup::~ProcessGroup() = default;

void ProcessGroup::start_allreduce_sum(const at::Tensor& t) {
  std::vector<at::Tensor> ts{t};
  impl_->started.push_back(impl_->pg->allreduce(ts));
}

void ProcessGroup::wait_started(const char* what) {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  works.swap(impl_->started);
  for (auto& w : works) wait(w, impl_->timeout, env_.rank, what);
}

double ProcessGroup::allreduce_mean_scalar(double v) {
  at::Tensor t = at::full({1}, v, at::TensorOptions().dtype(at::kDouble).device(impl_->device));
  std::vector<at::Tensor> ts{t};
  wait(impl_->pg->allreduce(ts), impl_->timeout, env_.rank, "all-reduce");
  return t.item<double>() / double(env_.world_size);
}

at::Tensor ProcessGroup::allreduce_max(const at::Tensor& t) {
  std::vector<at::Tensor> ts{t.to(impl_->device).clone()};
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::MAX;
  wait(impl_->pg->allreduce(ts, o), impl_->timeout, env_.rank, "all-reduce");
  return ts[0].to(t.device());
}

bool ProcessGroup::all_true(bool v) {
  at::Tensor t = at::full({1}, v ? 0.0f : 1.0f, at::TensorOptions().device(impl_->device));
  return allreduce_max(t).item<float>() == 0.0f;
}

void ProcessGroup::broadcast(const io::NamedTensors& tensors) {
  for (const auto& [name, t] : tensors) {
    std::vector<at::Tensor> ts{t.detach()};
    wait(impl_->pg->broadcast(ts), impl_->timeout, env_.rank, "broadcast");
  }
}

void ProcessGroup::barrier() {
  // a small all-reduce instead of Backend::barrier, so that the timeout applies to it as well
  all_true(true);
}

}  // namespace nala::train
