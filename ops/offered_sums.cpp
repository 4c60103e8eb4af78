#include "ops/offered_sums.h"

#include <atomic>
#include <vector>

#include <ATen/ATen.h>

namespace nala::ops {
namespace {

struct Offer {
  c10::weak_intrusive_ptr<c10::StorageImpl> storage{c10::intrusive_ptr<c10::StorageImpl>()};
  int64_t offset = 0, numel = 0;
  uint32_t version = 0;
  at::Tensor sums;  // (C) float32
};

thread_local std::vector<Offer> offers;  // oldest first
std::atomic<int64_t> taken{0};

}  // namespace

void offer_column_sums(const at::Tensor& g, const at::Tensor& sums) {
  TORCH_CHECK(g.defined() && g.dim() >= 1 && g.is_contiguous() && sums.dim() == 1 && sums.scalar_type() == at::kFloat && sums.size(0) == g.size(-1) &&
                  sums.device() == g.device(),
              "offer_column_sums: sums must be (C) float32 beside a contiguous (…, C) gradient on its device, got ", sums.sizes(), " ",
              sums.scalar_type(), " for ", g.sizes(), g.defined() && !g.is_contiguous() ? " (not contiguous)" : "");
  if (offers.size() >= size_t(kMaxOffers)) offers.erase(offers.begin());
  Offer o;
  o.storage = g.storage().getWeakStorageImpl();
  o.offset = g.storage_offset();
  o.numel = g.numel();
  o.version = g._version();
  o.sums = sums;
  offers.push_back(std::move(o));
}

at::Tensor take_column_sums(const at::Tensor& g2) {
  // contiguous only: a transposed alias of a square gradient has the same storage, offset and sizes
  if (offers.empty() || !g2.defined() || g2.dim() < 1 || !g2.has_storage() || !g2.is_contiguous()) return at::Tensor();
  for (auto it = offers.begin(); it != offers.end(); ++it) {
    const c10::intrusive_ptr<c10::StorageImpl> s = it->storage.lock();
    if (s && s.get() == g2.storage().unsafeGetStorageImpl() && it->offset == g2.storage_offset() && it->numel == g2.numel() &&
        it->version == g2._version() && it->sums.size(0) == g2.size(-1)) {
      at::Tensor r = std::move(it->sums);
      offers.erase(it);
      taken.fetch_add(1, std::memory_order_relaxed);
      return r;  // (C)
    }
  }
  return at::Tensor();
}

int64_t column_sums_taken() { return taken.load(std::memory_order_relaxed); }

}  // namespace nala::ops
