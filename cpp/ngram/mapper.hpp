// The map step of an index build: hash windows, scatter by top hash bits into partition buckets, and
// spill buckets as sorted runs of saturated counts (segment files) within a memory budget, sorting and
// writing partitions on several threads.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fastmmeval::ngram {

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
  void add(const Token* tokens, size_t n_tokens, const int64_t* offsets, size_t n_docs, uint64_t seed);
  // Spills what is left and returns the paths of all runs written, in order.
  std::vector<std::string> finish();
  uint64_t windows() const { return windows_; }

 private:
  void push(uint64_t h) {
    const size_t p = shift_ < 64 ? static_cast<size_t>(h >> shift_) : 0;
    uint64_t* bucket = storage_.get() + p * bucket_cap_;
    bucket[sizes_[p]] = h;
    if (++sizes_[p] == bucket_cap_) bucket_full(p);
  }
  void bucket_full(size_t p);
  void spill(size_t p, uint64_t* tmp);
  void spill_all(size_t at_least);  // spills, in parallel, every bucket holding at least that many

  MapperConfig config_;
  unsigned shift_;
  size_t bucket_cap_;
  std::unique_ptr<uint64_t[]> storage_;  // partitions x bucket_cap_, pages touched only as filled
  std::unique_ptr<uint64_t[]> tmp_;      // sort scratch: one bucket per thread
  std::vector<size_t> sizes_;
  std::vector<uint32_t> seq_;
  std::vector<std::vector<uint64_t>> staging_;  // hashed pieces waiting to be scattered
  std::vector<uint64_t> doc_tmp_;                // sort scratch of the dedup step on this thread
  std::vector<std::vector<std::string>> runs_;  // per partition
  uint64_t windows_ = 0;
};

}  // namespace fastmmeval::ngram
