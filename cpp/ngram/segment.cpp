#include "ngram/segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>

namespace fastmmeval::ngram {

namespace {

constexpr char kMagic[8] = {'F', 'M', 'M', 'N', 'G', 'S', 'E', 'G'};

size_t padded(size_t bytes) { return (bytes + 7) & ~size_t{7}; }

constexpr size_t kPage = 4096;                // writes are whole, aligned pages (the file is truncated after)
constexpr size_t kStage = size_t{1} << 20;     // bytes per write() call
constexpr size_t kStageCapacity = kStage + 16 * kPage;  // a stage plus one block (36 KiB) and a page
constexpr size_t kLinearMerge = 8;  // merges of up to this many inputs find the minimum by a scan

[[noreturn]] void io_error(const std::string& path, const char* what) {
  throw std::runtime_error(path + ": cannot " + what + " (" + std::strerror(errno) + ")");
}

[[noreturn]] void corrupt(const std::string& path, const std::string& why) {
  throw std::invalid_argument(path + ": " + why);
}

// The stored checksum: XXH3-64 of the header without its checksum field, followed by the payload digest.
uint64_t combine(const SegmentHeader& h, uint64_t payload_digest) {
  char buf[64];
  std::memcpy(buf, &h, 48);
  std::memcpy(buf + 48, reinterpret_cast<const char*>(&h) + 56, 8);
  std::memcpy(buf + 56, &payload_digest, 8);
  return XXH3_64bits(buf, sizeof buf);
}

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

uint64_t payload_bytes(uint64_t entries) {
  const uint64_t full = entries / kBlockEntries, rest = entries % kBlockEntries;
  return full * padded(9 * kBlockEntries) + padded(9 * rest) + 8 * (full + (rest > 0));
}

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
  if (static_cast<uint64_t>(st.st_size) != sizeof h + payload_bytes(h.entries)) {
    corrupt(path, "segment is " + std::to_string(st.st_size) + " bytes but its header says " +
                      std::to_string(h.entries) + " entries (truncated or corrupt)");
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
  firsts_.push_back(hashes[0]);
  const size_t bytes = padded(9 * n);
  char* dst = stage_.get() + staged_;
  std::memcpy(dst, hashes, 8 * n);
  std::memcpy(dst + 8 * n, counts, n);
  std::memset(dst + 9 * n, 0, bytes - 9 * n);
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

uint64_t SegmentWriter::finish() {
  flush_block();
  const char* index = reinterpret_cast<const char*>(firsts_.data());
  for (size_t left = 8 * firsts_.size(); left > 0;) {
    const size_t take = std::min(left, kStageCapacity - kPage - staged_);
    std::memcpy(stage_.get() + staged_, index, take);
    index += take;
    left -= take;
    staged(take);
  }
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
  h.flags = kind_.dedup ? kFlagDedup : 0;
  h.checksum = combine(h, XXH3_64bits_digest(&state_));
  const uint64_t size = written_ + staged_;
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
  return entries_;
}

// ---------------------------------------------------------------- sequential reader

SegmentReader::SegmentReader(std::string path, const SegmentKind& kind) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) io_error(path_, "open segment");
  header_ = read_segment_header(path_, fd_, &kind);
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
  XXH3_64bits_reset(&state_);
  hashes_.resize(kBlockEntries);
  counts_.resize(padded(kBlockEntries));
  next_block();
}

SegmentReader::~SegmentReader() {
  if (fd_ >= 0) ::close(fd_);
}

void SegmentReader::read(void* data, size_t size) {
  read_exact(fd_, data, size, path_);
  XXH3_64bits_update(&state_, data, size);
}

void SegmentReader::next_block() {
  if (read_ == header_.entries) {
    if (fill_ == 0 && read_ > 0) return;  // already exhausted and checked
    fill_ = 0;
    const uint64_t blocks = (header_.entries + kBlockEntries - 1) / kBlockEntries;
    std::vector<uint64_t> firsts(blocks);
    read(firsts.data(), 8 * blocks);
    if (combine(header_, XXH3_64bits_digest(&state_)) != header_.checksum) {
      corrupt(path_, "segment checksum mismatch (the file is corrupt)");
    }
    return;
  }
  const size_t m = static_cast<size_t>(std::min<uint64_t>(kBlockEntries, header_.entries - read_));
  read(hashes_.data(), 8 * m);
  read(counts_.data(), padded(9 * m) - 8 * m);
  for (size_t i = 1; i < m; ++i) {
    if (hashes_[i] <= hashes_[i - 1]) corrupt(path_, "segment hashes are not strictly increasing");
  }
  if (read_ > 0 && m > 0 && hashes_[0] <= last_) corrupt(path_, "segment hashes are not strictly increasing");
  last_ = hashes_[m - 1];
  read_ += m;
  fill_ = m;
}

// ---------------------------------------------------------------- mapped segment

Segment::Segment(std::string path, bool verify) : path_(std::move(path)) {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) io_error(path_, "open segment");
  try {
    header_ = read_segment_header(path_, fd, nullptr);
    size_ = sizeof header_ + payload_bytes(header_.entries);
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
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

Segment::~Segment() {
  if (base_ != nullptr) ::munmap(const_cast<char*>(base_), size_);
}

void Segment::lookup(const uint64_t* queries, size_t n, uint8_t* out, uint8_t cap) const {
  const uint64_t entries = header_.entries;
  if (entries == 0) return;
  const uint64_t blocks = (entries + kBlockEntries - 1) / kBlockEntries;
  const char* payload = base_ + sizeof header_;
  const auto* firsts = reinterpret_cast<const uint64_t*>(payload + payload_bytes(entries) - 8 * blocks);
  const size_t block_bytes = padded(9 * kBlockEntries);
  const uint64_t* from = firsts;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t q = queries[i];
    from = std::upper_bound(from, firsts + blocks, q);
    if (from == firsts) continue;  // below the first hash
    const uint64_t b = static_cast<uint64_t>(from - firsts) - 1;
    from = firsts + b;
    const size_t m = static_cast<size_t>(std::min<uint64_t>(kBlockEntries, entries - b * kBlockEntries));
    const char* block = payload + b * block_bytes;
    const auto* hashes = reinterpret_cast<const uint64_t*>(block);
    const uint64_t* hit = std::lower_bound(hashes, hashes + m, q);
    if (hit != hashes + m && *hit == q) {
      const unsigned sum = out[i] + static_cast<uint8_t>(block[8 * m + (hit - hashes)]);
      out[i] = static_cast<uint8_t>(std::min<unsigned>(sum, cap));
    }
  }
}

// ---------------------------------------------------------------- merge

std::pair<uint64_t, uint64_t> merge_segments(const std::vector<std::string>& inputs, const std::string& out_path,
                                             const SegmentKind& kind) {
  std::vector<std::unique_ptr<SegmentReader>> readers;
  readers.reserve(inputs.size());
  for (const std::string& path : inputs) readers.push_back(std::make_unique<SegmentReader>(path, kind));
  std::unique_ptr<SegmentWriter> writer;
  if (!out_path.empty()) writer = std::make_unique<SegmentWriter>(out_path, kind);
  const unsigned cap = kind.threshold + 1;
  uint64_t entries = 0, frequent = 0;
  auto emit = [&](uint64_t hash, unsigned count) {
    const auto c = static_cast<uint8_t>(std::min(count, cap));
    ++entries;
    frequent += c > kind.threshold;
    if (writer) writer->add(hash, c);
  };
  // Each input's position in its current block.
  struct Cursor {
    SegmentReader* in;
    const uint64_t* hash;
    const uint8_t* count;
    size_t pos, size;
    bool step() {  // false once the input is exhausted
      if (++pos < size) return true;
      in->next_block();
      hash = in->hashes();
      count = in->counts();
      pos = 0;
      size = in->size();
      return size > 0;
    }
  };
  std::vector<Cursor> cur;
  for (auto& r : readers) {
    if (r->size() > 0) cur.push_back({r.get(), r->hashes(), r->counts(), 0, r->size()});
  }
  if (cur.size() <= kLinearMerge) {
    // Few inputs: the minimum by a linear scan; an exhausted input is swapped out.
    while (!cur.empty()) {
      uint64_t hash = cur[0].hash[cur[0].pos];
      for (size_t j = 1; j < cur.size(); ++j) hash = std::min(hash, cur[j].hash[cur[j].pos]);
      unsigned count = 0;
      for (size_t j = 0; j < cur.size();) {
        Cursor& c = cur[j];
        if (c.hash[c.pos] != hash) {
          ++j;
        } else {
          count += c.count[c.pos];
          if (c.step()) {
            ++j;
          } else {
            c = cur.back();
            cur.pop_back();
          }
        }
      }
      emit(hash, count);
    }
  } else {
    // Many inputs: a binary min-heap of cursors by current hash, replacing the top in place.
    auto key = [&cur](size_t i) { return cur[i].hash[cur[i].pos]; };
    auto sift_down = [&](size_t i) {
      const Cursor item = cur[i];
      const uint64_t k = item.hash[item.pos];
      const size_t n = cur.size();
      for (size_t c; (c = 2 * i + 1) < n; i = c) {
        if (c + 1 < n && key(c + 1) < key(c)) ++c;
        if (key(c) >= k) break;
        cur[i] = cur[c];
      }
      cur[i] = item;
    };
    for (size_t i = cur.size() / 2; i-- > 0;) sift_down(i);
    while (!cur.empty()) {
      const uint64_t hash = key(0);
      unsigned count = 0;
      while (!cur.empty() && key(0) == hash) {
        count += cur[0].count[cur[0].pos];
        if (!cur[0].step()) {
          cur[0] = cur.back();
          cur.pop_back();
        }
        if (!cur.empty()) sift_down(0);
      }
      emit(hash, count);
    }
  }
  if (writer) writer->finish();
  return {entries, frequent};
}

}  // namespace fastmmeval::ngram
