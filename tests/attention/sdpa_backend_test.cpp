// The NALA_SDPA_BACKEND switch (attention/sdpa_backend.h) on the CPU: its names, its errors, and that
// it leaves CPU attention to ATen's own choice, bit for bit; against a float64 softmax written out.
#include <gtest/gtest.h>

#include <cmath>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "attention/nala_reference.h"
#include "attention/sdpa_backend.h"

using namespace nala::attention;

TEST(SdpaBackend, NamesRoundTripAndOthersAreAnErrorNamingTheValue) {
  for (auto b : {SdpaBackend::Auto, SdpaBackend::CuDNN, SdpaBackend::Flash, SdpaBackend::Efficient, SdpaBackend::Nala})
    EXPECT_EQ(parse_sdpa_backend(sdpa_backend_name(b)), b);
  try {
    parse_sdpa_backend("flash2");
    FAIL() << "flash2 was taken";
  } catch (const c10::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("NALA_SDPA_BACKEND='flash2'"), std::string::npos) << m;
    EXPECT_NE(m.find("auto, cudnn, flash, efficient or nala"), std::string::npos) << m;
  }
}

TEST(SdpaBackend, TheCpuKeepsAtensChoiceForEveryName) {
  torch::manual_seed(2);
  const at::Tensor q = at::randn({2, 3, 17, 8}), k = at::randn({2, 3, 17, 8}), v = at::randn({2, 3, 17, 8});  // (B, H, N, d)
  // the truth: softmax(q kᵀ / √d) v in float64
  const at::Tensor s = at::matmul(q.to(at::kDouble), k.to(at::kDouble).transpose(-1, -2)) / std::sqrt(8.0);  // (B, H, N, N)
  const at::Tensor truth = at::matmul(at::softmax(s, -1), v.to(at::kDouble));                            // (B, H, N, d)
  const at::Tensor aten = at::scaled_dot_product_attention(q, k, v);                                      // (B, H, N, d)
  ASSERT_LT((aten.to(at::kDouble) - truth).abs().max().item<double>(), 1e-5);
  for (auto b : {SdpaBackend::Auto, SdpaBackend::CuDNN, SdpaBackend::Flash, SdpaBackend::Efficient, SdpaBackend::Nala}) {
    EXPECT_TRUE(at::equal(sdpa_with_backend(q, k, v, b), aten)) << sdpa_backend_name(b);
    EXPECT_EQ(sdpa_choice(q, k, v, b), at::_fused_sdp_choice(q, k, v)) << sdpa_backend_name(b);
    set_sdpa_backend(b);
    EXPECT_TRUE(at::equal(softmax_attention(q, k, v), aten)) << sdpa_backend_name(b);
  }
  set_sdpa_backend(SdpaBackend::Auto);  // the default
}
