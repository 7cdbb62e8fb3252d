// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// libtrain umbrella header: everything a trainer needs (see man libtrain(3), libtrain(7)).
#pragma once

#include "libtrain/bootstrap.h"
#include "libtrain/communicator.h"
#include "libtrain/errors.h"
#include "libtrain/nccl.h"
#include "libtrain/pmix_store.h"
#include "libtrain/store.h"
#include "libtrain/tcp_store.h"
#include "libtrain/timeline.h"
#include "libtrain/training.h"
#include "libtrain/types.h"
