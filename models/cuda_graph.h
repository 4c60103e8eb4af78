// A CUDA graph of a model call or of a whole training step (issue #18's deliverable 3): captured
// once on a side stream from a function that runs the work, then replayed, so it costs one graph
// launch instead of hundreds to ~2,000 kernel launches from the host (the gaps between them were
// ≈ 4.8 ms of a 42.5 ms DiT-S/2 training step on the H200, docs/benchmarks.md). Users: the
// training step (train/train_step.h) and the samplers' network call (samplers/graphed_net.h).
// The captured function must read its inputs from fixed addresses (static input buffers, the
// parameters, the optimizer state, all updated in place) and must not synchronise with the host;
// what it returns lives in the graph's memory pool and is overwritten by the next replay. Random
// draws come from the default CUDA generator's graph-safe state: a replay reads the generator's
// seed and offset at replay time (and advances the offset), so a replay after manual_seed(s) draws
// what an eager step after manual_seed(s) draws. Autocast's weight-cast cache is off during capture
// (the casts become part of the graph). A capture first releases LibTorch's cuBLAS/cuBLASLt
// workspaces of the current stream (the side stream gets its own, which LibTorch's maps keep).
#pragma once
#include <functional>
#include <memory>

namespace nala::models {

class CudaGraph {
 public:
  CudaGraph();
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  bool captured() const;
  // Records step() into a new graph (replacing any earlier one); step() runs on the host but
  // launches nothing on the device: call replay() to run it. Throws where the build has no CUDA.
  void capture(const std::function<void()>& step);
  void replay();  // on the current CUDA stream
  void reset();   // drops the graph and its memory pool

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nala::models
