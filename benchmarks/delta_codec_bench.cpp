// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Delta codec throughput of the CUDA kernels (cuda/delta.hpp) on a model's bf16 tensors (dense8b
// by default): for each fraction of changed elements, a deterministic step (ws_pattern::perturb:
// random positions) turns the reference into the source, then each rep times, with CUDA events
// on one stream:
//   encode = measure (count + layout, one host synchronization) + encode (the blobs) + the
//            reference update (the trainer's reference copy, which the next step is encoded
//            against, made equal to the source: inside measure with --ref-update fused, the
//            default and what CudaDeltaCodec does; or applying the blobs onto it afterwards with
//            --ref-update apply, the earlier way): GB/s of SOURCE bytes;
//   apply  = the inference side: one batched apply of every blob onto a copy of the reference:
//            GB/s of BLOB bytes (headers, directories and payloads).
// Before each rep the blob buffer is poisoned and the reference copy reset (it holds the source
// after the previous rep, which would hide a missing write); after each phase the updated copy is
// compared with the source, byte for byte, on the device (#wrong). Median over the reps.
#include <weightsync/cuda/check.hpp>
#include <weightsync/cuda/delta.hpp>
#include <weightsync/cuda/device_buffer.hpp>
#include <weightsync/layouts.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_pattern.hpp"

using namespace weightsync;
using namespace weightsync::delta;

namespace {

constexpr const char* kUsage = R"(usage: delta_codec_bench [options]
  --layout NAME        tensor layout: dense8b (default), moe30b, small1b, lora8b, tiny, tiny504
                       or synthetic:COUNTxBYTES (its bf16 tensors are used)
  --max-bytes N        keep only the layout's first tensors, up to N bytes in all (0: all; default 0)
  --densities LIST     fractions of elements changed per step, comma-separated, each in [0, 1]
                       (default 0.001,0.01,0.03,0.1,0.5)
  --bucket-elems N     elements per bucket (a multiple of 32 in [32, 65536]; default 16384)
  --reps N             timed repetitions per density (default 5; the median is reported)
  --warmup N           untimed repetitions first (default 1)
  --seed N             the step generator's seed (default 1)
  --ref-update MODE    fused (measure writes the source into the reference; default) or apply
                       (the blobs applied onto the reference after encode)
  --sparse-writes MODE scattered (default) or sectors: how apply writes sparse buckets
  --change KIND        bits (default: a changed element gets random bits) or ulps (it moves 1 to 4
                       steps of its magnitude, an optimizer step: what the low-byte reference
                       assumes; random bits fail its check in every block they touch)
  --reference KIND     full (default: a copy of the tensors) or low-byte (1 byte per element plus a
                       hash per 256, updated inside measure; the bucket a multiple of 256)
  --json FILE          also write one JSON object per density to FILE
  -h, --help           this text
Needs about 3x the layout's bytes of GPU memory plus the blobs (dense8b: 16.4 GB per copy).
Targets (H200): encode >= 1500 GB/s of source bytes; apply >= 200 GB/s of blob bytes; blob <= 2.5 %
of the source at 1 % changed.
)";

struct Args {
  std::string layout = "dense8b";
  std::uint64_t max_bytes = 0;
  std::vector<double> densities = {0.001, 0.01, 0.03, 0.1, 0.5};
  std::uint32_t bucket_elems = kDefaultBucketElems;
  int reps = 5, warmup = 1;
  std::uint64_t seed = 1;
  bool fused = true;
  SparseWrites writes = SparseWrites::scattered;
  bool low_byte = false;
  bool ulps = false;
  std::string json;
};

std::uint64_t parse_u64(const std::string& flag, const std::string& v) {
  std::size_t used = 0;
  unsigned long long x = 0;
  try {
    x = std::stoull(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty() || v[0] == '-')
    throw std::invalid_argument(flag + ": not a non-negative integer: '" + v + "'");
  return x;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "-h" || k == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) throw std::invalid_argument(k + " needs a value (--help lists the options)");
    const std::string v = argv[++i];
    if (k == "--layout") {
      a.layout = v;
    } else if (k == "--max-bytes") {
      a.max_bytes = parse_u64(k, v);
    } else if (k == "--densities") {
      a.densities.clear();
      std::size_t at = 0;
      while (at <= v.size()) {
        const std::size_t comma = std::min(v.find(',', at), v.size());
        const std::string item = v.substr(at, comma - at);
        std::size_t used = 0;
        double d = -1;
        try {
          d = std::stod(item, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != item.size() || item.empty() || !(d >= 0 && d <= 1))
          throw std::invalid_argument("--densities: '" + item + "' is not a fraction in [0, 1]");
        a.densities.push_back(d);
        at = comma + 1;
      }
    } else if (k == "--bucket-elems") {
      const std::uint64_t b = parse_u64(k, v);
      if (b == 0 || b > kMaxBucketElems || b % 32 != 0)
        throw std::invalid_argument(
            "--bucket-elems: must be a multiple of 32 in [32, 65536], got " + v);
      a.bucket_elems = static_cast<std::uint32_t>(b);
    } else if (k == "--reps") {
      a.reps = static_cast<int>(std::min<std::uint64_t>(parse_u64(k, v), 1000000));
      if (a.reps < 1) throw std::invalid_argument("--reps must be >= 1");
    } else if (k == "--warmup") {
      a.warmup = static_cast<int>(std::min<std::uint64_t>(parse_u64(k, v), 1000000));
    } else if (k == "--seed") {
      a.seed = parse_u64(k, v);
    } else if (k == "--ref-update") {
      if (v != "fused" && v != "apply")
        throw std::invalid_argument("--ref-update: fused or apply, got '" + v + "'");
      a.fused = v == "fused";
    } else if (k == "--sparse-writes") {
      if (v != "scattered" && v != "sectors")
        throw std::invalid_argument("--sparse-writes: scattered or sectors, got '" + v + "'");
      a.writes = v == "sectors" ? SparseWrites::sectors : SparseWrites::scattered;
    } else if (k == "--change") {
      if (v != "bits" && v != "ulps")
        throw std::invalid_argument("--change: bits or ulps, got '" + v + "'");
      a.ulps = v == "ulps";
    } else if (k == "--reference") {
      if (v != "full" && v != "low-byte")
        throw std::invalid_argument("--reference: full or low-byte, got '" + v + "'");
      a.low_byte = v == "low-byte";
    } else if (k == "--json") {
      a.json = v;
    } else {
      throw std::invalid_argument("unknown option " + k + " (delta_codec_bench --help lists them)");
    }
  }
  (void)layouts::by_name(a.layout);  // names a bad one now
  return a;
}

void ck(cudaError_t e, const char* what) {
  weightsync::detail::check(e, what);
}

float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  ck(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
  return ms;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Events {
  std::vector<cudaEvent_t> e;
  explicit Events(int n) : e(static_cast<std::size_t>(n), nullptr) {
    for (auto& x : e) ck(cudaEventCreate(&x), "cudaEventCreate");
  }
  ~Events() {
    for (auto x : e) cudaEventDestroy(x);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
};

}  // namespace

int main(int argc, char** argv) {
  Args a;
  try {
    a = parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "delta_codec_bench: %s\n", e.what());
    return 2;
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 4;
  }
  try {
    cudaDeviceProp prop{};
    ck(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    // the tensors, each 256-byte aligned in one buffer
    std::vector<TensorMeta> metas;
    std::vector<std::uint64_t> at;
    std::uint64_t total = 0, src_bytes = 0;
    for (const TensorMeta& m : layouts::by_name(a.layout)) {
      if (m.dtype != DType::bfloat16) continue;
      if (a.max_bytes != 0 && src_bytes + m.nbytes() > a.max_bytes) break;
      metas.push_back(m);
      at.push_back(total);
      total += (m.nbytes() + 255) / 256 * 256;
      src_bytes += m.nbytes();
    }
    if (metas.empty()) throw config_error("max-bytes", "keeps no tensor of the layout");
    cudaStream_t s = nullptr;
    ck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    DeviceBuffer base(total, 0), src(total, 0), work(total, 0), blobs;
    DeviceBuffer wrong_d(8, 0);
    ws_pattern::fill(base.data(), total, a.seed * 7 + 3, s);
    CudaDeltaEncoder enc(a.bucket_elems);
    CudaDeltaApplier app(a.bucket_elems, a.writes);
    if (a.low_byte && !a.fused)
      throw config_error("ref-update", "a low-byte reference is updated inside measure (fused)");
    // --reference low-byte: the trainer's reference is each tensor's low bytes and block hashes
    std::vector<std::uint64_t> lat;
    std::uint64_t ltotal = 0;
    for (const auto& m : metas) {
      lat.push_back(ltotal);
      ltotal += a.low_byte ? (low_byte_ref_bytes(m.numel()) + 255) / 256 * 256 : 0;
    }
    DeviceBuffer lref(std::max<std::uint64_t>(ltotal, 1), 0);
    std::vector<DeltaJob> jobs;
    for (std::size_t i = 0; i < metas.size(); ++i)
      jobs.push_back({src.data() + at[i], a.low_byte ? lref.data() + lat[i] : work.data() + at[i],
                      metas[i].numel(), 2, a.low_byte});
    std::printf(
        "# delta_codec_bench on %s: layout %s, %zu bf16 tensors, %llu bytes, bucket %u, "
        "change %s, reference %s (%llu bytes), ref-update %s, sparse-writes %s, median of %d reps after %d "
        "warm-up\n",
        prop.name, a.layout.c_str(), metas.size(), static_cast<unsigned long long>(src_bytes),
        a.bucket_elems, a.ulps ? "ulps" : "bits", a.low_byte ? "low-byte" : "full",
        static_cast<unsigned long long>(a.low_byte ? ltotal : total), a.fused ? "fused" : "apply",
        a.writes == SparseWrites::sectors ? "sectors" : "scattered", a.reps, a.warmup);
    std::printf(
        "# encode = measure + encode + reference update (the blobs applied onto the "
        "reference copy), GB/s of source bytes; apply = one batched apply, GB/s of blob "
        "bytes\n");
    std::printf("# %8s %10s %8s %10s %10s %10s %10s %10s %10s %10s %10s %7s\n", "density",
                "changed%", "blob%", "blob_MB", "measure_us", "encode_us", "refupd_us", "total_us",
                "enc_GB/s", "apply_us", "app_GB/s", "#wrong");
    std::ofstream js;
    if (!a.json.empty()) js.open(a.json);
    Events ev(6);
    bool all_ok = true;
    for (double d : a.densities) {
      // the step: src = base with about d of its elements changed
      ck(cudaMemcpyAsync(src.data(), base.data(), total, cudaMemcpyDeviceToDevice, s),
         "cudaMemcpyAsync");
      for (std::size_t i = 0; i < metas.size(); ++i)
        if (a.ulps)
          ws_pattern::nudge(src.data() + at[i], metas[i].numel(), d,
                            a.seed * 1000003 + i * 7919 + static_cast<std::uint64_t>(d * 1e9), s);
        else
          ws_pattern::perturb(src.data() + at[i], metas[i].numel(), 2, d,
                              a.seed * 1000003 + i * 7919 + static_cast<std::uint64_t>(d * 1e9), s);
      std::vector<double> t_measure, t_encode, t_ref, t_total, t_apply;
      std::uint64_t blob_total = 0, changed = 0, wrong_total = 0;
      std::vector<std::uint64_t> sizes;
      for (int r = 0; r < a.warmup + a.reps; ++r) {
        // reset the reference (it holds the source after the last rep)
        if (a.low_byte)
          for (std::size_t i = 0; i < metas.size(); ++i)
            low_byte_seed(lref.data() + lat[i], base.data() + at[i], metas[i].numel(), s);
        else
          ck(cudaMemcpyAsync(work.data(), base.data(), total, cudaMemcpyDeviceToDevice, s),
             "cudaMemcpyAsync");
        ck(cudaEventRecord(ev.e[0], s), "cudaEventRecord");
        sizes = enc.measure(jobs, s, a.fused);
        ck(cudaEventRecord(ev.e[1], s), "cudaEventRecord");
        std::vector<std::uint64_t> off(sizes.size());
        blob_total = 0;
        for (std::size_t i = 0; i < sizes.size(); ++i) {
          off[i] = blob_total;
          blob_total += (sizes[i] + 255) / 256 * 256;
        }
        if (blobs.size() < blob_total) {  // (first rep of a density only: the sizes repeat)
          ck(cudaStreamSynchronize(s), "cudaStreamSynchronize");
          blobs = DeviceBuffer();
          blobs = DeviceBuffer(blob_total, 0);
          ck(cudaEventRecord(ev.e[1], s), "cudaEventRecord");
        }
        std::vector<void*> outs;
        std::vector<DeltaApplyBlob> ab;
        for (std::size_t i = 0; i < sizes.size(); ++i) {
          outs.push_back(blobs.data() + off[i]);
          ab.push_back({blobs.data() + off[i], sizes[i], work.data() + at[i], metas[i].numel(), 2,
                        metas[i].name});
        }
        enc.encode(outs, s);
        ck(cudaEventRecord(ev.e[2], s), "cudaEventRecord");
        if (!a.fused) app.apply(ab, s);  // the trainer's reference update
        ck(cudaEventRecord(ev.e[3], s), "cudaEventRecord");
        app.finish(s);
        changed = enc.changed_elements();
        ck(cudaMemsetAsync(wrong_d.data(), 0, 8, s), "cudaMemsetAsync");
        if (!a.low_byte)  // (the full reference now equals the source)
          ws_pattern::count_diff(work.data(), src.data(), total,
                                 reinterpret_cast<unsigned long long*>(wrong_d.data()), s);
        // the inference side: the blobs onto a fresh reference copy
        ck(cudaMemcpyAsync(work.data(), base.data(), total, cudaMemcpyDeviceToDevice, s),
           "cudaMemcpyAsync");
        ck(cudaEventRecord(ev.e[4], s), "cudaEventRecord");
        app.apply(ab, s);
        ck(cudaEventRecord(ev.e[5], s), "cudaEventRecord");
        app.finish(s);
        ws_pattern::count_diff(work.data(), src.data(), total,
                               reinterpret_cast<unsigned long long*>(wrong_d.data()), s);
        // poison the blobs for the next rep
        ck(cudaMemsetAsync(blobs.data(), 0xee, blobs.size(), s), "cudaMemsetAsync");
        unsigned long long wrong = 0;
        ck(cudaMemcpyAsync(&wrong, wrong_d.data(), 8, cudaMemcpyDeviceToHost, s),
           "cudaMemcpyAsync");
        ck(cudaStreamSynchronize(s), "cudaStreamSynchronize");
        wrong_total += wrong;
        if (r < a.warmup) continue;
        t_measure.push_back(elapsed_ms(ev.e[0], ev.e[1]) * 1e3);
        t_encode.push_back(elapsed_ms(ev.e[1], ev.e[2]) * 1e3);
        t_ref.push_back(elapsed_ms(ev.e[2], ev.e[3]) * 1e3);
        t_total.push_back(elapsed_ms(ev.e[0], ev.e[3]) * 1e3);
        t_apply.push_back(elapsed_ms(ev.e[4], ev.e[5]) * 1e3);
      }
      std::uint64_t blob_bytes = 0;
      for (auto x : sizes) blob_bytes += x;
      std::uint64_t numel = src_bytes / 2;
      const double us = median(t_total), aus = median(t_apply);
      const double enc_gbs = static_cast<double>(src_bytes) / (us * 1e-6) / 1e9;
      const double app_gbs = static_cast<double>(blob_bytes) / (aus * 1e-6) / 1e9;
      const double blob_pct =
          100.0 * static_cast<double>(blob_bytes) / static_cast<double>(src_bytes);
      const double changed_pct = 100.0 * static_cast<double>(changed) / static_cast<double>(numel);
      all_ok = all_ok && wrong_total == 0;
      std::printf(
          "  %8g %10.4f %8.3f %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f %7llu\n", d,
          changed_pct, blob_pct, static_cast<double>(blob_bytes) / 1e6, median(t_measure),
          median(t_encode), median(t_ref), us, enc_gbs, aus, app_gbs,
          static_cast<unsigned long long>(wrong_total));
      if (js)
        js << "{\"tool\":\"delta_codec_bench\",\"device\":\"" << prop.name << "\",\"layout\":\""
           << a.layout << "\",\"tensors\":" << metas.size() << ",\"src_bytes\":" << src_bytes
           << ",\"dtype\":\"bfloat16\",\"bucket_elems\":" << a.bucket_elems
           << ",\"change\":\"" << (a.ulps ? "ulps" : "bits")
           << "\",\"reference\":\"" << (a.low_byte ? "low-byte" : "full")
           << "\",\"reference_bytes\":" << (a.low_byte ? ltotal : total)
           << ",\"ref_update\":\"" << (a.fused ? "fused" : "apply") << "\",\"sparse_writes\":\""
           << (a.writes == SparseWrites::sectors ? "sectors" : "scattered")
           << "\",\"density\":" << d
           << ",\"changed_elements\":" << changed << ",\"blob_bytes\":" << blob_bytes
           << ",\"blob_pct\":" << blob_pct << ",\"measure_us\":" << median(t_measure)
           << ",\"encode_us\":" << median(t_encode) << ",\"ref_update_us\":" << median(t_ref)
           << ",\"encode_total_us\":" << us << ",\"encode_src_GBps\":" << enc_gbs
           << ",\"apply_us\":" << aus << ",\"apply_blob_GBps\":" << app_gbs
           << ",\"reps\":" << a.reps << ",\"wrong\":" << wrong_total << "}\n";
    }
    std::printf("# check: %s\n", all_ok ? "every applied tensor equals its source" : "MISMATCH");
    cudaStreamDestroy(s);
    return all_ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "delta_codec_bench: %s\n", e.what());
    return 1;
  }
}
