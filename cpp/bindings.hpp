// What the binding files of fastmmeval._core share.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>

namespace py = pybind11;
using u32_array = py::array_t<uint32_t, py::array::c_style>;
using i64_array = py::array_t<int64_t, py::array::c_style>;

// Adds the n-gram index's functions and classes (hashing, map, segments, merges, streaming) to m.
void bind_ngram(py::module_& m);
