// Round trips of every file format, and hostile files: random truncations, byte flips and absurd
// header sizes must give a clear error (a std::exception naming the file), never a crash.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include <ATen/ATen.h>

#include "io/atomic_file.h"
#include "io/image.h"
#include "io/npz.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;
using namespace nala;

namespace {

std::string temp_dir() {
  static std::string d = [] {
    std::string p = (fs::temp_directory_path() / ("nala_io_test_" + std::to_string(::getpid()))).string();
    fs::create_directories(p);
    return p;
  }();
  return d;
}

std::vector<std::pair<std::string, at::Tensor>> sample_tensors() {
  at::manual_seed(1);
  return {{"f32", at::randn({3, 5})},
          {"f64", at::randn({7}, at::kDouble)},
          {"f16", at::randn({2, 3}).to(at::kHalf)},
          {"bf16", at::randn({4, 1, 2}).to(at::kBFloat16)},
          {"i64", at::randint(-1000, 1000, {6}, at::kLong)},
          {"i32", at::randint(-1000, 1000, {2, 2}, at::kInt)},
          {"u8", at::randint(0, 256, {3, 4, 3}, at::kByte)},
          {"bool", at::randint(0, 2, {5}, at::kByte).to(at::kBool)},
          {"scalar", at::tensor(3.5)},
          {"empty", at::empty({0, 3})}};
}

void expect_same(const at::Tensor& a, const at::Tensor& b, const std::string& name) {
  EXPECT_EQ(a.scalar_type(), b.scalar_type()) << name;
  EXPECT_EQ(a.sizes(), b.sizes()) << name;
  if (a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type()) EXPECT_TRUE(at::equal(a, b)) << name;
}

std::string slurp(const std::string& p) { return io::read_file(p); }
void dump(const std::string& p, const std::string& s) { std::ofstream(p, std::ios::binary).write(s.data(), s.size()); }

// Every mutation must load or throw std::exception; crashes fail the test binary.
template <typename Load>
int fuzz(const std::string& good, const std::string& path, Load load, int rounds) {
  std::mt19937 rng(42);
  int errors = 0;
  for (int r = 0; r < rounds; ++r) {
    std::string s = good;
    switch (r % 3) {
      case 0: s.resize(rng() % s.size()); break;                                       // truncation
      case 1: for (int k = 0; k < 1 + int(rng() % 4); ++k) s[rng() % s.size()] ^= char(1 + rng() % 255); break;  // byte flips
      case 2: s[rng() % std::min<size_t>(s.size(), 64)] = char(rng() % 256); break;      // header damage
    }
    dump(path, s);
    try {
      load(path);
    } catch (const std::exception& e) {
      ++errors;
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << "error does not name the file: " << e.what();
    }
  }
  return errors;
}

}  // namespace

TEST(Safetensors, RoundTripEveryDtype) {
  const std::string p = temp_dir() + "/rt.safetensors";
  auto t = sample_tensors();
  io::save_safetensors(p, t, {{"format", "pt"}, {"note", "x"}});
  std::map<std::string, std::string> meta;
  auto back = io::load_safetensors(p, &meta);
  ASSERT_EQ(back.size(), t.size());
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_EQ(back[i].first, t[i].first);
    expect_same(back[i].second, t[i].second, t[i].first);
  }
  EXPECT_EQ(meta["note"], "x");
}

TEST(Safetensors, HostileHeadersGiveClearErrors) {
  const std::string p = temp_dir() + "/bad.safetensors";
  auto expect_error = [&](const std::string& bytes, const std::string& needle) {
    dump(p, bytes);
    try {
      io::load_safetensors(p);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  };
  auto with_header = [](const std::string& json, const std::string& data) {
    std::string s(8, '\0');
    uint64_t n = json.size();
    for (int i = 0; i < 8; ++i) s[i] = char(n >> (8 * i));
    return s + json + data;
  };
  expect_error(std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8), "exceeds");
  expect_error(std::string("\x10\x00\x00\x00\x00\x00\x00\x00{}", 10), "exceeds the file size");
  expect_error(with_header("{not json", ""), "not valid JSON");
  expect_error(with_header(R"({"a":{"dtype":"F99","shape":[1],"data_offsets":[0,4]}})", "abcd"), "unknown dtype 'F99'");
  expect_error(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "abcd"), "tensor 'a': shape needs 8 bytes");
  expect_error(with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", "abcd"), "outside the data buffer");
  expect_error(with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})", "abcdefgh"), "overlaps");
  expect_error(with_header(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "abcd"), "non-negative");
  expect_error(with_header(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})", "abcd"), "hole");
}

TEST(Safetensors, FuzzedFilesNeverCrash) {
  const std::string good_path = temp_dir() + "/good.safetensors";
  io::save_safetensors(good_path, sample_tensors());
  const int errors = fuzz(slurp(good_path), temp_dir() + "/fuzz.safetensors", [](const std::string& p) { io::load_safetensors(p); }, 300);
  std::cout << "safetensors fuzz: " << errors << " of 300 mutations rejected\n";
  EXPECT_GT(errors, 150);
}

TEST(Npz, RoundTripStoredAndCompressed) {
  for (bool compress : {false, true}) {
    const std::string p = temp_dir() + (compress ? "/rt_c.npz" : "/rt.npz");
    auto t = sample_tensors();
    t.erase(std::remove_if(t.begin(), t.end(), [](auto& x) { return x.second.scalar_type() == at::kBFloat16; }), t.end());
    io::save_npz(p, t, compress);
    auto back = io::load_npz(p);
    ASSERT_EQ(back.size(), t.size());
    for (size_t i = 0; i < t.size(); ++i) {
      EXPECT_EQ(back[i].first, t[i].first);
      expect_same(back[i].second, t[i].second, t[i].first);
    }
  }
}

TEST(Npz, StreamingRowsEqualWholeArray) {
  const std::string p = temp_dir() + "/stream.npz";
  at::Tensor a = at::randint(0, 256, {23, 8, 8, 3}, at::kByte);
  {
    io::NpzWriter w(p, true);
    w.begin("arr_0", at::kByte, {23, 8, 8, 3});
    for (int64_t i = 0; i < 23; i += 5) w.append(a.narrow(0, i, std::min<int64_t>(5, 23 - i)));
    w.add("arr_1", at::arange(23));
    w.close();
  }
  io::NpzArrayReader r(p, "arr_0");
  std::vector<at::Tensor> parts;
  while (r.rows_left() > 0) parts.push_back(r.read_rows(4));
  EXPECT_EQ(parts.size(), 6u);
  EXPECT_TRUE(at::equal(at::cat(parts), a));
  EXPECT_EQ(io::npz_keys(p), (std::vector<std::string>{"arr_0", "arr_1"}));
}

TEST(Npz, UnfinishedWriterLeavesTargetUntouched) {
  const std::string p = temp_dir() + "/keep.npz";
  io::save_npz(p, {{"arr_0", at::arange(5)}});
  {
    io::NpzWriter w(p);
    w.begin("arr_0", at::kLong, {10});
    w.append(at::arange(3));
    // destroyed without close(), as after an exception
  }
  EXPECT_TRUE(at::equal(io::load_npz(p)[0].second, at::arange(5)));
  for (auto& e : fs::directory_iterator(temp_dir())) EXPECT_EQ(e.path().string().find("keep.npz.tmp"), std::string::npos);
}

TEST(Npz, FuzzedFilesNeverCrash) {
  for (bool compress : {false, true}) {
    const std::string good_path = temp_dir() + "/good.npz";
    io::save_npz(good_path, {{"arr_0", at::randint(0, 256, {4, 6, 6, 3}, at::kByte)}, {"arr_1", at::arange(4)}}, compress);
    const int errors = fuzz(slurp(good_path), temp_dir() + "/fuzz.npz", [](const std::string& p) { io::load_npz(p); }, 300);
    std::cout << "npz fuzz (" << (compress ? "deflate" : "stored") << "): " << errors << " of 300 mutations rejected\n";
    EXPECT_GT(errors, 150);
  }
}

TEST(Npz, MissingKeyNamesTheKeys) {
  const std::string p = temp_dir() + "/keys.npz";
  io::save_npz(p, {{"arr_0", at::arange(3)}});
  try {
    io::NpzArrayReader r(p, "mu");
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("no array 'mu' (arrays: arr_0)"), std::string::npos) << e.what();
  }
}

TEST(Image, PngRoundTripAndGrid) {
  const std::string p = temp_dir() + "/img.png";
  at::Tensor img = at::randint(0, 256, {13, 17, 3}, at::kByte);
  io::write_png(p, img);
  EXPECT_TRUE(at::equal(io::read_image(p), img));
  at::Tensor grid = io::make_grid(at::stack({img, img, img}), 2, 2);
  EXPECT_EQ(grid.sizes(), (at::IntArrayRef{2 * 15 + 2, 2 * 19 + 2, 3}));
  EXPECT_TRUE(at::equal(grid.narrow(0, 2, 13).narrow(1, 2 + 19, 17), img));
  EXPECT_EQ(grid[0][0][0].item<int>(), 0);
}

TEST(Image, CorruptImageIsAClearError) {
  const std::string p = temp_dir() + "/broken.png";
  dump(p, "\x89PNG\r\n\x1a\nnot really");
  try {
    io::read_image(p);
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(Image, CenterCropShapes) {
  at::Tensor img = at::randint(0, 256, {300, 517, 3}, at::kByte);
  EXPECT_EQ(io::center_crop_adm(img, 64).sizes(), (at::IntArrayRef{64, 64, 3}));
  EXPECT_EQ(io::center_crop_adm(img, 256).sizes(), (at::IntArrayRef{256, 256, 3}));
  // A constant image stays constant through box, bicubic and crop (coefficients sum to one).
  at::Tensor c = at::full({97, 131, 3}, 77, at::kByte);
  EXPECT_TRUE(at::equal(io::center_crop_adm(c, 32), at::full({32, 32, 3}, 77, at::kByte)));
}

TEST(AtomicFile, FailedWriteKeepsOldContent) {
  const std::string p = temp_dir() + "/atomic.txt";
  io::write_file_atomic(p, [](std::ostream& o) { o << "old"; });
  EXPECT_THROW(io::write_file_atomic(p, [](std::ostream& o) { o << "half"; throw std::runtime_error("simulated disk full"); }),
               std::runtime_error);
  EXPECT_EQ(slurp(p), "old");
}
