"""Hardware-grounded simulation networks with one heterogeneity knob h (docs/SIMNETS.md).

Every network starts from S identical stages: a slice of a transformer on one modern GPU
(constants below, in physical units). One hardware effect (a *family*) then makes the stages
differ, with strength ``h`` in [0, 1]: ``h = 0`` gives S identical stages, ``h = 1`` the
strongest spread this generator draws. Each stage draws its own strength ``u_s ~ U(0, 1)``
of the effect, scaled by ``h``, so stages disagree about their best microbatch size.

Families (``FAMILIES``):

* ``knee``: occupancy. Below ``k_s`` samples the GPU is under-occupied and a call costs as much
  as ``k_s`` samples: ``t(m) = c + a * max(m, k_s)``, ``k_s = 1 + h u_s (KNEE_MAX - 1)``.
* ``launch``: per-call overhead (kernel launches, framework dispatch, host sync):
  ``c_s = LAUNCH * (1 + h u_s (LAUNCH_MAX / LAUNCH - 1))``.
* ``cache``: super-linear cost once the working set leaves L2 or the allocator is under
  pressure: ``a m (1 + g_s max(0, m - C_s) / C_s)``, ``g_s = h u_s CACHE_SLOPE``.
* ``weights``: a memory-bound layer (fully connected, embedding) whose cost is the weight read:
  ``max(bytes_s / HBM_BW, m * bytes_s / PEAK)``, ``bytes_s = h u_s WEIGHT_MAX``.
* ``slowgpu``: half the stages (drawn) sit on an older GPU: their per-sample work is
  ``1 + h (SLOW_GPU - 1)`` times slower (launch overhead is host-side and unchanged).
* ``slowlink``: boundaries that cross nodes: bandwidth falls from NVLink to
  ``1 / (1/NVLINK_BW + h u_s (1/SLOW_LINK_BW - 1/NVLINK_BW))``, latency grows likewise.
* ``mix``: every effect at once, each stage drawing each strength independently.

Backward costs about twice forward and is correlated with it (same knee, same cache size,
2x the work, 3x the weight traffic: read weights, read and write their gradients). The
decorrelated variant (``decorrelated=True``, ``-dc`` in names) draws the backward's knee,
cache size and work ratio (1 to 3) independently of the forward's. Recompute backward is
forward + backward. Every size 1..B is tabulated exactly.

This module imports no torch.
"""

from __future__ import annotations

import numpy as np

from .problem import Link, Problem, StageCosts, StageMemory


def family_name(family: str, S: int, B: int, h: float, seed: int,
                decorrelated: bool = False) -> str:
    """The canonical name of a family network, e.g. ``sim-knee-s8-b64-h0.5-s3``."""
    return f"sim-{family}{'-dc' * decorrelated}-s{S}-b{B}-h{h:g}-s{seed}"

__all__ = ["FAMILIES", "contrast_problem", "family_problem"]

FAMILIES = ("knee", "launch", "cache", "weights", "slowgpu", "slowlink", "mix")

# The identical base stage (h = 0): two GPT-2-medium-sized layers at sequence length 1024 on
# an H100-class GPU (bf16, ~300 TFLOP/s reached).
WORK = 2.0e-4  # s per sample, forward (about 60 GFLOP at 300 TFLOP/s)
BWD_RATIO = 2.0  # backward work / forward work (two matrix products per forward one)
LAUNCH = 5.0e-5  # s per call, forward: about 10 kernel launches of 5 us
OPT = 2.5e-4  # s, Adam over ~25 M parameters (memory-bound, ~32 B/param at 3.35 TB/s)
ACT_BYTES = 2.0 * 2**20  # bytes per sample crossing a boundary: 1024 tokens x 1024 x bf16
NVLINK_BW = 4.5e11  # bytes/s one way (NVLink 4)
NVLINK_LAT = 1.0e-5  # s
PARAM_BYTES = 25e6 * 16.0  # bf16 weights + fp32 master copy and Adam moments
# The effects' strongest values (reached at h = 1 by a stage drawing u_s = 1).
KNEE_MAX = 32.0  # samples a small-layer stage needs to fill the GPU's SMs
LAUNCH_MAX = 2.0e-3  # s per call: a host-bound stage (many tiny kernels, Python dispatch)
CACHE_SLOPE = 1.0  # extra cost per working-set size beyond the cache (doubling at 2 C_s)
CACHE_SAMPLES = (8.0, 32.0)  # C_s range: 50 MB L2 over 2-6 MB of live activations a sample
WEIGHT_MAX = 1.0e9  # bytes of a memory-bound layer (VGG16's classifier is 0.5 GB in fp32)
HBM_BW = 3.35e12  # bytes/s, H100 HBM3
PEAK = 3.0e14  # FLOP/s reached by a large matrix product; 1 FLOP per weight byte per sample
SLOW_GPU = 3.0  # per-sample work ratio of an older GPU (A100 against H100, bf16)
SLOW_LINK_BW = 1.25e9  # bytes/s: 10 Gb/s Ethernet between nodes
SLOW_LINK_LAT = 5.0e-5  # s: a TCP round through the host


def _effects(family: str) -> frozenset[str]:
    return frozenset(FAMILIES[:-1]) if family == "mix" else frozenset({family})


def _curve(m: np.ndarray, ratio: float, launch: float, work: float, knee: float, g: float,
           cache: float, wbytes: float, traffic: float) -> np.ndarray:
    """One direction's cost at sizes ``m``: launch + work above the knee, super-linear past the
    cache, plus the weight read of a memory-bound layer (roofline: read time or compute)."""
    size = np.maximum(m, knee)
    t = ratio * (launch + work * size * (1.0 + g * np.maximum(0.0, size - cache) / cache))
    if wbytes > 0:
        t = t + np.maximum(traffic * wbytes / HBM_BW, ratio * m * wbytes / PEAK)
    return t


def family_problem(
    family: str,
    S: int,
    B: int,
    h: float,
    seed: int = 0,
    *,
    decorrelated: bool = False,
    name: str | None = None,
) -> Problem:
    """Draw a ``family`` network with ``S`` stages, mini-batch ``B`` and heterogeneity ``h``.

    Same arguments, same problem. The draws ``u_s`` do not depend on ``h``, so one seed's
    networks at different ``h`` differ only in strength (docs/SIMNETS.md).
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown simulation family {family!r}; valid: {', '.join(FAMILIES)}")
    if S < 1 or B < 1:
        raise ValueError(f"family_problem needs S >= 1 and B >= 1, got S={S}, B={B}")
    if not 0.0 <= h <= 1.0:
        raise ValueError(f"heterogeneity h must be in [0, 1], got {h}")
    fam_index = FAMILIES.index(family)
    rng = np.random.default_rng([seed, S, B, fam_index, int(decorrelated), 0x51A])
    # All draws first, in a fixed order, so that h only scales them.
    u = {k: rng.uniform(0.0, 1.0, S) for k in
         ("knee", "launch", "cache", "weights", "slowgpu", "slowlink")}
    u_knee_b = rng.uniform(0.0, 1.0, S)
    cache_c = rng.uniform(*CACHE_SAMPLES, S)
    cache_c_b = rng.uniform(*CACHE_SAMPLES, S)
    ratio_b = rng.uniform(1.0, 3.0, S)
    on_slow_gpu = rng.permutation(S) < S // 2 if S > 1 else np.zeros(S, bool)
    eff = _effects(family)
    m = np.arange(1, B + 1, dtype=np.float64)

    def strength(effect: str, s: int) -> float:
        return h * float(u[effect][s]) if effect in eff else 0.0

    stages = []
    for s in range(S):
        knee_f = 1.0 + strength("knee", s) * (KNEE_MAX - 1.0)
        knee_b = knee_f
        cache_f = cache_b = float(cache_c[s])
        rb = BWD_RATIO
        if decorrelated:
            knee_b = 1.0 + (h * float(u_knee_b[s]) if "knee" in eff else 0.0) * (KNEE_MAX - 1.0)
            cache_b = float(cache_c_b[s])
            rb = BWD_RATIO + h * (float(ratio_b[s]) - BWD_RATIO)
        launch = LAUNCH * (1.0 + strength("launch", s) * (LAUNCH_MAX / LAUNCH - 1.0))
        work = WORK * (1.0 + (h * (SLOW_GPU - 1.0) if "slowgpu" in eff and on_slow_gpu[s]
                              else 0.0))
        g = strength("cache", s) * CACHE_SLOPE
        wbytes = strength("weights", s) * WEIGHT_MAX
        fwd = _curve(m, 1.0, launch, work, knee_f, g, cache_f, wbytes, 1.0)
        bwd = _curve(m, rb, launch, work, knee_b, g, cache_b, wbytes, 3.0)
        stages.append(StageCosts(
            fwd=tuple(fwd.tolist()), bwd=tuple(bwd.tolist()), rbwd=tuple((fwd + bwd).tolist()),
            opt=OPT * (1.0 + (wbytes * 16.0 / 2.0) / PARAM_BYTES),
            memory=StageMemory(param_bytes=PARAM_BYTES + wbytes * 8.0,
                               saved_act_bytes_per_sample=ACT_BYTES * 8.0,
                               input_bytes_per_sample=ACT_BYTES),
            name=f"{family}{s}",
            extra={"family": family, "knee_fwd": knee_f, "knee_bwd": knee_b,
                   "launch_s": launch, "work_s_per_sample": work, "cache_slope": g,
                   "weight_bytes": wbytes},
        ))
    links = []
    for s in range(S - 1):
        x = strength("slowlink", s)
        links.append(Link(
            act_bytes=ACT_BYTES, grad_bytes=ACT_BYTES,
            latency=NVLINK_LAT + x * (SLOW_LINK_LAT - NVLINK_LAT),
            bandwidth=1.0 / (1.0 / NVLINK_BW + x * (1.0 / SLOW_LINK_BW - 1.0 / NVLINK_BW)),
        ))

    return Problem(
        name=name or family_name(family, S, B, h, seed, decorrelated),
        B=B,
        sizes=tuple(range(1, B + 1)),
        stages=tuple(stages),
        links=tuple(links),
        provenance={
            "source": "synthetic",
            "device": "simulated H100-class GPUs",
            "generator": "umpipe_bench.simnets.family_problem",
            "family": family, "h": h, "seed": seed, "decorrelated": decorrelated,
        },
        description=f"simulation network, family {family}{' (decorrelated)' * decorrelated}, "
        f"S={S}, B={B}, h={h:g}, seed={seed}",
    ).validate()


def contrast_problem(S: int, B: int, launch: float = 2e-2, cliff: float = 49.0,
                     cliff_at: float = 8.0) -> Problem:
    """The constructed extreme beyond the families (docs/SIMNETS.md, "Where +100 % appears").

    Even stages are host-bound: ``launch`` seconds per call (20 ms: 100 samples' worth of the
    base stage's work). Odd stages fall off a memory cliff: past ``cliff_at`` samples the cost
    of each further sample grows by ``cliff`` times the base work per ``cliff_at`` samples (49:
    about the ratio of HBM3 to PCIe 5 bandwidth, activations spilled to host memory). Links,
    optimizer and base work as in the families.
    """
    if S < 1 or B < 1:
        raise ValueError(f"contrast_problem needs S >= 1 and B >= 1, got S={S}, B={B}")
    m = np.arange(1, B + 1, dtype=np.float64)
    stages = []
    for s in range(S):
        c, g = (launch, 0.0) if s % 2 == 0 else (LAUNCH, cliff)
        fwd = _curve(m, 1.0, c, WORK, 1.0, g, cliff_at, 0.0, 1.0)
        bwd = _curve(m, BWD_RATIO, c, WORK, 1.0, g, cliff_at, 0.0, 3.0)
        stages.append(StageCosts(fwd=tuple(fwd.tolist()), bwd=tuple(bwd.tolist()),
                                 rbwd=tuple((fwd + bwd).tolist()), opt=OPT,
                                 name="host" if s % 2 == 0 else "cliff"))
    link = Link(act_bytes=ACT_BYTES, grad_bytes=ACT_BYTES, latency=NVLINK_LAT,
                bandwidth=NVLINK_BW)
    return Problem(
        name=f"contrast-s{S}-b{B}", B=B, sizes=tuple(range(1, B + 1)), stages=tuple(stages),
        links=(link,) * (S - 1),
        provenance={"source": "synthetic", "device": "constructed extreme",
                    "generator": "umpipe_bench.simnets.contrast_problem", "launch": launch,
                    "cliff": cliff, "cliff_at": cliff_at},
        description=f"host-bound stages ({launch * 1e3:g} ms per call) alternating with "
        f"memory-cliff stages (x{cliff:g} past {cliff_at:g} samples), S={S}, B={B}",
    ).validate()
