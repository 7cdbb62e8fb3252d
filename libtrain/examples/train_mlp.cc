// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// C++ data-parallel trainer: a 784-hidden-10 MLP on Fashion-MNIST with libtrain. Each rank
// takes its share of every global batch, GradientReducer averages the gradients, rank 0
// reports test accuracy. Usage (FASHION_MNIST=dir overrides the data folder):
//   train_mlp [--epochs N] [--batch GLOBAL] [--lr F] [--limit SAMPLES] [--die-rank K --die-step S]
// --die-rank makes rank K SIGKILL itself at global step S (to test failure handling).
#include <signal.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
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

struct Data {
  std::vector<float> x;
  std::vector<int> y;
  size_t n = 0;
};

Data load(const std::string& dir, const std::string& prefix, size_t limit = 0) {
  auto img = read_gz(dir + "/" + prefix + "-images-idx3-ubyte.gz");
  auto lab = read_gz(dir + "/" + prefix + "-labels-idx1-ubyte.gz");
  Data d;
  d.n = lab.size() - 8;
  if (limit && limit < d.n) d.n = limit;
  d.x.resize(d.n * kIn);
  d.y.resize(d.n);
  for (size_t i = 0; i < d.x.size(); ++i) d.x[i] = img[16 + i] / 255.0f;
  for (size_t i = 0; i < d.n; ++i) d.y[i] = lab[8 + i];
  return d;
}

struct Model {
  std::vector<float> w1 = std::vector<float>(kIn * kHidden), b1 = std::vector<float>(kHidden),
                     w2 = std::vector<float>(kHidden * kOut), b2 = std::vector<float>(kOut);
  std::vector<libtrain::TensorRef> refs() {
    return {{w1.data(), w1.size(), libtrain::DataType::kFloat32}, {b1.data(), b1.size(), libtrain::DataType::kFloat32},
            {w2.data(), w2.size(), libtrain::DataType::kFloat32}, {b2.data(), b2.size(), libtrain::DataType::kFloat32}};
  }
};

// Forward one sample; fills hidden activations and class probabilities; returns the argmax.
int forward(const Model& m, const float* x, float* h, float* p) {
  for (int j = 0; j < kHidden; ++j) h[j] = m.b1[j];
  for (int i = 0; i < kIn; ++i)
    if (x[i] != 0)
      for (int j = 0; j < kHidden; ++j) h[j] += x[i] * m.w1[i * kHidden + j];
  for (int j = 0; j < kHidden; ++j) h[j] = std::max(h[j], 0.0f);
  float mx = -1e30f, sum = 0;
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
void backward(const Model& m, const float* x, int y, float scale, Model& g) {
  float h[kHidden], p[kOut], dh[kHidden] = {};
  forward(m, x, h, p);
  p[y] -= 1;
  for (int k = 0; k < kOut; ++k) {
    float d = p[k] * scale;
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

double accuracy(const Model& m, const Data& d) {
  size_t ok = 0;
  float h[kHidden], p[kOut];
  for (size_t i = 0; i < d.n; ++i) ok += forward(m, &d.x[i * kIn], h, p) == d.y[i];
  return static_cast<double>(ok) / static_cast<double>(d.n);
}

struct Options {
  int epochs = 3;
  size_t batch = 128, limit = 0;
  float lr = 0.05f;
  int die_rank = -1;
  size_t die_step = 10;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *flag = argv[i], *v = argv[i + 1];
    if (!std::strcmp(flag, "--epochs")) o.epochs = std::atoi(v);
    else if (!std::strcmp(flag, "--batch")) o.batch = std::strtoul(v, nullptr, 10);
    else if (!std::strcmp(flag, "--lr")) o.lr = std::strtof(v, nullptr);
    else if (!std::strcmp(flag, "--limit")) o.limit = std::strtoul(v, nullptr, 10);
    else if (!std::strcmp(flag, "--die-rank")) o.die_rank = std::atoi(v);
    else if (!std::strcmp(flag, "--die-step")) o.die_step = std::strtoul(v, nullptr, 10);
    else throw std::invalid_argument(std::string("unknown option ") + flag);
  }
  if ((argc - 1) % 2 || o.batch == 0) throw std::invalid_argument("usage: see the top of train_mlp.cc");
  return o;
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
    size_t batch = opt.batch;
    const char* dir = std::getenv("FASHION_MNIST");
    libtrain::init();
    int rank = libtrain::rank(), size = libtrain::size();
    Data train = load(dir ? dir : "/usr/share/datasets/fashion-mnist", "train", opt.limit);
    Data test = load(dir ? dir : "/usr/share/datasets/fashion-mnist", "t10k");
    if (rank == 0)
      std::printf("training on %d ranks (%s bootstrap, %d on this node), %zu samples, global batch %zu\n",
                  size, libtrain::bootstrap_method().c_str(), libtrain::local_size(), train.n, batch);
    std::fflush(stdout);
    Model m, g;
    std::mt19937 rng(42u + static_cast<unsigned>(rank));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& w : m.w1) w = nd(rng) * std::sqrt(2.0f / kIn);
    for (auto& w : m.w2) w = nd(rng) * std::sqrt(2.0f / kHidden);
    libtrain::broadcast_parameters(m.refs());
    libtrain::GradientReducer reducer(libtrain::world());
    std::vector<size_t> perm(train.n);
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
        for (auto* v : {&g.w1, &g.b1, &g.w2, &g.b2}) std::fill(v->begin(), v->end(), 0.0f);
        for (size_t i = start + static_cast<size_t>(rank); i < start + batch; i += static_cast<size_t>(size))
          backward(m, &train.x[perm[i] * kIn], train.y[perm[i]], static_cast<float>(size) / static_cast<float>(batch), g);
        reducer.reduce(g.refs());
        auto mr = m.refs(), gr = g.refs();
        for (size_t t = 0; t < mr.size(); ++t)
          for (size_t i = 0; i < mr[t].count; ++i)
            static_cast<float*>(mr[t].data)[i] -= opt.lr * static_cast<float*>(gr[t].data)[i];
      }
      if (rank == 0) {  // the others go on to the next allreduce and wait there
        acc = accuracy(m, test);
        std::printf("epoch %d: test accuracy %.4f\n", epoch + 1, acc);
        std::fflush(stdout);
      }
    }
    libtrain::world().barrier();
    if (rank == 0) std::printf("final test accuracy %.4f after %d epochs on %d ranks\n", acc, opt.epochs, size);
    libtrain::shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::string who = libtrain::is_initialized() ? "rank " + std::to_string(libtrain::rank()) : "rank ?";
    std::fprintf(stderr, "train_mlp: %s: %s: %s\n", who.c_str(), error_kind(e), e.what());
    return 1;
  }
}
