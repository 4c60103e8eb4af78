#include "metrics/inception.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "models/checkpoint.h"
#include "io/safetensors.h"

namespace nala::metrics {
namespace {

using torch::nn::Conv2dOptions;

// Conv (no bias) -> BatchNorm (eps 1e-3) -> ReLU, with torchvision's names conv / bn. In eval mode
// with speed.fold_bn the BatchNorm is folded into the conv (inference BN is affine per channel):
// w' = w·γ/√(σ²+ε), b' = β − μ·γ/√(σ²+ε), refolded when a weight changes (version counters),
// moves device or changes dtype.
struct BasicConv : torch::nn::Module {
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  const InceptionSpeed* speed = nullptr;  // the owning FidInception's; null: the unfused layers
  at::Tensor w_fold, b_fold;              // (out, in, kh, kw), (out)
  std::vector<int64_t> fold_key;
  BasicConv(int64_t in, int64_t out, std::vector<int64_t> k, std::vector<int64_t> stride = {1, 1}, std::vector<int64_t> pad = {0, 0}) {
    conv = register_module("conv", torch::nn::Conv2d(Conv2dOptions(in, out, torch::ExpandingArray<2>({k[0], k.size() > 1 ? k[1] : k[0]}))
                                                         .stride(torch::ExpandingArray<2>({stride[0], stride.size() > 1 ? stride[1] : stride[0]}))
                                                         .padding(torch::ExpandingArray<2>({pad[0], pad.size() > 1 ? pad[1] : pad[0]}))
                                                         .bias(false)));
    bn = register_module("bn", torch::nn::BatchNorm2d(torch::nn::BatchNorm2dOptions(out).eps(0.001)));
  }
  void fold(bool channels_last) {
    const at::Tensor& w = conv->weight;
    std::vector<int64_t> key = {int64_t(w._version()), int64_t(bn->weight._version()), int64_t(bn->bias._version()),
                                int64_t(bn->running_mean._version()), int64_t(bn->running_var._version()),
                                int64_t(reinterpret_cast<intptr_t>(w.data_ptr())), int64_t(w.scalar_type()), channels_last};
    if (w_fold.defined() && key == fold_key) return;
    at::Tensor inv = bn->weight / at::sqrt(bn->running_var + bn->options.eps());                        // (out) γ/√(σ²+ε)
    w_fold = w * inv.view({-1, 1, 1, 1});                                                                 // (out, in, kh, kw)
    if (channels_last) w_fold = w_fold.contiguous(at::MemoryFormat::ChannelsLast);
    b_fold = bn->bias - bn->running_mean * inv;                                                           // (out)
    fold_key = std::move(key);
  }
  at::Tensor forward(const at::Tensor& x) {
    if (is_training()) w_fold = at::Tensor();  // train-mode BatchNorm updates its statistics without a version bump
    if (is_training() || !speed || !speed->fold_bn) return at::relu(bn->forward(conv->forward(x)));
    torch::NoGradGuard ng;
    fold(x.is_cuda() && speed->channels_last);
    const auto& o = conv->options;
    if (x.is_cuda() && speed->fused_relu)
      return at::cudnn_convolution_relu(x, w_fold, b_fold, o.stride(), std::get<torch::ExpandingArray<2>>(o.padding()), o.dilation(), 1);
    at::Tensor y = at::conv2d(x, w_fold, b_fold, o.stride(), std::get<torch::ExpandingArray<2>>(o.padding()));  // (N, out, h, w)
    return y.relu_();
  }
};
using BC = std::shared_ptr<BasicConv>;
BC bc(int64_t in, int64_t out, std::vector<int64_t> k, std::vector<int64_t> s = {1}, std::vector<int64_t> p = {0}) {
  return std::make_shared<BasicConv>(in, out, k, s, p);
}
// TF's average pool ignores the padded zeros (pytorch-fid: count_include_pad=False)
at::Tensor avg3(const at::Tensor& x) { return at::avg_pool2d(x, {3, 3}, {1, 1}, {1, 1}, false, false); }

struct InceptionA : torch::nn::Module {
  BC b1, b5_1, b5_2, bd_1, bd_2, bd_3, bp;
  InceptionA(int64_t in, int64_t pool) {
    b1 = register_module("branch1x1", bc(in, 64, {1}));
    b5_1 = register_module("branch5x5_1", bc(in, 48, {1}));
    b5_2 = register_module("branch5x5_2", bc(48, 64, {5}, {1}, {2}));
    bd_1 = register_module("branch3x3dbl_1", bc(in, 64, {1}));
    bd_2 = register_module("branch3x3dbl_2", bc(64, 96, {3}, {1}, {1}));
    bd_3 = register_module("branch3x3dbl_3", bc(96, 96, {3}, {1}, {1}));
    bp = register_module("branch_pool", bc(in, pool, {1}));
  }
  at::Tensor forward(const at::Tensor& x) {
    return at::cat({b1->forward(x), b5_2->forward(b5_1->forward(x)), bd_3->forward(bd_2->forward(bd_1->forward(x))), bp->forward(avg3(x))}, 1);
  }
};

struct InceptionB : torch::nn::Module {
  BC b3, bd_1, bd_2, bd_3;
  explicit InceptionB(int64_t in) {
    b3 = register_module("branch3x3", bc(in, 384, {3}, {2}));
    bd_1 = register_module("branch3x3dbl_1", bc(in, 64, {1}));
    bd_2 = register_module("branch3x3dbl_2", bc(64, 96, {3}, {1}, {1}));
    bd_3 = register_module("branch3x3dbl_3", bc(96, 96, {3}, {2}));
  }
  at::Tensor forward(const at::Tensor& x) {
    return at::cat({b3->forward(x), bd_3->forward(bd_2->forward(bd_1->forward(x))), at::max_pool2d(x, {3, 3}, {2, 2})}, 1);
  }
};

struct InceptionC : torch::nn::Module {
  BC b1, b7_1, b7_2, b7_3, bd_1, bd_2, bd_3, bd_4, bd_5, bp;
  at::Tensor last_branch1x1;  // Mixed_6d's is the sFID feature
  InceptionC(int64_t in, int64_t c7) {
    b1 = register_module("branch1x1", bc(in, 192, {1}));
    b7_1 = register_module("branch7x7_1", bc(in, c7, {1}));
    b7_2 = register_module("branch7x7_2", bc(c7, c7, {1, 7}, {1}, {0, 3}));
    b7_3 = register_module("branch7x7_3", bc(c7, 192, {7, 1}, {1}, {3, 0}));
    bd_1 = register_module("branch7x7dbl_1", bc(in, c7, {1}));
    bd_2 = register_module("branch7x7dbl_2", bc(c7, c7, {7, 1}, {1}, {3, 0}));
    bd_3 = register_module("branch7x7dbl_3", bc(c7, c7, {1, 7}, {1}, {0, 3}));
    bd_4 = register_module("branch7x7dbl_4", bc(c7, c7, {7, 1}, {1}, {3, 0}));
    bd_5 = register_module("branch7x7dbl_5", bc(c7, 192, {1, 7}, {1}, {0, 3}));
    bp = register_module("branch_pool", bc(in, 192, {1}));
  }
  at::Tensor forward(const at::Tensor& x) {
    last_branch1x1 = b1->forward(x);
    at::Tensor b7 = b7_3->forward(b7_2->forward(b7_1->forward(x)));
    at::Tensor bd = bd_5->forward(bd_4->forward(bd_3->forward(bd_2->forward(bd_1->forward(x)))));
    return at::cat({last_branch1x1, b7, bd, bp->forward(avg3(x))}, 1);
  }
};

struct InceptionD : torch::nn::Module {
  BC b3_1, b3_2, b7_1, b7_2, b7_3, b7_4;
  explicit InceptionD(int64_t in) {
    b3_1 = register_module("branch3x3_1", bc(in, 192, {1}));
    b3_2 = register_module("branch3x3_2", bc(192, 320, {3}, {2}));
    b7_1 = register_module("branch7x7x3_1", bc(in, 192, {1}));
    b7_2 = register_module("branch7x7x3_2", bc(192, 192, {1, 7}, {1}, {0, 3}));
    b7_3 = register_module("branch7x7x3_3", bc(192, 192, {7, 1}, {1}, {3, 0}));
    b7_4 = register_module("branch7x7x3_4", bc(192, 192, {3}, {2}));
  }
  at::Tensor forward(const at::Tensor& x) {
    return at::cat({b3_2->forward(b3_1->forward(x)), b7_4->forward(b7_3->forward(b7_2->forward(b7_1->forward(x)))),
                    at::max_pool2d(x, {3, 3}, {2, 2})}, 1);
  }
};

struct InceptionE : torch::nn::Module {
  BC b1, b3_1, b3_2a, b3_2b, bd_1, bd_2, bd_3a, bd_3b, bp;
  bool max_pool;  // FIDInceptionE_2 (Mixed_7c) uses a max pool, E_1 an average pool
  InceptionE(int64_t in, bool max_pool_) : max_pool(max_pool_) {
    b1 = register_module("branch1x1", bc(in, 320, {1}));
    b3_1 = register_module("branch3x3_1", bc(in, 384, {1}));
    b3_2a = register_module("branch3x3_2a", bc(384, 384, {1, 3}, {1}, {0, 1}));
    b3_2b = register_module("branch3x3_2b", bc(384, 384, {3, 1}, {1}, {1, 0}));
    bd_1 = register_module("branch3x3dbl_1", bc(in, 448, {1}));
    bd_2 = register_module("branch3x3dbl_2", bc(448, 384, {3}, {1}, {1}));
    bd_3a = register_module("branch3x3dbl_3a", bc(384, 384, {1, 3}, {1}, {0, 1}));
    bd_3b = register_module("branch3x3dbl_3b", bc(384, 384, {3, 1}, {1}, {1, 0}));
    bp = register_module("branch_pool", bc(in, 192, {1}));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor a = b3_1->forward(x);
    at::Tensor d = bd_2->forward(bd_1->forward(x));
    at::Tensor pool = max_pool ? at::max_pool2d(x, {3, 3}, {1, 1}, {1, 1}) : avg3(x);
    return at::cat({b1->forward(x), at::cat({b3_2a->forward(a), b3_2b->forward(a)}, 1), at::cat({bd_3a->forward(d), bd_3b->forward(d)}, 1),
                    bp->forward(pool)}, 1);
  }
};

}  // namespace

struct FidInception::Impl {
  BC c1a, c2a, c2b, c3b, c4a;
  std::shared_ptr<InceptionA> m5b, m5c, m5d;
  std::shared_ptr<InceptionB> m6a;
  std::shared_ptr<InceptionC> m6b, m6c, m6d, m6e;
  std::shared_ptr<InceptionD> m7a;
  std::shared_ptr<InceptionE> m7b, m7c;
  torch::nn::Linear fc{nullptr};
};

FidInception::FidInception() : impl(std::make_shared<Impl>()) {
  auto& m = *impl;
  m.c1a = register_module("Conv2d_1a_3x3", bc(3, 32, {3}, {2}));
  m.c2a = register_module("Conv2d_2a_3x3", bc(32, 32, {3}));
  m.c2b = register_module("Conv2d_2b_3x3", bc(32, 64, {3}, {1}, {1}));
  m.c3b = register_module("Conv2d_3b_1x1", bc(64, 80, {1}));
  m.c4a = register_module("Conv2d_4a_3x3", bc(80, 192, {3}));
  m.m5b = register_module("Mixed_5b", std::make_shared<InceptionA>(192, 32));
  m.m5c = register_module("Mixed_5c", std::make_shared<InceptionA>(256, 64));
  m.m5d = register_module("Mixed_5d", std::make_shared<InceptionA>(288, 64));
  m.m6a = register_module("Mixed_6a", std::make_shared<InceptionB>(288));
  m.m6b = register_module("Mixed_6b", std::make_shared<InceptionC>(768, 128));
  m.m6c = register_module("Mixed_6c", std::make_shared<InceptionC>(768, 160));
  m.m6d = register_module("Mixed_6d", std::make_shared<InceptionC>(768, 160));
  m.m6e = register_module("Mixed_6e", std::make_shared<InceptionC>(768, 192));
  m.m7a = register_module("Mixed_7a", std::make_shared<InceptionD>(768));
  m.m7b = register_module("Mixed_7b", std::make_shared<InceptionE>(1280, false));
  m.m7c = register_module("Mixed_7c", std::make_shared<InceptionE>(2048, true));
  m.fc = register_module("fc", torch::nn::Linear(2048, 1008));
  for (auto& mod : modules(false))
    if (auto* c = dynamic_cast<BasicConv*>(mod.get())) c->speed = &speed;
  eval();
}

at::Tensor tf1_resize_bilinear(const at::Tensor& x, int64_t oh, int64_t ow) {
  const int64_t ih = x.size(2), iw = x.size(3);
  if (ih == oh && iw == ow) return x;
  auto axis = [&](int64_t in, int64_t out) {
    const float scale = float(in) / float(out);  // float32, as TF
    at::Tensor src = at::arange(out, x.options().dtype(at::kFloat)) * scale;  // no half-pixel offset
    at::Tensor lo = at::floor(src);
    at::Tensor d = src - lo;
    at::Tensor lo_i = lo.to(at::kLong).clamp_max(in - 1), hi_i = (lo_i + 1).clamp_max(in - 1);
    return std::make_tuple(lo_i, hi_i, d);
  };
  auto [ylo, yhi, dy] = axis(ih, oh);
  auto [xlo, xhi, dx] = axis(iw, ow);
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor top_rows = xf.index_select(2, ylo), bot_rows = xf.index_select(2, yhi);   // (N, C, oh, iw)
  auto lerp_x = [&](const at::Tensor& r) {
    at::Tensor l = r.index_select(3, xlo), h = r.index_select(3, xhi);                    // (N, C, oh, ow)
    return l + (h - l) * dx.view({1, 1, 1, ow});
  };
  at::Tensor top = lerp_x(top_rows), bot = lerp_x(bot_rows);
  return top + (bot - top) * dy.view({1, 1, oh, 1});
}

InceptionFeatures FidInception::forward_normalised(const at::Tensor& x_in) {
  torch::NoGradGuard ng;
  auto& m = *impl;
  const bool cl = x_in.is_cuda() && speed.channels_last;
  // cuDNN's algorithm search for these shapes, restored afterwards (it is process-wide)
  struct BenchmarkGuard {  // touches the flag only when it must change
    bool prev = at::globalContext().benchmarkCuDNN(), set;
    explicit BenchmarkGuard(bool on) : set(on != prev) {
      if (set) at::globalContext().setBenchmarkCuDNN(on);
    }
    ~BenchmarkGuard() {
      if (set) at::globalContext().setBenchmarkCuDNN(prev);
    }
  } bench_guard(x_in.is_cuda() ? speed.cudnn_benchmark : at::globalContext().benchmarkCuDNN());
  at::Tensor x = cl ? x_in.contiguous(at::MemoryFormat::ChannelsLast) : x_in;  // (N, 3, 299, 299)
  x = m.c2b->forward(m.c2a->forward(m.c1a->forward(x)));
  x = at::max_pool2d(x, {3, 3}, {2, 2});
  x = m.c4a->forward(m.c3b->forward(x));
  x = at::max_pool2d(x, {3, 3}, {2, 2});
  x = m.m5d->forward(m.m5c->forward(m.m5b->forward(x)));
  x = m.m6a->forward(x);
  x = m.m6b->forward(x);
  x = m.m6c->forward(x);
  x = m.m6d->forward(x);
  at::Tensor sp = m.m6d->last_branch1x1;                                   // (N, 192, 17, 17) post-ReLU
  x = m.m6e->forward(x);
  x = m.m7c->forward(m.m7b->forward(m.m7a->forward(x)));                   // (N, 2048, 8, 8)
  InceptionFeatures f;
  f.pool = x.mean({2, 3}).to(at::kFloat);                                  // (N, 2048)
  f.spatial = sp.narrow(1, 0, 7).permute({0, 2, 3, 1}).reshape({sp.size(0), -1}).to(at::kFloat);  // (N, 2023) in (h, w, c) order
  f.logits = at::matmul(f.pool, m.fc->weight.to(at::kFloat).t());         // (N, 1008), no bias (ADM evaluator.py:603-614)
  return f;
}

InceptionFeatures FidInception::forward_uint8(const at::Tensor& images) {
  TORCH_CHECK(images.dim() == 4 && images.size(3) == 3, "Inception input must be uint8 (N, H, W, 3), got ", images.sizes());
  const auto dev = impl->fc->weight.device();
  at::Tensor x = images.to(dev).permute({0, 3, 1, 2}).to(at::kFloat);     // (N, 3, H, W) 0..255
  x = tf1_resize_bilinear(x, 299, 299);
  x = (x - 128.0) / 128.0;                                                 // the graph's Sub/Mul
  return forward_normalised(x.to(impl->fc->weight.scalar_type()));
}

std::shared_ptr<FidInception> load_inception(const std::string& path) {
  auto net = std::make_shared<FidInception>();
  io::NamedTensors w;
  for (auto& [k, t] : io::load_safetensors(path)) w.emplace_back(k, t);
  // num_batches_tracked and fc.bias do not affect features; accept files without them
  auto own = io::state_dict(*net);
  std::map<std::string, at::Tensor> have(w.begin(), w.end());
  for (auto& [k, t] : own)
    if (!have.count(k) && (k.find("num_batches_tracked") != std::string::npos || k == "fc.bias")) w.emplace_back(k, t.clone());
  io::NamedTensors filtered;
  for (auto& [k, t] : w)
    if (k.rfind("AuxLogits", 0) != 0) filtered.emplace_back(k, t);
  io::load_state_dict(*net, filtered, path);
  net->eval();
  return net;
}

}  // namespace nala::metrics
