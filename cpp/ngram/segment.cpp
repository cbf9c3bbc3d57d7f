#include "ngram/segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>

namespace fastmmeval::ngram {

namespace {

constexpr char kMagic[8] = {'F', 'M', 'M', 'N', 'G', 'S', 'E', 'G'};

constexpr size_t kPage = 4096;                // writes are whole, aligned pages (the file is truncated after)
constexpr size_t kStage = size_t{1} << 20;     // bytes per write() call
constexpr size_t kStageCapacity = kStage + 2 * kPage;  // a stage, a block and a page
static_assert(kMaxBlockBytes <= kPage, "a block fits in a page");
constexpr size_t kIndexPairs = 4096;  // sparse index pairs a writer holds in memory (64 KiB)
constexpr size_t kReadBuffer = size_t{32} << 10;  // bytes a sequential reader reads at a time

[[noreturn]] void io_error(const std::string& path, const char* what) {
  throw std::runtime_error(path + ": cannot " + what + " (" + std::strerror(errno) + ")");
}

[[noreturn]] void corrupt(const std::string& path, const std::string& why) {
  throw std::invalid_argument(path + ": " + why);
}

// The stored checksum: XXH3-64 of the header up to its checksum field, followed by the payload digest.
uint64_t combine(const SegmentHeader& h, uint64_t payload_digest) {
  constexpr size_t kCovered = offsetof(SegmentHeader, checksum);
  char buf[kCovered + 8];
  std::memcpy(buf, &h, kCovered);
  std::memcpy(buf + kCovered, &payload_digest, 8);
  return XXH3_64bits(buf, sizeof buf);
}

uint64_t blocks_of(uint64_t entries) { return (entries + kBlockEntries - 1) / kBlockEntries; }

// Bytes of the sparse index: each block's first hash, then each block's offset in the payload.
uint64_t index_bytes(uint64_t entries) { return 16 * blocks_of(entries); }

void read_exact(int fd, void* data, size_t size, const std::string& path) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t got = ::read(fd, p, size);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) io_error(path, "read segment");
    if (got == 0) corrupt(path, "segment is truncated");
    p += got;
    size -= static_cast<size_t>(got);
  }
}

}  // namespace

SegmentHeader read_segment_header(const std::string& path, int fd, const SegmentKind* kind) {
  SegmentHeader h;
  read_exact(fd, &h, sizeof h, path);
  if (std::memcmp(h.magic, kMagic, 8) != 0) corrupt(path, "not an n-gram index segment (bad magic)");
  if (h.version != kSegmentVersion) {
    corrupt(path, "segment format version " + std::to_string(h.version) + ", expected " +
                      std::to_string(kSegmentVersion));
  }
  if (h.block_entries != kBlockEntries) corrupt(path, "segment header is corrupt (block size)");
  if (kind != nullptr && (h.n != kind->n || h.threshold != kind->threshold ||
                          h.partition_bits != kind->partition_bits || h.partition != kind->partition ||
                          ((h.flags & kFlagDedup) != 0) != kind->dedup)) {
    corrupt(path, "segment belongs to another index or partition (n, threshold, partition or dedup differ)");
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) io_error(path, "stat segment");
  if (static_cast<uint64_t>(st.st_size) != sizeof h + h.payload_bytes) {
    corrupt(path, "segment is " + std::to_string(st.st_size) + " bytes but its header says " +
                      std::to_string(sizeof h + h.payload_bytes) + " (truncated or corrupt)");
  }
  if (h.payload_bytes < index_bytes(h.entries) + kBlockHead * blocks_of(h.entries)) {
    corrupt(path, "segment header is corrupt (" + std::to_string(h.entries) + " entries in " +
                      std::to_string(h.payload_bytes) + " bytes)");
  }
  return h;
}

// ---------------------------------------------------------------- writer

SegmentWriter::SegmentWriter(std::string path, const SegmentKind& kind)
    : path_(std::move(path)),
      kind_(kind),
      stage_(static_cast<char*>(std::aligned_alloc(kPage, kStageCapacity)), &std::free),
      head_(static_cast<char*>(std::aligned_alloc(kPage, kPage)), &std::free) {
  if (!stage_ || !head_) throw std::bad_alloc();
  // Buffered writes: the kernel writes the pages back while the build goes on. Direct I/O (tried) saves
  // the page-cache copy's system time but blocks each spilling thread on the disk: 100M tokens built
  // in 1.59 s with it, 1.21 s without (bench/bench_contam.py, 2 cores).
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) io_error(path_, "create segment");
  XXH3_64bits_reset(&state_);
  std::memset(stage_.get(), 0, sizeof(SegmentHeader));  // the header, written last
  staged_ = sizeof(SegmentHeader);
}

SegmentWriter::~SegmentWriter() {
  if (index_fd_ >= 0) ::close(index_fd_);
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
}

void SegmentWriter::write_at(const char* data, size_t size, uint64_t offset) {
  while (size > 0) {
    const ssize_t put = ::pwrite(fd_, data, size, static_cast<off_t>(offset));
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) io_error(path_, "write segment");
    data += put;
    offset += static_cast<uint64_t>(put);
    size -= static_cast<size_t>(put);
  }
}

void SegmentWriter::staged(size_t bytes) {
  XXH3_64bits_update(&state_, stage_.get() + staged_, bytes);
  staged_ += bytes;
  if (staged_ < kStage) return;
  if (written_ == 0) std::memcpy(head_.get(), stage_.get(), kPage);
  write_at(stage_.get(), kStage, written_);
  written_ += kStage;
  staged_ -= kStage;
  std::memmove(stage_.get(), stage_.get() + kStage, staged_);
}

void SegmentWriter::put_block(const uint64_t* hashes, const uint8_t* counts, size_t n) {
  index_.push_back(hashes[0]);
  index_.push_back(written_ + staged_ - sizeof(SegmentHeader));
  if (index_.size() == 2 * kIndexPairs) spill_index();
  const size_t bytes = encode_block(hashes, counts, n, stage_.get() + staged_);
  entries_ += n;
  staged(bytes);
}

void SegmentWriter::flush_block() {
  if (fill_ == 0) return;
  put_block(hashes_, counts_, fill_);
  fill_ = 0;
}

void SegmentWriter::add(const uint64_t* hashes, const uint8_t* counts, size_t n) {
  for (size_t i = 0; i < n; ++i) frequent_ += counts[i] > kind_.threshold;
  while (n > 0) {
    size_t take = kBlockEntries;
    if (fill_ == 0 && n >= kBlockEntries) {
      put_block(hashes, counts, kBlockEntries);  // a whole block goes straight to the stage
    } else {
      take = std::min(n, kBlockEntries - fill_);
      std::memcpy(hashes_ + fill_, hashes, 8 * take);
      std::memcpy(counts_ + fill_, counts, take);
      fill_ += take;
      if (fill_ == kBlockEntries) flush_block();
    }
    hashes += take;
    counts += take;
    n -= take;
  }
}

void SegmentWriter::spill_index() {
  const std::string spill = path_ + ".index";
  if (index_fd_ < 0) {
    index_fd_ = ::open(spill.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (index_fd_ < 0) io_error(spill, "create index spill file");
    ::unlink(spill.c_str());  // gone when closed, however the writer ends
  }
  const char* data = reinterpret_cast<const char*>(index_.data());
  for (size_t size = 8 * index_.size(), done = 0; done < size;) {
    const ssize_t put = ::pwrite(index_fd_, data + done, size - done, static_cast<off_t>(16 * index_spilled_ + done));
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) io_error(spill, "write index spill file");
    done += static_cast<size_t>(put);
  }
  index_spilled_ += index_.size() / 2;
  index_.clear();
}

void SegmentWriter::stage_column(const uint64_t* pairs, size_t n, size_t column) {
  for (size_t i = 0; i < n;) {
    const size_t take = std::min(n - i, (kStageCapacity - kPage - staged_) / 8);
    char* dst = stage_.get() + staged_;
    for (size_t j = 0; j < take; ++j) std::memcpy(dst + 8 * j, &pairs[2 * (i + j) + column], 8);
    staged(8 * take);
    i += take;
  }
}

void SegmentWriter::stage_index(size_t column) {
  if (index_spilled_ > 0) {
    std::vector<uint64_t> chunk(2 * kIndexPairs);
    if (::lseek(index_fd_, 0, SEEK_SET) != 0) io_error(path_ + ".index", "rewind index spill file");
    for (uint64_t at = 0; at < index_spilled_; at += kIndexPairs) {
      const size_t pairs = static_cast<size_t>(std::min<uint64_t>(kIndexPairs, index_spilled_ - at));
      read_exact(index_fd_, chunk.data(), 16 * pairs, path_ + ".index");
      stage_column(chunk.data(), pairs, column);
    }
  }
  stage_column(index_.data(), index_.size() / 2, column);
}

std::pair<uint64_t, uint64_t> SegmentWriter::finish() {
  flush_block();
  stage_index(0);
  stage_index(1);
  const uint64_t size = written_ + staged_;
  SegmentHeader h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kSegmentVersion;
  h.n = kind_.n;
  h.threshold = kind_.threshold;
  h.partition_bits = kind_.partition_bits;
  h.partition = kind_.partition;
  h.block_entries = kBlockEntries;
  h.entries = entries_;
  h.frequent = frequent_;
  h.payload_bytes = size - sizeof h;
  h.flags = kind_.dedup ? kFlagDedup : 0;
  h.checksum = combine(h, XXH3_64bits_digest(&state_));
  if (written_ == 0) {
    std::memcpy(stage_.get(), &h, sizeof h);
  } else {
    std::memcpy(head_.get(), &h, sizeof h);
    write_at(head_.get(), kPage, 0);
  }
  const size_t tail = (staged_ + kPage - 1) / kPage * kPage;  // whole pages, as every write
  std::memset(stage_.get() + staged_, 0, tail - staged_);
  write_at(stage_.get(), tail, written_);
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) io_error(path_, "truncate segment");
  if (::close(fd_) != 0) {
    fd_ = -1;
    ::unlink(path_.c_str());
    io_error(path_, "close segment");
  }
  fd_ = -1;
  return {entries_, frequent_};
}

// ---------------------------------------------------------------- sequential reader

SegmentReader::SegmentReader(std::string path, const SegmentKind& kind) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) io_error(path_, "open segment");
  header_ = read_segment_header(path_, fd_, &kind);
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
  XXH3_64bits_reset(&state_);
  buffer_.resize(kReadBuffer);
  left_ = header_.payload_bytes;
  hashes_.resize(kBlockEntries);
  counts_.resize(kBlockEntries);
  next_block();
}

SegmentReader::~SegmentReader() {
  if (fd_ >= 0) ::close(fd_);
}

const char* SegmentReader::ensure(size_t n) {
  if (end_ - pos_ < n) {
    std::memmove(buffer_.data(), buffer_.data() + pos_, end_ - pos_);
    end_ -= pos_;
    pos_ = 0;
    const size_t more = static_cast<size_t>(std::min<uint64_t>(buffer_.size() - end_, left_));
    read_exact(fd_, buffer_.data() + end_, more, path_);
    XXH3_64bits_update(&state_, buffer_.data() + end_, more);
    end_ += more;
    left_ -= more;
    if (end_ < n) corrupt(path_, "segment is truncated");
  }
  return buffer_.data() + pos_;
}

void SegmentReader::next_block() {
  const uint64_t blocks_end = header_.payload_bytes - index_bytes(header_.entries);
  if (read_ == header_.entries) {
    if (fill_ == 0 && read_ > 0) return;  // already exhausted and checked
    fill_ = 0;
    if (offset_ != blocks_end) corrupt(path_, "segment blocks do not end where its index starts");
    for (uint64_t index = index_bytes(header_.entries); index > 0;) {  // read only for the checksum
      const size_t take = static_cast<size_t>(std::min<uint64_t>(index, buffer_.size()));
      ensure(take);
      pos_ += take;
      index -= take;
    }
    if (combine(header_, XXH3_64bits_digest(&state_)) != header_.checksum) {
      corrupt(path_, "segment checksum mismatch (the file is corrupt)");
    }
    return;
  }
  const size_t m = static_cast<size_t>(std::min<uint64_t>(kBlockEntries, header_.entries - read_));
  const char* head = ensure(kBlockHead);
  const size_t bytes = block_bytes(m, static_cast<uint8_t>(head[8]), static_cast<uint8_t>(head[9]));
  if (bytes == 0 || offset_ + bytes > blocks_end) corrupt(path_, "segment block header is corrupt");
  if (!decode_block(ensure(bytes), m, hashes_.data(), counts_.data()) || (read_ > 0 && hashes_[0] <= last_)) {
    corrupt(path_, "segment hashes are not strictly increasing");
  }
  pos_ += bytes;
  last_ = hashes_[m - 1];
  read_ += m;
  offset_ += bytes;
  fill_ = m;
}

// ---------------------------------------------------------------- mapped segment

Segment::Segment(std::string path, bool verify) : path_(std::move(path)) {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) io_error(path_, "open segment");
  try {
    header_ = read_segment_header(path_, fd, nullptr);
    size_ = sizeof header_ + header_.payload_bytes;
    if (verify) {
      XXH3_state_t state;
      XXH3_64bits_reset(&state);
      std::vector<char> buf(1 << 20);
      for (uint64_t left = size_ - sizeof header_; left > 0;) {
        const size_t m = static_cast<size_t>(std::min<uint64_t>(buf.size(), left));
        read_exact(fd, buf.data(), m, path_);
        XXH3_64bits_update(&state, buf.data(), m);
        left -= m;
      }
      if (combine(header_, XXH3_64bits_digest(&state)) != header_.checksum) {
        corrupt(path_, "segment checksum mismatch (the file is corrupt)");
      }
    }
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) io_error(path_, "map segment");
    base_ = static_cast<const char*>(p);
    blocks_ = blocks_of(header_.entries);
    firsts_ = reinterpret_cast<const uint64_t*>(base_ + size_ - index_bytes(header_.entries));
    offsets_ = firsts_ + blocks_;
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

Segment::~Segment() {
  if (base_ != nullptr) ::munmap(const_cast<char*>(base_), size_);
}

size_t Segment::decode(uint64_t b, uint64_t* hashes, uint8_t* counts) const {
  const uint64_t blocks_end = header_.payload_bytes - index_bytes(header_.entries), at = offsets_[b];
  const size_t m = static_cast<size_t>(std::min<uint64_t>(kBlockEntries, header_.entries - b * kBlockEntries));
  const char* block = base_ + sizeof header_ + at;
  if (at > blocks_end - kBlockHead) corrupt(path_, "segment index is corrupt");
  const size_t bytes = block_bytes(m, static_cast<uint8_t>(block[8]), static_cast<uint8_t>(block[9]));
  if (bytes == 0 || bytes > blocks_end - at || !decode_block(block, m, hashes, counts) || hashes[0] != firsts_[b]) {
    corrupt(path_, "segment block " + std::to_string(b) + " is corrupt");
  }
  return m;
}

void Segment::lookup(const uint64_t* queries, size_t n, uint8_t* out, uint8_t cap) const {
  if (blocks_ == 0) return;
  uint64_t hashes[kBlockEntries];
  uint8_t counts[kBlockEntries];
  uint64_t decoded = blocks_;  // the block in hashes and counts (none yet)
  size_t m = 0;
  const uint64_t* from = firsts_;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t q = queries[i];
    from = std::upper_bound(from, firsts_ + blocks_, q);
    if (from == firsts_) continue;  // below the first hash
    const uint64_t b = static_cast<uint64_t>(from - firsts_) - 1;
    from = firsts_ + b;
    if (b != decoded) {
      m = decode(b, hashes, counts);
      decoded = b;
    }
    const uint64_t* hit = std::lower_bound(hashes, hashes + m, q);
    if (hit != hashes + m && *hit == q) {
      const unsigned sum = out[i] + counts[hit - hashes];
      out[i] = static_cast<uint8_t>(std::min<unsigned>(sum, cap));
    }
  }
}

}  // namespace fastmmeval::ngram
