#include "models/cuda_graph.h"

#include <iterator>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <tuple>

#include <ATen/autocast_mode.h>

#ifdef NALA_WITH_CUDA
#include <ATen/cuda/CUDAContextLight.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace nala::models {

#ifdef NALA_WITH_CUDA
namespace {
// Drops the cuBLAS and cuBLASLt workspaces LibTorch keeps for `stream` (every handle): the blocks go
// back to the caching allocator in the stream's order.
void release_blas_workspaces(cudaStream_t stream) {
  for (at::cuda::WorkspaceMapWithMutex* m : {&at::cuda::cublas_handle_stream_to_workspace(), &at::cuda::cublaslt_handle_stream_to_workspace()}) {
    const std::unique_lock<std::shared_mutex> lock(m->mutex);
    for (auto it = m->map.begin(); it != m->map.end();) it = std::get<1>(it->first) == static_cast<void*>(stream) ? m->map.erase(it) : std::next(it);
  }
}
}  // namespace
#endif

struct CudaGraph::Impl {
#ifdef NALA_WITH_CUDA
  std::unique_ptr<at::cuda::CUDAGraph> graph;
#endif
};

CudaGraph::CudaGraph() : impl_(std::make_unique<Impl>()) {}
CudaGraph::~CudaGraph() = default;

bool CudaGraph::captured() const {
#ifdef NALA_WITH_CUDA
  return impl_->graph != nullptr;
#else
  return false;
#endif
}

void CudaGraph::reset() {
#ifdef NALA_WITH_CUDA
  impl_->graph.reset();
#endif
}

void CudaGraph::capture(const std::function<void()>& step) {
#ifdef NALA_WITH_CUDA
  reset();
  // LibTorch keeps a cuBLAS and a cuBLASLt workspace per (handle, stream) in its own maps, 32 MiB
  // for cuBLAS on Hopper: the eager steps' on the current stream, and those the capture allocates
  // for the side stream, which the graph's kernels use (they stay in the maps past the graph). The
  // current stream's are released here (an eager call later allocates them again), so a graphed
  // step holds one set, as an eager step does. Only the current stream's: another graph's, on its
  // own side stream, stays where its replays expect it.
  release_blas_workspaces(c10::cuda::getCurrentCUDAStream().stream());
  // The graph allocates from a private pool; blocks the eager steps left cached would sit beside
  // it unused (DiT-XL/2 at batch 256: ~80 GB of activations twice does not fit a 141 GB card).
  c10::cuda::CUDACachingAllocator::emptyCache();
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream();
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();  // graphs cannot be captured on the default stream
  at::cuda::CUDAEvent queued;
  queued.record(current);
  queued.block(side);  // what the current stream holds (the static inputs' copies) comes first
  {
    const c10::cuda::CUDAStreamGuard on_side(side);
    struct AutocastCacheOff {  // restored on every exit, a throwing capture_begin() included
      const bool was = at::autocast::is_autocast_cache_enabled();
      AutocastCacheOff() { at::autocast::set_autocast_cache_enabled(false); }
      ~AutocastCacheOff() { at::autocast::set_autocast_cache_enabled(was); }
    } cache_off;
    graph->capture_begin();
    try {
      step();
    } catch (...) {
      try {
        graph->capture_end();  // leave the stream usable; the error that matters is step()'s
      } catch (...) {
      }
      throw;
    }
    graph->capture_end();
  }
  at::cuda::CUDAEvent captured_event;
  captured_event.record(side);
  captured_event.block(current);
  impl_->graph = std::move(graph);
#else
  (void)step;
  throw std::runtime_error("CUDA graphs: this nala was built without CUDA");
#endif
}

void CudaGraph::replay() {
#ifdef NALA_WITH_CUDA
  if (!impl_->graph) throw std::logic_error("CudaGraph::replay: nothing captured");
  impl_->graph->replay();
#else
  throw std::runtime_error("CUDA graphs: this nala was built without CUDA");
#endif
}

}  // namespace nala::models
