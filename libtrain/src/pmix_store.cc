// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// PmixStore on the PMIx 4 client API. Values travel as PMIX_BYTE_OBJECT; job facts (size,
// local rank and size, hostname) come from the reserved keys the server (slurmd's mpi/pmix or
// OpenMPI's prte/orted) provides. See pmix_store.h for the key convention.
#include "libtrain/pmix_store.h"

#include "libtrain/errors.h"

#ifdef LIBTRAIN_HAVE_PMIX
#include <pmix.h>
#include <unistd.h>

#include <cstring>

namespace libtrain {

bool pmix_available() { return true; }

struct PmixStore::Impl {
  pmix_proc_t me{};
};

namespace {

[[noreturn]] void throw_pmix(const std::string& what, pmix_status_t rc) {
  std::string msg = "libtrain: " + what + " failed: " + PMIx_Error_string(rc);
  if (rc == PMIX_ERR_TIMEOUT) throw TimeoutError(msg + " (LIBTRAIN_TIMEOUT)");
  if (rc == PMIX_ERR_UNREACH || rc == PMIX_ERR_LOST_CONNECTION)
    throw PeerError(msg + "; is this running under srun --mpi=pmix?");
  throw Error(msg);
}

// Owns a pmix_value_t* from PMIx_Get.
struct ValueGuard {
  pmix_value_t* v = nullptr;
  ~ValueGuard() { if (v) PMIX_VALUE_RELEASE(v); }
};

bool get_uint(const pmix_proc_t& proc, const char* key, uint64_t& out) {
  ValueGuard g;
  if (PMIx_Get(&proc, key, nullptr, 0, &g.v) != PMIX_SUCCESS || !g.v) return false;
  switch (g.v->type) {
    case PMIX_UINT32: out = g.v->data.uint32; return true;
    case PMIX_UINT16: out = g.v->data.uint16; return true;
    case PMIX_UINT64: out = g.v->data.uint64; return true;
    case PMIX_INT: out = static_cast<uint64_t>(g.v->data.integer); return true;
    case PMIX_PROC_RANK: out = g.v->data.rank; return true;
    default: return false;
  }
}

std::string get_string(const pmix_proc_t& proc, const char* key) {
  ValueGuard g;
  if (PMIx_Get(&proc, key, nullptr, 0, &g.v) != PMIX_SUCCESS || !g.v) return {};
  return g.v->type == PMIX_STRING && g.v->data.string ? g.v->data.string : "";
}

int owner_of(const std::string& key) {
  size_t slash = key.rfind('/');
  if (slash == std::string::npos || slash + 1 == key.size())
    throw InvalidArgument("libtrain: PMIx store key '" + key + "' must end in /<writer rank>");
  return std::stoi(key.substr(slash + 1));
}

}  // namespace

PmixStore::PmixStore() : impl_(std::make_unique<Impl>()) {
  pmix_status_t rc = PMIx_Init(&impl_->me, nullptr, 0);
  if (rc != PMIX_SUCCESS) throw_pmix("PMIx_Init", rc);
  rank_ = static_cast<int>(impl_->me.rank);
  nspace_ = impl_->me.nspace;
  pmix_proc_t job;
  PMIX_LOAD_PROCID(&job, impl_->me.nspace, PMIX_RANK_WILDCARD);
  uint64_t v = 0;
  if (get_uint(job, PMIX_JOB_SIZE, v)) size_ = static_cast<int>(v);
  if (get_uint(job, PMIX_LOCAL_SIZE, v)) local_size_ = static_cast<int>(v);
  if (get_uint(impl_->me, PMIX_LOCAL_RANK, v)) local_rank_ = static_cast<int>(v);
  node_ = get_string(impl_->me, PMIX_HOSTNAME);
  if (node_.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    node_ = host;
  }
}

PmixStore::~PmixStore() { PMIx_Finalize(nullptr, 0); }

void PmixStore::set(const std::string& key, const Bytes& value) {
  pmix_value_t v;
  PMIX_VALUE_CONSTRUCT(&v);
  v.type = PMIX_BYTE_OBJECT;
  v.data.bo.bytes = reinterpret_cast<char*>(const_cast<uint8_t*>(value.data()));
  v.data.bo.size = value.size();
  pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, key.c_str(), &v);  // PMIx copies the value
  if (rc != PMIX_SUCCESS) throw_pmix("PMIx_Put '" + key + "'", rc);
  rc = PMIx_Commit();
  if (rc != PMIX_SUCCESS) throw_pmix("PMIx_Commit", rc);
}

Bytes PmixStore::get(const std::string& key, Seconds timeout) {
  pmix_proc_t peer;
  PMIX_LOAD_PROCID(&peer, impl_->me.nspace, static_cast<pmix_rank_t>(owner_of(key)));
  pmix_info_t info;
  int secs = std::max(1, static_cast<int>(timeout.count()));
  PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &secs, PMIX_INT);
  ValueGuard g;
  pmix_status_t rc = PMIx_Get(&peer, key.c_str(), &info, 1, &g.v);
  PMIX_INFO_DESTRUCT(&info);
  if (rc != PMIX_SUCCESS) throw_pmix("PMIx_Get '" + key + "'", rc);
  if (!g.v || g.v->type != PMIX_BYTE_OBJECT)
    throw Error("libtrain: PMIx key '" + key + "' holds no byte object");
  const auto* p = reinterpret_cast<const uint8_t*>(g.v->data.bo.bytes);
  return Bytes(p, p + g.v->data.bo.size);
}

int64_t PmixStore::add(const std::string& key, int64_t) {
  throw InvalidArgument("libtrain: PMIx has no atomic add (key '" + key + "'); use publish()");
}

void PmixStore::publish(Seconds timeout) {
  pmix_info_t info[2];
  bool collect = true;
  int secs = std::max(1, static_cast<int>(timeout.count()));
  PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
  PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &secs, PMIX_INT);
  pmix_proc_t all;
  PMIX_LOAD_PROCID(&all, impl_->me.nspace, PMIX_RANK_WILDCARD);
  pmix_status_t rc = PMIx_Fence(&all, 1, info, 2);
  PMIX_INFO_DESTRUCT(&info[0]);
  PMIX_INFO_DESTRUCT(&info[1]);
  if (rc != PMIX_SUCCESS) throw_pmix("PMIx_Fence", rc);
}

}  // namespace libtrain

#else  // !LIBTRAIN_HAVE_PMIX

namespace libtrain {

bool pmix_available() { return false; }
struct PmixStore::Impl {};
PmixStore::PmixStore() { throw Error("libtrain: built without PMIx (pkg-config pmix not found)"); }
PmixStore::~PmixStore() = default;
void PmixStore::set(const std::string&, const Bytes&) {}
Bytes PmixStore::get(const std::string&, Seconds) { return {}; }
int64_t PmixStore::add(const std::string&, int64_t) { return 0; }
void PmixStore::publish(Seconds) {}

}  // namespace libtrain
#endif
