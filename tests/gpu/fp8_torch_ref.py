# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""torch's plain formula for weightsync's FP8 quantization (include/weightsync/fp8/quantize.hpp).

usage: fp8_torch_ref.py IN DTYPE ROWS COLS MODES OUT [DEVICE]
  IN: the raw little-endian input (DTYPE bfloat16 | float32, ROWS x COLS, row-major);
  MODES: a comma-separated list of block128 | block128_ue8m0 | per_tensor | per_channel;
  for each MODE, OUT.MODE.w: float8_e4m3fn bytes; OUT.MODE.s: float32 scales (block:
  [ceil(R/128), ceil(C/128)], per_channel: [R, 1], per_tensor: one value).
  DEVICE: cuda (default when available) or cpu.
Every scale is a float32 tensor of the same device (never a Python scalar: torch's CUDA division
by a CPU scalar multiplies by its reciprocal).
"""
import sys

import torch


def ue8m0(scale):
    b = scale.view(torch.int32)
    special = torch.isnan(scale) | torch.isinf(scale)
    b = torch.where(special | (b >= 0x00800000), b, torch.full_like(b, 0x00800000))
    up = ((b & 0x7FFFFF) != 0) & ~special
    b = torch.where(up, (b & 0x7F800000) + 0x00800000, b)
    return b.view(torch.float32)


def scale_of(amax):
    amax = amax.float()
    s = amax / torch.full_like(amax, 448.0)
    return torch.where(s == 0, torch.ones_like(s), s)


def quantize(x, mode):
    """Returns (fp8 weight, fp32 scales) of x [rows, cols] by torch's plain formula."""
    rows, cols = x.shape
    dt, dev = x.dtype, x.device
    xf = x.float()
    if mode in ("block128", "block128_ue8m0"):
        gr, gc = (rows + 127) // 128, (cols + 127) // 128
        xp = torch.zeros(gr * 128, gc * 128, dtype=dt, device=dev)
        xp[:rows, :cols] = x
        amax = xp.view(gr, 128, gc, 128).abs().amax(dim=(1, 3))
        s = scale_of(amax)
        if mode == "block128_ue8m0":
            s = ue8m0(s)
        full = s.repeat_interleave(128, 0).repeat_interleave(128, 1)[:rows, :cols]
    elif mode == "per_channel":
        s = scale_of(x.abs().amax(dim=1, keepdim=True))
        full = s.expand(rows, cols)
    elif mode == "per_tensor":
        s = scale_of(x.abs().amax().reshape(1))
        full = s.reshape(1, 1).expand(rows, cols)
    else:
        raise SystemExit("unknown mode " + mode)
    w = (xf / full.contiguous()).clamp(-448, 448).to(torch.float8_e4m3fn)
    return w, s


def main():
    src, dtype, rows, cols, modes, out = sys.argv[1:7]
    dev = sys.argv[7] if len(sys.argv) > 7 else ("cuda" if torch.cuda.is_available() else "cpu")
    rows, cols = int(rows), int(cols)
    dt = {"bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]
    with open(src, "rb") as f:
        x = torch.frombuffer(bytearray(f.read()), dtype=dt).reshape(rows, cols).to(dev)
    for mode in modes.split(","):
        w, s = quantize(x, mode)
        with open(out + "." + mode + ".w", "wb") as f:
            f.write(bytes(w.view(torch.uint8).cpu().flatten().tolist()))
        with open(out + "." + mode + ".s", "wb") as f:
            f.write(bytes(s.contiguous().view(torch.uint8).cpu().flatten().tolist()))


if __name__ == "__main__":
    main()
