// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// weightsync-bench: time per full weight sync (trainer rank 0 -> every other rank) for benchmark
// layouts, over a sweep of buffer size B, ring slots K and modes, side by side with a raw
// ncclBroadcast of the same bytes measured in the same processes in the same run.
//
//   weightsync_bench [--np 2] [--layout dense8b,moe30b,small1b,lora8b,synthetic:<n>x<bytes>]
//                    [--buffer-size 16M,64M,256M,1G,2G] [--num-buffers 1,2,3]
//                    [--mode packed,zerocopy,unpacked,unpacked-zc] [--direct 0,32M]
//                    [--protocol weightsync|vllm] [--warmup 3] [--iters 10] [--json FILE]
//                    [--backend nccl|ipc|p2p] [--copy-streams 2] [--piece 0] [--non-blocking]
//                    [--ipc-wait poll|block] [--ipc-control shm|tcp] [--tp 2] [--tp-rank 0]
//
// The launcher starts --np processes of itself (one GPU each, rank % device count), which meet
// at a TCP rendezvous on 127.0.0.1. Each iteration: the consumers poison their destinations, all
// ranks meet at a barrier, then CUDA events (and the host clock) time the sync on every rank; the
// iteration's time is the maximum over ranks. Every iteration's received bytes are verified on
// the device (bit-exact, per tensor) and counted in #wrong. Modes:
//   packed       chunks through the ring; load_weights copies each view into its parameter
//   zerocopy     chunks through the ring; destinations given, single tensors received in place
//   unpacked     one broadcast per tensor into a slot; load_weights copies it
//   unpacked-zc  one broadcast per tensor, straight from the source into the destination
//   mapped       zerocopy into vLLM's parameters of TP rank --tp-rank of --tp (fused qkv and
//                gate_up, sharded, vocab-parallel embeddings) through the loading planner and the
//                Qwen3 map (dense layouts: dense8b, small1b); in place where a tensor lands whole,
//                else one batched gather per chunk. Verified against the same plan run locally.
// With --backend ipc (both processes on GPU 0) or p2p (rank r on GPU r), the consumer pulls from
// the producer's memory through CUDA IPC (copy engines, no NCCL kernel):
//   zerocopy     pulled from the producer's tensors straight into the destinations
//   packed       views into the producer's memory; load_weights copies each into its parameter
//   staged       the producer stages every tensor in its exported slot ring; pulled from there
// The baseline is then raw-nccl (p2p: ncclBroadcast of the same bytes on the same two GPUs) or
// raw-copy (ipc: one device-local cudaMemcpyAsync of the same bytes on the consumer). ipc also
// times raw-ipc, the raw transfer over the transport itself, with no protocol: the consumer copies
// the producer's bytes through a CUDA IPC mapping, each side's stream ordered after the other's
// through interprocess events, with one shared-memory flag each way (the producer's "go", each
// consumer's "copy enqueued"): what an ncclBroadcast does on this transport. It is the baseline of
// a sync's fixed cost (#25: extra time per sync against one raw transfer); raw-copy stays the
// ratios' basis (a copy's bandwidth).
// The model's tensors lie in one arena at 256-byte aligned offsets. Where that padding adds more
// than 1% (tiny504: 504 x 64 B in 129 KiB), the arena's broadcast (raw-nccl-arena / raw-copy-arena)
// moves far more than the payload, and the ratio's baseline is one broadcast (or copy) of exactly
// the payload's bytes from a buffer of that size (raw-nccl / raw-copy), checked the same way.
// Every timed sync is checked; a model of up to 256 MiB is checked in one launch against a
// reference copy (one launch per tensor, 504 of them for tiny504, slowed the next sync: run 114).
#include <weightsync/config.hpp>
#include <weightsync/layouts.hpp>
#include <weightsync/packed_broadcast.hpp>
#include <weightsync/sealed_metadata.hpp>
#if WEIGHTSYNC_BENCH_GPU
#include <weightsync/cuda/delta_source.hpp>
#include <weightsync/cuda/event.hpp>
#include <weightsync/cuda/fp8_source.hpp>
#include <weightsync/cuda/mps.hpp>
#include <weightsync/cuda/stream.hpp>
#include <weightsync/ipc.hpp>
#include <weightsync/loading.hpp>
#include <weightsync/nccl/communicator.hpp>
#elif WEIGHTSYNC_HAS_CUDA
#include <cuda_runtime_api.h>  // (only to say why the GPU rows are not here)
#endif

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "host_bench.hpp"
#include "shm_barrier.hpp"
#include "process.hpp"
#if WEIGHTSYNC_BENCH_GPU
#include "gpu_model.hpp"
#endif

namespace ws = weightsync;
using nlohmann::json;

namespace {

// Set by the launcher in ranks that share a GPU (NCCL's net transport between them).
constexpr const char* kSharedGpuVar = "WS_BENCH_SHARED_GPU";
constexpr const char* kSharedNote = "shared GPU, NCCL net transport: functional, not a link figure";
[[maybe_unused]] bool shared_gpu() {
  const char* v = std::getenv(kSharedGpuVar);
  return v && std::string(v) == "1";
}
// Set by the launcher in the ranks it starts: they run on this host (a shared-memory barrier can
// join them).
constexpr const char* kOneHostVar = "WS_BENCH_ONE_HOST";
[[maybe_unused]] bool one_host() {
  const char* v = std::getenv(kOneHostVar);
  return v && std::string(v) == "1";
}

struct Args {
  int np = 2;
  std::vector<std::string> layouts{"dense8b"};
  std::vector<std::size_t> buffer_sizes{std::size_t{1} << 30};
  std::vector<int> num_buffers{2};
  std::vector<std::string> modes{"packed"};
  std::vector<std::size_t> direct{0};
  std::vector<int> checksum{0};  // --checksum off,on: rows without and with per-chunk checksums
  std::string protocol = "weightsync";
  std::string backend = "nccl";
  int copy_streams = 2;                      // IpcOptions::copy_streams
  bool ipc_block = false;                    // IpcOptions::blocking_waits (--ipc-wait block)
  bool ipc_tcp = false;  // IpcOptions::shared_memory_control = false (--ipc-control tcp)
  std::string barrier = "auto";  // --barrier: ipc's per-iteration barrier (shm, tcp, auto)
  bool sealed = true;             // --metadata sealed|span: SealedMetadata or a span
  std::size_t piece = 0;  // IpcOptions::piece_bytes (0: automatic)
  int warmup = 3;
  int iters = 10;
  std::string json_path;
  int timeout_s = 120;
  std::size_t gap = 0;   // bytes between tensors: 0 = one flat buffer, > 0 = scattered parameters
  bool blocking = true;  // blocking NCCL launches (NcclOptions::blocking; --non-blocking: off)
  bool fp8 = false;      // --fp8: also send the layout as its FP8 checkpoint (nccl backend)
  std::vector<double> delta;  // --delta: densities of the delta rows (nccl backend)
  bool delta_always = false;  // --delta-mode always (default auto)
  bool paired = false;   // --paired: each mode row timed in turn with its raw baseline
  int tp = 2;            // --mode mapped: the consumer is TP rank tp_rank of tp
  int tp_rank = 0;
  // set by the launcher for its children
  int rank = -1;
  int port = 0;
  int raw_port = 0;
  int ipc_port = 0;
  std::vector<std::string> argv;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t a = 0;
  while (a <= s.size()) {
    const auto b = s.find(',', a);
    out.push_back(s.substr(a, b == std::string::npos ? std::string::npos : b - a));
    if (b == std::string::npos) break;
    a = b + 1;
  }
  return out;
}

// "64M", "1G", "4096", "1.5K": binary units (K = 2^10, M = 2^20, G = 2^30). `what`: the option.
std::size_t parse_size(const std::string& s, const std::string& what) {
  std::size_t idx = 0;
  double v = 0;
  try {
    v = std::stod(s, &idx);
  } catch (const std::exception&) {
    throw std::invalid_argument(what + ": '" + s + "' is not a size (e.g. 4096, 64M, 1G)");
  }
  std::size_t mult = 1;
  if (idx < s.size()) {
    switch (s[idx]) {
      case 'K':
      case 'k':
        mult = std::size_t{1} << 10;
        break;
      case 'M':
      case 'm':
        mult = std::size_t{1} << 20;
        break;
      case 'G':
      case 'g':
        mult = std::size_t{1} << 30;
        break;
      default:
        throw std::invalid_argument(what + ": '" + s + "' is not a size (e.g. 4096, 64M, 1G)");
    }
    ++idx;
    if (idx < s.size() && (s[idx] == 'i' || s[idx] == 'I')) ++idx;  // "MiB"-style
    if (idx < s.size() && (s[idx] == 'B' || s[idx] == 'b')) ++idx;
    if (idx != s.size())
      throw std::invalid_argument(what + ": '" + s + "' is not a size (e.g. 4096, 64M, 1G)");
  }
  if (!(v >= 0)) throw std::invalid_argument(what + ": '" + s + "' must not be negative");
  return static_cast<std::size_t>(v * static_cast<double>(mult));
}

// A whole number within [lo, hi] for option `what`.
int parse_int(const std::string& s, const std::string& what, int lo, int hi) {
  std::size_t idx = 0;
  long v = 0;
  try {
    v = std::stol(s, &idx);
  } catch (const std::exception&) {
    idx = 0;
  }
  if (idx == 0 || idx != s.size())
    throw std::invalid_argument(what + ": '" + s + "' is not a whole number");
  if (v < lo || v > hi)
    throw std::invalid_argument(what + ": must be in " + std::to_string(lo) + ".." +
                                std::to_string(hi) + ", got " + s);
  return static_cast<int>(v);
}

constexpr const char* kUsage =
    R"(weightsync_bench: time full weight syncs (rank 0 -> every other rank) for
benchmark layouts, beside a raw broadcast (or copy) of the same bytes in the same processes.
Every received byte is checked (#wrong); destinations are poisoned before each iteration.
Baselines: raw-nccl (ncclBroadcast), raw-host (host), and on ipc raw-copy (a device-local copy:
the ratios' basis) and raw-ipc (a copy through the IPC mapping, streams ordered through
interprocess events: the raw transfer over the transport, for a sync's fixed cost).

usage: weightsync_bench [options]
  --np N               ranks (processes), default 2; with fewer GPUs than ranks (or
                       WS_SHARE_GPU=1) NCCL ranks share GPUs over NCCL's socket transport:
                       functional figures, never link figures (every row says so)
  --backend B          nccl (default), ipc (two processes on GPU 0, CUDA IPC), p2p (GPU r,
                       copy engines), host (host memory + TCP; needs no GPU)
  --layout L,...       dense8b (default), moe30b, small1b, lora8b, tiny (one 4 KiB tensor),
                       tiny504 (504 x 64 B), synthetic:<count>x<bytes>
  --mode M,...         packed (default), zerocopy, unpacked, unpacked-zc; ipc/p2p: staged;
                       nccl/ipc: mapped (vLLM's TP-sharded parameters, --tp N --tp-rank R)
  --buffer-size S,...  B, the packing threshold (default 1G); sizes: 4096, 64M, 1G (binary)
  --num-buffers K,...  ring slots (default 2)
  --direct S,...       direct-tensor threshold (default 0: off)
  --checksum C,...     off (default), on: per-chunk checksums (TransferOptions::checksum; rows
                       "+ck"); "off,on" measures both in one run; ipc: on-ce copies with copy
                       engines, then digests (IpcOptions::checksum_copy = false; rows "+ck-ce")
  --protocol P         weightsync (default) or vllm (no handshake; vLLM's wire)
  --warmup N           untimed iterations (default 3)
  --iters N            timed iterations (default 10); the median is reported
  --json FILE          append one JSON object per row (nccl-tests keys)
  --timeout S          seconds for every wait (default 120)
  --gap S              bytes between tensors (default 0: one flat arena)
  --non-blocking       NCCL launches through a non-blocking communicator
  --paired             time each mode row in turn with the transport's raw transfer of exactly
                       the payload's bytes (raw-nccl; ipc: raw-ipc; host: raw-host), one of
                       each per iteration, alternating which goes first; prints the extra per
                       sync (row - raw, per iteration: median, and the share of iterations at
                       most one raw), so that a drift between passes cannot bias the ratio
  --fp8                nccl, ipc: after each bf16 row, the same sync with the trainer's tensors
                       quantized on the fly (Fp8Source: the linear projections as float8_e4m3fn
                       with 128x128 block scales, the rest bf16; nccl: into the producer's ring,
                       ipc: into one arena, a whole FP8 copy, since ipc pulls every tensor);
                       every received byte checked against the consumer's own quantization of
                       the same weights; also prints the wire bytes with lm_head quantized too
  --delta D[,D...]     nccl, ipc or host: after the bf16 rows, delta syncs (DeltaSource; on
                       the GPU with CudaDeltaCodec): both sides hold version v0, the trainer changes a
                       D share of the bf16 elements (one bit each, deterministic random
                       positions), encodes against its reference and sends the blobs; the
                       consumer applies them in place. Row time: encode + transfer + apply (max
                       over ranks) against the faster of the packed / zerocopy bf16 rows; every
                       received byte checked
                       against the consumer's own step
  --delta-mode M       auto (default: DeltaMode::automatic, told the link speed the packed row
                       measured: a link as fast as the diff sends whole) or always (a blob for
                       every changed tensor smaller than its blob)
  --copy-streams N, --piece S, --ipc-wait poll|block   ipc/p2p tuning
  --ipc-control shm|tcp  ipc/p2p: the per-sync messages through a shared-memory mailbox (default)
                       or TCP on loopback (IpcOptions::shared_memory_control)
  --metadata M         sealed (default: the layout as a SealedMetadata, its digest computed
                       once) or span (a std::span<const TensorMeta>: every sync compares the
                       list with the last one, a pass over every name and shape); mapped rows'
                       consumers take a span
  --barrier B          the bench's barrier before each timed iteration. shm: a spin on a
                       shared-memory counter, every rank leaves within about a microsecond (ranks
                       on one host only); tcp (ipc/p2p): messages, the producer released first,
                       its clock running one loopback latency (15-40 us under MPS) before the
                       consumers leave; nccl (nccl): an all-reduce, each rank leaving when it
                       completes there, the receiver up to ~20 us after the sender on the shared
                       GPU's socket transport (which shortens the raw broadcast's row by as
                       much); tcp on the host backend: one 1-byte broadcast from every rank;
                       auto (default): shm for ranks on one host (those --np starts,
                       unless --rank is given), except on a GPU shared without MPS (in time
                       slices, ranks that leave together make even the raw copy wait for the
                       other process's slice)
  -h, --help           this text
Output: nccl-tests-style table on stdout (lines starting with # are headers), progress on stderr.
)";

[[maybe_unused]] std::string size_label(std::size_t b) {
  if (b == 0) return "0";
  if (b % (std::size_t{1} << 30) == 0) return std::to_string(b >> 30) + "G";
  if (b % (std::size_t{1} << 20) == 0) return std::to_string(b >> 20) + "M";
  if (b % (std::size_t{1} << 10) == 0) return std::to_string(b >> 10) + "K";
  return std::to_string(b);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(k + " needs a value");
      return argv[++i];
    };
    if (k == "--np")
      a.np = parse_int(val(), k, 1, 1024);
    else if (k == "--layout")
      a.layouts = split(val());
    else if (k == "--buffer-size") {
      a.buffer_sizes.clear();
      for (auto& s : split(val())) a.buffer_sizes.push_back(parse_size(s, k));
    } else if (k == "--num-buffers") {
      a.num_buffers.clear();
      for (auto& s : split(val())) a.num_buffers.push_back(parse_int(s, k, 1, 8));
    } else if (k == "--mode")
      a.modes = split(val());
    else if (k == "--direct") {
      a.direct.clear();
      for (auto& s : split(val())) a.direct.push_back(parse_size(s, k));
    } else if (k == "--checksum") {
      a.checksum.clear();
      for (auto& c : split(val())) {
        if (c != "off" && c != "on" && c != "on-ce")
          throw std::invalid_argument("--checksum takes off, on and/or on-ce, got '" + c + "'");
        a.checksum.push_back(c == "off" ? 0 : c == "on" ? 1 : 2);
      }
    } else if (k == "--protocol")
      a.protocol = val();
    else if (k == "--backend")
      a.backend = val();
    else if (k == "--copy-streams")
      a.copy_streams = parse_int(val(), k, 1, 64);
    else if (k == "--piece")
      a.piece = parse_size(val(), k);
    else if (k == "--ipc-wait") {
      const std::string w = val();
      if (w != "poll" && w != "block")
        throw std::invalid_argument("--ipc-wait must be poll or block, got " + w);
      a.ipc_block = w == "block";
    } else if (k == "--metadata") {
      const std::string v = val();
      if (v != "sealed" && v != "span")
        throw std::invalid_argument("--metadata: sealed or span, got " + v);
      a.sealed = v == "sealed";
    } else if (k == "--ipc-control") {
      const std::string w = val();
      if (w != "shm" && w != "tcp")
        throw std::invalid_argument("--ipc-control must be shm or tcp, got " + w);
      a.ipc_tcp = w == "tcp";
    } else if (k == "--warmup")
      a.warmup = parse_int(val(), k, 0, 1000000);
    else if (k == "--iters")
      a.iters = parse_int(val(), k, 1, 1000000);
    else if (k == "--json")
      a.json_path = val();
    else if (k == "--timeout")
      a.timeout_s = parse_int(val(), k, 1, 86400);
    else if (k == "--gap")
      a.gap = parse_size(val(), k);
    else if (k == "--tp")
      a.tp = parse_int(val(), k, 1, 1024);
    else if (k == "--tp-rank")
      a.tp_rank = parse_int(val(), k, 0, 1023);
    else if (k == "--delta") {
      for (const auto& s : split(val())) {
        std::size_t used = 0;
        double d = -1;
        try {
          d = std::stod(s, &used);
        } catch (const std::exception&) {
        }
        if (used != s.size() || !(d > 0.0 && d <= 1.0))
          throw std::invalid_argument("--delta: '" + s + "' is not a density in (0, 1]");
        a.delta.push_back(d);
      }
    } else if (k == "--delta-mode") {
      const std::string m = val();
      if (m != "auto" && m != "always")
        throw std::invalid_argument("--delta-mode must be auto or always, got " + m);
      a.delta_always = m == "always";
    } else if (k == "--paired") {
      a.paired = true;
      a.argv.push_back(k);
      continue;
    } else if (k == "--fp8") {
      a.fp8 = true;
      a.argv.push_back(k);
      continue;
    } else if (k == "--blocking" || k == "--non-blocking") {
      a.blocking = k == "--blocking";
      a.argv.push_back(k);
      continue;
    } else if (k == "--rank") {
      a.rank = parse_int(val(), k, 0, 1023);
      continue;
    } else if (k == "--port") {
      a.port = parse_int(val(), k, 1, 65535);
      continue;
    } else if (k == "--barrier") {
      const std::string v = val();
      if (v != "shm" && v != "tcp" && v != "nccl" && v != "auto")
        throw std::invalid_argument("--barrier: shm, tcp, nccl or auto, got " + v);
      a.barrier = v;
    } else if (k == "--raw-port") {
      a.raw_port = parse_int(val(), k, 1, 65535);
      continue;
    } else if (k == "--ipc-port") {
      a.ipc_port = parse_int(val(), k, 1, 65535);
      continue;
    } else if (k == "-h" || k == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else
      throw std::invalid_argument("unknown option " + k + " (weightsync_bench --help lists them)");
    if (k != "--rank" && k != "--port") {
      a.argv.push_back(k);
      a.argv.push_back(argv[i]);
    }
  }
  if (a.iters < 1) throw std::invalid_argument("--iters must be >= 1");
  if (a.backend != "nccl" && a.backend != "ipc" && a.backend != "p2p" && a.backend != "host")
    throw std::invalid_argument("--backend must be nccl, ipc, p2p or host, got " + a.backend);
  for (const auto& l : a.layouts) (void)ws::layouts::by_name(l);  // names a bad one now
  if (a.fp8 && a.backend != "nccl" && a.backend != "ipc")
    throw std::invalid_argument("--fp8 needs --backend nccl or ipc");
  if (!a.delta.empty() && a.backend != "nccl" && a.backend != "host" && a.backend != "ipc")
    throw std::invalid_argument("--delta needs --backend nccl, ipc or host");
  if (a.backend == "host")
    for (const auto& m : a.modes)
      if (m != "packed" && m != "zerocopy" && m != "unpacked" && m != "unpacked-zc")
        throw std::invalid_argument(
            "--mode " + m + " is not a host mode (packed, zerocopy, unpacked, unpacked-zc)");
  for (const auto& m : a.modes)
    if (m != "packed" && m != "zerocopy" && m != "unpacked" && m != "unpacked-zc" &&
        m != "staged" && m != "mapped")
      throw std::invalid_argument("--mode: unknown mode " + m +
                                  " (weightsync_bench --help lists them)");
  if (a.tp < 1 || a.tp_rank < 0 || a.tp_rank >= a.tp)
    throw std::invalid_argument("--tp-rank must be in [0, --tp), got " + std::to_string(a.tp_rank) +
                                " of " + std::to_string(a.tp));
  return a;
}

struct Stats {
  double median = 0, min = 0, p99 = 0, stdev = 0, cv_pct = 0;
  std::vector<double> times;
};

Stats stats_of(std::vector<double> t) {
  Stats s;
  s.times = t;
  std::sort(t.begin(), t.end());
  const std::size_t n = t.size();
  s.median = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
  s.min = t.front();
  s.p99 = t[std::min(n - 1, static_cast<std::size_t>(std::ceil(0.99 * double(n))) - 1)];
  const double mean = std::accumulate(t.begin(), t.end(), 0.0) / double(n);
  double var = 0;
  for (double x : t) var += (x - mean) * (x - mean);
  s.stdev = n > 1 ? std::sqrt(var / double(n - 1)) : 0;
  s.cv_pct = mean > 0 ? 100 * s.stdev / mean : 0;
  return s;
}

std::string iso_now() {
  char buf[64];
  const std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

#if WEIGHTSYNC_BENCH_GPU
// One child process: a rank.
// --mode mapped, the consumer's side: vLLM's parameters of one TP rank for a dense Qwen3-style
// layout, the load plan into them, and a reference computed by the same plan from a local copy of
// the producer's bytes (the plan itself is checked against plain loops in the tests).
class Mapped {
 public:
  // The Qwen3 configuration of a dense layout (nullopt: experts, no embeddings, or no layers).
  static std::optional<ws::ModelConfig> config_of(const std::vector<ws::TensorMeta>& metas) {
    auto find = [&](const std::string& n) -> const ws::TensorMeta* {
      for (const auto& m : metas)
        if (m.name == n) return &m;
      return nullptr;
    };
    const auto* embed = find("model.embed_tokens.weight");
    const auto* q = find("model.layers.0.self_attn.q_proj.weight");
    const auto* k = find("model.layers.0.self_attn.k_proj.weight");
    const auto* gate = find("model.layers.0.mlp.gate_proj.weight");
    const auto* qn = find("model.layers.0.self_attn.q_norm.weight");
    if (!embed || !q || !k || !gate || !qn) return std::nullopt;
    ws::ModelConfig c;
    c.hidden = embed->shape[1];
    c.head_dim = qn->shape[0];
    c.n_heads = q->shape[0] / c.head_dim;
    c.n_kv_heads = k->shape[0] / c.head_dim;
    c.intermediate = gate->shape[0];
    c.tie_word_embeddings = find("lm_head.weight") == nullptr;
    return c;
  }

  Mapped(const std::vector<ws::TensorMeta>& metas, const ws::ModelConfig& c, ws::TpConfig tp,
         int device, std::size_t gap, cudaStream_t s) {
    int layers = 0;
    while (has(metas, ws::detail::cat("model.layers.", layers, ".input_layernorm.weight")))
      ++layers;
    const std::int64_t vocab = metas.front().shape[0];  // model.embed_tokens.weight
    params_ = make_params(c, layers, vocab, tp, device, bufs_);
    ref_params_ = make_params(c, layers, vocab, tp, device, ref_bufs_);
    plan_ = ws::plan_loading(metas, params_, ws::qwen3_map(c, tp));
    // The reference: the same plan over a local copy of the producer's bytes (pattern 1).
    ws_test::DeviceModel local(metas, device, gap);
    local.fill(1, s);
    const auto ref = ws::plan_loading(metas, ref_params_, ws::qwen3_map(c, tp));
    std::vector<ws::TensorView> views;
    for (std::size_t i = 0; i < metas.size(); ++i) {
      if (void* d = ref.destination(metas[i]))
        ws::detail::check(
            cudaMemcpyAsync(d, local.data(i), metas[i].nbytes(), cudaMemcpyDeviceToDevice, s),
            "cudaMemcpyAsync");
      else
        views.push_back({&metas[i], local.data(i), metas[i].nbytes()});
    }
    ref.load(std::span<const ws::TensorView>(views), s);
    ws::detail::check(cudaMalloc(reinterpret_cast<void**>(&counter_), sizeof *counter_),
                      "cudaMalloc");
    ws::detail::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  }
  ~Mapped() { cudaFree(counter_); }
  Mapped(const Mapped&) = delete;
  Mapped& operator=(const Mapped&) = delete;

  const ws::LoadPlan& plan() const { return *plan_; }
  std::size_t param_bytes() const {
    std::size_t n = 0;
    for (const auto& b : bufs_) n += b.size();
    return n;
  }
  void poison(cudaStream_t s) {
    for (auto& b : bufs_)
      ws::detail::check(cudaMemsetAsync(b.data(), 0xCD, b.size(), s), "cudaMemsetAsync");
  }
  // Bytes of the parameters that differ from the reference.
  unsigned long long count_wrong(cudaStream_t s) {
    ws::detail::check(cudaMemsetAsync(counter_, 0, sizeof *counter_, s), "cudaMemsetAsync");
    for (std::size_t i = 0; i < bufs_.size(); ++i)
      ws_pattern::count_diff(bufs_[i].data(), ref_bufs_[i].data(), bufs_[i].size(), counter_, s);
    unsigned long long host = 0;
    ws::detail::check(cudaMemcpyAsync(&host, counter_, sizeof host, cudaMemcpyDeviceToHost, s),
                      "cudaMemcpyAsync");
    ws::detail::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    return host;
  }

 private:
  static bool has(const std::vector<ws::TensorMeta>& metas, const std::string& n) {
    return std::any_of(metas.begin(), metas.end(), [&](const auto& m) { return m.name == n; });
  }
  // vLLM's parameter names and per-rank shapes for a dense Qwen3 model (bf16 throughout).
  static std::vector<ws::ParamInfo> make_params(const ws::ModelConfig& c, int layers,
                                                std::int64_t vocab, ws::TpConfig tp, int device,
                                                std::vector<ws::DeviceBuffer>& bufs) {
    std::vector<ws::ParamInfo> out;
    const std::int64_t H = c.hidden, hd = c.head_dim, n = tp.size;
    const std::int64_t kv_heads = c.n_kv_heads >= n ? c.n_kv_heads / n : 1;
    const std::int64_t pad = c.vocab_padding > 0 ? c.vocab_padding : 1;
    const std::int64_t vocab_rows = (vocab + pad - 1) / pad * pad / n;
    auto add = [&](std::string name, std::vector<std::int64_t> shape) {
      const std::size_t bytes = ws::TensorMeta{name, ws::DType::bfloat16, shape}.nbytes();
      bufs.emplace_back(bytes, device);
      out.push_back({std::move(name), bufs.back().data(), ws::DType::bfloat16, std::move(shape)});
    };
    bufs.reserve(static_cast<std::size_t>(8 * layers + 3));
    add("model.embed_tokens.weight", {vocab_rows, H});
    for (int l = 0; l < layers; ++l) {
      const std::string p = ws::detail::cat("model.layers.", l, ".");
      add(p + "self_attn.qkv_proj.weight", {(c.n_heads / n + 2 * kv_heads) * hd, H});
      add(p + "self_attn.o_proj.weight", {H, c.n_heads * hd / n});
      add(p + "self_attn.q_norm.weight", {hd});
      add(p + "self_attn.k_norm.weight", {hd});
      add(p + "mlp.gate_up_proj.weight", {2 * c.intermediate / n, H});
      add(p + "mlp.down_proj.weight", {H, c.intermediate / n});
      add(p + "input_layernorm.weight", {H});
      add(p + "post_attention_layernorm.weight", {H});
    }
    add("model.norm.weight", {H});
    if (!c.tie_word_embeddings) add("lm_head.weight", {vocab_rows, H});
    return out;
  }

  std::vector<ws::DeviceBuffer> bufs_, ref_bufs_;
  std::vector<ws::ParamInfo> params_, ref_params_;
  std::optional<ws::LoadPlan> plan_;
  unsigned long long* counter_ = nullptr;
};

class Bench {
 public:
  explicit Bench(const Args& a)
      : a_(a), device_(select_device(a)), stream_(device_), start_(device_), end_(device_) {
    ws::RendezvousOptions o;
    o.address = "127.0.0.1";
    o.port = a.port;
    o.rank = a.rank;
    o.world_size = a.np;
    o.timeout = std::chrono::seconds(a.timeout_s);
    ws::NcclOptions n;
    n.device = device_;
    n.timeout = std::chrono::seconds(a.timeout_s);
    n.blocking = a.blocking;
    n.connect_all = true;  // both ranks are this library's
    if (a.backend == "ipc") {
      host_ = true;  // both ranks on one GPU: no NCCL (it refuses two ranks on one device)
    } else {
      comm_.emplace(ws::NcclCommunicator::connect(o, n));
      // The baseline runs on a communicator of its own with blocking launches: the fastest way
      // NCCL broadcasts, whatever mode the library's communicator uses.
      o.port = a.raw_port;
      n.blocking = true;
      raw_comm_.emplace(ws::NcclCommunicator::connect(o, n));
    }
    ws::detail::check(cudaMalloc(reinterpret_cast<void**>(&scratch_), 64), "cudaMalloc");
    if (a.backend != "nccl") {
      o.port = a.ipc_port;
      ws::IpcOptions io;
      io.same_gpu = a.backend == "ipc";
      io.copy_streams = a.copy_streams;
      io.piece_bytes = a.piece;
      io.blocking_waits = a.ipc_block;
      io.shared_memory_control = !a.ipc_tcp;
      ipc_.emplace(o, device_, io, std::chrono::seconds(a.timeout_s));
      if (host_)  // the raw-ipc row's flags
        ipc_flags_.emplace("/ws_bench_flags_" + std::to_string(a.ipc_port), a.np, a.rank,
                           std::chrono::seconds(a.timeout_s), [this] {
                             char b = 0;
                             for (int r = 0; r < a_.np; ++r) ipc_->control().broadcast(&b, 1, r);
                           });
      if (a.barrier == "shm" || (a.barrier == "auto" && ws::mps_active()))
        shm_barrier_.emplace("/ws_bench_barrier_" + std::to_string(a.ipc_port), a.np, a.rank,
                             std::chrono::seconds(a.timeout_s), [this] {
                               char b = 0;  // (every rank has opened the segment after this)
                               for (int r = 0; r < a_.np; ++r) ipc_->control().broadcast(&b, 1, r);
                             });
    } else if (a.barrier == "shm" ||
               (a.barrier == "auto" && one_host() && (!shared_gpu() || ws::mps_active()))) {
      // nccl: an all-reduce releases each rank when it completes there, the receiver after the
      // sender (up to ~20 us on the socket transport), which shortens the raw row's clock on the
      // receiver by as much (run 91). A shared-memory spin starts every rank's clock together.
      shm_barrier_.emplace("/ws_bench_barrier_" + std::to_string(a.ipc_port), a.np, a.rank,
                           std::chrono::seconds(a.timeout_s), [this] { comm_barrier(); });
    }
  }
  ~Bench() {
    for (cudaEvent_t e : raw_ipc_events_)
      if (e != nullptr) cudaEventDestroy(e);
    cudaFree(scratch_);
  }

  int run() {
    header();
    int failures = 0;
    for (const auto& layout : a_.layouts) failures += run_layout(layout);
    if (rank() == 0) {
      std::printf("# Out of bounds values : %d %s\n", failures, failures ? "FAILED" : "OK");
      if (!bw_.empty())
        std::printf("# Avg bus bandwidth    : %.2f\n",
                    std::accumulate(bw_.begin(), bw_.end(), 0.0) / double(bw_.size()));
      std::fflush(stdout);
    }
    return failures ? 1 : 0;
  }

 private:
  static int select_device(const Args& a) {
    int ndev = 0;
    ws::detail::check(cudaGetDeviceCount(&ndev), "cudaGetDeviceCount");
    const int d = a.backend == "ipc" ? 0 : a.rank % ndev;
    ws::detail::check(cudaSetDevice(d), "cudaSetDevice");
    return d;
  }
  int rank() const { return a_.rank; }
  cudaStream_t s() const { return stream_.get(); }

  // Every rank meets here; afterwards all start within a few microseconds.
  void barrier() {
    if (shm_barrier_) {
      ws::detail::check(cudaStreamSynchronize(s()), "cudaStreamSynchronize");
      shm_barrier_->wait();
      return;
    }
    if (host_) {
      // Every consumer reports in, then the producer releases them and is the first to leave: it
      // starts its sync while they come out of the barrier, as a trainer calls send when the
      // server is ready. (Released the other way round, a consumer's clock ran for one TCP
      // latency before the producer had left the barrier: up to ~80 us under MPS, run 47.)
      ws::detail::check(cudaStreamSynchronize(s()), "cudaStreamSynchronize");
      for (int r = 1; r <= a_.np; ++r) {
        char b = 0;
        ipc_->control().broadcast(&b, 1, r % a_.np);
      }
      return;
    }
    comm_barrier();
  }
  void comm_barrier() {
    comm_->all_reduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, s());
    comm_->synchronize(s());
  }
  // Every rank's `n` doubles, through the host control channel (the ipc backend).
  std::vector<double> host_gather(const double* x, int n) {
    std::vector<double> all(static_cast<std::size_t>(a_.np * n));
    for (int r = 0; r < a_.np; ++r) {
      double* d = all.data() + r * n;
      if (r == rank()) std::copy(x, x + n, d);
      ipc_->control().broadcast(d, sizeof(double) * static_cast<std::size_t>(n), r);
    }
    return all;
  }

  // Max over ranks of two doubles.
  std::pair<double, double> max_over_ranks(double x, double y) {
    double h[2] = {x, y};
    if (host_) {
      const auto all = host_gather(h, 2);
      for (int r = 0; r < a_.np; ++r) {
        h[0] = std::max(h[0], all[static_cast<std::size_t>(2 * r)]);
        h[1] = std::max(h[1], all[static_cast<std::size_t>(2 * r + 1)]);
      }
      return {h[0], h[1]};
    }
    ws::detail::check(cudaMemcpyAsync(scratch_, h, sizeof h, cudaMemcpyHostToDevice, s()),
                      "cudaMemcpyAsync");
    comm_->all_reduce(scratch_, scratch_, 2, ncclFloat64, ncclMax, s());
    ws::detail::check(cudaMemcpyAsync(h, scratch_, sizeof h, cudaMemcpyDeviceToHost, s()),
                      "cudaMemcpyAsync");
    comm_->synchronize(s());
    return {h[0], h[1]};
  }
  double sum_over_ranks(double x) {
    if (host_) {
      const auto all = host_gather(&x, 1);
      return std::accumulate(all.begin(), all.end(), 0.0);
    }
    ws::detail::check(cudaMemcpyAsync(scratch_, &x, sizeof x, cudaMemcpyHostToDevice, s()),
                      "cudaMemcpyAsync");
    comm_->all_reduce(scratch_, scratch_, 1, ncclFloat64, ncclSum, s());
    ws::detail::check(cudaMemcpyAsync(&x, scratch_, sizeof x, cudaMemcpyDeviceToHost, s()),
                      "cudaMemcpyAsync");
    comm_->synchronize(s());
    return x;
  }

  void header() {
    int v = 0;
    ncclGetVersion(&v);
    int rt = 0;
    cudaRuntimeGetVersion(&rt);
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, device_);
    char bus[32] = {};
    cudaDeviceGetPCIBusId(bus, sizeof bus, device_);
    device_name_ = prop.name;
    char host[64] = {};
    ::gethostname(host, sizeof host - 1);
    // Gather every rank's line through rank 0 (a 256-byte broadcast from each rank).
    char line[256] = {};
    std::snprintf(line, sizeof line, "#  Rank %2d Pid %6d on %.40s device %2d [%.20s] %.80s",
                  rank(), static_cast<int>(::getpid()), host, device_, bus, prop.name);
    devices_ = json::array();
    for (int r = 0; r < a_.np; ++r) {
      char buf[256];
      std::memcpy(buf, line, sizeof buf);
      if (host_) {
        ipc_->control().broadcast(buf, sizeof buf, r);
      } else {
        ws::DeviceBuffer d(sizeof buf, device_);
        ws::detail::check(cudaMemcpyAsync(d.data(), buf, sizeof buf, cudaMemcpyHostToDevice, s()),
                          "memcpy");
        comm_->broadcast(d.data(), sizeof buf, r, s());
        ws::detail::check(cudaMemcpyAsync(buf, d.data(), sizeof buf, cudaMemcpyDeviceToHost, s()),
                          "memcpy");
        comm_->synchronize(s());
      }
      lines_.push_back(buf);
    }
    nccl_version_ = v;
    cudart_ = rt;
    if (rank() != 0) return;
    std::printf("# weightsync-bench %s nccl-headers=%d nccl-library=%d cudart=%d\n",
                WEIGHTSYNC_VERSION_STRING, NCCL_VERSION_CODE, v, rt);
    std::printf(
        "# ranks: %d root: 0 warmup: %d iters: %d timing: cuda-events, max over ranks, median; "
        "backend: %s; protocol: %s; nccl launches: %s\n",
        a_.np, a_.warmup, a_.iters, a_.backend.c_str(), a_.protocol.c_str(),
        a_.blocking ? "blocking" : "non-blocking");
    if (shared_gpu()) {
      int ndev = 0;
      if (cudaGetDeviceCount(&ndev) != cudaSuccess) ndev = 0;
      if (ndev >= a_.np)  // (WS_SHARE_GPU=1 with a GPU per rank: the net transport, no sharing)
        std::printf("# transport: %s (%d ranks on %d GPUs, one each: %s)\n", kSharedNote, a_.np,
                    ndev, device_name_.c_str());
      else
        std::printf("# transport: %s (%d ranks share %d %s)\n", kSharedNote, a_.np, ndev,
                    device_name_.c_str());
    }
    if (shared_gpu() || a_.backend == "ipc") {
      std::printf("# mps: %s\n", ws::mps_note().c_str());
    }
    if (!ipc_)
      std::printf("# bench barrier: %s; metadata %s\n",
                  shm_barrier_ ? "shm (every rank's clock starts together)"
                               : "nccl (an all-reduce: each rank leaves when it completes there)",
                  a_.sealed ? "sealed" : "span");
    if (ipc_)
      std::printf(
          "# ipc: copy streams %d, piece %s, waits %s, control %s, bench barrier %s, metadata %s\n",
          a_.copy_streams, a_.piece ? size_label(a_.piece).c_str() : "auto",
          a_.ipc_block ? "block" : "poll", a_.ipc_tcp ? "tcp" : "shm", shm_barrier_ ? "shm" : "tcp",
          a_.sealed ? "sealed" : "span");
    for (const auto& l : lines_) std::printf("%s\n", l.c_str());
    std::fflush(stdout);
  }

  // A row timed in turn with its baseline (--paired, time_paired).
  struct Paired {
    Stats ev, wall;          // the row
    Stats raw_ev, raw_wall;  // its baseline
    Stats extra;             // per iteration: row - baseline (event time)
  };
  struct Row {
    std::string layout, impl;
    std::size_t size = 0, count = 0, chunks = 0, buffer = 0, direct = 0;
    int nbuf = 0;
    Stats ev, wall;
    unsigned long long wrong = 0;
    double ratio = 0;
    std::size_t ring_producer = 0, ring_consumer = 0;
  };

  void print_table_header(const std::string& layout, const std::vector<ws::TensorMeta>& metas,
                          std::size_t bytes) {
    if (rank() != 0) return;
    std::printf("#\n# layout: %s tensors: %zu bytes: %zu dtype: bf16 memory: %s\n", layout.c_str(),
                metas.size(), bytes,
                a_.gap ? ("scattered (gap " + size_label(a_.gap) + ")").c_str() : "contiguous");
    std::printf("#%13s %9s %7s %11s %5s %14s %10s %8s %8s %7s %7s %9s\n", "size", "tensors",
                "chunks", "buffer", "nbuf", "impl", "time", "algbw", "busbw", "#wrong", "vs_raw",
                "ring");
    std::printf("#%13s %9s %7s %11s %5s %14s %10s %8s %8s %7s %7s %9s\n", "(B)", "", "", "(B)", "",
                "", "(us)", "(GB/s)", "(GB/s)", "", "(%)", "(MB)");
    std::fflush(stdout);
  }

  // `paired` (--paired): the row's baseline timed in turn with it, and its wrong bytes.
  void emit(const Row& r, const Paired* paired = nullptr, unsigned long long paired_wrong = 0) {
    if (rank() != 0) return;
    const char* paired_impl = raw_comm_ ? "raw-nccl" : "raw-ipc";
    double within = 0;  // the share of iterations whose extra was at most that iteration's raw
    if (paired) {
      const auto& x = paired->extra.times;
      const auto& raw = paired->raw_ev.times;
      for (std::size_t i = 0; i < x.size(); ++i) within += x[i] <= raw[i] ? 1.0 : 0.0;
      within = x.empty() ? 0.0 : within / double(x.size());
    }
    const double algbw = double(r.size) / (r.ev.median * 1e-6) / 1e9;
    bw_.push_back(algbw);
    std::printf(" %13zu %9zu %7zu %11s %5s %14s %10.1f %8.2f %8.2f %7llu %7.1f %9.1f%s\n", r.size,
                r.count, r.chunks, r.buffer ? std::to_string(r.buffer).c_str() : "-",
                r.nbuf ? std::to_string(r.nbuf).c_str() : "-", r.impl.c_str(), r.ev.median, algbw,
                algbw, r.wrong, 100.0 * r.ratio,
                double(std::max(r.ring_producer, r.ring_consumer)) / 1e6,
                shared_gpu() ? (std::string("  # ") + kSharedNote).c_str() : "");
    if (paired)
      std::printf("#   paired with %s of %zu B, in turn each iteration: raw %.1f us (#wrong %llu), "
                  "this row %.1f us; extra (row - raw, per iteration) median %.1f us = %.2f raw, "
                  "at most one raw in %.0f%% of iterations\n",
                  paired_impl, r.size, paired->raw_ev.median, paired_wrong, paired->ev.median,
                  paired->extra.median,
                  paired->raw_ev.median > 0 ? paired->extra.median / paired->raw_ev.median : 0.0,
                  100.0 * within);
    std::fflush(stdout);
    if (a_.json_path.empty()) return;
    json j;
    j["version"] = 1;
    j["tool"] = "weightsync-bench";
    j["date"] = iso_now();
    j["args"] = a_.argv;
    j["device"] = device_name_;
    j["devices"] = lines_;
    j["nccl_version"] = nccl_version_;
    j["cuda_runtime"] = cudart_;
    j["layout"] = r.layout;
    j["memory"] = a_.gap ? "scattered" : "contiguous";
    j["gap_bytes"] = a_.gap;
    j["size"] = r.size;
    j["count"] = r.count;
    j["type"] = "bfloat16";
    j["root"] = 0;
    j["ranks"] = a_.np;
    j["chunks"] = r.chunks;
    j["buffer_size_bytes"] = r.buffer;
    j["num_buffers"] = r.nbuf;
    j["direct_threshold_bytes"] = r.direct;
    j["protocol"] = a_.protocol;
    j["backend"] = a_.backend;
    if (ipc_) {
      j["copy_streams"] = a_.copy_streams;
      j["ipc_wait"] = a_.ipc_block ? "block" : "poll";
      j["ipc_control"] = ipc_->shared_memory_control_active() ? "shm" : "tcp";
      j["piece_bytes"] = a_.piece;
    }
    j["bench_barrier"] = shm_barrier_ ? "shm" : ipc_ ? "tcp" : "nccl";
    j["nccl_blocking"] = a_.blocking;
    j["shared_gpu"] = shared_gpu();
    j["mps"] = ws::mps_active();
    if (shared_gpu()) j["note"] = kSharedNote;
    j["impl"] = r.impl;
    j["time"] = r.ev.median;
    j["wall_us"] = r.wall.median;
    j["alg_bw"] = algbw;
    j["bus_bw"] = algbw;
    j["nwrong"] = r.wrong;
    j["ratio_vs_raw"] = r.ratio;
    j["extra_device_bytes"] = {{"producer", r.ring_producer}, {"consumer", r.ring_consumer}};
    j["warmup_iters"] = a_.warmup;
    j["iters"] = a_.iters;
    j["stats"] = {{"min_us", r.ev.min},          {"p50_us", r.ev.median}, {"p99_us", r.ev.p99},
                  {"stdev_us", r.ev.stdev},      {"cv_pct", r.ev.cv_pct}, {"times_us", r.ev.times},
                  {"wall_p50_us", r.wall.median}};
    if (paired)
      j["paired"] = {{"raw_impl", paired_impl},
                     {"raw_p50_us", paired->raw_ev.median},
                     {"raw_times_us", paired->raw_ev.times},
                     {"raw_nwrong", paired_wrong},
                     {"extra_p50_us", paired->extra.median},
                     {"extra_vs_raw", paired->raw_ev.median > 0
                                          ? paired->extra.median / paired->raw_ev.median
                                          : 0.0},
                     {"within_one_raw", within}};
    std::ofstream(a_.json_path, std::ios::app) << j.dump() << "\n";
  }

  // Iteration i of a timed row: `before(i)` untimed, the barrier, then `body(i)` between two
  // events (and the host clock). Returns the max over ranks of (event us, host us).
  template <class Before, class Body>
  std::pair<double, double> time_once(Before& before, Body& body, int i) {
    before(i);
    barrier();
    start_.record(s());
    const auto t0 = std::chrono::steady_clock::now();
    body(i);
    end_.record(s());
    end_.synchronize();
    const double w =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    const double e = ws::TimedEvent::elapsed(start_, end_).count();
    return max_over_ranks(e, w);
  }

  // Times `body` warmup + iters times; `before` runs untimed before each iteration.
  template <class Before, class Body>
  std::pair<Stats, Stats> time_it(Before&& before, Body&& body) {
    std::vector<double> ev, wall;
    for (int i = 0; i < a_.warmup + a_.iters; ++i) {
      const auto [me, mw] = time_once(before, body, i);
      if (i >= a_.warmup) {
        ev.push_back(me);
        wall.push_back(mw);
      }
    }
    return {stats_of(ev), stats_of(wall)};
  }

  // --paired: a row and its raw baseline timed in turn, one of each per iteration (the row first
  // in even iterations, the baseline first in odd ones), so that both see the same machine: a
  // drift between two blocks of iterations (the raw rows moved by 40% between passes, run 130)
  // cannot make the row look cheaper or dearer than its baseline. `extra` is the median over
  // iterations of (row - baseline), each the max over ranks.
  template <class BeforeA, class BodyA, class BeforeB, class BodyB>
  Paired time_paired(BeforeA&& before_a, BodyA&& a, BeforeB&& before_b, BodyB&& b) {
    std::vector<double> ev[2], wall[2], extra;
    for (int i = 0; i < a_.warmup + a_.iters; ++i) {
      std::pair<double, double> t[2];
      for (int j = 0; j < 2; ++j) {
        const int which = (i % 2 == 0) ? j : 1 - j;
        t[which] = which == 0 ? time_once(before_a, a, i) : time_once(before_b, b, i);
      }
      if (i < a_.warmup) continue;
      for (int w = 0; w < 2; ++w) {
        ev[w].push_back(t[w].first);
        wall[w].push_back(t[w].second);
      }
      extra.push_back(t[0].first - t[1].first);
    }
    return {stats_of(ev[0]), stats_of(wall[0]), stats_of(ev[1]), stats_of(wall[1]),
            stats_of(extra)};
  }

  // --fp8: the same layout as its FP8 checkpoint, quantized on the producer as the pipeline
  // takes each tensor (Fp8Source + CudaFp8Quantizer, block 128 x 128 scales), straight into the
  // producer's ring slots (Fp8Source::iterate(workspace, options)), received into the consumer's
  // FP8 tensors (laid out in its bf16 model's arena, free once the bf16 rows are done: moe30b's two
  // ranks then fit one H200) and checked byte for byte, after every iteration, against the
  // consumer's own quantization of the same bf16 weights, tensor by tensor (the kernels are
  // checked against the host and torch in the tests).
  int run_fp8(const std::string& layout, const std::vector<ws::TensorMeta>& metas,
              ws_test::DeviceModel& model, const std::map<std::string, double>& bf16_time) {
    using Src = ws_test::ModelSource;
    const bool producer = rank() == 0;
    int failures = 0;
    ws::Fp8SourceOptions fo;
    fo.whole = ipc_.has_value();  // (ipc pulls every tensor of a sync at once)
    Src src{metas, model};
    ws::Fp8Source<Src, ws::CudaFp8Quantizer> fp8(src, fo, ws::CudaFp8Quantizer{s(), device_});
    const auto metas8 = fp8.metas();
    const auto total = [](const std::vector<ws::TensorMeta>& v) {
      std::size_t n = 0;
      for (const auto& m : v) n += m.nbytes();
      return n;
    };
    const std::size_t bytes8 = total(metas8);
    ws::Fp8SourceOptions with_lm = fo;  // the same with lm_head quantized too (from the layout)
    with_lm.include.push_back(R"(^lm_head\.weight$)");
    const std::size_t bytes8_lm = total(ws::Fp8Source<Src>(src, with_lm).metas());
    std::vector<std::size_t> off8;  // the consumer's FP8 tensors in its model's arena
    std::size_t extent8 = 0;
    for (const auto& m : metas8) {
      off8.push_back(extent8);
      extent8 += (m.nbytes() + 255) / 256 * 256;
    }
    if (extent8 > model.arena_bytes()) throw std::runtime_error("--fp8: the FP8 layout is larger");
    auto got = [&](std::size_t i) { return model.arena() + off8[i]; };
    std::size_t largest = 0;
    for (const auto& m : metas) largest = std::max(largest, m.nbytes());
    std::optional<ws::DeviceBuffer> scratch, qbuf, sbuf, counter;
    if (!producer) {
      scratch.emplace(largest, device_);
      qbuf.emplace(largest / 2 + 256, device_);
      sbuf.emplace(std::size_t{1} << 20, device_);
      counter.emplace(sizeof(unsigned long long), device_);
    }
    // Bytes of the received tensors that differ from the consumer's own quantization of the
    // producer's weights (pattern round 1), tensor by tensor.
    auto diff = [&]() -> unsigned long long {
      if (producer) return 0;
      auto* cnt = reinterpret_cast<unsigned long long*>(counter->data());
      ws::detail::check(cudaMemsetAsync(cnt, 0, sizeof *cnt, s()), "cudaMemsetAsync");
      std::size_t o = 0;
      for (std::size_t i = 0; i < metas.size(); ++i) {
        const auto nb = metas[i].nbytes();
        ws_pattern::fill(scratch->data(), nb, ws_test::tensor_seed(1, i), s());
        if (fp8.quantized(metas[i]))  // (what the producer holds: made finite below)
          ws_pattern::finite(scratch->data(), metas[i].numel(),
                             static_cast<unsigned>(ws::dtype_size(metas[i].dtype)), s());
        if (fp8.quantized(metas[i])) {
          if (metas8[o + 1].nbytes() > sbuf->size()) throw std::runtime_error("--fp8: scales");
          ws::quantize_fp8(metas[i], scratch->data(), fo.scaling, qbuf->data(),
                           reinterpret_cast<float*>(sbuf->data()), s());
          ws_pattern::count_diff(got(o), qbuf->data(), metas8[o].nbytes(), cnt, s());
          ws_pattern::count_diff(got(o + 1), sbuf->data(), metas8[o + 1].nbytes(), cnt, s());
          o += 2;
        } else {
          ws_pattern::count_diff(got(o), scratch->data(), nb, cnt, s());
          ++o;
        }
      }
      unsigned long long host = 0;
      ws::detail::check(cudaMemcpyAsync(&host, cnt, sizeof host, cudaMemcpyDeviceToHost, s()),
                        "cudaMemcpyAsync");
      ws::detail::check(cudaStreamSynchronize(s()), "cudaStreamSynchronize");
      return host;
    };
    // The producer's tensors that are quantized made finite and weight-like (random bits hold
    // inf / NaN, which send an FP8 block down the quantizer's exact slow path: real weights never
    // do); the bf16 rows are done with them.
    if (producer)
      for (std::size_t i = 0; i < metas.size(); ++i)
        if (fp8.quantized(metas[i]))
          ws_pattern::finite(model.data(i), metas[i].numel(),
                             static_cast<unsigned>(ws::dtype_size(metas[i].dtype)), s());
    ws::detail::check(cudaStreamSynchronize(s()), "cudaStreamSynchronize");
    for (const auto& mode : a_.modes) {
      if (ipc_ ? mode != "zerocopy" : (mode != "packed" && mode != "zerocopy")) continue;
      ws::TransferOptions opt;
      opt.buffer_size_bytes = a_.buffer_sizes.front();
      opt.num_buffers = a_.num_buffers.front();
      opt.protocol = a_.protocol == "vllm" ? ws::Protocol::vllm : ws::Protocol::weightsync;
      opt.timeout = std::chrono::seconds(a_.timeout_s);
      auto index = [&](const ws::TensorMeta* m) {
        return static_cast<std::size_t>(m - metas8.data());
      };
      if (mode == "zerocopy" && !producer)
        opt.destination = [&](const ws::TensorMeta& m) -> void* { return got(index(&m)); };
      ws::workspace_for<ws::NcclCommunicator> wsp{ws::CudaPolicy(device_)};
      ws::TransferStats st;
      unsigned long long wrong = 0;
      double pass_us = 0;  // ipc: the producer's whole quantize pass (host clock, last iteration)
      auto [ev, wall] = time_it(
          [&](int i) {
            if (i > 0) wrong += diff();
            if (!producer)
              ws::detail::check(cudaMemsetAsync(model.arena(), 0xCD, extent8, s()),
                                "cudaMemsetAsync");
          },
          [&](int) {
            if (producer) {
              opt.source_stream = s();
              if (ipc_) {
                const auto q0 = std::chrono::steady_clock::now();
                auto items = fp8.iterate();
                pass_us = std::chrono::duration<double, std::micro>(
                              std::chrono::steady_clock::now() - q0)
                              .count();
                st = ipc_->send(metas8, items, opt);
                return;
              }
              auto items = fp8.iterate(wsp, opt);
              st = ws::packed_broadcast_producer(metas8, items, *comm_, 0, opt, wsp);
              return;
            }
            auto land = [&](std::span<const ws::TensorView> batch, cudaStream_t stream) {
              for (const auto& v : batch)
                if (v.nbytes)
                  ws::detail::check(cudaMemcpyAsync(got(index(v.meta)), v.data, v.nbytes,
                                                    cudaMemcpyDeviceToDevice, stream),
                                    "cudaMemcpyAsync");
            };
            st = ipc_ ? ipc_->receive(metas8, opt, land)
                      : ws::packed_broadcast_consumer(metas8, *comm_, 0, land, opt, wsp);
          });
      wrong += diff();
      wrong = static_cast<unsigned long long>(sum_over_ranks(double(wrong)));
      const double extra = sum_over_ranks(producer ? double(fp8.arena_bytes()) : 0.0);
      const double ring = sum_over_ranks(producer ? double(wsp.device_bytes()) : 0.0);
      const double in_ring = sum_over_ranks(producer && fp8.in_ring() ? 1.0 : 0.0);
      Row r;
      r.layout = layout;
      r.impl = "fp8-" + mode;
      r.size = bytes8;
      r.count = metas8.size();
      r.chunks = st.chunks;
      r.buffer = opt.buffer_size_bytes;
      r.nbuf = opt.num_buffers;
      r.ev = ev;
      r.wall = wall;
      r.wrong = wrong;
      const auto b = bf16_time.find(mode);
      r.ratio = b != bf16_time.end() ? b->second / ev.median : 0.0;
      r.ring_producer = static_cast<std::size_t>(ring);
      emit(r);
      if (ipc_) {
        print_ipc_phases();
        // the same pass alone, both ranks idle: what the quantize itself costs
        const double last = sum_over_ranks(producer ? pass_us : 0.0);
        double alone = 0;
        if (producer) {
          ws::TimedEvent t_end;
          const auto q0 = std::chrono::steady_clock::now();
          (void)fp8.iterate();
          t_end.record(s());
          t_end.synchronize();
          alone = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - q0)
                      .count();
        }
        alone = sum_over_ranks(alone);
        if (rank() == 0)
          std::printf("#   fp8 ipc: the producer's quantize pass (fp8.iterate(), host clock): %.1f us "
                      "in the last timed sync, %.1f us alone\n", last, alone);
      }
      if (rank() == 0)
        std::printf(
            "#   fp8 %s: wire bytes %zu = %.4f x bf16 (%zu); with lm_head quantized too %zu = "
            "%.4f x; time %.1f us = %.3f x the bf16 row (vs_raw column: bf16 row / fp8 row); "
            "producer: %s, extra memory %.3f MB beyond its ring of %.1f MB\n",
            mode.c_str(), bytes8, double(bytes8) / double(model.bytes()), model.bytes(), bytes8_lm,
            double(bytes8_lm) / double(model.bytes()), ev.median,
            b != bf16_time.end() ? ev.median / b->second : 0.0,
            in_ring > 0 ? "quantized into the ring"
            : fo.whole  ? "one arena (a whole FP8 copy of the quantized tensors: ipc pulls them all)"
                        : "arenas",
            extra / 1e6, ring / 1e6);
      failures += wrong != 0;
    }
    return failures;
  }

  // Where each side's time went in the last ipc sync (ranks 0 and 1), printed by rank 0.
  // The ipc phases (IpcStats): the median over the syncs logged in phase_log_ (the timed ones of
  // the row just measured), else the last sync's.
  void print_ipc_phases() {
    std::vector<ws::IpcStats> log = std::exchange(phase_log_, {});
    const bool logged = !log.empty();
    if (!logged) log.push_back(ipc_->stats());
    auto med = [&](double ws::IpcStats::*f) {
      std::vector<double> v;
      for (const auto& x : log) v.push_back(x.*f);
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    using S = ws::IpcStats;
    double v[7] = {med(&S::ahead_us),   med(&S::plan_us), med(&S::prepare_us),
                   med(&S::enqueue_us), med(&S::wait_us), med(&S::status_us),
                   med(&S::pull_device_us)};
    for (double& d : v) d = sum_over_ranks(rank() == 1 ? d : 0.0);
    double p[6] = {med(&S::check_us),     med(&S::source_us),  med(&S::place_us),
                   med(&S::send_plan_us), med(&S::staging_us), med(&S::outcomes_us)};
    for (double& d : p) d = sum_over_ranks(rank() == 0 ? d : 0.0);
    if (rank() == 0) {
      std::printf(
          "#   producer us (%s): check %.1f, source %.1f, place %.1f, send plan %.1f, staging "
          "%.1f, outcomes %.1f; control %s\n",
          logged ? ws::detail::cat("median of ", log.size()).c_str() : "last sync", p[0], p[1],
          p[2], p[3], p[4], p[5], ipc_->shared_memory_control_active() ? "shm" : "tcp");
      std::printf(
          "#   consumer us: ahead %.1f, plan %.1f, prepare %.1f, enqueue %.1f, wait %.1f, status "
          "%.1f; pull on device %.1f (sampled)\n",
          v[0], v[1], v[2], v[3], v[4], v[5], v[6]);
    }
  }
  std::vector<ws::IpcStats> phase_log_;  // see print_ipc_phases

  // --delta: delta syncs of the layout. Both sides start from v0 (the pattern of round 1); the
  // trainer's step changes a `density` share of its bf16 elements; DeltaSource (CudaDeltaCodec)
  // encodes against its reference (seeded with v0 before each iteration, untimed) and sends the
  // blobs and whole tensors through the packed pipeline; the consumer's UpdateReceiver applies
  // them in place into its parameters. Checked against the consumer's own step of v0.
  int run_delta(const std::string& layout, const std::vector<ws::TensorMeta>& metas,
                ws_test::DeviceModel& model, const std::map<std::string, double>& full_time) {
    using Src = ws_test::ModelSource;
    for (const auto& m : metas)
      if (ws::dtype_size(m.dtype) != 2)
        throw std::invalid_argument("--delta: layout " + layout + " has a tensor that is not 2-byte");
    const bool producer = rank() == 0;
    int failures = 0;
    ws_test::DeviceModel base(metas, device_, a_.gap);
    base.fill(1, s());
    std::optional<ws_test::DeviceModel> want;
    if (!producer) want.emplace(metas, device_, a_.gap);
    std::map<std::string, std::size_t> index;
    for (std::size_t i = 0; i < metas.size(); ++i) index[metas[i].name] = i;
    auto copy_all = [&](const ws_test::DeviceModel& to, const ws_test::DeviceModel& from) {
      ws::detail::check(cudaMemcpyAsync(to.arena(), from.arena(), from.arena_bytes(),
                                        cudaMemcpyDeviceToDevice, s()),
                        "cudaMemcpyAsync");
    };
    auto step = [&](const ws_test::DeviceModel& m, double density, std::uint64_t seed) {
      for (std::size_t i = 0; i < metas.size(); ++i)
        ws_pattern::perturb(m.data(i), metas[i].numel(), 2, density, seed + i, s());
    };
    ws::TransferOptions opt;
    opt.buffer_size_bytes = a_.buffer_sizes.front();
    opt.num_buffers = a_.num_buffers.front();
    opt.protocol = a_.protocol == "vllm" ? ws::Protocol::vllm : ws::Protocol::weightsync;
    opt.timeout = std::chrono::seconds(a_.timeout_s);
    ws::workspace_for<ws::NcclCommunicator> wsp{ws::CudaPolicy(device_)};
    Src src{metas, model};
    // the baseline: the faster full row of packed and zerocopy (ipc: zerocopy lands in place, as
    // a delta round's whole tensors do)
    auto full = full_time.find("packed");
    if (const auto z = full_time.find("zerocopy");
        z != full_time.end() && (full == full_time.end() || z->second < full->second))
      full = z;
    // DeltaMode::automatic, told the link's speed as the full packed row of this run measured it.
    ws::DeltaOptions dopt;
    if (a_.delta_always) dopt.mode = ws::DeltaMode::always;
    if (full != full_time.end() && full->second > 0)
      dopt.link_bytes_per_s = double(model.bytes()) / (full->second * 1e-6);
    ws::DeltaSource<Src, ws::CudaDeltaCodec> d(src, dopt, ws::CudaDeltaCodec(s(), device_));
    auto plain = ws::NcclUpdateInfo::from_metas(metas);
    plain.packed = true;
    // (converted once, as the full rows' plans are built once: a round's update differs from the
    // last only in its delta)
    const ws::UpdateRequest plain_req = ws::to_update_request(plain, ws::UpdateContext{});
    ws::DeviceBuffer sizes_dev((metas.size() + 1) * sizeof(std::int64_t), device_);
    for (std::size_t di = 0; di < a_.delta.size(); ++di) {
      const double density = a_.delta[di];
      const std::uint64_t seed = 7000 + 1000 * di;
      auto reset = [&] {  // every rank holds v0; the trainer then takes its step
        copy_all(model, base);
        if (producer) {
          ws::detail::check(cudaStreamSynchronize(s()), "cudaStreamSynchronize");
          d.seed("v0");
          step(model, density, seed);
        }
        ws::detail::check(cudaStreamSynchronize(s()), "cudaStreamSynchronize");
      };
      // The update info (HTTP in a real setup): the trainer's payload sizes and whether the round
      // is whole, broadcast before every round's transfer (inside the timed part: a receiver
      // cannot take a delta round before it knows its sizes). DeltaMode::automatic may decide a
      // round differently from the one before (it measures the diff's speed as it goes).
      auto announce = [&](std::vector<std::int64_t>& p) {
        if (ipc_) {  // (ipc: over the host control channel)
          ipc_->control().broadcast(p.data(), p.size() * sizeof(std::int64_t), 0);
          return;
        }
        ws::detail::check(cudaMemcpyAsync(sizes_dev.data(), p.data(), sizes_dev.size(),
                                          cudaMemcpyHostToDevice, s()),
                          "cudaMemcpyAsync");
        comm_->broadcast(sizes_dev.data(), sizes_dev.size(), 0, s());
        ws::detail::check(cudaMemcpyAsync(p.data(), sizes_dev.data(), sizes_dev.size(),
                                          cudaMemcpyDeviceToHost, s()),
                          "cudaMemcpyAsync");
        ws::detail::check(cudaStreamSynchronize(s()), "cudaStreamSynchronize");
      };
      auto payload_of = [&](const ws::UpdateRequest& got) {
        std::vector<std::int64_t> p(metas.size() + 1, 0);
        std::copy(got.delta->payload_bytes.begin(), got.delta->payload_bytes.end(), p.begin());
        p.back() = got.delta->base_version.empty() ? 1 : 0;
        return p;
      };
      bool whole_round = false;
      // the receiver's wire of the round (the last round's when the update is the same)
      ws::detail::UpdateWireCache wires;
      std::shared_ptr<const ws::detail::UpdateWire> wire;
      auto take = [&](std::vector<std::int64_t> p) {
        whole_round = p.back() != 0;
        p.pop_back();
        auto info = plain_req;
        info.delta = ws::DeltaUpdate{whole_round ? "" : "v0", ws::delta::kDefaultBucketElems,
                                     std::move(p), {}};
        wire = wires.get(info, "v0");
      };
      if (!producer) {
        copy_all(*want, base);
        step(*want, density, seed);
        ws::detail::check(cudaStreamSynchronize(s()), "cudaStreamSynchronize");
      }
      std::vector<double> encode_us, load_us;
      ws::TransferStats st;
      unsigned long long wrong = 0;
      auto diff = [&]() -> unsigned long long {
        return producer ? 0 : model.count_diff(*want, s());
      };
      double commit_us = 0;
      // host time of the last round before the transfer started, at the end of: prepare (the
      // producer), the announcement, the receiver's wire, everything (the receiver set up)
      double before_us[4] = {};
      auto [ev, wall] = time_it(
          [&](int i) {
            if (i > 0) wrong += diff();
            reset();
          },
          [&](int) {
            const auto lambda_start = std::chrono::steady_clock::now();
            auto since = [&] {
              return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() -
                                                               lambda_start)
                  .count();
            };
            auto mark_before = [&] { before_us[3] = since(); };
            if (producer) {
              const auto got = d.prepare("v1", plain_req);
              before_us[0] = since();
              auto p = payload_of(got);
              announce(p);
              before_us[1] = since();
              before_us[2] = since();  // (the producer sends its prepared wire: d.metas())
              encode_us.push_back(std::chrono::duration<double, std::micro>(d.stats().encode).count());
              opt.source_stream = s();
              auto items = d.iterate();
              const auto& wm = d.metas();
              mark_before();
              st = ipc_ ? ipc_->send(wm, items, opt)
                        : ws::packed_broadcast_producer(wm, items, *comm_, 0, opt, wsp);
              return;
            }
            std::vector<std::int64_t> p(metas.size() + 1, 0);
            before_us[0] = 0;
            announce(p);
            before_us[1] = since();
            take(std::move(p));
            before_us[2] = since();
            ws::detail::UpdateReceiver rx(
                wire, nullptr,
                [&](const ws::TensorMeta& m) -> void* { return model.data(index.at(m.name)); },
                true);
            auto o = opt;
            o.destination = rx.destination();
            auto load = rx.load();
            auto land = [&](std::span<const ws::TensorView> batch, cudaStream_t stream) {
              load(batch, stream);
            };
            mark_before();
            st = ipc_ ? ipc_->receive(rx.metas(), o, land)
                      : ws::packed_broadcast_consumer(rx.metas(), *comm_, 0, land, o, wsp);
            load_us.push_back(std::chrono::duration<double, std::micro>(st.load).count());
          });
      wrong += diff();
      std::uint64_t wire_bytes = 0;  // (the last round's)
      const auto& wire_metas = producer ? d.metas() : wire->metas;
      for (const auto& m : wire_metas) wire_bytes += m.nbytes();
      if (producer) {
        const auto t0 = std::chrono::steady_clock::now();
        d.commit();
        commit_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      }
      wrong = static_cast<unsigned long long>(sum_over_ranks(double(wrong)));
      auto med = [](std::vector<double> v) {
        if (v.empty()) return 0.0;
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      const auto [enc, ld] = max_over_ranks(med(encode_us), med(load_us));
      const double cmt = max_over_ranks(commit_us, 0).first;
      Row r;
      r.layout = layout;
      r.impl = "delta-" + std::to_string(density).substr(0, 6);
      r.size = wire_bytes;
      r.count = wire_metas.size();
      r.chunks = st.chunks;
      r.buffer = opt.buffer_size_bytes;
      r.nbuf = opt.num_buffers;
      r.ev = ev;
      r.wall = wall;
      r.wrong = wrong;
      r.ratio = full != full_time.end() ? full->second / ev.median : 0.0;
      emit(r);
      if (ipc_) print_ipc_phases();
      {
        double pb[4], cb[4];
        for (int j = 0; j < 4; ++j) {
          pb[j] = sum_over_ranks(rank() == 0 ? before_us[j] : 0.0);
          cb[j] = sum_over_ranks(rank() == 1 ? before_us[j] : 0.0);
        }
        if (rank() == 0)
          std::printf("#   delta host us from the round's start (last iteration): producer "
                      "prepared %.1f, announced %.1f, wire %.1f, sending %.1f; consumer "
                      "announced %.1f, wire %.1f, receiving %.1f\n",
                      pb[0], pb[1], pb[2], pb[3], cb[1], cb[2], cb[3]);
      }
      if (rank() == 0)
        std::printf(
            "#   delta %.4g: payload %zu B = %.3f%% of %zu; encode %.1f us = %.1f GB/s of source; "
            "apply (consumer load_weights) %.1f us = %.1f GB/s of payload; reference update "
            "%.1f us; sync %.1f us vs full %s %.1f us: %.3fx%s\n",
            density, static_cast<std::size_t>(wire_bytes), 100.0 * double(wire_bytes) / double(model.bytes()),
            model.bytes(), enc, enc > 0 ? double(model.bytes()) / enc / 1e3 : 0.0, ld,
            ld > 0 ? double(wire_bytes) / ld / 1e3 : 0.0, cmt, ev.median,
            full != full_time.end() ? full->first.c_str() : "-",
            full != full_time.end() ? full->second : 0.0, r.ratio,
            whole_round ? " (automatic: whole, the link is as fast as the diff)" : "");
      failures += wrong != 0;
    }
    return failures;
  }

  // raw-ipc (see the top of the file): `buf` is the producer's source (this rank's, exported) or
  // a consumer's destination; times warmup + iters transfers of its first `n` bytes, `before`
  // running untimed before each.
  template <class Before>
  std::pair<Stats, Stats> time_raw_ipc(std::byte* buf, std::size_t n, Before&& before) {
    return with_raw_ipc(buf, n, [&](auto& transfer) { return time_it(before, transfer); });
  }
  // Sets raw-ipc up for `buf` (above) and returns f(transfer), where transfer(i) enqueues one
  // raw-ipc transfer of its first `n` bytes; the mapping is closed after f.
  template <class F>
  auto with_raw_ipc(std::byte* buf, std::size_t n, F&& f) {
    const bool producer = rank() == 0;
    const auto np = static_cast<std::size_t>(a_.np);
    if (raw_ipc_events_.empty()) {  // once: every rank's event, its handle to the others
      raw_ipc_events_.assign(np, nullptr);
      ws::detail::check(cudaEventCreateWithFlags(&raw_ipc_events_[static_cast<std::size_t>(rank())],
                                                 cudaEventDisableTiming | cudaEventInterprocess),
                        "cudaEventCreateWithFlags(interprocess)");
      for (int r = 0; r < a_.np; ++r) {
        cudaIpcEventHandle_t h{};
        if (r == rank())
          ws::detail::check(cudaIpcGetEventHandle(&h, raw_ipc_events_[static_cast<std::size_t>(r)]),
                            "cudaIpcGetEventHandle");
        ipc_->control().broadcast(&h, sizeof h, r);
        if (r != rank() && (producer || r == 0))
          ws::detail::check(cudaIpcOpenEventHandle(&raw_ipc_events_[static_cast<std::size_t>(r)], h),
                            "cudaIpcOpenEventHandle");
      }
    }
    cudaIpcMemHandle_t h{};
    if (producer) ws::detail::check(cudaIpcGetMemHandle(&h, buf), "cudaIpcGetMemHandle");
    ipc_->control().broadcast(&h, sizeof h, 0);
    void* remote = nullptr;
    if (!producer)
      ws::detail::check(cudaIpcOpenMemHandle(&remote, h, cudaIpcMemLazyEnablePeerAccess),
                        "cudaIpcOpenMemHandle");
    const auto deadline = std::chrono::seconds(a_.timeout_s);
    auto spin = [&](std::atomic<std::uint64_t>& flag, std::uint64_t v) {
      const auto t0 = std::chrono::steady_clock::now();
      for (std::uint64_t k = 0; flag.load(std::memory_order_acquire) < v; ++k)
        if (k % 4096 == 4095 && std::chrono::steady_clock::now() - t0 > deadline)
          throw std::runtime_error("raw-ipc: the other side did not go on within the timeout");
    };
    auto& mine = raw_ipc_events_[static_cast<std::size_t>(rank())];
    auto transfer = [&](int) {
      const std::uint64_t g = ++raw_ipc_round_;  // (every rank runs as many)
      if (producer) {
        ws::detail::check(cudaEventRecord(mine, s()), "cudaEventRecord");
        ipc_flags_->slot(0).store(g, std::memory_order_release);
        for (std::size_t r = 1; r < np; ++r) {
          spin(ipc_flags_->slot(r), g);
          ws::detail::check(cudaStreamWaitEvent(s(), raw_ipc_events_[r], 0), "cudaStreamWaitEvent");
        }
        return;
      }
      spin(ipc_flags_->slot(0), g);
      ws::detail::check(cudaStreamWaitEvent(s(), raw_ipc_events_[0], 0), "cudaStreamWaitEvent");
      ws::detail::check(cudaMemcpyAsync(buf, remote, n, cudaMemcpyDeviceToDevice, s()),
                        "cudaMemcpyAsync(raw-ipc)");
      ws::detail::check(cudaEventRecord(mine, s()), "cudaEventRecord");
      ipc_flags_->slot(static_cast<std::size_t>(rank())).store(g, std::memory_order_release);
    };
    struct Unmap {  // (also when f throws: the bench then reports and exits)
      void* remote;
      cudaStream_t s;
      ~Unmap() {
        if (remote == nullptr) return;
        (void)cudaStreamSynchronize(s);
        (void)cudaIpcCloseMemHandle(remote);
      }
    } unmap{remote, s()};
    return f(transfer);
  }

  int run_layout(const std::string& layout) {
    const auto metas = ws::layouts::by_name(layout);
    // ipc: the list the syncs are given (--metadata); items and destinations point into it.
    const ws::SealedMetadata sealed(metas);
    const bool use_sealed = a_.sealed;
    const ws::TensorMeta* const listed = use_sealed ? sealed.metas().data() : metas.data();
    ws_test::DeviceModel model(metas, device_, a_.gap);
    const std::size_t bytes = model.bytes();
    print_table_header(layout, metas, bytes);
    const bool producer = rank() == 0;
    if (producer) model.fill(1, s());
    ws::detail::check(cudaStreamSynchronize(s()), "cudaStreamSynchronize");
    auto verify = [&]() -> unsigned long long { return producer ? 0 : model.count_wrong(1, s()); };
    auto poison = [&](int) {
      if (!producer) model.poison(s());
    };
    int failures = 0;
    std::map<std::string, double> bf16_time;  // mode -> median (us), for the --fp8 ratio

    // Raw ncclBroadcast of the model's bytes as one buffer (the arena; with --gap it also carries
    // the gaps, so raw moves slightly more than the payload and is verified the same way; see
    // below for layouts of tensors smaller than the arena's alignment).
    Row raw;
    const bool exact_raw = model.extent() > bytes + bytes / 100;
    {
      unsigned long long wrong = 0;
      // ipc (one GPU): the baseline is one device-local copy of the same bytes on the consumer.
      std::optional<ws_test::DeviceModel> local;
      if (host_ && !producer) {
        local.emplace(metas, device_, a_.gap);
        local->fill(1, s());
      }
      auto [ev, wall] = time_it(poison, [&](int) {
        if (raw_comm_)
          raw_comm_->broadcast(model.arena(), model.extent(), 0, s());
        else if (local)
          ws::detail::check(cudaMemcpyAsync(model.arena(), local->arena(), model.extent(),
                                            cudaMemcpyDeviceToDevice, s()),
                            "cudaMemcpyAsync");
      });
      wrong = static_cast<unsigned long long>(sum_over_ranks(double(verify())));
      raw.layout = layout;
      raw.impl = raw_comm_ ? "raw-nccl" : "raw-copy";
      if (exact_raw) raw.impl += "-arena";
      raw.size = bytes;
      raw.count = metas.size();
      raw.chunks = 1;
      raw.ev = ev;
      raw.wall = wall;
      raw.wrong = wrong;
      raw.ratio = 1.0;
      if (!exact_raw) emit(raw);  // (else after the exact baseline, with its ratio to it)
      failures += wrong != 0;
      if (host_ && !exact_raw) {
        auto [iev, iwall] = time_raw_ipc(model.arena(), model.extent(), poison);
        Row ri = raw;
        ri.impl = "raw-ipc";
        ri.ev = iev;
        ri.wall = iwall;
        ri.wrong = static_cast<unsigned long long>(sum_over_ranks(double(verify())));
        ri.ratio = raw.ev.median > 0 ? iev.median / raw.ev.median : 0.0;
        emit(ri);
        failures += ri.wrong != 0;
      }
    }
    // Tensors smaller than the arena's 256-byte alignment (tiny504: 504 x 64 B in 129 KiB) make
    // the arena's broadcast move far more than the payload. The baseline is then one broadcast (or
    // copy) of exactly the payload's bytes, from a buffer of that size, checked the same way; the
    // arena's row stays for reference (renamed raw-nccl-arena / raw-copy-arena).
    // The exact-bytes baselines' buffer (and --paired's): `packed`, of exactly the payload's
    // bytes, holds a seeded pattern on the producer; a consumer's is poisoned before each
    // transfer and checked after the row.
    const std::uint64_t seed = 0x7261770000000000ull + bytes;
    std::optional<ws::DeviceBuffer> packed_buf, counter, local_packed;
    if (exact_raw || a_.paired) {
      packed_buf.emplace(bytes, device_);
      counter.emplace(sizeof(unsigned long long), device_);
      if (producer) ws_pattern::fill(packed_buf->data(), bytes, seed, s());
      if (host_ && !producer) {
        local_packed.emplace(bytes, device_);
        ws_pattern::fill(local_packed->data(), bytes, seed, s());
      }
    }
    auto poison_packed = [&](int) {
      if (!producer)
        ws::detail::check(cudaMemsetAsync(packed_buf->data(), 0xCD, bytes, s()),
                          "cudaMemsetAsync");
    };
    // The consumer's wrong bytes in `packed`, summed over ranks.
    auto packed_wrong = [&]() -> unsigned long long {
      unsigned long long mine = 0;
      if (!producer) {
        auto* c = reinterpret_cast<unsigned long long*>(counter->data());
        ws::detail::check(cudaMemsetAsync(c, 0, sizeof *c, s()), "cudaMemsetAsync");
        ws_pattern::count_wrong(packed_buf->data(), bytes, seed, c, s());
        ws::detail::check(cudaMemcpyAsync(&mine, c, sizeof mine, cudaMemcpyDeviceToHost, s()),
                          "cudaMemcpyAsync");
        ws::detail::check(cudaStreamSynchronize(s()), "cudaStreamSynchronize");
      }
      return static_cast<unsigned long long>(sum_over_ranks(double(mine)));
    };
    if (exact_raw) {
      std::byte* const packed = packed_buf->data();
      auto [ev, wall] = time_it(
          poison_packed,
          [&](int) {
            if (raw_comm_)
              raw_comm_->broadcast(packed, bytes, 0, s());
            else if (local_packed)
              ws::detail::check(cudaMemcpyAsync(packed, local_packed->data(), bytes,
                                                cudaMemcpyDeviceToDevice, s()),
                                "cudaMemcpyAsync");
          });
      Row exact = raw;
      exact.impl = raw_comm_ ? "raw-nccl" : "raw-copy";
      exact.ev = ev;
      exact.wall = wall;
      exact.wrong = packed_wrong();
      raw.ratio = raw.ev.median > 0 ? ev.median / raw.ev.median : 0.0;  // the arena's, vs exact
      emit(raw);
      emit(exact);
      failures += exact.wrong != 0;
      raw = exact;  // (the ratio's basis)
      if (host_) {  // raw-ipc of exactly the payload's bytes, checked the same way
        auto [iev, iwall] = time_raw_ipc(packed, bytes, poison_packed);
        Row ri = exact;
        ri.impl = "raw-ipc";
        ri.ev = iev;
        ri.wall = iwall;
        ri.wrong = packed_wrong();
        ri.ratio = exact.ev.median > 0 ? iev.median / exact.ev.median : 0.0;
        emit(ri);
        failures += ri.wrong != 0;
      }
    }

    int config = 0;
    const int configs = static_cast<int>(a_.modes.size() * a_.buffer_sizes.size() *
                                         a_.num_buffers.size() * a_.direct.size() *
                                         a_.checksum.size());
    for (const auto& mode : a_.modes)
      for (const std::size_t b : a_.buffer_sizes)
        for (const int k : a_.num_buffers)
          for (const std::size_t direct : a_.direct)
          for (const int checksum : a_.checksum) {
            ++config;
            if (checksum && a_.protocol == "vllm") continue;  // vLLM's wire has no status frames
            if (checksum == 2 && !ipc_) continue;             // (an ipc setting)
            const bool unpacked = mode.rfind("unpacked", 0) == 0;
            if (unpacked && (b != a_.buffer_sizes.front() || direct != a_.direct.front())) continue;
            if (ipc_ && (unpacked || direct)) continue;  // not IPC modes
            if (!ipc_ && mode == "staged") continue;
            if (ipc_ && mode != "staged" &&
                (b != a_.buffer_sizes.front() || k != a_.num_buffers.front()))
              continue;  // B and K only shape the staged path
            if (direct && (unpacked || a_.protocol == "vllm")) continue;
            const bool mapped = mode == "mapped";
            const auto mcfg = mapped ? Mapped::config_of(metas) : std::nullopt;
            if (mapped && !mcfg) {
              if (rank() == 0)
                std::fprintf(stderr, "mapped: %s is not a dense Qwen3-style layout; skipped\n",
                             layout.c_str());
              continue;
            }
            if (rank() == 0)
              std::fprintf(stderr, "[%d/%d] %s %s B=%s K=%d direct=%s\n", config, configs,
                           layout.c_str(), mode.c_str(), size_label(b).c_str(), k,
                           size_label(direct).c_str());
            ws::TransferOptions opt;
            opt.packed = !unpacked;
            opt.buffer_size_bytes = b;
            opt.num_buffers = k;
            opt.direct_threshold_bytes = direct;
            opt.checksum = checksum != 0;
            opt.protocol = a_.protocol == "vllm" ? ws::Protocol::vllm : ws::Protocol::weightsync;
            opt.timeout = std::chrono::seconds(a_.timeout_s);
            const bool zc = mode == "zerocopy" || mode == "unpacked-zc" || mode == "staged";
            if (ipc_) ipc_->options().export_sources = mode != "staged";
            if (ipc_) ipc_->options().checksum_copy = checksum != 2;
            auto index = [&](const ws::TensorMeta* m) {
              return static_cast<std::size_t>(m - listed);
            };
            if (zc && !producer)
              opt.destination = [&](const ws::TensorMeta& m) -> void* {
                return model.data(index(&m));
              };
            std::optional<Mapped> mp;
            if (mapped && !producer) {
              mp.emplace(metas, *mcfg, ws::TpConfig{a_.tp_rank, a_.tp}, device_, a_.gap, s());
              opt.destination = mp->plan().destination_fn();
            }
            if (mapped) {  // what the plan does, from the consumer (rank 1)
              double c[3] = {0, 0, 0};
              if (mp)
                c[0] = double(mp->plan().in_place_count()),
                c[1] = double(mp->plan().gather_count()), c[2] = double(mp->param_bytes());
              for (double& d : c) d = sum_over_ranks(rank() == 1 ? d : 0.0);
              if (rank() == 0)
                std::printf(
                    "#   mapped to TP rank %d of %d: %.0f tensors in place, %.0f gathered, "
                    "%.0f parameter bytes\n",
                    a_.tp_rank, a_.tp, c[0], c[1], c[2]);
            }
            std::vector<ws::SourceTensorRef> items;
            for (std::size_t i = 0; i < metas.size(); ++i)
              items.push_back({listed + i, model.data(i)});
            ws::workspace_for<ws::NcclCommunicator> wsp{ws::CudaPolicy(device_)};
            unsigned long long wrong = 0;
            ws::TransferStats st;
            auto before_sync = [&](int i) {
              if (i > 0 && !producer)
                wrong += mp ? mp->count_wrong(s()) : model.count_wrong(1, s());
              if (mp)
                mp->poison(s());
              else
                poison(i);
            };
            auto sync = [&](int iter) {
              auto load = [&](std::span<const ws::TensorView> batch, cudaStream_t stream) {
                for (const auto& v : batch)
                  if (v.nbytes)
                    ws::detail::check(
                        cudaMemcpyAsync(model.data(index(v.meta)), v.data, v.nbytes,
                                        cudaMemcpyDeviceToDevice, stream),
                        "cudaMemcpyAsync");
              };
              if (ipc_ && producer) {
                opt.source_stream = s();
                st = use_sealed ? ipc_->send(sealed, items, opt) : ipc_->send(metas, items, opt);
              } else if (ipc_ && mp) {
                st = use_sealed ? ipc_->receive(sealed, opt, mp->plan().loader<cudaStream_t>())
                                : ipc_->receive(metas, opt, mp->plan().loader<cudaStream_t>());
              } else if (ipc_ && use_sealed) {
                st = ipc_->receive(sealed, opt, load);
              } else if (ipc_) {
                st = ipc_->receive(metas, opt, load);
              } else if (producer) {
                opt.source_stream = s();
                st = use_sealed ? ws::packed_broadcast_producer(sealed, items, *comm_, 0, opt, wsp)
                                : ws::packed_broadcast_producer(metas, items, *comm_, 0, opt, wsp);
              } else if (mp) {
                st = ws::packed_broadcast_consumer(metas, *comm_, 0,
                                                   mp->plan().loader<cudaStream_t>(), opt, wsp);
              } else if (use_sealed) {
                st = ws::packed_broadcast_consumer(sealed, *comm_, 0, load, opt, wsp);
              } else {
                st = ws::packed_broadcast_consumer(metas, *comm_, 0, load, opt, wsp);
              }
              if (ipc_ && iter >= a_.warmup) phase_log_.push_back(ipc_->stats());
            };
            Stats ev, wall;
            std::optional<Paired> paired;
            unsigned long long paired_wrong = 0;
            if (a_.paired) {
              // The transport's raw transfer of exactly the payload's bytes, in turn with the sync.
              std::byte* const packed = packed_buf->data();
              auto pair_with = [&](auto& raw_transfer) {
                return time_paired(before_sync, sync, poison_packed, raw_transfer);
              };
              if (raw_comm_) {
                auto raw_transfer = [&](int) { raw_comm_->broadcast(packed, bytes, 0, s()); };
                paired = pair_with(raw_transfer);
              } else {
                paired = with_raw_ipc(packed, bytes, pair_with);
              }
              paired_wrong = packed_wrong();
              ev = paired->ev;
              wall = paired->wall;
            } else {
              std::tie(ev, wall) = time_it(before_sync, sync);
            }
            wrong += mp ? mp->count_wrong(s()) : verify();
            wrong = static_cast<unsigned long long>(sum_over_ranks(double(wrong)));
            const std::size_t ring_mine =
                ipc_ ? (producer ? st.ring_bytes : 0) : wsp.device_bytes();
            const double ring_c = sum_over_ranks(producer ? 0.0 : double(ring_mine));
            std::string impl = mode;
            if (mapped) impl = ws::detail::cat("mapped-tp", a_.tp, "r", a_.tp_rank);
            if (direct) impl += "+d" + size_label(direct);
            if (checksum) impl += checksum == 2 ? "+ck-ce" : "+ck";
            Row r;
            r.layout = layout;
            r.impl = impl;
            r.size = bytes;
            r.count = metas.size();
            r.chunks = st.chunks;
            r.buffer = unpacked || (ipc_ && mode != "staged") ? 0 : b;
            r.nbuf = ipc_ && mode != "staged" ? 0 : k;
            r.direct = direct;
            r.ev = ev;
            r.wall = wall;
            r.wrong = wrong;
            r.ratio = raw.ev.median / ev.median;
            r.ring_producer = producer ? ring_mine : 0;
            r.ring_consumer = static_cast<std::size_t>(ring_c / double(std::max(1, a_.np - 1)));
            emit(r, paired ? &*paired : nullptr, paired_wrong);
            if (!mapped && !direct && !checksum) bf16_time[mode] = ev.median;
            failures += wrong != 0 || paired_wrong != 0;
            if (ipc_) {  // where each side's time went (median over the timed syncs)
              print_ipc_phases();
            } else if (a_.protocol == "weightsync") {  // TransferStats, ranks 0 and 1, last iteration
              auto us = [](std::chrono::nanoseconds d) { return double(d.count()) / 1e3; };
              double q[2][4];
              for (int who = 0; who < 2; ++who) {
                const double mine[4] = {us(st.handshake), us(st.data), us(st.finish), us(st.total)};
                for (int j = 0; j < 4; ++j) q[who][j] = sum_over_ranks(rank() == who ? mine[j] : 0.0);
              }
              if (rank() == 0)
                for (int who = 0; who < 2; ++who)
                  std::printf("#   %s host us (last iteration): handshake %.1f, data %.1f, finish "
                              "%.1f, total %.1f\n",
                              who == 0 ? "producer" : "consumer", q[who][0], q[who][1], q[who][2],
                              q[who][3]);
            }
          }
    if (a_.fp8) failures += run_fp8(layout, metas, model, bf16_time);
    if (!a_.delta.empty()) failures += run_delta(layout, metas, model, bf16_time);
    return failures;
  }

  Args a_;
  int device_;
  ws::CudaStream stream_;
  ws::TimedEvent start_, end_;
  std::optional<ws::NcclCommunicator> comm_;
  std::optional<ws::NcclCommunicator> raw_comm_;
  std::optional<ws_bench::ShmBarrier> shm_barrier_;  // ipc / p2p: --barrier shm
  std::optional<ws_bench::ShmBarrier> ipc_flags_;    // ipc on one GPU: raw-ipc's flags (slots)
  // raw-ipc: every rank's interprocess event, indexed by rank (this rank's own, the others'
  // opened from their handles; the producer opens every consumer's, a consumer the producer's)
  std::vector<cudaEvent_t> raw_ipc_events_;
  std::uint64_t raw_ipc_round_ = 0;
  std::optional<ws::IpcTransport> ipc_;
  bool host_ = false;  // coordinate over the IPC transport's control channel instead of NCCL
  float* scratch_ = nullptr;
  std::vector<std::string> lines_;
  json devices_;
  std::string device_name_;
  int nccl_version_ = 0, cudart_ = 0;
  std::vector<double> bw_;
};

#endif  // WEIGHTSYNC_BENCH_GPU

// --backend host: one rank of the host benchmark (host_bench.hpp), rows in the same table and
// JSON as the GPU backends; the baseline is raw-host, a HostCommunicator::broadcast of the same
// bytes over the same sockets.
int run_host(const Args& a) {
  host_bench::Options o;
  o.rank = a.rank;
  o.np = a.np;
  o.port = a.port;
  o.layouts = a.layouts;
  o.modes = a.modes;
  o.buffer_sizes = a.buffer_sizes;
  o.num_buffers = a.num_buffers;
  o.warmup = a.warmup;
  o.iters = a.iters;
  o.timeout_s = a.timeout_s;
  o.delta = a.delta;
  o.delta_always = a.delta_always;
  o.delta_note = [&](double density, std::size_t wire, std::size_t bytes, double enc, double app,
                     double commit, double sync, double full, bool whole) {
    if (a.rank != 0) return;
    std::printf(
        "#   delta %.4g: payload %zu B = %.3f%% of %zu; encode %.1f us = %.2f GB/s of source; "
        "apply (consumer load_weights) %.1f us; reference update %.1f us; sync %.1f us vs full "
        "packed %.1f us: %.1fx%s\n",
        density, wire, 100.0 * double(wire) / double(bytes), bytes, enc,
        enc > 0 ? double(bytes) / enc / 1e3 : 0.0, app, commit, sync, full,
        sync > 0 ? full / sync : 0.0,
        whole ? " (automatic: whole, the link is as fast as the diff)" : "");
    std::fflush(stdout);
  };
  char host[64] = {};
  ::gethostname(host, sizeof host - 1);
  if (a.rank == 0) {
    std::printf("# weightsync-bench %s backend: host (host memory, TCP on 127.0.0.1)\n",
                WEIGHTSYNC_VERSION_STRING);
    std::printf(
        "# ranks: %d root: 0 warmup: %d iters: %d timing: host clock, max over ranks, median\n",
        a.np, a.warmup, a.iters);
    std::printf("#  Host %s, %u hardware threads\n", host, std::thread::hardware_concurrency());
  }
  o.table = [&](const std::string& layout, std::size_t tensors, std::size_t bytes) {
    if (a.rank != 0) return;
    std::printf("#\n# layout: %s tensors: %zu bytes: %zu dtype: bf16 memory: host\n",
                layout.c_str(), tensors, bytes);
    std::printf("#%13s %9s %7s %11s %5s %14s %10s %8s %8s %7s %7s\n", "size", "tensors", "chunks",
                "buffer", "nbuf", "impl", "time", "algbw", "busbw", "#wrong", "vs_raw");
    std::printf("#%13s %9s %7s %11s %5s %14s %10s %8s %8s %7s %7s\n", "(B)", "", "", "(B)", "", "",
                "(us)", "(GB/s)", "(GB/s)", "", "(%)");
    std::fflush(stdout);
  };
  o.emit = [&](const std::string& layout, const std::string& impl, std::size_t bytes,
               std::size_t tensors, std::size_t chunks, std::size_t buffer, int nbuf,
               std::vector<double> times, unsigned long long wrong, double raw_median) {
    if (a.rank != 0) return;
    const Stats st = stats_of(std::move(times));
    const double algbw = double(bytes) / (st.median * 1e-6) / 1e9;
    std::printf(" %13zu %9zu %7zu %11s %5s %14s %10.1f %8.2f %8.2f %7llu %7.1f\n", bytes, tensors,
                chunks, buffer ? std::to_string(buffer).c_str() : "-",
                nbuf ? std::to_string(nbuf).c_str() : "-", impl.c_str(), st.median, algbw, algbw,
                wrong, 100.0 * raw_median / st.median);
    std::fflush(stdout);
    if (a.json_path.empty()) return;
    json j = {{"version", 1},
              {"tool", "weightsync-bench"},
              {"date", iso_now()},
              {"args", a.argv},
              {"device", std::string("host ") + host},
              {"backend", "host"},
              {"layout", layout},
              {"size", bytes},
              {"count", tensors},
              {"type", "bfloat16"},
              {"root", 0},
              {"ranks", a.np},
              {"chunks", chunks},
              {"buffer_size_bytes", buffer},
              {"num_buffers", nbuf},
              {"impl", impl},
              {"time", st.median},
              {"alg_bw", algbw},
              {"bus_bw", algbw},
              {"nwrong", wrong},
              {"ratio_vs_raw", raw_median / st.median},
              {"warmup_iters", a.warmup},
              {"iters", a.iters},
              {"stats",
               {{"min_us", st.min},
                {"p50_us", st.median},
                {"p99_us", st.p99},
                {"stdev_us", st.stdev},
                {"cv_pct", st.cv_pct},
                {"times_us", st.times}}}};
    std::ofstream(a.json_path, std::ios::app) << j.dump() << "\n";
  };
  o.paired = a.paired;
  o.sealed = a.sealed;
  // (ranks the launcher started share this host: a shared-memory barrier can join them)
  o.shm_barrier = a.barrier == "shm" || (a.barrier == "auto" && one_host());
  o.paired_note = [&](const std::string& layout, const std::string& impl, std::size_t bytes,
                      std::vector<double> raw, std::vector<double> extra,
                      unsigned long long raw_wrong) {
    if (a.rank != 0 || raw.empty()) return;
    double within = 0;
    for (std::size_t i = 0; i < extra.size(); ++i) within += extra[i] <= raw[i] ? 1.0 : 0.0;
    within /= double(extra.size());
    const Stats r = stats_of(raw), x = stats_of(extra);
    std::printf("#   paired with raw-host of %zu B, in turn each iteration: raw %.1f us (#wrong "
                "%llu); extra (row - raw, per iteration) median %.1f us = %.2f raw, at most one "
                "raw in %.0f%% of iterations\n",
                bytes, r.median, raw_wrong, x.median, r.median > 0 ? x.median / r.median : 0.0,
                100.0 * within);
    std::fflush(stdout);
    if (a.json_path.empty()) return;
    json j = {{"version", 1},
              {"tool", "weightsync-bench"},
              {"date", iso_now()},
              {"args", a.argv},
              {"backend", "host"},
              {"layout", layout},
              {"impl", impl},
              {"size", bytes},
              {"paired",
               {{"raw_impl", "raw-host"},
                {"raw_p50_us", r.median},
                {"raw_times_us", r.times},
                {"raw_nwrong", raw_wrong},
                {"extra_p50_us", x.median},
                {"extra_vs_raw", r.median > 0 ? x.median / r.median : 0.0},
                {"within_one_raw", within}}}};
    std::ofstream(a.json_path, std::ios::app) << j.dump() << "\n";
  };
  const int failures = host_bench::run_rank(o);
  if (a.rank == 0)
    std::printf("# Out of bounds values : %d %s\n", failures, failures ? "FAILED" : "OK");
  return failures ? 1 : 0;
}

int launch(const Args& a, const char* self) {
  const int port = ws_test::free_port();
  int raw_port = ws_test::free_port();
  while (raw_port == port) raw_port = ws_test::free_port();
  int ipc_port = ws_test::free_port();
  while (ipc_port == port || ipc_port == raw_port) ipc_port = ws_test::free_port();
  // Fewer GPUs than NCCL ranks (or WS_SHARE_GPU=1): the ranks share devices (rank % devices),
  // each process with its own NCCL_HOSTID so that NCCL takes them for different hosts and moves
  // the bytes over its socket transport on loopback. Functional figures, never link figures.
  int ndev = 0;
#if WEIGHTSYNC_BENCH_GPU
  if (a.backend != "host" && cudaGetDeviceCount(&ndev) != cudaSuccess) ndev = 0;
#endif
  const char* share = std::getenv("WS_SHARE_GPU");
  const bool shared =
      a.backend == "nccl" && ndev > 0 && (ndev < a.np || (share && std::string(share) == "1"));
  if (shared)
    std::fprintf(stderr,
                 "weightsync_bench: %d ranks on %d GPU(s): shared GPU, NCCL net transport "
                 "(one NCCL_HOSTID per rank, sockets on lo): functional, not a link figure\n",
                 a.np, ndev);
  std::vector<pid_t> kids;
  for (int r = 0; r < a.np; ++r) {
    std::vector<std::string> args = {self};
    args.insert(args.end(), a.argv.begin(), a.argv.end());
    args.push_back("--rank");
    args.push_back(std::to_string(r));
    args.push_back("--port");
    args.push_back(std::to_string(port));
    args.push_back("--raw-port");
    args.push_back(std::to_string(raw_port));
    args.push_back("--ipc-port");
    args.push_back(std::to_string(ipc_port));
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      if (shared) {  // (the launcher is single-threaded: setenv between fork and exec is safe)
        const std::string host_id =
            "wsbench-" + std::to_string(::getppid()) + "-" + std::to_string(r);
        ::setenv("NCCL_HOSTID", host_id.c_str(), 1);
        ::setenv("NCCL_SOCKET_IFNAME", "lo", 0);
        ::setenv("NCCL_IB_DISABLE", "1", 0);
        ::setenv(kSharedGpuVar, "1", 1);
      }
      ::setenv(kOneHostVar, "1", 1);
      std::vector<char*> cargv;
      for (auto& s : args) cargv.push_back(s.data());
      cargv.push_back(nullptr);
      ::execv("/proc/self/exe", cargv.data());
      ::_exit(127);
    }
    kids.push_back(pid);
  }
  int rc = 0;
  for (std::size_t i = 0; i < kids.size(); ++i) {
    int st = 0;
    ::waitpid(kids[i], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      std::fprintf(stderr, "weightsync_bench: rank %zu failed (%s %d)\n", i,
                   WIFEXITED(st) ? "exit" : "signal",
                   WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
      rc = 1;
      for (auto k : kids) ::kill(k, SIGTERM);
    }
  }
  return rc;
}

#if !WEIGHTSYNC_BENCH_GPU
// Why a build without the GPU rows has none: no CUDA or NCCL, or (what a CUDA build without a GPU
// at configure time is) no device here, or the GPU binaries left out.
std::string no_gpu_rows_reason() {
#if WEIGHTSYNC_HAS_CUDA
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0)
    return std::string("no CUDA device found (cudaGetDeviceCount: ") +
           (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") + ")";
  return "the GPU rows were not built (no GPU was seen at configure time, or NCCL is missing: "
         "reconfigure with -DWEIGHTSYNC_BUILD_GPU_TESTS=ON)";
#else
  return "this build has no CUDA/NCCL (configure with the CUDA toolkit and NCCL)";
#endif
}
#endif

}  // namespace

int main(int argc, char** argv) try {
  ::setenv("NCCL_NVLS_ENABLE", "0", 0);
  const Args a = parse(argc, argv);
#if !WEIGHTSYNC_BENCH_GPU
  if (a.backend != "host")  // (before any rank is launched: one line, not one per rank)
    throw std::invalid_argument("--backend " + a.backend + ": " + no_gpu_rows_reason() +
                                "; only --backend host runs here");
#endif
  if (a.rank < 0) return launch(a, argv[0]);
  if (a.backend == "host") return run_host(a);
#if WEIGHTSYNC_BENCH_GPU
  Bench b(a);
  return b.run();
#else
  return 2;  // (refused above)
#endif
} catch (const std::exception& e) {
  std::fprintf(stderr, "weightsync_bench: %s\n", e.what());
  return 2;
}
