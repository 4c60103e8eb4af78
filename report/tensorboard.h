// TensorBoard event files: scalars and PNG images a training run logs, in the format TensorBoard
// (and any reader of its files) reads, so `tensorboard --logdir runs/` shows a nala run's curves.
//
// A file is a sequence of records: uint64 length (little-endian), uint32 masked CRC-32C of those 8
// bytes, the data, uint32 masked CRC-32C of the data; each record's data is one serialized
// tensorboard.Event protocol buffer (tensorboard/compat/proto/event.proto, summary.proto). Only
// the few fields used here are encoded, by hand (see tensorboard.cpp for why no protobuf library).
//
// Resume rule (the same as metrics.jsonl): a writer opened to continue after step S first removes
// every event with a step > S from the folder's earlier files (rewritten atomically; a record cut
// short by a kill is dropped too), then appends to a new file that starts with a SessionLog START at
// step S + 1, which makes a TensorBoard that is already watching drop what it had read past S.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace nala::report {

// CRC-32C (Castagnoli), and the masked form TensorBoard's records store:
// ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
uint32_t masked_crc32c(const void* data, size_t n);

// One event of a file, as far as nala reads them back: its step (0 when it has none) and whether
// it is the file-version header.
struct EventRecord {
  std::string data;  // the serialized Event
  int64_t step = 0;
  bool has_step = false;
};

// Reads the records of an event file up to the first incomplete or corrupt one (a kill cut it
// short); `complete` says whether the file ended cleanly.
std::vector<EventRecord> read_event_file(const std::string& path, bool* complete = nullptr);

class EventFileWriter {
 public:
  // Writes into `dir` (created if needed), continuing after `resume_step` (0: a new run): see the
  // resume rule above. Throws naming the folder or file when it cannot.
  EventFileWriter(const std::string& dir, int64_t resume_step);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  void add_scalar(const std::string& tag, double value, int64_t step);
  // A PNG (its file bytes) of height x width pixels with 3 channels.
  void add_png(const std::string& tag, const std::string& png, int64_t height, int64_t width, int64_t step);
  // Pushes what was written to the file, so a watching TensorBoard sees it (after each log line).
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_event(const std::string& event);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace nala::report
