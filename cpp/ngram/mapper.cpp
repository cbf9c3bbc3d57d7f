#include "ngram/mapper.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <new>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "ngram/radix.hpp"
#include "ngram/segment.hpp"
#include "ngram/windows.hpp"

namespace fastmmeval::ngram {

PageBuffer::PageBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  base_ = p;
}

PageBuffer::~PageBuffer() {
  // Unmapped in pieces: unmapping holds the process's memory-map lock, which page faults, mmap and munmap on
  // other threads wait for (~0.1 s per GB unmapped at once).
  constexpr size_t kPiece = size_t{32} << 20;
  for (size_t at = 0; at < bytes_; at += kPiece) {
    ::munmap(static_cast<char*>(base_) + at, std::min(kPiece, bytes_ - at));
  }
}

PageBuffer& PageBuffer::operator=(PageBuffer&& o) noexcept {
  if (this != &o) {
    PageBuffer old(std::move(*this));
    base_ = o.base_;
    bytes_ = o.bytes_;
    o.base_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

Mapper::Mapper(MapperConfig config) : config_(std::move(config)), shift_(63 - config_.partition_bits) {
  const size_t threads = config_.threads = std::max(1u, config_.threads);
  const size_t parts = size_t{1} << config_.partition_bits;
  // 85%: the rest of the process (interpreter, blocks being read, write buffers) lives in the same budget.
  const size_t keys = std::max<size_t>(config_.memory_bytes / 100 * 85 / sizeof(uint64_t), 1 << 16);
  // Chunks of up to 64 KiB (long enough to stream), small enough that the pool holds 8 per thread and
  // partition: a partition's last, partly filled chunks waste little.
  chunk_ = 64;
  while (chunk_ < 8192 && 2 * chunk_ * 8 * parts * threads <= keys) chunk_ *= 2;
  // A partition spills alone at about twice its even share, and sorting it takes twice its size of
  // scratch per thread plus a byte per key for the counts; with few partitions the cap is lower, so the
  // pool keeps at least half the budget.
  const size_t cap = std::min(2 * keys / (parts + 4 * threads), keys / (4 * threads));
  slot_chunks_ = std::max<size_t>(1, cap / threads / chunk_);
  const size_t most = threads * slot_chunks_ * chunk_;  // keys of a partition at its cap
  scratch_ = 2 * most + most / sizeof(uint64_t) + 1;
  // Below two chunks per thread and partition every chunk would spill at once: such budgets are exceeded.
  const size_t pool = std::max(2 * threads * parts, (keys - std::min(keys, threads * scratch_)) / chunk_);
  storage_ = PageBuffer(pool * chunk_ * sizeof(uint64_t));
  tmp_ = PageBuffer(threads * scratch_ * sizeof(uint64_t));
  free_.resize(pool);
  for (size_t c = 0; c < pool; ++c) free_[c] = static_cast<uint32_t>(c);
  chunks_.resize(threads * parts);
  pos_.assign(threads * parts, nullptr);
  end_.assign(threads * parts, nullptr);
  seq_.assign(parts, 0);
  staging_.resize(threads);
  doc_tmp_.resize(threads);
  runs_.resize(parts);
}

namespace {
constexpr size_t kPiece = size_t{1} << 16;   // windows a thread hashes, then scatters, at a time
constexpr size_t kSample = size_t{1} << 20;  // windows sampled for hashes that saturate their count

// Windows [begin, begin + windows) of one document, as token offsets.
struct Span {
  size_t begin, windows;
};

// Consecutive spans [first, last), about kPiece windows together: one piece. With dedup every span is
// a whole document (so a piece may be larger); otherwise long documents are cut into several spans.
struct Piece {
  size_t first, last, windows;
};
}  // namespace

// Abandons the mapper if an add or finish throws: its buckets would be left half scattered.
struct Mapper::AbandonOnThrow {
  Mapper& mapper;
  const int uncaught = std::uncaught_exceptions();
  ~AbandonOnThrow() {
    if (std::uncaught_exceptions() > uncaught) mapper.abandon();
  }
};

template <typename Token>
void Mapper::add(const Token* tokens, size_t n_tokens, const int64_t* offsets, size_t n_docs, uint64_t seed,
                 Interrupt& interrupt) {
  if (failed_) throw std::logic_error("NgramMapper: add() after an add() or finish() that failed");
  if (finished_) throw std::logic_error("NgramMapper: add() after finish()");
  const AbandonOnThrow guard{*this};
  const size_t n = config_.n;
  std::vector<Span> spans;
  std::vector<Piece> pieces;
  auto append = [&](size_t begin, size_t windows) {
    if (pieces.empty() || (pieces.back().windows > 0 && pieces.back().windows + windows > kPiece)) {
      pieces.push_back({spans.size(), spans.size(), 0});
    }
    spans.push_back({begin, windows});
    pieces.back().last = spans.size();
    pieces.back().windows += windows;
  };
  for (size_t i = 0; i < n_docs; ++i) {
    const size_t begin = static_cast<size_t>(offsets[i]);
    const size_t end = i + 1 < n_docs ? static_cast<size_t>(offsets[i + 1]) : n_tokens;
    if (end - begin < n) continue;
    const size_t windows = end - begin - n + 1;
    windows_ += windows;
    if (config_.dedup) {
      append(begin, windows);
    } else {
      for (size_t s = 0; s < windows; s += kPiece) append(begin + s, std::min(kPiece, windows - s));
    }
  }
  if (pieces.empty()) return;

  // Hashes piece i into out (with dedup, each document's distinct hashes); returns how many.
  auto hash_piece = [&](size_t i, std::vector<uint64_t>& out, std::vector<uint64_t>& tmp) {
    out.resize(std::max(out.size(), pieces[i].windows));
    size_t k = 0;
    for (size_t sp = pieces[i].first; sp < pieces[i].last; ++sp) {
      const size_t start = k;
      k += hash_windows_to(tokens + spans[sp].begin, spans[sp].windows + n - 1, n, seed, out.data() + k);
      if (config_.dedup) {
        tmp.resize(std::max(tmp.size(), k - start));
        radix_sort(out.data() + start, tmp.data(), k - start, 64);
        k = static_cast<size_t>(std::unique(out.begin() + start, out.begin() + k) - out.begin());
      }
    }
    return k;
  };
  // The first block of a piece's worth of windows is sampled: the hashes that reach the count cap within
  // its first pieces are dropped from every piece after those (whose copies keep their counts saturated).
  size_t sampled = 0;  // pieces [0, sampled) of this block are the sample
  if (!sampled_ && (pieces.size() > 1 || pieces[0].windows >= kPiece)) {
    std::vector<uint64_t> sample;
    for (; sampled < pieces.size() && sample.size() < kSample; ++sampled) {
      const auto got = static_cast<std::ptrdiff_t>(hash_piece(sampled, staging_[0], doc_tmp_[0]));
      sample.insert(sample.end(), staging_[0].begin(), staging_[0].begin() + got);
    }
    std::vector<uint64_t> tmp(sample.size());
    heavy_.build(sample.data(), tmp.data(), sample.size(), config_.threshold + 1);
    sampled_ = true;
  }
  auto hash_kept = [&](size_t i, unsigned t) {
    const size_t got = hash_piece(i, staging_[t], doc_tmp_[t]);
    if (i < sampled || heavy_.size() == 0) return got;
    const size_t kept = heavy_.drop_held(staging_[t].data(), got);
    dropped_ += got - kept;
    return kept;
  };
  // Every thread takes the next piece, hashes it into its staging buffer and scatters it into its own
  // chunks. A thread that gets no chunk (the pool is used up, or its partition is at its cap) stops
  // there; the others stop after their current piece, partitions are spilled (on all threads), and the
  // round starts again with the interrupted pieces finished first.
  const unsigned threads = static_cast<unsigned>(std::min<size_t>(config_.threads, pieces.size()));
  std::atomic<size_t> next{0};
  std::vector<size_t> done(threads, 0), filled(threads, 0);  // thread t has scattered done[t] of filled[t]
  for (;;) {
    std::atomic<bool> full{false}, failed{false};
    std::exception_ptr error;
    auto work = [&](unsigned t) {
      try {
        for (;;) {
          if (t == 0) interrupt.poll();
          done[t] = scatter(t, staging_[t].data(), done[t], filled[t]);
          if (done[t] < filled[t]) {
            full = true;
            return;
          }
          const size_t i = full || failed ? pieces.size() : next++;
          if (i >= pieces.size()) return;
          filled[t] = hash_kept(i, t);
          done[t] = 0;
        }
      } catch (...) {
        if (!failed.exchange(true)) error = std::current_exception();
      }
    };
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work, t);
    work(0);
    for (std::thread& th : pool) th.join();
    if (error) std::rethrow_exception(error);
    if (!full) return;
    // A used-up pool spills every partition (one run each); a partition at its cap (a few n-grams
    // repeated very often) spills alone, so the others keep one run each.
    spill_all(free_next_ >= free_.size(), interrupt);
  }
}

template void Mapper::add<uint16_t>(const uint16_t*, size_t, const int64_t*, size_t, uint64_t, Interrupt&);
template void Mapper::add<uint32_t>(const uint32_t*, size_t, const int64_t*, size_t, uint64_t, Interrupt&);

size_t Mapper::scatter(unsigned t, const uint64_t* in, size_t k, size_t count) {
  const size_t first = t * seq_.size();
  uint64_t** pos = pos_.data() + first;
  uint64_t* const* end = end_.data() + first;
  const unsigned shift = shift_;  // a local: the stores below could alias the member, which is reloaded
  for (; k < count; ++k) {
    const uint64_t h = in[k];
    const size_t p = static_cast<size_t>((h >> shift) >> 1);
    if (pos[p] == end[p] && !new_chunk(first + p)) break;
    *pos[p]++ = h;
  }
  return k;
}

bool Mapper::new_chunk(size_t slot) {
  if (chunks_[slot].size() == slot_chunks_) return false;
  const size_t i = free_next_++;
  if (i >= free_.size()) return false;
  chunks_[slot].push_back(free_[i]);
  pos_[slot] = storage_.keys() + size_t{free_[i]} * chunk_;
  end_[slot] = pos_[slot] + chunk_;
  return true;
}

void Mapper::spill(size_t p, uint64_t* tmp) {
  const size_t parts = seq_.size();
  std::vector<KeySpan> spans;
  size_t keys = 0;
  for (size_t slot = p; slot < chunks_.size(); slot += parts) {
    for (const uint32_t c : chunks_[slot]) {
      const uint64_t* begin = storage_.keys() + size_t{c} * chunk_;
      const size_t size = c == chunks_[slot].back() ? static_cast<size_t>(pos_[slot] - begin) : chunk_;
      spans.push_back({begin, size});
      keys += size;
    }
  }
  const KeyCounts run = sort_counts(spans, keys, 64 - config_.partition_bits, static_cast<uint8_t>(config_.threshold + 1),
                                    tmp, tmp + keys, reinterpret_cast<uint8_t*>(tmp + 2 * keys));
  const unsigned seq = seq_[p]++;
  const bool alone = seq == 0 && !alone_prefix_.empty();
  char name[32];
  if (alone) {
    std::snprintf(name, sizeof name, "p%05zu.seg", p);
  } else {
    std::snprintf(name, sizeof name, "p%05zu-%06u.run", p, seq);
  }
  const std::string path = (alone ? alone_prefix_ : config_.prefix) + name;
  const std::string tmp_path = path + ".tmp";
  SegmentWriter writer(tmp_path, SegmentKind{config_.n, config_.threshold, config_.partition_bits,
                                             static_cast<uint32_t>(p), config_.dedup});
  writer.add(run.keys, run.counts, run.size);
  writer.finish();
  if (std::rename(tmp_path.c_str(), path.c_str()) != 0) {
    throw std::runtime_error(path + ": cannot rename run into place");
  }
  runs_[p].push_back(path);
}

void Mapper::spill_all(bool everything, Interrupt& interrupt) {
  const size_t parts = seq_.size();
  std::vector<size_t> chosen;
  for (size_t p = 0; p < parts; ++p) {
    for (size_t slot = p; slot < chunks_.size(); slot += parts) {
      const bool capped = chunks_[slot].size() == slot_chunks_ && pos_[slot] == end_[slot];
      if (everything ? !chunks_[slot].empty() : capped) {
        chosen.push_back(p);
        break;
      }
    }
  }
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  auto work = [&](unsigned t) {
    for (size_t i; !failed && (i = next++) < chosen.size();) {
      try {
        if (t == 0) interrupt.poll();
        spill(chosen[i], tmp_.keys() + t * scratch_);
      } catch (...) {
        if (!failed.exchange(true)) error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  const size_t helpers = std::min<size_t>(config_.threads, chosen.size()) - (chosen.empty() ? 0 : 1);
  for (unsigned t = 1; t <= helpers; ++t) pool.emplace_back(work, t);
  work(0);
  for (std::thread& th : pool) th.join();
  if (error) std::rethrow_exception(error);
  // Freed chunks (their pages already touched) are handed out before those never used.
  std::vector<uint32_t> free;
  for (const size_t p : chosen) {
    for (size_t slot = p; slot < chunks_.size(); slot += parts) {
      free.insert(free.end(), chunks_[slot].begin(), chunks_[slot].end());
      chunks_[slot].clear();
      pos_[slot] = end_[slot] = nullptr;
    }
  }
  free.insert(free.end(), free_.begin() + static_cast<std::ptrdiff_t>(std::min(free_next_.load(), free_.size())),
              free_.end());
  free_ = std::move(free);
  free_next_ = 0;
}

std::vector<std::string> Mapper::finish(const std::string& alone_prefix, Interrupt& interrupt) {
  if (failed_) throw std::logic_error("NgramMapper: finish() after an add() or finish() that failed");
  if (finished_) throw std::logic_error("NgramMapper: finish() was already called");
  const AbandonOnThrow guard{*this};
  alone_prefix_ = alone_prefix;
  spill_all(true, interrupt);
  finished_ = true;
  release_buffers();
  std::vector<std::string> all;
  for (const auto& paths : runs_) all.insert(all.end(), paths.begin(), paths.end());
  return all;
}

void Mapper::release_buffers() {
  // Unmapping a GB takes ~0.1 s: the caller goes on (with the reduce step, or with its error) meanwhile.
  try {
    std::thread([storage = std::move(storage_), tmp = std::move(tmp_)]() mutable {
      storage = PageBuffer();
      tmp = PageBuffer();
    }).detach();
  } catch (const std::system_error&) {  // no thread to be had: the buffers were freed here
  }
}

void Mapper::abandon() noexcept {
  failed_ = true;
  for (const auto& paths : runs_) {
    for (const std::string& path : paths) std::remove(path.c_str());
  }
  runs_ = {};
  staging_ = {};
  doc_tmp_ = {};
  release_buffers();
}

}  // namespace fastmmeval::ngram
