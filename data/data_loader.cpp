#include "data/data_loader.h"

#include <random>
#include <stdexcept>

#include <ATen/ATen.h>

#include "diffusion/seed.h"

namespace nala::data {

std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle, int64_t rank, int64_t world) {
  std::vector<int64_t> all(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) all[size_t(i)] = i;
  if (shuffle) {
    std::mt19937_64 rng(diffusion::derive_seed(seed, diffusion::SeedStream::DataOrder, uint64_t(epoch)));
    for (int64_t i = n - 1; i > 0; --i) {
      const int64_t j = int64_t(rng() % uint64_t(i + 1));
      std::swap(all[size_t(i)], all[size_t(j)]);
    }
  }
  const int64_t per_rank = (n + world - 1) / world;
  std::vector<int64_t> out;
  out.reserve(size_t(per_rank));
  for (int64_t k = 0; k < per_rank; ++k) out.push_back(all[size_t((rank + k * world) % n)]);
  return out;
}

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, int64_t batch, uint64_t seed, int64_t threads, bool shuffle,
                       int64_t rank, int64_t world)
    : dataset_(std::move(dataset)), batch_(batch), threads_(std::max<int64_t>(1, threads)), seed_(seed),
      shuffle_(shuffle), rank_(rank), world_(world) {
  batches_per_epoch_ = batches_per_rank(dataset_->size(), batch, world);
  start_workers();
}

int64_t DataLoader::batches_per_rank(int64_t size, int64_t batch, int64_t world) {
  if (batch <= 0) throw std::runtime_error("batch size must be positive, got " + std::to_string(batch));
  const int64_t per_rank = (size + world - 1) / world;
  if (per_rank / batch == 0)
    throw std::runtime_error("data set of " + std::to_string(size) + " samples is smaller than one batch of " + std::to_string(batch) + " per rank");
  return per_rank / batch;
}

DataLoader::~DataLoader() { stop_workers(); }

void DataLoader::start_workers() {
  stop_ = false;
  for (int64_t i = 0; i < threads_; ++i) workers_.emplace_back([this] { worker(); });
}

void DataLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

Batch DataLoader::assemble(int64_t epoch, int64_t index) {
  std::vector<int64_t> order;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = orders_.find(epoch);
    if (it == orders_.end()) it = orders_.emplace(epoch, epoch_order(dataset_->size(), seed_, epoch, shuffle_, rank_, world_)).first;
    order.assign(it->second.begin() + index * batch_, it->second.begin() + (index + 1) * batch_);
  }
  std::vector<at::Tensor> xs;
  std::vector<int64_t> ys;
  for (int64_t i : order) {
    Example e = dataset_->get(i);
    xs.push_back(e.x);
    ys.push_back(e.y);
  }
  Batch b;
  b.x = at::stack(xs);                                                  // (B, C, H, W)
  b.y = at::tensor(ys, at::TensorOptions().dtype(at::kLong));         // (B,)
  b.epoch = epoch;
  b.index = index;
  return b;
}

void DataLoader::worker() {
  const int64_t ahead = 2 * threads_;  // batches decoded ahead of the consumer
  for (;;) {
    int64_t e, i;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] {
        const int64_t dist = (next_epoch_ - want_epoch_) * batches_per_epoch_ + (next_index_ - want_index_);
        return stop_ || dist < ahead;
      });
      if (stop_) return;
      e = next_epoch_;
      i = next_index_;
      if (++next_index_ == batches_per_epoch_) {
        next_index_ = 0;
        ++next_epoch_;
      }
    }
    try {
      Batch b = assemble(e, i);
      std::lock_guard<std::mutex> lock(mutex_);
      ready_[{e, i}] = std::move(b);
      // orders of finished epochs are no longer needed
      while (!orders_.empty() && orders_.begin()->first < want_epoch_) orders_.erase(orders_.begin());
    } catch (const std::exception& ex) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (error_.empty()) error_ = ex.what();
    }
    cv_.notify_all();
  }
}

Batch DataLoader::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  const std::pair<int64_t, int64_t> key{want_epoch_, want_index_};
  cv_.wait(lock, [&] { return ready_.count(key) || !error_.empty(); });
  if (!error_.empty()) throw std::runtime_error("data loading failed: " + error_);
  Batch b = std::move(ready_[key]);
  ready_.erase(key);
  if (++want_index_ == batches_per_epoch_) {
    want_index_ = 0;
    ++want_epoch_;
  }
  lock.unlock();
  cv_.notify_all();
  return b;
}

void DataLoader::seek(int64_t epoch, int64_t index) {
  if (index < 0 || index >= batches_per_epoch_ || epoch < 0)
    throw std::runtime_error("data position (epoch " + std::to_string(epoch) + ", batch " + std::to_string(index) +
                             ") is outside the data set (" + std::to_string(batches_per_epoch_) + " batches per epoch)");
  stop_workers();
  ready_.clear();
  orders_.clear();
  error_.clear();
  next_epoch_ = want_epoch_ = epoch;
  next_index_ = want_index_ = index;
  start_workers();
}

}  // namespace nala::data
