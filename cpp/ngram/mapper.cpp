#include "ngram/mapper.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "ngram/radix.hpp"
#include "ngram/segment.hpp"
#include "ngram/windows.hpp"

namespace fastmmeval::ngram {

namespace {
// Buckets for every partition plus one bucket of sort scratch per thread share the budget.
size_t bucket_capacity(const MapperConfig& c) {
  const size_t parts = size_t{1} << c.partition_bits;
  // 85%: the rest of the process (interpreter, blocks being read, write buffers) lives in the same budget.
  return std::max<size_t>(1024, c.memory_bytes / 100 * 85 / sizeof(uint64_t) / (parts + std::max(1u, c.threads)));
}
}  // namespace

Mapper::Mapper(MapperConfig config)
    : config_(std::move(config)),
      shift_(64 - config_.partition_bits),
      bucket_cap_(bucket_capacity(config_)),
      storage_(new uint64_t[(size_t{1} << config_.partition_bits) * bucket_cap_]),
      tmp_(new uint64_t[std::max(1u, config_.threads) * bucket_cap_]) {
  config_.threads = std::max(1u, config_.threads);
  const size_t parts = size_t{1} << config_.partition_bits;
  sizes_.assign(parts, 0);
  seq_.assign(parts, 0);
  runs_.resize(parts);
}

namespace {
constexpr size_t kPiece = size_t{1} << 16;  // windows hashed per hand-off to the scattering thread

// Windows [begin, begin + windows) of one document, as token offsets.
struct Span {
  size_t begin, windows;
};

// Consecutive spans [first, last), about kPiece windows together: one hand-off. With dedup every span is
// a whole document (so a piece may be larger); otherwise long documents are cut into several spans.
struct Piece {
  size_t first, last, windows;
};
}  // namespace

template <typename Token>
void Mapper::add(const Token* tokens, size_t n_tokens, const int64_t* offsets, size_t n_docs, uint64_t seed) {
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
      for_each_window(tokens + spans[sp].begin, spans[sp].windows + n - 1, n, seed, [&](uint64_t h) { out[k++] = h; });
      if (config_.dedup) {
        tmp.resize(std::max(tmp.size(), k - start));
        radix_sort(out.data() + start, tmp.data(), k - start, 64);
        k = static_cast<size_t>(std::unique(out.begin() + start, out.begin() + k) - out.begin());
      }
    }
    return k;
  };
  // Producers hash pieces into staging slots (piece i into slot i % slots; producer j owns pieces
  // j, j + producers, ..., so it alternates between two slots); this thread scatters them in order.
  const size_t producers = std::min<size_t>(config_.threads - 1, pieces.size() - 1);
  const size_t slots = std::max<size_t>(1, 2 * producers);
  staging_.resize(std::max(staging_.size(), slots));
  std::vector<size_t> filled(slots, 0);
  if (producers == 0) {
    for (size_t i = 0; i < pieces.size(); ++i) {
      const size_t count = hash_piece(i, staging_[0], doc_tmp_);
      for (size_t k = 0; k < count; ++k) push(staging_[0][k]);
    }
    return;
  }
  std::vector<char> ready(slots, 0);
  std::mutex mu;
  std::condition_variable cv;
  bool abort = false;
  auto produce = [&](size_t j) {
    std::vector<uint64_t> tmp;
    for (size_t i = j; i < pieces.size(); i += producers) {
      const size_t slot = i % slots;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return !ready[slot] || abort; });
        if (abort) return;
      }
      filled[slot] = hash_piece(i, staging_[slot], tmp);
      {
        std::lock_guard<std::mutex> lock(mu);
        ready[slot] = 1;
      }
      cv.notify_all();
    }
  };
  std::vector<std::thread> pool;
  for (size_t j = 0; j < producers; ++j) pool.emplace_back(produce, j);
  try {
    for (size_t i = 0; i < pieces.size(); ++i) {
      const size_t slot = i % slots;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return ready[slot] != 0; });
      }
      const uint64_t* in = staging_[slot].data();
      for (size_t k = 0; k < filled[slot]; ++k) push(in[k]);
      {
        std::lock_guard<std::mutex> lock(mu);
        ready[slot] = 0;
      }
      cv.notify_all();
    }
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mu);
      abort = true;
    }
    cv.notify_all();
    for (std::thread& t : pool) t.join();
    throw;
  }
  for (std::thread& t : pool) t.join();
}

template void Mapper::add<uint16_t>(const uint16_t*, size_t, const int64_t*, size_t, uint64_t);
template void Mapper::add<uint32_t>(const uint32_t*, size_t, const int64_t*, size_t, uint64_t);

void Mapper::bucket_full(size_t) {
  // Near-uniform hashes fill all buckets together: spill every nearly full one, in parallel. Buckets
  // that fill early (a few n-grams repeated very often) spill alone, so the others keep one run each.
  spill_all(bucket_cap_ - bucket_cap_ / 8);
}

void Mapper::spill(size_t p, uint64_t* tmp) {
  const size_t size = sizes_[p];
  if (size == 0) return;
  uint64_t* bucket = storage_.get() + p * bucket_cap_;
  radix_sort(bucket, tmp, size, shift_);
  char name[32];
  std::snprintf(name, sizeof name, "p%05zu-%06u.run", p, seq_[p]++);
  const std::string path = config_.prefix + name;
  const std::string tmp_path = path + ".tmp";
  SegmentWriter writer(tmp_path, SegmentKind{config_.n, config_.threshold, config_.partition_bits,
                                             static_cast<uint32_t>(p), config_.dedup});
  const unsigned cap = config_.threshold + 1;
  for (size_t k = 0; k < size;) {
    size_t j = k + 1;
    while (j < size && bucket[j] == bucket[k]) ++j;
    writer.add(bucket[k], static_cast<uint8_t>(std::min<size_t>(j - k, cap)));
    k = j;
  }
  writer.finish();
  if (std::rename(tmp_path.c_str(), path.c_str()) != 0) {
    throw std::runtime_error(path + ": cannot rename run into place");
  }
  runs_[p].push_back(path);
  sizes_[p] = 0;
}

void Mapper::spill_all(size_t at_least) {
  std::vector<size_t> chosen;
  for (size_t p = 0; p < sizes_.size(); ++p) {
    if (sizes_[p] > 0 && sizes_[p] >= at_least) chosen.push_back(p);
  }
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  auto work = [&](unsigned t) {
    for (size_t i; !failed && (i = next++) < chosen.size();) {
      try {
        spill(chosen[i], tmp_.get() + t * bucket_cap_);
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
}

std::vector<std::string> Mapper::finish() {
  spill_all(0);
  std::vector<std::string> all;
  for (const auto& paths : runs_) all.insert(all.end(), paths.begin(), paths.end());
  return all;
}

}  // namespace fastmmeval::ngram
