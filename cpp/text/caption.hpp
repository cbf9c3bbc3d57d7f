// Captioning metrics over captions given as token ids: CIDEr-D, BLEU 1-4 and ROUGE-L as
// pycocoevalcap 1.2 computes them (its Cider, Bleu(4) with "closest" and Rouge scorers).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fastmmeval::text {

// The buffers of a captioning corpus. Caption i is tokens[caption_starts[i] ..
// caption_starts[i+1]) (the last caption ends at n_tokens). Image j is the captions
// [image_starts[j], image_starts[j+1]) (the last image ends at n_captions): its first caption
// is the candidate, the others (at least one) are its references.
struct CaptionLayout {
  const uint32_t* tokens;
  size_t n_tokens;
  const int64_t* caption_starts;
  size_t n_captions;
  const int64_t* image_starts;
  size_t n_images;
};

// Empty string when the layout is well formed, else what is wrong with it.
std::string validate_layout(const CaptionLayout& layout);

// Empty string when every image index lies in [0, n_images), else the first one that does not.
std::string validate_selection(const int64_t* images, size_t n_selected, size_t n_images);

// The 1- to 4-grams of every caption of a corpus, interned to dense ids, with what CIDEr-D and
// BLEU need per image. Images are addressed by a selection: indices into the corpus's images,
// repeats allowed (a bootstrap sample), scored as if the selected images were the corpus.
class CaptionNgrams {
 public:
  static constexpr size_t kMaxOrder = 4;

  // The layout must be valid (validate_layout); its buffers are copied.
  explicit CaptionNgrams(const CaptionLayout& layout);

  size_t n_images() const { return image_starts_.size() - 1; }

  // CIDEr-D of each selected image into out[0..n_selected): n = 1..4, Gaussian length penalty
  // with sigma, clipped tf-idf, x10, document frequencies over the references of the selection.
  void cider(const int64_t* images, size_t n_selected, double sigma, double* out) const;

  // BLEU 1..4 (closest reference length) of the selection as a corpus into corpus[0..4) and of
  // each selected image into per_image[4 * i .. 4 * i + 4).
  void bleu(const int64_t* images, size_t n_selected, double* corpus, double* per_image) const;

 private:
  // Per image: candidate length, closest reference length, guesses 1..4, clipped matches 1..4.
  static constexpr size_t kBleuStats = 2 + 2 * kMaxOrder;

  size_t gram_begin(size_t caption, size_t order) const { return gram_starts_[caption * kMaxOrder + order]; }
  size_t gram_end(size_t caption, size_t order) const { return gram_starts_[caption * kMaxOrder + order + 1]; }
  double cider_image(size_t image, const std::vector<uint32_t>& df, const std::vector<double>& log_df,
                     double ref_len, double sigma, std::vector<double>& cand_w, std::vector<double>& ref_w) const;
  void add_common_grams(size_t image);
  void add_bleu_stats(size_t image);

  std::vector<int64_t> image_starts_;  // n_images + 1 caption indices
  std::vector<uint32_t> lengths_;      // words per caption
  // Caption c's distinct grams of order k+1, sorted by id, with their counts, at
  // [gram_starts_[4c + k], gram_starts_[4c + k + 1]).
  std::vector<uint32_t> gram_ids_;
  std::vector<uint32_t> gram_counts_;
  std::vector<size_t> gram_starts_;
  // Image j's distinct reference grams (all orders) at [ref_gram_starts_[j], ref_gram_starts_[j + 1]).
  std::vector<uint32_t> ref_grams_;
  std::vector<size_t> ref_gram_starts_;
  // Reference caption r's grams of order k+1 that its candidate has too, as (index of the gram
  // in the candidate's grams, index in r's grams), both from gram_begin(., 0), at
  // [common_starts_[4r + k], common_starts_[4r + k + 1]) (empty for candidates).
  std::vector<std::pair<uint32_t, uint32_t>> common_;
  std::vector<size_t> common_starts_;
  std::vector<int64_t> bleu_stats_;  // kBleuStats per image
  size_t n_grams_ = 0;
};

// ROUGE-L of each image into out[0..n_images): the F-measure (beta) of the largest precision and
// the largest recall of the longest common subsequence over the references. An empty caption
// counts as one empty word (pycocoevalcap splits on " "), which only an empty caption matches.
void rouge_l(const CaptionLayout& layout, double beta, double* out);

}  // namespace fastmmeval::text
