#include "ngram/stream.hpp"

#include <algorithm>

#include "ngram/windows.hpp"

namespace fastmmeval::ngram {

Stream::Stream(const uint64_t* queries, size_t n_queries, uint32_t n, uint32_t threshold, bool dedup,
               uint32_t max_ids)
    : queries_(queries, queries + n_queries),
      n_(n),
      cap_(threshold + 1),
      max_ids_(max_ids),
      dedup_(dedup),
      counts_(n_queries, 0),
      ids_(n_queries, 0),
      last_doc_(n_queries, -1) {
  // About 16 bits per query (two probes: ~1.5% false positives), from 32 KiB up to 8 MiB.
  size_t bits = size_t{1} << 18;
  while (bits < 16 * n_queries && bits < (size_t{1} << 26)) bits <<= 1;
  mask_ = bits - 1;
  bloom_.assign(bits / 64, 0);
  for (const uint64_t h : queries_) {
    bloom_[(h & mask_) >> 6] |= uint64_t{1} << (h & 63);
    bloom_[((h >> 32) & mask_) >> 6] |= uint64_t{1} << ((h >> 32) & 63);
  }
}

template <typename Token>
void Stream::process(const Token* tokens, size_t n_tokens, const int64_t* offsets, size_t n_docs, uint64_t seed,
                     std::vector<std::pair<int64_t, int64_t>>& hits) {
  for (size_t i = 0; i < n_docs; ++i, ++serial_) {
    const size_t begin = static_cast<size_t>(offsets[i]);
    const size_t end = i + 1 < n_docs ? static_cast<size_t>(offsets[i + 1]) : n_tokens;
    doc_hits_.clear();
    for_each_window(tokens + begin, end - begin, n_, seed, [this](uint64_t h) {
      if (!maybe(h)) return;
      const auto it = std::lower_bound(queries_.begin(), queries_.end(), h);
      if (it != queries_.end() && *it == h) doc_hits_.push_back(static_cast<uint32_t>(it - queries_.begin()));
    });
    if (dedup_) {
      std::sort(doc_hits_.begin(), doc_hits_.end());
      doc_hits_.erase(std::unique(doc_hits_.begin(), doc_hits_.end()), doc_hits_.end());
    }
    for (const uint32_t q : doc_hits_) {
      counts_[q] = static_cast<uint8_t>(std::min<uint32_t>(counts_[q] + 1u, cap_));
      if (ids_[q] < max_ids_ && last_doc_[q] != serial_) {
        ++ids_[q];
        last_doc_[q] = serial_;
        hits.emplace_back(q, static_cast<int64_t>(i));
      }
    }
  }
}

template void Stream::process<uint16_t>(const uint16_t*, size_t, const int64_t*, size_t, uint64_t,
                                        std::vector<std::pair<int64_t, int64_t>>&);
template void Stream::process<uint32_t>(const uint32_t*, size_t, const int64_t*, size_t, uint64_t,
                                        std::vector<std::pair<int64_t, int64_t>>&);

}  // namespace fastmmeval::ngram
