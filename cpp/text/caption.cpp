#include "text/caption.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace fastmmeval::text {

namespace {

// pycocoevalcap's BleuScorer smoothing: matches + 1e-15 ("tiny") over guesses + 1e-9 ("small").
constexpr double kBleuTiny = 1e-15;
constexpr double kBleuSmall = 1e-9;
// Python's math.e / numpy's np.e; CiderScorer raises it to a power (not exp).
constexpr double kE = 2.718281828459045;

size_t run_end(const int64_t* starts, size_t n, size_t total, size_t i) {
  return i + 1 < n ? static_cast<size_t>(starts[i + 1]) : total;
}

std::string check_starts(const int64_t* starts, size_t n, size_t total, const char* what, const char* of) {
  const std::string name(what);
  if (n == 0) return total == 0 ? "" : name + " is empty but " + of + " are not (the first start must be 0)";
  if (starts[0] != 0) return name + "[0] must be 0, got " + std::to_string(starts[0]);
  for (size_t i = 1; i < n; ++i) {
    if (starts[i] < starts[i - 1]) {
      return name + " must be non-decreasing, but " + name + "[" + std::to_string(i) + "]=" +
             std::to_string(starts[i]) + " < " + std::to_string(starts[i - 1]);
    }
  }
  if (static_cast<size_t>(starts[n - 1]) > total) {
    return name + "[" + std::to_string(n - 1) + "]=" + std::to_string(starts[n - 1]) + " is past the end of " +
           of + " (" + std::to_string(total) + ")";
  }
  return "";
}

// uint64 key -> dense uint32 id, open addressing with linear probing.
class IdTable {
 public:
  explicit IdTable(size_t expected) {
    size_t cap = 1024;
    while (cap < 2 * expected) cap *= 2;
    resize(cap);
  }

  // The id of key, giving it the next free id when it is new.
  uint32_t intern(uint64_t key) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    size_t i = home(key);
    while (slots_[i].id != kFree) {
      if (slots_[i].key == key) return slots_[i].id;
      i = (i + 1) & mask_;
    }
    slots_[i] = {key, static_cast<uint32_t>(size_)};
    return static_cast<uint32_t>(size_++);
  }

  size_t size() const { return size_; }

 private:
  static constexpr uint32_t kFree = std::numeric_limits<uint32_t>::max();
  struct Slot {
    uint64_t key;
    uint32_t id;
  };

  size_t home(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_); }

  void resize(size_t cap) {
    slots_.assign(cap, Slot{0, kFree});
    mask_ = cap - 1;
    shift_ = 64;
    for (size_t c = cap; c > 1; c >>= 1) --shift_;
  }

  void grow() {
    std::vector<Slot> old = std::move(slots_);
    resize(2 * old.size());
    for (const Slot& slot : old) {
      if (slot.id == kFree) continue;
      size_t i = home(slot.key);
      while (slots_[i].id != kFree) i = (i + 1) & mask_;
      slots_[i] = slot;
    }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
};

// Key of the gram (prefix gram id, next token); unigrams take the prefix id kNoPrefix, which no
// gram gets (ids stay below it).
constexpr uint64_t kNoPrefix = std::numeric_limits<uint32_t>::max();
uint64_t gram_key(uint64_t prefix, uint32_t token) { return (prefix << 32) | token; }

}  // namespace

std::string validate_layout(const CaptionLayout& layout) {
  std::string problem = check_starts(layout.caption_starts, layout.n_captions, layout.n_tokens, "caption_starts",
                                     "tokens");
  if (!problem.empty()) return problem;
  problem = check_starts(layout.image_starts, layout.n_images, layout.n_captions, "image_starts", "captions");
  if (!problem.empty()) return problem;
  for (size_t j = 0; j < layout.n_images; ++j) {
    const size_t size = run_end(layout.image_starts, layout.n_images, layout.n_captions, j) -
                        static_cast<size_t>(layout.image_starts[j]);
    if (size < 2) {
      return "image " + std::to_string(j) + " has " + std::to_string(size) +
             " captions; each needs a candidate and at least one reference";
    }
  }
  if (layout.n_tokens * CaptionNgrams::kMaxOrder >= kNoPrefix) return "too many tokens for 32-bit gram ids";
  return "";
}

std::string validate_selection(const int64_t* images, size_t n_selected, size_t n_images) {
  for (size_t i = 0; i < n_selected; ++i) {
    if (images[i] < 0 || static_cast<size_t>(images[i]) >= n_images) {
      return "images[" + std::to_string(i) + "]=" + std::to_string(images[i]) + " is not in [0, " +
             std::to_string(n_images) + ")";
    }
  }
  return "";
}

CaptionNgrams::CaptionNgrams(const CaptionLayout& layout) {
  const size_t n_captions = layout.n_captions;
  image_starts_.assign(layout.image_starts, layout.image_starts + layout.n_images);
  image_starts_.push_back(static_cast<int64_t>(n_captions));
  lengths_.resize(n_captions);
  gram_starts_.reserve(n_captions * kMaxOrder + 1);
  gram_starts_.push_back(0);
  gram_ids_.reserve(layout.n_tokens * kMaxOrder);
  gram_counts_.reserve(layout.n_tokens * kMaxOrder);

  IdTable table(layout.n_tokens);
  std::vector<uint32_t> prev, cur;
  for (size_t c = 0; c < n_captions; ++c) {
    const size_t begin = static_cast<size_t>(layout.caption_starts[c]);
    const size_t len = run_end(layout.caption_starts, n_captions, layout.n_tokens, c) - begin;
    const uint32_t* words = layout.tokens + begin;
    lengths_[c] = static_cast<uint32_t>(len);
    for (size_t k = 0; k < kMaxOrder; ++k) {
      // cur[i]: id of the gram of k+1 words starting at word i.
      cur.clear();
      for (size_t i = 0; i + k < len; ++i) {
        cur.push_back(table.intern(gram_key(k == 0 ? kNoPrefix : prev[i], words[i + k])));
      }
      prev = cur;
      std::sort(cur.begin(), cur.end());
      for (size_t i = 0; i < cur.size();) {
        size_t j = i;
        while (j < cur.size() && cur[j] == cur[i]) ++j;
        gram_ids_.push_back(cur[i]);
        gram_counts_.push_back(static_cast<uint32_t>(j - i));
        i = j;
      }
      gram_starts_.push_back(gram_ids_.size());
    }
  }
  n_grams_ = table.size();

  const size_t n_images = image_starts_.size() - 1;
  ref_gram_starts_.reserve(n_images + 1);
  ref_gram_starts_.push_back(0);
  bleu_stats_.reserve(n_images * kBleuStats);
  common_starts_.reserve(n_captions * kMaxOrder + 1);
  common_starts_.push_back(0);
  for (size_t j = 0; j < n_images; ++j) {
    const size_t first = static_cast<size_t>(image_starts_[j]) + 1;
    const size_t last = static_cast<size_t>(image_starts_[j + 1]);
    const size_t mark = ref_grams_.size();
    ref_grams_.insert(ref_grams_.end(), gram_ids_.begin() + static_cast<ptrdiff_t>(gram_starts_[first * kMaxOrder]),
                      gram_ids_.begin() + static_cast<ptrdiff_t>(gram_starts_[last * kMaxOrder]));
    std::sort(ref_grams_.begin() + static_cast<ptrdiff_t>(mark), ref_grams_.end());
    ref_grams_.erase(std::unique(ref_grams_.begin() + static_cast<ptrdiff_t>(mark), ref_grams_.end()),
                     ref_grams_.end());
    ref_gram_starts_.push_back(ref_grams_.size());
    add_common_grams(j);
    add_bleu_stats(j);
  }
}

void CaptionNgrams::add_common_grams(size_t image) {
  const size_t cand = static_cast<size_t>(image_starts_[image]);
  const size_t last = static_cast<size_t>(image_starts_[image + 1]);
  for (size_t k = 0; k < kMaxOrder; ++k) common_starts_.push_back(common_.size());
  const size_t cand_base = gram_begin(cand, 0);
  for (size_t r = cand + 1; r < last; ++r) {
    const size_t ref_base = gram_begin(r, 0);
    for (size_t k = 0; k < kMaxOrder; ++k) {
      size_t i = gram_begin(cand, k), q = gram_begin(r, k);
      const size_t ce = gram_end(cand, k), qe = gram_end(r, k);
      while (i < ce && q < qe) {
        if (gram_ids_[i] < gram_ids_[q]) {
          ++i;
        } else if (gram_ids_[q] < gram_ids_[i]) {
          ++q;
        } else {
          common_.emplace_back(static_cast<uint32_t>(i - cand_base), static_cast<uint32_t>(q - ref_base));
          ++i;
          ++q;
        }
      }
      common_starts_.push_back(common_.size());
    }
  }
}

void CaptionNgrams::add_bleu_stats(size_t image) {
  const size_t cand = static_cast<size_t>(image_starts_[image]);
  const size_t last = static_cast<size_t>(image_starts_[image + 1]);
  const int64_t test_len = lengths_[cand];
  // Closest reference length; on a tie the shorter one.
  int64_t ref_len = lengths_[cand + 1];
  for (size_t r = cand + 2; r < last; ++r) {
    const int64_t len = lengths_[r];
    const int64_t d = std::abs(len - test_len), best = std::abs(ref_len - test_len);
    if (d < best || (d == best && len < ref_len)) ref_len = len;
  }
  bleu_stats_.push_back(test_len);
  bleu_stats_.push_back(ref_len);
  for (size_t k = 0; k < kMaxOrder; ++k) {
    bleu_stats_.push_back(std::max<int64_t>(0, test_len - static_cast<int64_t>(k)));
  }
  // Largest count of each candidate gram in any one reference.
  const size_t cand_base = gram_begin(cand, 0);
  std::vector<uint32_t> max_ref(gram_end(cand, kMaxOrder - 1) - cand_base, 0);
  for (size_t r = cand + 1; r < last; ++r) {
    const size_t ref_base = gram_begin(r, 0);
    for (size_t p = common_starts_[r * kMaxOrder]; p < common_starts_[(r + 1) * kMaxOrder]; ++p) {
      const auto [a, b] = common_[p];
      max_ref[a] = std::max(max_ref[a], gram_counts_[ref_base + b]);
    }
  }
  for (size_t k = 0; k < kMaxOrder; ++k) {
    int64_t correct = 0;
    for (size_t i = gram_begin(cand, k); i < gram_end(cand, k); ++i) {
      correct += std::min(gram_counts_[i], max_ref[i - cand_base]);
    }
    bleu_stats_.push_back(correct);
  }
}

double CaptionNgrams::cider_image(size_t image, const std::vector<uint32_t>& df, const std::vector<double>& log_df,
                                  double ref_len, double sigma, std::vector<double>& cand_w,
                                  std::vector<double>& ref_w) const {
  const size_t cand = static_cast<size_t>(image_starts_[image]);
  const size_t last = static_cast<size_t>(image_starts_[image + 1]);
  // tf-idf weights of caption c's grams into w (indexed like gram_ids_ from gram_begin(c, 0)),
  // with the norm of each order.
  auto weigh = [&](size_t c, std::vector<double>& w, double* norm) {
    const size_t base = gram_begin(c, 0);
    w.resize(gram_end(c, kMaxOrder - 1) - base);
    for (size_t k = 0; k < kMaxOrder; ++k) {
      double sq = 0.0;
      for (size_t i = gram_begin(c, k); i < gram_end(c, k); ++i) {
        const double v = static_cast<double>(gram_counts_[i]) * (ref_len - log_df[df[gram_ids_[i]]]);
        w[i - base] = v;
        sq += v * v;
      }
      norm[k] = std::sqrt(sq);
    }
  };
  // pycocoevalcap's CIDEr "length" counts the caption's bigrams, not its words.
  auto bigrams = [&](size_t c) { return lengths_[c] > 0 ? static_cast<double>(lengths_[c] - 1) : 0.0; };

  double cand_norm[kMaxOrder], ref_norm[kMaxOrder], score[kMaxOrder] = {0.0, 0.0, 0.0, 0.0};
  weigh(cand, cand_w, cand_norm);
  for (size_t r = cand + 1; r < last; ++r) {
    weigh(r, ref_w, ref_norm);
    const double delta = bigrams(cand) - bigrams(r);
    const double penalty = std::pow(kE, -(delta * delta) / (2 * sigma * sigma));
    for (size_t k = 0; k < kMaxOrder; ++k) {
      double val = 0.0;
      for (size_t p = common_starts_[r * kMaxOrder + k]; p < common_starts_[r * kMaxOrder + k + 1]; ++p) {
        const double h = cand_w[common_[p].first], w = ref_w[common_[p].second];
        val += std::min(h, w) * w;
      }
      if (cand_norm[k] != 0.0 && ref_norm[k] != 0.0) val /= cand_norm[k] * ref_norm[k];
      val *= penalty;
      score[k] += val;
    }
  }
  // numpy's mean of the four orders: the first plus the sum of the rest, over 4.
  double mean = score[0] + ((score[1] + score[2]) + score[3]);
  mean /= static_cast<double>(kMaxOrder);
  mean /= static_cast<double>(last - cand - 1);
  return mean * 10.0;
}

void CaptionNgrams::cider(const int64_t* images, size_t n_selected, double sigma, double* out) const {
  if (n_selected == 0) return;
  // Each distinct selected image is scored once; a repeat counts again in the frequencies.
  std::vector<uint32_t> times(n_images(), 0);
  std::vector<size_t> distinct;
  for (size_t s = 0; s < n_selected; ++s) {
    const size_t j = static_cast<size_t>(images[s]);
    if (times[j]++ == 0) distinct.push_back(j);
  }
  std::vector<uint32_t> df(n_grams_, 0);
  for (const size_t j : distinct) {
    for (size_t g = ref_gram_starts_[j]; g < ref_gram_starts_[j + 1]; ++g) df[ref_grams_[g]] += times[j];
  }
  // log(max(1, df)) for every possible df (at most one per selected image).
  std::vector<double> log_df(n_selected + 1, 0.0);
  for (size_t d = 2; d <= n_selected; ++d) log_df[d] = std::log(static_cast<double>(d));
  const double ref_len = std::log(static_cast<double>(n_selected));
  std::vector<double> scores(n_images()), cand_w, ref_w;
  for (const size_t j : distinct) scores[j] = cider_image(j, df, log_df, ref_len, sigma, cand_w, ref_w);
  for (size_t s = 0; s < n_selected; ++s) out[s] = scores[static_cast<size_t>(images[s])];
}

void CaptionNgrams::bleu(const int64_t* images, size_t n_selected, double* corpus, double* per_image) const {
  // BLEU 1..4 from (test length, reference length, guesses, matches), as BleuScorer does for
  // one image and for the summed statistics of the corpus.
  auto score = [](double test_len, double ref_len, const double* guess, const double* correct, double* out) {
    double product = 1.0;
    for (size_t k = 0; k < kMaxOrder; ++k) {
      product *= (correct[k] + kBleuTiny) / (guess[k] + kBleuSmall);
      out[k] = std::pow(product, 1.0 / static_cast<double>(k + 1));
    }
    const double ratio = (test_len + kBleuTiny) / (ref_len + kBleuSmall);
    if (ratio < 1) {
      for (size_t k = 0; k < kMaxOrder; ++k) out[k] *= std::exp(1 - 1 / ratio);
    }
  };
  int64_t totals[kBleuStats] = {};
  double stats[kBleuStats];
  for (size_t s = 0; s < n_selected; ++s) {
    const int64_t* row = bleu_stats_.data() + static_cast<size_t>(images[s]) * kBleuStats;
    for (size_t t = 0; t < kBleuStats; ++t) {
      totals[t] += row[t];
      stats[t] = static_cast<double>(row[t]);
    }
    score(stats[0], stats[1], stats + 2, stats + 2 + kMaxOrder, per_image + kMaxOrder * s);
  }
  for (size_t t = 0; t < kBleuStats; ++t) stats[t] = static_cast<double>(totals[t]);
  score(stats[0], stats[1], stats + 2, stats + 2 + kMaxOrder, corpus);
}

void rouge_l(const CaptionLayout& layout, double beta, double* out) {
  // An empty caption is one empty word (pycocoevalcap splits on " "): an LCS of 1 with another
  // empty caption, of 0 with any other.
  std::vector<uint32_t> row;
  auto lcs = [&row](const uint32_t* a, size_t na, const uint32_t* b, size_t nb) {
    row.assign(nb + 1, 0);
    for (size_t i = 0; i < na; ++i) {
      uint32_t diag = 0;
      for (size_t j = 0; j < nb; ++j) {
        const uint32_t up = row[j + 1];
        row[j + 1] = a[i] == b[j] ? diag + 1 : std::max(up, row[j]);
        diag = up;
      }
    }
    return row[nb];
  };
  const double beta2 = beta * beta;
  for (size_t j = 0; j < layout.n_images; ++j) {
    const size_t cand = static_cast<size_t>(layout.image_starts[j]);
    const size_t last = run_end(layout.image_starts, layout.n_images, layout.n_captions, j);
    const uint32_t* cw = layout.tokens + layout.caption_starts[cand];
    const size_t cn = run_end(layout.caption_starts, layout.n_captions, layout.n_tokens, cand) -
                      static_cast<size_t>(layout.caption_starts[cand]);
    double prec_max = 0.0, rec_max = 0.0;
    for (size_t r = cand + 1; r < last; ++r) {
      const uint32_t* rw = layout.tokens + layout.caption_starts[r];
      const size_t rn =
          run_end(layout.caption_starts, layout.n_captions, layout.n_tokens, r) - static_cast<size_t>(layout.caption_starts[r]);
      const double common = (cn == 0 || rn == 0) ? static_cast<double>(cn == 0 && rn == 0) : lcs(rw, rn, cw, cn);
      prec_max = std::max(prec_max, common / static_cast<double>(std::max<size_t>(cn, 1)));
      rec_max = std::max(rec_max, common / static_cast<double>(std::max<size_t>(rn, 1)));
    }
    out[j] = (prec_max != 0 && rec_max != 0) ? ((1 + beta2) * prec_max * rec_max) / (rec_max + beta2 * prec_max) : 0.0;
  }
}

}  // namespace fastmmeval::text
