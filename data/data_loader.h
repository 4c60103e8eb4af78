// Batches from a Dataset: deterministic order from (seed, epoch), sharded by rank, decoded by a
// pool of worker threads a few batches ahead.
//
// Order (as torch's DistributedSampler with shuffle and drop_last=False): a permutation of
// [0, n) from (seed, epoch), padded by wrapping to a multiple of world, then every world-th entry
// from rank. The loader yields full batches of `batch` samples; an epoch's tail shorter than a
// batch is dropped (as DiT's DataLoader(drop_last=True)). A position is (epoch, batch index) and
// can be restored exactly, which is what training resume relies on.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <ATen/core/Tensor.h>

#include "data/datasets.h"

namespace nala::data {

// The indices rank `rank` of `world` visits in `epoch`.
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle, int64_t rank = 0, int64_t world = 1);

struct Batch {
  at::Tensor x;  // (B, C, H, W) float32
  at::Tensor y;  // (B,) int64
  int64_t epoch = 0, index = 0;  // position of this batch
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<Dataset> dataset, int64_t batch, uint64_t seed, int64_t threads = 4,
             bool shuffle = true, int64_t rank = 0, int64_t world = 1);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  // Batches an epoch of `size` samples gives each of `world` ranks; throws when not one (a batch
  // that must be positive, a data set smaller than one batch a rank), as the constructor does.
  static int64_t batches_per_rank(int64_t size, int64_t batch, int64_t world);
  DataLoader& operator=(const DataLoader&) = delete;

  // Next batch; batches go in order (epoch, 0), (epoch, 1), ..., then the next epoch.
  Batch next();
  // Restart from a position (the batch returned next is (epoch, index)).
  void seek(int64_t epoch, int64_t index);
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  const Dataset& dataset() const { return *dataset_; }

 private:
  void worker();
  void stop_workers();
  void start_workers();
  Batch assemble(int64_t epoch, int64_t index);

  std::shared_ptr<Dataset> dataset_;
  int64_t batch_, threads_;
  uint64_t seed_;
  bool shuffle_;
  int64_t rank_, world_, batches_per_epoch_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::pair<int64_t, int64_t>, Batch> ready_;
  std::map<int64_t, std::vector<int64_t>> orders_;  // per epoch
  int64_t next_epoch_ = 0, next_index_ = 0;        // next position to hand out to a worker
  int64_t want_epoch_ = 0, want_index_ = 0;        // next position next() returns
  bool stop_ = false;
  std::string error_;
  std::vector<std::thread> workers_;
};

}  // namespace nala::data
