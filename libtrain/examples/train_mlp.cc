// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// C++ data-parallel trainer: a 784-hidden-10 MLP on Fashion-MNIST with libtrain. Each rank
// takes its share of every global batch, GradientReducer averages the gradients, rank 0
// reports test accuracy. Usage (FASHION_MNIST=dir overrides the data folder):
//   train_mlp [--epochs N] [--batch GLOBAL] [--lr F] [--limit SAMPLES] [--dtype float32|float64]
//             [--save PATH] [--die-rank K --die-step S]
// --dtype float64 trains in double precision: 8 ranks and one process then differ only by the
// order of each gradient's sums, at double's precision (tests/cluster/test_libtrain.bash).
// --save makes rank 0 write the trained weights to PATH: w1, b1, w2, b2, in that order, as raw
// native values of the dtype. --die-rank makes rank K SIGKILL itself at global step S (to test
// failure handling).
#include <signal.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "libtrain/libtrain.h"

namespace {

constexpr int kIn = 784, kHidden = 128, kOut = 10;

std::vector<uint8_t> read_gz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot open " + path);
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.insert(out.end(), buf, buf + n);
  gzclose(f);
  return out;
}

template <typename T>
struct Data {
  std::vector<T> x;
  std::vector<int> y;
  size_t n = 0;
};

template <typename T>
Data<T> load(const std::string& dir, const std::string& prefix, size_t limit = 0) {
  auto img = read_gz(dir + "/" + prefix + "-images-idx3-ubyte.gz");
  auto lab = read_gz(dir + "/" + prefix + "-labels-idx1-ubyte.gz");
  Data<T> d;
  d.n = lab.size() - 8;
  if (limit && limit < d.n) d.n = limit;
  d.x.resize(d.n * kIn);
  d.y.resize(d.n);
  for (size_t i = 0; i < d.x.size(); ++i) d.x[i] = static_cast<T>(img[16 + i]) / T(255);
  for (size_t i = 0; i < d.n; ++i) d.y[i] = lab[8 + i];
  return d;
}

template <typename T>
constexpr libtrain::DataType kType = std::is_same_v<T, double> ? libtrain::DataType::kFloat64 : libtrain::DataType::kFloat32;

template <typename T>
struct Model {
  std::vector<T> w1 = std::vector<T>(kIn * kHidden), b1 = std::vector<T>(kHidden),
                 w2 = std::vector<T>(kHidden * kOut), b2 = std::vector<T>(kOut);
  std::vector<libtrain::TensorRef> refs() {
    return {{w1.data(), w1.size(), kType<T>}, {b1.data(), b1.size(), kType<T>},
            {w2.data(), w2.size(), kType<T>}, {b2.data(), b2.size(), kType<T>}};
  }
};

// Forward one sample; fills hidden activations and class probabilities; returns the argmax.
template <typename T>
int forward(const Model<T>& m, const T* x, T* h, T* p) {
  for (int j = 0; j < kHidden; ++j) h[j] = m.b1[j];
  for (int i = 0; i < kIn; ++i)
    if (x[i] != 0)
      for (int j = 0; j < kHidden; ++j) h[j] += x[i] * m.w1[i * kHidden + j];
  for (int j = 0; j < kHidden; ++j) h[j] = std::max(h[j], T(0));
  T mx = T(-1e30), sum = 0;
  for (int k = 0; k < kOut; ++k) {
    p[k] = m.b2[k];
    for (int j = 0; j < kHidden; ++j) p[k] += h[j] * m.w2[j * kOut + k];
    mx = std::max(mx, p[k]);
  }
  for (int k = 0; k < kOut; ++k) sum += (p[k] = std::exp(p[k] - mx));
  for (int k = 0; k < kOut; ++k) p[k] /= sum;
  return static_cast<int>(std::max_element(p, p + kOut) - p);
}

// Adds the gradient of one sample's loss, times `scale`, into g.
template <typename T>
void backward(const Model<T>& m, const T* x, int y, T scale, Model<T>& g) {
  T h[kHidden], p[kOut], dh[kHidden] = {};
  forward(m, x, h, p);
  p[y] -= 1;
  for (int k = 0; k < kOut; ++k) {
    T d = p[k] * scale;
    g.b2[k] += d;
    for (int j = 0; j < kHidden; ++j) {
      g.w2[j * kOut + k] += h[j] * d;
      dh[j] += m.w2[j * kOut + k] * d;
    }
  }
  for (int j = 0; j < kHidden; ++j) dh[j] = h[j] > 0 ? dh[j] : 0;
  for (int j = 0; j < kHidden; ++j) g.b1[j] += dh[j];
  for (int i = 0; i < kIn; ++i)
    if (x[i] != 0)
      for (int j = 0; j < kHidden; ++j) g.w1[i * kHidden + j] += x[i] * dh[j];
}

template <typename T>
double accuracy(const Model<T>& m, const Data<T>& d) {
  size_t ok = 0;
  T h[kHidden], p[kOut];
  for (size_t i = 0; i < d.n; ++i) ok += forward(m, &d.x[i * kIn], h, p) == d.y[i];
  return static_cast<double>(ok) / static_cast<double>(d.n);
}

struct Options {
  int epochs = 3;
  size_t batch = 128, limit = 0;
  float lr32 = 0.05f;  // --lr as each dtype reads it
  double lr64 = 0.05;
  bool float64 = false;
  std::string save;
  int die_rank = -1;
  size_t die_step = 10;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *flag = argv[i], *v = argv[i + 1];
    if (!std::strcmp(flag, "--epochs")) o.epochs = std::atoi(v);
    else if (!std::strcmp(flag, "--batch")) o.batch = std::strtoul(v, nullptr, 10);
    else if (!std::strcmp(flag, "--lr")) o.lr32 = std::strtof(v, nullptr), o.lr64 = std::strtod(v, nullptr);
    else if (!std::strcmp(flag, "--limit")) o.limit = std::strtoul(v, nullptr, 10);
    else if (!std::strcmp(flag, "--dtype") && !std::strcmp(v, "float32")) o.float64 = false;
    else if (!std::strcmp(flag, "--dtype") && !std::strcmp(v, "float64")) o.float64 = true;
    else if (!std::strcmp(flag, "--dtype")) throw std::invalid_argument(std::string("--dtype ") + v + ": float32 or float64");
    else if (!std::strcmp(flag, "--save")) o.save = v;
    else if (!std::strcmp(flag, "--die-rank")) o.die_rank = std::atoi(v);
    else if (!std::strcmp(flag, "--die-step")) o.die_step = std::strtoul(v, nullptr, 10);
    else throw std::invalid_argument(std::string("unknown option ") + flag);
  }
  if ((argc - 1) % 2 || o.batch == 0) throw std::invalid_argument("usage: see the top of train_mlp.cc");
  return o;
}

// Rank 0's --save: m's weights to path, through path.tmp renamed over it, so that a failed save
// leaves no half-written file under the name asked for.
template <typename T>
void save(Model<T>& m, const std::string& path) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot write " + path + " (as " + tmp + "): " + std::strerror(errno));
  bool ok = true;
  for (const auto& r : m.refs()) ok = ok && std::fwrite(r.data, sizeof(T), r.count, f) == r.count;
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot write " + path + ": " + std::strerror(err));
  }
}

template <typename T>
void train_model(const Options& opt) {
  const size_t batch = opt.batch;
  const T lr = std::is_same_v<T, double> ? static_cast<T>(opt.lr64) : static_cast<T>(opt.lr32);
  const char* dir = std::getenv("FASHION_MNIST");
  int rank = libtrain::rank(), size = libtrain::size();
  auto train = load<T>(dir ? dir : "/usr/share/datasets/fashion-mnist", "train", opt.limit);
  auto test = load<T>(dir ? dir : "/usr/share/datasets/fashion-mnist", "t10k");
  if (rank == 0)
    std::printf("training on %d ranks (%s bootstrap, %d on this node), %zu samples, global batch %zu\n",
                size, libtrain::bootstrap_method().c_str(), libtrain::local_size(), train.n, batch);
  std::fflush(stdout);
  Model<T> m, g;
  // Drawn as floats in either dtype: float64 starts from float32's initial weights.
  std::mt19937 rng(42u + static_cast<unsigned>(rank));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& w : m.w1) w = static_cast<T>(nd(rng) * std::sqrt(2.0f / kIn));
  for (auto& w : m.w2) w = static_cast<T>(nd(rng) * std::sqrt(2.0f / kHidden));
  libtrain::broadcast_parameters(m.refs());
  libtrain::GradientReducer reducer(libtrain::world());
  std::vector<size_t> perm(train.n);
  const T scale = static_cast<T>(size) / static_cast<T>(batch);
  double acc = 0;
  size_t global_step = 0;
  for (int epoch = 0; epoch < opt.epochs; ++epoch) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(static_cast<unsigned>(epoch)));  // same everywhere
    for (size_t start = 0; start + batch <= train.n; start += batch, ++global_step) {
      if (rank == opt.die_rank && global_step == opt.die_step) {
        std::printf("rank %d: killing myself (SIGKILL) at step %zu\n", rank, global_step);
        std::fflush(stdout);
        ::kill(::getpid(), SIGKILL);
      }
      for (auto* v : {&g.w1, &g.b1, &g.w2, &g.b2}) std::fill(v->begin(), v->end(), T(0));
      for (size_t i = start + static_cast<size_t>(rank); i < start + batch; i += static_cast<size_t>(size))
        backward(m, &train.x[perm[i] * kIn], train.y[perm[i]], scale, g);
      reducer.reduce(g.refs());
      auto mr = m.refs(), gr = g.refs();
      for (size_t t = 0; t < mr.size(); ++t)
        for (size_t i = 0; i < mr[t].count; ++i) static_cast<T*>(mr[t].data)[i] -= lr * static_cast<T*>(gr[t].data)[i];
    }
    if (rank == 0) {  // the others go on to the next allreduce and wait there
      acc = accuracy(m, test);
      std::printf("epoch %d: test accuracy %.4f\n", epoch + 1, acc);
      std::fflush(stdout);
    }
  }
  libtrain::world().barrier();
  if (rank == 0 && !opt.save.empty()) save(m, opt.save);
  if (rank == 0) std::printf("final test accuracy %.4f after %d epochs on %d ranks\n", acc, opt.epochs, size);
}

// The libtrain error class, for messages like Python's ("PeerError: libtrain: ...").
const char* error_kind(const std::exception& e) {
  if (dynamic_cast<const libtrain::PeerError*>(&e)) return "PeerError";
  if (dynamic_cast<const libtrain::TimeoutError*>(&e)) return "TimeoutError";
  if (dynamic_cast<const libtrain::MismatchError*>(&e)) return "MismatchError";
  if (dynamic_cast<const libtrain::InvalidArgument*>(&e)) return "InvalidArgument";
  if (dynamic_cast<const libtrain::SystemError*>(&e)) return "SystemError";
  if (dynamic_cast<const libtrain::Error*>(&e)) return "Error";
  return "error";
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options opt = parse(argc, argv);
    libtrain::init();
    if (opt.float64) train_model<double>(opt);
    else train_model<float>(opt);
    libtrain::shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::string who = libtrain::is_initialized() ? "rank " + std::to_string(libtrain::rank()) : "rank ?";
    std::fprintf(stderr, "train_mlp: %s: %s: %s\n", who.c_str(), error_kind(e), e.what());
    return 1;
  }
}
