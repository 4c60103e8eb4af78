// report/tensorboard.h: CRC-32C against its published check value, and the writer's resume rule
// read back through read_event_file (the Python test reads the same files with TensorBoard's own
// reader: tests/python/test_tensorboard.py).
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <gtest/gtest.h>

#include "io/atomic_file.h"
#include "report/tensorboard.h"

namespace nala::report {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("nala_tb_" + name + "_" + std::to_string(::getpid()));
  io::remove_tree(d.string());
  return d;
}

std::vector<fs::path> event_files(const fs::path& d) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(d)) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int64_t> steps_of(const fs::path& f, bool* complete = nullptr) {
  std::vector<int64_t> s;
  for (const auto& r : read_event_file(f.string(), complete))
    if (r.has_step) s.push_back(r.step);
  return s;
}

TEST(Crc32c, PublishedCheckValue) {
  // CRC-32C of the ASCII digits "123456789" is 0xE3069283 (RFC 3720, B.4; the standard check value)
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  const uint32_t c = crc32c("abc", 3);
  EXPECT_EQ(masked_crc32c("abc", 3), ((c >> 15) | (c << 17)) + 0xa282ead8u);
  EXPECT_EQ(crc32c("6789", 4, crc32c("12345", 5)), 0xE3069283u);  // continues a running CRC
}

TEST(EventFileWriter, ResumeKeepsTheStepsUpToTheCheckpoint) {
  const fs::path d = fresh_dir("resume");
  {
    EventFileWriter w(d.string(), 0);
    for (int64_t s = 1; s <= 10; ++s) w.add_scalar("train/loss", 1.0 / double(s), s);
    w.flush();
  }
  auto files = event_files(d);
  ASSERT_EQ(files.size(), 1u);
  // header (no step), START at 1, then steps 1..10
  EXPECT_EQ(steps_of(files[0]), (std::vector<int64_t>{1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  {
    EventFileWriter w(d.string(), 6);
    w.add_scalar("train/loss", 0.5, 8);
  }
  files = event_files(d);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(steps_of(files[0]), (std::vector<int64_t>{1, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(steps_of(files[1]), (std::vector<int64_t>{7, 8}));  // START at 7, then the new step
  io::remove_tree(d.string());
}

TEST(EventFileWriter, ACutRecordIsDroppedOnResume) {
  const fs::path d = fresh_dir("cut");
  {
    EventFileWriter w(d.string(), 0);
    for (int64_t s = 1; s <= 3; ++s) w.add_scalar("x", double(s), s);
  }
  const fs::path f = event_files(d)[0];
  const auto full = fs::file_size(f);
  fs::resize_file(f, full - 5);  // the last record cut short, as a kill mid-write leaves it
  bool complete = true;
  EXPECT_EQ(steps_of(f, &complete), (std::vector<int64_t>{1, 1, 2}));
  EXPECT_FALSE(complete);
  { EventFileWriter w(d.string(), 3); }
  EXPECT_EQ(steps_of(f, &complete), (std::vector<int64_t>{1, 1, 2}));
  EXPECT_TRUE(complete);
  io::remove_tree(d.string());
}

TEST(EventFileWriter, UnwritableFolderNamesIt) {
  const fs::path d = fresh_dir("blocked");
  fs::create_directories(d);
  std::ofstream(d / "tb") << "a file where the folder should be";
  try {
    EventFileWriter w((d / "tb").string(), 0);
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find((d / "tb").string()), std::string::npos) << e.what();
  }
  io::remove_tree(d.string());
}

}  // namespace
}  // namespace nala::report
