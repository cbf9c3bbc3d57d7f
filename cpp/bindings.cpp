// Python bindings of fastmmeval._core: argument checks and .def lines only (the n-gram index in
// bindings_ngram.cpp).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>

#include "bindings.hpp"
#include "common/interrupt.hpp"
#include "kcenter/kcenter.hpp"
#include "text/caption.hpp"
#include "text/edit_distance.hpp"
#include "text/words.hpp"

namespace {

namespace text = fastmmeval::text;
using f64_array = py::array_t<double, py::array::c_style>;

text::CaptionLayout caption_layout(const std::string& fn, const u32_array& tokens, const i64_array& caption_starts,
                                   const i64_array& image_starts) {
  if (tokens.ndim() != 1 || caption_starts.ndim() != 1 || image_starts.ndim() != 1) {
    throw py::value_error(fn + ": tokens, caption_starts and image_starts must be 1-D arrays");
  }
  const text::CaptionLayout layout{tokens.data(), static_cast<size_t>(tokens.size()), caption_starts.data(),
                                   static_cast<size_t>(caption_starts.size()), image_starts.data(),
                                   static_cast<size_t>(image_starts.size())};
  const std::string problem = text::validate_layout(layout);
  if (!problem.empty()) throw py::value_error(fn + ": " + problem);
  return layout;
}

std::unique_ptr<text::CaptionNgrams> make_caption_ngrams(const u32_array& tokens, const i64_array& caption_starts,
                                                         const i64_array& image_starts) {
  const text::CaptionLayout layout = caption_layout("CaptionNgrams", tokens, caption_starts, image_starts);
  py::gil_scoped_release release;
  return std::make_unique<text::CaptionNgrams>(layout);
}

// The selected image indices: all images in order when images is None.
i64_array caption_selection(const std::string& fn, const text::CaptionNgrams& corpus,
                            const std::optional<i64_array>& images) {
  if (!images) {
    i64_array all(static_cast<py::ssize_t>(corpus.n_images()));
    for (size_t j = 0; j < corpus.n_images(); ++j) all.mutable_data()[j] = static_cast<int64_t>(j);
    return all;
  }
  if (images->ndim() != 1) throw py::value_error(fn + ": images must be a 1-D array");
  const std::string problem =
      text::validate_selection(images->data(), static_cast<size_t>(images->size()), corpus.n_images());
  if (!problem.empty()) throw py::value_error(fn + ": " + problem);
  return *images;
}

f64_array caption_cider(const text::CaptionNgrams& corpus, const std::optional<i64_array>& images, double sigma) {
  const i64_array selected = caption_selection("cider", corpus, images);
  f64_array out(selected.size());
  double* dst = out.mutable_data();
  {
    py::gil_scoped_release release;
    corpus.cider(selected.data(), static_cast<size_t>(selected.size()), sigma, dst);
  }
  return out;
}

py::tuple caption_bleu(const text::CaptionNgrams& corpus, const std::optional<i64_array>& images) {
  const i64_array selected = caption_selection("bleu", corpus, images);
  const auto n = static_cast<py::ssize_t>(selected.size());
  const auto orders = static_cast<py::ssize_t>(text::CaptionNgrams::kMaxOrder);
  f64_array total(orders);
  f64_array per_image({n, orders});
  double* total_dst = total.mutable_data();
  double* per_image_dst = per_image.mutable_data();
  {
    py::gil_scoped_release release;
    corpus.bleu(selected.data(), static_cast<size_t>(n), total_dst, per_image_dst);
  }
  return py::make_tuple(total, per_image);
}

f64_array caption_rouge_l(const u32_array& tokens, const i64_array& caption_starts, const i64_array& image_starts,
                          double beta) {
  const text::CaptionLayout layout = caption_layout("caption_rouge_l", tokens, caption_starts, image_starts);
  f64_array out(static_cast<py::ssize_t>(layout.n_images));
  double* dst = out.mutable_data();
  {
    py::gil_scoped_release release;
    text::rouge_l(layout, beta, dst);
  }
  return out;
}

// Appends a view of the code points of every str of seq to out. `keep` takes a reference to each str so
// the views stay valid while the GIL is released (another thread may change the sequence meanwhile).
void add_code_points(const std::string& fn, const py::sequence& seq, std::vector<py::object>& keep,
                     std::vector<text::CodePoints>& out) {
  if (PyUnicode_Check(seq.ptr())) throw py::type_error(fn + ": expected a sequence of str, not str");
  for (py::handle item : seq) {
    PyObject* s = item.ptr();
    if (!PyUnicode_Check(s)) {
      throw py::type_error(fn + ": expected str items, got " + py::str(py::type::handle_of(item)).cast<std::string>());
    }
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(s) != 0) throw py::error_already_set();
#endif
    keep.push_back(py::reinterpret_borrow<py::object>(item));
    out.push_back({PyUnicode_DATA(s), static_cast<size_t>(PyUnicode_GET_LENGTH(s)), static_cast<int>(PyUnicode_KIND(s))});
  }
}

// Views of the code points of a[i] and b[i], and the references that keep them valid.
struct StrPairs {
  std::vector<py::object> keep;
  std::vector<text::CodePoints> a, b;
};

StrPairs str_pairs(const std::string& fn, const py::sequence& a, const py::sequence& b) {
  if (a.size() != b.size()) {
    throw py::value_error(fn + ": a and b differ in length (" + std::to_string(a.size()) + " vs " +
                          std::to_string(b.size()) + ")");
  }
  StrPairs pairs;
  pairs.keep.reserve(2 * a.size());
  pairs.a.reserve(a.size());
  pairs.b.reserve(b.size());
  add_code_points(fn, a, pairs.keep, pairs.a);
  add_code_points(fn, b, pairs.keep, pairs.b);
  return pairs;
}

i64_array levenshtein_distance(const py::sequence& a, const py::sequence& b) {
  const StrPairs pairs = str_pairs("levenshtein_distance", a, b);
  i64_array out(static_cast<py::ssize_t>(pairs.a.size()));
  int64_t* dst = out.mutable_data();
  {
    py::gil_scoped_release release;
    fastmmeval::text::levenshtein_batch(pairs.a.data(), pairs.b.data(), pairs.a.size(), dst, nullptr);
  }
  return out;
}

py::array_t<double> levenshtein_similarity(const py::sequence& a, const py::sequence& b) {
  const StrPairs pairs = str_pairs("levenshtein_similarity", a, b);
  py::array_t<double> out(static_cast<py::ssize_t>(pairs.a.size()));
  double* dst = out.mutable_data();
  {
    py::gil_scoped_release release;
    fastmmeval::text::levenshtein_batch(pairs.a.data(), pairs.b.data(), pairs.a.size(), nullptr, dst);
  }
  return out;
}

constexpr size_t kCodePoints = 0x110000;

py::tuple word_ids(const py::sequence& texts, const u32_array& table, uint32_t seed) {
  if (table.ndim() != 1 || static_cast<size_t>(table.size()) != kCodePoints) {
    throw py::value_error("word_ids: table must be a 1-D uint32 array of " + std::to_string(kCodePoints) +
                          " entries (one per code point)");
  }
  std::vector<py::object> keep;
  std::vector<text::CodePoints> views;
  keep.reserve(texts.size());
  views.reserve(texts.size());
  add_code_points("word_ids", texts, keep, views);
  const uint32_t* entries = table.data();
  text::WordIds got;
  {
    py::gil_scoped_release release;
    got = text::word_ids(views.data(), views.size(), entries, seed);
  }
  auto* kept = new std::vector<uint32_t>(std::move(got.ids));  // handed to numpy, not copied
  const py::capsule owner(kept, [](void* v) { delete static_cast<std::vector<uint32_t>*>(v); });
  py::array_t<uint32_t> ids(static_cast<py::ssize_t>(kept->size()), kept->data(), owner);
  return py::make_tuple(ids, i64_array(static_cast<py::ssize_t>(got.offsets.size()), got.offsets.data()));
}

namespace kcenter = fastmmeval::kcenter;

py::array to_float16(const py::array_t<float, py::array::c_style>& values, unsigned threads, bool simd) {
  py::array out(py::dtype("float16"), std::vector<py::ssize_t>(values.shape(), values.shape() + values.ndim()));
  const float* src = values.data();
  auto* dst = static_cast<uint16_t*>(out.mutable_data());
  const auto count = static_cast<size_t>(values.size());
  {
    py::gil_scoped_release release;
    kcenter::to_f16(src, count, threads, simd, dst);
  }
  return out;
}

i64_array greedy_k_center(const py::array& features, size_t k, size_t first, bool float16, unsigned threads,
                          bool simd, const std::optional<py::function>& on_pick) {
  const py::dtype dt = features.dtype();
  const bool f16 = dt.kind() == 'f' && dt.itemsize() == 2;
  const bool f32 = dt.kind() == 'f' && dt.itemsize() == 4;
  if (!f16 && !f32) throw py::type_error("greedy_k_center: features must be float16 or float32");
  if (f16 && !float16) throw py::value_error("greedy_k_center: float16 features need float16=True");
  if (features.ndim() != 2) throw py::value_error("greedy_k_center: features must be a 2-D array (rows x dims)");
  if (!(features.flags() & py::array::c_style)) throw py::value_error("greedy_k_center: features must be C-contiguous");
  const auto n = static_cast<size_t>(features.shape(0));
  const auto d = static_cast<size_t>(features.shape(1));
  if (k < 1 || k > n) {
    throw py::value_error("greedy_k_center: k must be in 1.." + std::to_string(n) + ", got " + std::to_string(k));
  }
  if (first >= n) throw py::value_error("greedy_k_center: first must be < " + std::to_string(n));
  kcenter::Options options{threads, simd, {}};
  if (on_pick) {
    options.on_pick = [&on_pick](size_t done) {
      py::gil_scoped_acquire gil;
      (*on_pick)(done);
    };
  }
  i64_array out(static_cast<py::ssize_t>(k));
  int64_t* dst = out.mutable_data();
  const void* src = features.data();
  fastmmeval::Interrupt interrupt(signal_check());
  {
    py::gil_scoped_release release;
    if (f16) {
      kcenter::greedy_f16(static_cast<const uint16_t*>(src), n, d, k, first, options, interrupt, dst);
    } else if (float16) {
      std::vector<uint16_t> stored(n * d);
      kcenter::to_f16(static_cast<const float*>(src), n * d, threads, simd, stored.data());
      kcenter::greedy_f16(stored.data(), n, d, k, first, options, interrupt, dst);
    } else {
      kcenter::greedy_f32(static_cast<const float*>(src), n, d, k, first, options, interrupt, dst);
    }
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "fastmmeval native core (numpy buffers in, numpy buffers out)";
  bind_ngram(m);
  py::class_<text::CaptionNgrams>(m, "CaptionNgrams",
                                  "The 1- to 4-grams of a captioning corpus, interned once, for CIDEr-D and BLEU "
                                  "over any selection of its images (repeats allowed). Caption i is "
                                  "tokens[caption_starts[i]:caption_starts[i+1]] (uint32 word ids; the last ends at "
                                  "len(tokens)); image j is captions image_starts[j]..image_starts[j+1] (the last "
                                  "ends at len(caption_starts)): its candidate, then at least one reference.")
      .def(py::init(&make_caption_ngrams), py::arg("tokens"), py::arg("caption_starts"), py::arg("image_starts"))
      .def_property_readonly("n_images", &text::CaptionNgrams::n_images)
      .def("cider", &caption_cider, py::arg("images") = py::none(), py::arg("sigma") = 6.0,
           "Per selected image CIDEr-D as pycocoevalcap 1.2 (document frequencies over the selection's "
           "references). images: int64 indices, None for all. Returns a float64 array.")
      .def("bleu", &caption_bleu, py::arg("images") = py::none(),
           "BLEU 1..4 as pycocoevalcap 1.2 (closest reference length): (corpus float64[4], per image "
           "float64[n, 4]) for the selected images (int64 indices, None for all).");
  m.def("caption_rouge_l", &caption_rouge_l, py::arg("tokens"), py::arg("caption_starts"), py::arg("image_starts"),
        py::arg("beta") = 1.2,
        "ROUGE-L of each image as pycocoevalcap 1.2 (same buffers as CaptionNgrams). Returns float64[n_images].");
  m.def("greedy_k_center", &greedy_k_center, py::arg("features"), py::arg("k"), py::arg("first"),
        py::arg("float16") = true, py::arg("threads") = 0, py::arg("simd") = true, py::arg("on_pick") = py::none(),
        "Greedy k-center over the rows of features (C-contiguous float16 or float32, n x d) from row "
        "`first`: each next center is the row farthest (Euclidean) from its nearest center, ties to the "
        "lowest index. float16=True stores float32 features as float16 (rounded to nearest even) and "
        "accumulates in fp32. threads=0 uses all cores; simd=False forces the portable loops; on_pick(done) "
        "is called after each pick (an exception it raises stops the run). Releases the GIL; on the main "
        "thread, Ctrl-C stops it (KeyboardInterrupt). Returns int64[k] row indices in pick order.");
  m.def("to_float16", &to_float16, py::arg("values"), py::arg("threads") = 0, py::arg("simd") = true,
        "float32 values as float16, rounded to nearest even (as numpy's astype(float16)); the conversion "
        "greedy_k_center applies with float16=True. Releases the GIL.");
  m.def("kcenter_simd_path", &fastmmeval::kcenter::simd_path,
        "The row-distance code greedy_k_center uses on this CPU: 'avx2+f16c+fma' or 'portable'.");
  m.def("word_ids", &word_ids, py::arg("texts"), py::arg("table"), py::arg("seed"),
        "The `words` tokenizer: every text (a sequence of str) cut into maximal runs of word characters, each "
        "word mapped to XXH32 (with seed) of the UTF-8 bytes of its lower case as str.lower() gives it. table "
        "(uint32, one entry per code point) holds each character's lower case in its low 21 bits and its kind "
        "in the top bits (see cpp/text/words.hpp; built by fastmmeval.contam.readers.text_tokens.word_table). "
        "Releases the GIL. Returns (uint32 ids of all texts, one after another; int64 offsets where each "
        "text's ids start).");
  m.def("levenshtein_distance", &levenshtein_distance, py::arg("a"), py::arg("b"),
        "Levenshtein distance, in code points, between a[i] and b[i] for every i (two equally long "
        "sequences of str). Releases the GIL. Returns an int64 array.");
  m.def("levenshtein_similarity", &levenshtein_similarity, py::arg("a"), py::arg("b"),
        "1 - levenshtein_distance / max(len(a[i]), len(b[i])) for every i (1.0 for two empty "
        "strings). Releases the GIL. Returns a float64 array.");
}
