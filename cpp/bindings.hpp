// What the binding files of fastmmeval._core share.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <functional>

namespace py = pybind11;
using u32_array = py::array_t<uint32_t, py::array::c_style>;
using i64_array = py::array_t<int64_t, py::array::c_style>;

// The check of a fastmmeval::Interrupt for a long call made with the GIL held (ask for it before releasing the
// GIL): on the main thread, the only one Python runs signal handlers on, it takes the GIL back and raises what
// a pending signal's handler raised (KeyboardInterrupt for Ctrl-C); on other threads there is none.
inline std::function<void()> signal_check() {
  const py::object main = py::module_::import("threading").attr("main_thread")().attr("ident");
  if (main.cast<unsigned long>() != PyThread_get_thread_ident()) return {};
  return [] {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  };
}

// Adds the n-gram index's functions and classes (hashing, map, segments, merges, streaming) to m.
void bind_ngram(py::module_& m);
