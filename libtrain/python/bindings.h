// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Shared by the two halves of the libtrain._libtrain module: module.cc (numpy arrays, the
// process-wide world) and tensor_bindings.cc (raw-address collectives on any communicator, which
// libtrain.torch drives with tensors' data pointers).
#pragma once

#include <pybind11/pybind11.h>

#include "libtrain/communicator.h"

namespace libtrain::python {

// An asynchronous collective seen from Python: keeps the buffers' owners alive until it is done.
struct Handle {
  Work work;
  pybind11::object keep;
  void wait() {
    {
      pybind11::gil_scoped_release nogil;
      work.wait();
    }
    keep = pybind11::none();
  }
  bool is_done() const { return work.is_done(); }
};

void bind_tensor_collectives(pybind11::module_& m);

}  // namespace libtrain::python
