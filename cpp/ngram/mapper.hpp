// The map step of an index build: hash windows, scatter them by top hash bits into partitions, and spill
// partitions as sorted runs of saturated counts (segment files) within a memory budget. Every thread
// hashes and scatters its own share of the windows; spills sort and write partitions on all threads.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/interrupt.hpp"
#include "ngram/heavy.hpp"

namespace fastmmeval::ngram {

// Anonymous memory mapped for one owner, its pages taken from the system only as they are first touched.
class PageBuffer {
 public:
  PageBuffer() = default;
  explicit PageBuffer(size_t bytes);
  ~PageBuffer();
  PageBuffer(PageBuffer&& o) noexcept : base_(o.base_), bytes_(o.bytes_) {
    o.base_ = nullptr;
    o.bytes_ = 0;
  }
  PageBuffer& operator=(PageBuffer&& o) noexcept;
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;
  uint64_t* keys() const { return static_cast<uint64_t*>(base_); }

 private:
  void* base_ = nullptr;
  size_t bytes_ = 0;
};

struct MapperConfig {
  std::string prefix;  // run files are <prefix>p<partition:05d>-<seq:06d>.run
  uint32_t n, threshold, partition_bits;
  bool dedup;           // count documents containing a hash, not occurrences
  size_t memory_bytes;  // what the buckets and sort buffers may use together
  unsigned threads;     // threads that hash windows and that sort and write spilled partitions
};

class Mapper {
 public:
  explicit Mapper(MapperConfig config);
  Mapper(const Mapper&) = delete;
  Mapper& operator=(const Mapper&) = delete;
  // Adds the windows of every document (offsets already validated); Token is uint16_t or uint32_t.
  template <typename Token>
  void add(const Token* tokens, size_t n_tokens, const int64_t* offsets, size_t n_docs, uint64_t seed,
           Interrupt& interrupt);
  // Spills what is left and returns the paths of all runs written, in order. The mapper takes no windows
  // after that; its memory goes back to the system on a thread of its own. With alone_prefix, a partition
  // that had not spilled before writes its one run as <alone_prefix>p<partition:05d>.seg: a run is already
  // a segment, so no one has to rename it there.
  // An add or finish that throws (interrupted, or an error) leaves the mapper unusable: its memory goes back
  // and the runs it wrote are removed.
  std::vector<std::string> finish(const std::string& alone_prefix, Interrupt& interrupt);
  uint64_t windows() const { return windows_; }
  // Windows dropped as copies of a hash whose count saturated in the sample (they change no count).
  uint64_t dropped() const { return dropped_; }

 private:
  // Scatters in[k, count) into thread t's chunks; stops early (returning where) when it gets no chunk.
  size_t scatter(unsigned t, const uint64_t* in, size_t k, size_t count);
  bool new_chunk(size_t slot);  // gives slot (thread x partition) a fresh chunk; false if none may be had
  void spill(size_t p, uint64_t* tmp);
  // Spills, in parallel, every non-empty partition or those at their cap.
  void spill_all(bool everything, Interrupt& interrupt);
  void release_buffers();  // gives storage_ and tmp_ back to the system on a thread of its own
  void abandon() noexcept;
  struct AbandonOnThrow;

  MapperConfig config_;
  unsigned shift_;           // a hash's partition is (h >> shift_) >> 1 (0 without partition bits)
  size_t chunk_;             // keys per chunk
  size_t slot_chunks_;       // chunks one thread may hold for one partition before it must spill
  size_t scratch_;           // keys of sort scratch per thread
  // Keys wait in a pool of chunks, pages touched only as used: partitions take chunks as they grow, so
  // skewed ones do not leave the budget idle. Slot t * partitions + p lists the chunks thread t filled
  // for partition p; its last one is being filled, pos_ and end_ bound its free part.
  PageBuffer storage_;
  PageBuffer tmp_;  // sort scratch: scratch_ keys per thread
  std::vector<uint32_t> free_;       // chunks not in use; free_[free_next_, ...) may still be taken
  std::atomic<size_t> free_next_{0};
  std::vector<std::vector<uint32_t>> chunks_;
  std::vector<uint64_t*> pos_, end_;
  std::vector<uint32_t> seq_;
  std::vector<std::vector<uint64_t>> staging_;  // per thread: the hashes of the piece it scatters
  std::vector<std::vector<uint64_t>> doc_tmp_;  // per thread: sort scratch of the dedup step
  std::vector<std::vector<std::string>> runs_;  // per partition
  std::string alone_prefix_;                    // given to finish
  HeavyHashes heavy_;     // sampled from the first block of at least a piece's windows
  bool sampled_ = false;
  std::atomic<uint64_t> dropped_{0};
  uint64_t windows_ = 0;
  bool finished_ = false;
  bool failed_ = false;
};

}  // namespace fastmmeval::ngram
