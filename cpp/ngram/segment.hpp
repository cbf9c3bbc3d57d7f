// Segment files of an n-gram index: sorted unique hashes with saturated uint8 counts, in bit-packed blocks
// (blocks.hpp), with a sparse block index and a checksum. The layout is documented in
// python/fastmmeval/contam/ngram/segment.py.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#define XXH_INLINE_ALL
#include "ngram/blocks.hpp"
#include "xxhash.h"

namespace fastmmeval::ngram {

constexpr uint32_t kSegmentVersion = 2;
constexpr uint64_t kFlagDedup = 1;

#pragma pack(push, 1)
struct SegmentHeader {
  char magic[8];
  uint32_t version, n, threshold, partition_bits, partition, block_entries;
  uint64_t entries, frequent, payload_bytes, flags, checksum;
};
#pragma pack(pop)
static_assert(sizeof(SegmentHeader) == 72, "segment header is 72 bytes");

// What every segment of one index partition shares.
struct SegmentKind {
  uint32_t n, threshold, partition_bits, partition;
  bool dedup;
};

// Writes one segment to `path`: entries in strictly increasing hash order, then finish(). A writer
// destroyed before finish() removes its file.
class SegmentWriter {
 public:
  SegmentWriter(std::string path, const SegmentKind& kind);
  ~SegmentWriter();
  SegmentWriter(const SegmentWriter&) = delete;
  SegmentWriter& operator=(const SegmentWriter&) = delete;
  void add(const uint64_t* hashes, const uint8_t* counts, size_t n);  // n entries, continuing the order
  std::pair<uint64_t, uint64_t> finish();  // returns {entries, frequent}

 private:
  void flush_block();
  void put_block(const uint64_t* hashes, const uint8_t* counts, size_t n);  // encodes one block of n entries
  void staged(size_t bytes);  // digests the last `bytes` put on the stage; writes a full stage out
  void write_at(const char* data, size_t size, uint64_t offset);
  void spill_index();  // moves the index pairs held in memory to the spill file
  void stage_index(size_t column);  // stages column 0 (first hashes) or 1 (offsets) of every index pair
  void stage_column(const uint64_t* pairs, size_t n, size_t column);
  std::string path_;
  SegmentKind kind_;
  int fd_ = -1;
  XXH3_state_t state_;
  uint64_t hashes_[kBlockEntries];
  uint8_t counts_[kBlockEntries];
  size_t fill_ = 0;
  uint64_t entries_ = 0, frequent_ = 0;
  // The sparse index as (first hash, payload offset) pairs, one per block: the latest in memory, earlier
  // ones (big segments only) in an unlinked spill file, so a writer's memory stays bounded.
  std::vector<uint64_t> index_;
  int index_fd_ = -1;
  uint64_t index_spilled_ = 0;  // pairs in the spill file
  std::unique_ptr<char, void (*)(void*)> stage_;  // page-aligned bytes waiting to be written
  std::unique_ptr<char, void (*)(void*)> head_;   // the file's first page, to put the header in last
  size_t staged_ = 0;
  uint64_t written_ = 0;
};

// Reads a segment front to back, one block at a time, checking its header against `kind` and its
// checksum when the end is reached.
class SegmentReader {
 public:
  SegmentReader(std::string path, const SegmentKind& kind);
  ~SegmentReader();
  SegmentReader(const SegmentReader&) = delete;
  SegmentReader& operator=(const SegmentReader&) = delete;
  // The current block: size() hashes and counts (size() is 0 once the segment is exhausted).
  size_t size() const { return fill_; }
  const uint64_t* hashes() const { return hashes_.data(); }
  const uint8_t* counts() const { return counts_.data(); }
  const std::string& path() const { return path_; }
  void next_block();

 private:
  const char* ensure(size_t n);  // the next n bytes of the file, read ahead (and digested) as needed
  std::string path_;
  int fd_ = -1;
  SegmentHeader header_;
  XXH3_state_t state_;
  std::vector<char> buffer_;
  size_t pos_ = 0, end_ = 0;  // buffer_[pos_, end_) is read but not yet used
  uint64_t left_ = 0;         // payload bytes not yet read
  std::vector<uint64_t> hashes_;
  std::vector<uint8_t> counts_;
  size_t fill_ = 0;
  uint64_t read_ = 0, offset_ = 0;  // entries and block bytes used
  uint64_t last_ = 0;  // the previous block's last hash
};

// A segment mapped read-only for lookups.
class Segment {
 public:
  // Opens `path`, checking its header and size, and with verify its checksum (reading the whole file).
  Segment(std::string path, bool verify);
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  const SegmentHeader& header() const { return header_; }
  const std::string& path() const { return path_; }
  // out[i] = min(cap, out[i] + count of queries[i]) for ascending queries.
  void lookup(const uint64_t* queries, size_t n, uint8_t* out, uint8_t cap) const;

 private:
  // Decodes block b into hashes and counts, returning its entries; an error naming the file if it is corrupt.
  size_t decode(uint64_t b, uint64_t* hashes, uint8_t* counts) const;
  std::string path_;
  SegmentHeader header_;
  const char* base_ = nullptr;
  size_t size_ = 0;
  uint64_t blocks_ = 0;
  const uint64_t* firsts_ = nullptr;   // the sparse index
  const uint64_t* offsets_ = nullptr;
};

// Header of the segment at path, after checking magic, version and (when kind is given) that it belongs
// to that partition of that index.
SegmentHeader read_segment_header(const std::string& path, int fd, const SegmentKind* kind);

}  // namespace fastmmeval::ngram
