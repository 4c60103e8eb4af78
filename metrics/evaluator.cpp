#include "metrics/evaluator.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "data/datasets.h"
#include "io/image.h"
#include "io/npz.h"
#include "io/safetensors.h"
#include "report/progress.h"
#include "metrics/fmnist_classifier.h"
#include "metrics/inception.h"
#include "metrics/frechet_distance.h"
#include "metrics/inception_score.h"
#include "metrics/precision_recall.h"
#include "metrics/statistics.h"

namespace nala::metrics {
namespace {

struct Extracted {
  at::Tensor pool, logits;  // (N, 2048), (N, 1008) on the CPU
  RunningStats pool_stats{2048}, spatial_stats{2023};
  std::vector<int64_t> image_shape;
  double seconds = 0;
};

void check_images(const io::NpzArrayReader& r, const std::string& path) {
  const auto& s = r.shape();
  if (s.size() != 4 || s[3] != 3 || r.dtype() != at::kByte)
    throw std::runtime_error(path + ": arr_0 must be uint8 images (N, H, W, 3), got " + c10::toString(r.dtype()) + " " + c10::str(at::IntArrayRef(s)));
  if (s[0] < 1) throw std::runtime_error(path + ": arr_0 holds no images");
}

Extracted extract(FidInception& net, const std::string& path, const EvalOptions& o) {
  io::NpzArrayReader r(path, "arr_0");
  check_images(r, path);
  Extracted e;
  e.image_shape = r.shape();
  std::vector<at::Tensor> pools, logits;
  report::ProgressBar bar("inception " + path.substr(path.find_last_of('/') + 1), r.rows_total(), "img");
  const auto t0 = std::chrono::steady_clock::now();
  int64_t done = 0;
  while (r.rows_left() > 0) {
    at::Tensor imgs = r.read_rows(o.batch);
    InceptionFeatures f = net.forward_uint8(imgs);
    e.pool_stats.add(f.pool);
    e.spatial_stats.add(f.spatial);
    pools.push_back(f.pool.cpu());
    logits.push_back(f.logits.cpu());
    done += imgs.size(0);
    if (o.progress) bar.update(done);
  }
  if (o.progress) bar.finish();
  e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  e.pool = at::cat(pools);
  e.logits = at::cat(logits);
  return e;
}

void check_counts(int64_t n, int64_t dim, const std::string& what, const EvalOptions& o) {
  if (n < 2) throw std::runtime_error(what + ": " + std::to_string(n) + " image(s) are too few for statistics");
  if (n < dim && !o.allow_few_samples)
    throw std::runtime_error(what + ": " + std::to_string(n) + " images are fewer than the " + std::to_string(dim) +
                             " feature dimensions, so the covariance is singular and the distance meaningless (FID-50K uses 50,000; "
                             "--allow-few-samples overrides)");
}

}  // namespace

InceptionMetrics evaluate_inception(FidInception& net, const std::string& ref_npz, const std::string& sample_npz, const EvalOptions& o) {
  torch::NoGradGuard ng;
  // validate both files before the long part
  {
    io::NpzArrayReader rr(ref_npz, "arr_0"), rs(sample_npz, "arr_0");
    check_images(rr, ref_npz);
    check_images(rs, sample_npz);
    if ((rr.shape()[1] != rs.shape()[1] || rr.shape()[2] != rs.shape()[2]) && !o.allow_size_mismatch)
      throw std::runtime_error("image sizes differ: " + ref_npz + " has " + std::to_string(rr.shape()[1]) + "x" + std::to_string(rr.shape()[2]) +
                               ", " + sample_npz + " has " + std::to_string(rs.shape()[1]) + "x" + std::to_string(rs.shape()[2]) +
                               " (both are resized to 299 for Inception; --allow-size-mismatch compares them anyway)");
  }
  std::map<std::string, at::Tensor> ref_stats;
  for (const auto& k : io::npz_keys(ref_npz))
    if (k == "mu" || k == "sigma" || k == "mu_s" || k == "sigma_s") ref_stats[k] = io::NpzArrayReader(ref_npz, k).read_all();
  if (!ref_stats.empty() && ref_stats.size() != 4)
    throw std::runtime_error(ref_npz + ": a reference batch carries all of mu, sigma, mu_s, sigma_s or none of them");
  Extracted ref = extract(net, ref_npz, o);
  Extracted sam = extract(net, sample_npz, o);
  check_counts(sam.pool.size(0), 2048, sample_npz, o);
  InceptionMetrics m;
  m.samples = sam.pool.size(0);
  m.references = ref.pool.size(0);
  m.images_per_second = double(m.samples + m.references) / (ref.seconds + sam.seconds);
  at::Tensor mu, sigma, mu_s, sigma_s;
  if (!ref_stats.empty()) {
    mu = ref_stats["mu"];
    sigma = ref_stats["sigma"];
    mu_s = ref_stats["mu_s"];
    sigma_s = ref_stats["sigma_s"];
    m.reference_stats_from_file = true;
    if (mu.numel() != 2048 || mu_s.numel() != 2023)
      throw std::runtime_error(ref_npz + ": mu has " + std::to_string(mu.numel()) + " and mu_s " + std::to_string(mu_s.numel()) +
                               " entries, expected 2048 and 2023");
  } else {
    check_counts(ref.pool.size(0), 2048, ref_npz, o);
    mu = ref.pool_stats.mean();
    sigma = ref.pool_stats.covariance();
    mu_s = ref.spatial_stats.mean();
    sigma_s = ref.spatial_stats.covariance();
  }
  // sample statistics first, as evaluator.py:56 calls sample_stats.frechet_distance(ref_stats)
  m.fid = frechet_distance(sam.pool_stats.mean(), sam.pool_stats.covariance(), mu, sigma);
  m.sfid = frechet_distance(sam.spatial_stats.mean(), sam.spatial_stats.covariance(), mu_s, sigma_s);
  m.inception_score = inception_score(sam.logits, 5000);
  auto pr = precision_recall(ref.pool.to(o.device), sam.pool.to(o.device), 3, 10000);
  m.precision = pr.precision;
  m.recall = pr.recall;
  return m;
}

void save_reference_stats(FidInception& net, const std::string& in_npz, const std::string& out_npz, const EvalOptions& o) {
  torch::NoGradGuard ng;
  Extracted e = extract(net, in_npz, o);
  check_counts(e.pool.size(0), 2048, in_npz, o);
  io::NpzArrayReader r(in_npz, "arr_0");
  io::NpzWriter w(out_npz);
  w.begin("arr_0", at::kByte, r.shape());
  while (r.rows_left() > 0) w.append(r.read_rows(1000));
  w.add("mu", e.pool_stats.mean());
  w.add("sigma", e.pool_stats.covariance());
  w.add("mu_s", e.spatial_stats.mean());
  w.add("sigma_s", e.spatial_stats.covariance());
  w.close();
}

namespace {

// FNV-1a, 64 bits (http://www.isthe.com/chongo/tech/comp/fnv/): a cache key, not a security hash.
constexpr uint64_t kFnvOffset = 14695981039346656037ull, kFnvPrime = 1099511628211ull;
uint64_t fnv1a(const void* data, size_t bytes, uint64_t h) {
  const auto* b = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * kFnvPrime;
  return h;
}
uint64_t fnv1a(const at::Tensor& t, uint64_t h) {
  const at::Tensor c = t.detach().to(at::kCPU).contiguous();
  return fnv1a(c.data_ptr(), size_t(c.nbytes()), h);
}
std::string hex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}
// A hash of the classifier's weights (names and values, buffers included).
std::string fnv1a_hex(const FmnistClassifier& net) {
  uint64_t h = kFnvOffset;
  for (const auto& p : net.named_parameters(true)) h = fnv1a(p.value(), fnv1a(p.key().data(), p.key().size(), h));
  for (const auto& b : net.named_buffers(true)) h = fnv1a(b.value(), fnv1a(b.key().data(), b.key().size(), h));
  return hex(h);
}

// The cache's format; bump the number when what it holds changes (the classifier's features, the
// references' preprocessing, kPrK): a cache of another number is then recomputed and replaced.
constexpr const char* kRefCacheFamily = "nala fmnist reference features ";
constexpr const char* kRefCacheFormat = "nala fmnist reference features 2";
constexpr int64_t kPrK = 3, kPrBlock = 10000;  // P/R's k-th neighbour and distance block, as ADM (evaluator.py)

struct RefCache {
  at::Tensor features, radii;  // (refs, 256), (refs,) float32; undefined: to be computed
};

// The cached reference features and radii when `path` holds them for this classifier, these
// references and this device; undefined when the file is absent or was written for another
// classifier, image size, device or format version (it is then recomputed and replaced). A file
// that is not such a cache is an error: it is never overwritten.
RefCache cached_references(const std::string& path, const std::string& key_net, const std::string& key_ref, int64_t refs) {
  if (!std::filesystem::exists(path)) return {};
  std::map<std::string, std::string> meta;
  const io::NamedTensors t = io::load_safetensors(path, &meta);
  if (meta["format"].rfind(kRefCacheFamily, 0) != 0)
    throw std::runtime_error(path + ": not a nala Fashion-MNIST reference cache (format '" + meta["format"] + "', expected '" +
                             kRefCacheFormat + "'); pass another --ref-cache path");
  if (meta["format"] != kRefCacheFormat || meta["classifier_fnv1a64"] != key_net || meta["references_fnv1a64"] != key_ref) {
    std::cerr << path << ": reference features of another classifier, image size, device or format; recomputing them\n";
    return {};
  }
  RefCache c;
  for (const auto& [name, x] : t) {
    if (name == "features" && x.scalar_type() == at::kFloat && x.sizes() == at::IntArrayRef{refs, 256}) c.features = x;
    if (name == "radii" && x.scalar_type() == at::kFloat && x.sizes() == at::IntArrayRef{refs}) c.radii = x;
  }
  if (t.size() != 2 || !c.features.defined() || !c.radii.defined())
    throw std::runtime_error(path + ": a reference cache holds float32 'features' (" + std::to_string(refs) + ", 256) and 'radii' (" +
                             std::to_string(refs) + ")");
  return c;
}

}  // namespace

FmnistMetrics evaluate_fmnist(FmnistClassifier& net, const std::string& sample_npz, const std::string& fmnist_dir, const EvalOptions& o) {
  torch::NoGradGuard ng;
  net.to(o.device);
  io::NpzArrayReader r(sample_npz, "arr_0");
  const auto& s = r.shape();
  if (s.size() != 4 || s[1] != s[2] || s[1] % 32 != 0 || r.dtype() != at::kByte)
    throw std::runtime_error(sample_npz + ": FD-FMNIST needs uint8 samples (N, S, S, C) with S = 32 or a multiple of 32, got " +
                             c10::str(at::IntArrayRef(s)));
  if (s[0] < 1) throw std::runtime_error(sample_npz + ": arr_0 holds no images");
  const int64_t S = s[1], up = S / 32;
  auto feats = [&](const at::Tensor& x) {  // x: (N, 1, 32, 32) in [-1, 1]
    std::vector<at::Tensor> f, l;
    for (int64_t i = 0; i < x.size(0); i += 1000) {
      at::Tensor xb = x.narrow(0, i, std::min<int64_t>(1000, x.size(0) - i)).to(o.device);
      at::Tensor h = net.features(xb);
      f.push_back(h.cpu());
      l.push_back(net.fc2->forward(h).cpu());
    }
    return std::make_pair(at::cat(f), at::cat(l));
  };
  at::Tensor imgs = r.read_all();                                                    // (N, S, S, C)
  at::Tensor xs = imgs.select(3, 0).unsqueeze(1).to(at::kFloat).div(127.5).sub(1.0);  // gray: channel 0, (N, 1, S, S)
  data::FashionMNIST test(fmnist_dir, "test", 32);
  const at::Tensor raw = test.images();  // (10000, 32, 32) uint8
  if (up > 1) xs = at::avg_pool2d(xs, {up, up});  // (N, 1, 32, 32)
  // the test images as the classifier sees them: at 32 px as they are; for samples of the upsampled
  // data (data/datasets.h), whose up×up blocks are averaged back to 32 px above, taken the same way
  // (upsampled, written as uint8 like samples, averaged), so a model that reproduces the data exactly
  // scores as the test set itself
  auto references = [&] {
    at::Tensor xr = raw.unsqueeze(1).to(at::kFloat).div(127.5).sub(1.0);  // (10000, 1, 32, 32)
    if (up > 1) xr = at::avg_pool2d(io::uint8_to_model(io::model_to_uint8(data::fashion_mnist_upsample(xr, S))), {up, up});
    return xr;
  };
  auto [fs, ls] = feats(xs);
  RefCache ref;  // the reference features (10000, 256) and their P/R radii (10000,)
  if (!o.fmnist_ref_cache.empty()) {
    // keyed by the classifier's weights, the test images, the size they are taken through and the
    // device type (CUDA's convolutions may use TF32: its features differ from the CPU's in the 3rd digit)
    const std::string device = c10::DeviceTypeName(o.device.type());
    const std::string key_net = fnv1a_hex(net);
    const std::string key_ref = hex(fnv1a(raw, fnv1a(device.data(), device.size(), fnv1a(&S, sizeof S, kFnvOffset))));
    ref = cached_references(o.fmnist_ref_cache, key_net, key_ref, raw.size(0));
    if (!ref.features.defined()) {
      ref.features = feats(references()).first;
      ref.radii = manifold_radii(ref.features, kPrK, kPrBlock);
      io::save_safetensors(o.fmnist_ref_cache, {{"features", ref.features}, {"radii", ref.radii}},
                           {{"format", kRefCacheFormat}, {"classifier_fnv1a64", key_net}, {"references_fnv1a64", key_ref}});
    }
  } else {
    ref.features = feats(references()).first;
  }
  const at::Tensor& fr = ref.features;
  check_counts(fs.size(0), 256, sample_npz, o);
  RunningStats a(256), b(256);
  a.add(fs);
  b.add(fr);
  FmnistMetrics m;
  m.samples = fs.size(0);
  m.references = fr.size(0);
  m.fd = frechet_distance(a.mean(), a.covariance(), b.mean(), b.covariance());
  auto pr = precision_recall(fr, fs, kPrK, kPrBlock, ref.radii);
  m.precision = pr.precision;
  m.recall = pr.recall;
  m.class_is = inception_score(ls, 5000);
  bool has_labels = false;
  for (const auto& k : io::npz_keys(sample_npz)) has_labels |= k == "arr_1";
  if (has_labels) {
    at::Tensor y = io::NpzArrayReader(sample_npz, "arr_1").read_all().to(at::kLong);
    if (y.numel() == fs.size(0)) m.class_accuracy = (ls.argmax(1) == y).to(at::kDouble).mean().item<double>();
  }
  return m;
}

}  // namespace nala::metrics
