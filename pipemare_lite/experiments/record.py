"""Stored experiment results that mean something on any machine (chapter 10).

A single-seed number from a training run is a property of the code *and* of the CPU: the
kernels torch picks (AVX2 or AVX512 paths, MKL's dispatch for the CPU's vendor) differ in
the last bit, and tens of momentum-SGD steps grow that bit into a different trajectory
(issue 10 measured a sync row's accuracy moving over 0.880-0.922 across CPU settings). So a
stored result records

- a **fingerprint** of the machine and library stack that wrote it
  (:func:`machine_fingerprint`), and
- for every row the values over **several seeds** (:func:`seed_summary`: mean, min, max),

and the check that re-runs one row (:func:`check_rerun`) works in one of two modes:

- **bitwise**, when the current fingerprint's kernel part (:func:`kernel_fingerprint`: the
  fp32 SIMD flags, torch's CPU capability, the libraries and threads, not the CPU's model
  number) equals the stored one: the re-run seed's
  numbers must equal the stored ones exactly (same seed, same machine, same numbers);
- **range**, on any other machine: each checked metric of the re-run must lie within the
  **prediction interval for one new seed** computed from the stored seeds
  (:func:`prediction_interval`, derived below), cut to the range the quantity can take.
  Keys that no kernel can change (step counts, bytes) are still compared exactly.

How the interval is derived. On a foreign machine the re-run of seed ``s`` starts from the
same data and weights as the stored seed ``s`` and differs only by last-bit kernel
differences; after enough steps these act like a change of seed (the measured cross-CPU
moves of a row are as large as its seed-to-seed spread, and no larger). So the re-run is
modelled as one more independent draw from the distribution the stored seeds came from,
taken as normal with unknown mean and variance. For ``n`` stored values with mean ``m``
and sample standard deviation ``s``, the two-sided prediction interval for one new draw at
level ``LEVEL = 1 - ALPHA`` is (Student's t, exact under the model)::

    m +- t(n - 1, 1 - ALPHA / 2) * s * sqrt(1 + 1 / n),   ALPHA = 0.01 (a 99 % interval)

then

- **cut to the quantity's range** (:data:`METRIC_RANGES`: an accuracy in [0, 1], a loss
  in [0, inf)): an interval never claims more room than the quantity has. Where it was cut
  the report says so: with few, widely spread seeds (3 seeds, some diverged) it then bounds
  nothing on that side, which is what 3 such seeds can tell;
- **given a floor** on its half-width: the caller's (one test sample for an accuracy),
  else :data:`RELATIVE_FLOOR` times ``|m|``. It matters where the stored seeds agree (all
  equal: ``s = 0`` and the t-interval would be the point itself, though another machine's
  kernels can still move the last bits); elsewhere the t half-width is far above it.

The level is 99 %, not 95 %: a check compares two correlated metrics (accuracy and loss)
of one seed, and a correct method on a foreign machine should fail about once in a hundred
checks, not once in twenty. A new seed lands outside all ``n`` stored seeds with
probability ``2 / (n + 1)`` (22 % for 8 seeds), so "outside every stored seed" is no
evidence of a fault; the interval is: with the 8-seed check cell of
``paper_shape_quick.json`` it is [0.725, 1] in accuracy (the old rule, the seed range
widened by a 99.9 % half-width on each side, accepted [0.54, 1.20]). A change of the
method that moves a metric by much more than the seed noise fails (tests/test_results.py
re-runs a synchronous row with an asynchronous delay and sees the check reject it); a
change within the seed noise can only be caught in bitwise mode. A failure names the
quantity, the interval and by how much the re-run missed it.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import platform
from dataclasses import dataclass, field

#: two-sided false-alarm probability of the prediction-interval check under the normal model
#: (module doc): a correct re-run on a foreign machine fails one metric with this probability
ALPHA = 0.01

#: the range each checked quantity can take; a prediction interval is cut to it (module doc)
METRIC_RANGES = {
    "final_accuracy": (0.0, 1.0),
    "quality": (0.0, 1.0),
    "final_loss": (0.0, math.inf),
}

#: the half-width's floor relative to the stored mean's size, for a metric whose caller
#: gives no floor (module doc): it decides only where the stored seeds (nearly) agree
RELATIVE_FLOOR = 1e-3

#: CPU flags that decide which SIMD kernels torch, MKL and oneDNN pick
SIMD_FLAGS = (
    "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512dq",
    "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile",
    "amx_bf16", "amx_int8", "asimd", "sve", "sve2",
)  # fmt: skip

#: the flags among :data:`SIMD_FLAGS` that change float32 kernels: vector width and FMA. The
#: VNNI, bf16, fp16 and AMX extensions serve int8 and low-precision kernels only (oneDNN and
#: MKL pick fp32 code by AVX2 / AVX-512), so two CPUs that differ only there compute fp32
#: training bitwise alike (seen: an EPYC with and one without ``avx_vnni`` reproduced the
#: stored paper-shape run bitwise).
FP32_KERNEL_FLAGS = (
    "sse4_1", "sse4_2", "avx", "avx2", "fma", "avx512f", "avx512dq", "avx512bw", "avx512vl",
    "asimd", "sve", "sve2",
)  # fmt: skip

#: fingerprint fields that decide the kernels (and so the bitwise check); the others (CPU
#: model number, numpy/scikit-learn/python versions, OS) are recorded but decide nothing
KERNEL_FIELDS = (
    "cpu_vendor", "machine", "torch_cpu_capability", "blas", "lapack", "mkl", "onednn",
    "torch_commit", "torch_version", "torch_threads", "kernel_env",
)  # fmt: skip

#: environment variables that change which kernels run (recorded when set)
KERNEL_ENV_VARS = (
    "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "MKL_DEBUG_CPU_TYPE",
    "DNNL_MAX_CPU_ISA", "ONEDNN_MAX_CPU_ISA", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
)  # fmt: skip


# ---------------------------------------------------------------------------- fingerprint


def _cpuinfo() -> dict:
    """Vendor, model and SIMD flags of the first CPU in /proc/cpuinfo ({} where absent)."""
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        return {}
    first: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if first:
                break
            continue
        key, _, value = line.partition(":")
        first.setdefault(key.strip(), value.strip())
    flags = set((first.get("flags") or first.get("Features") or "").split())
    return {
        "cpu_vendor": first.get("vendor_id") or first.get("CPU implementer", ""),
        "cpu_model": first.get("model name") or first.get("CPU part", ""),
        "cpu_family_model": f"{first.get('cpu family', '')}/{first.get('model', '')}",
        "cpu_simd_flags": [f for f in SIMD_FLAGS if f in flags],
    }


def _torch_build() -> dict:
    """The BLAS, MKL and oneDNN lines of ``torch.__config__.show()``."""
    import torch

    shown = torch.__config__.show()
    lines = [line.strip(" -") for line in shown.splitlines()]
    settings = dict(
        item.strip().split("=", 1) for line in lines if line.startswith("Build settings:")
        for item in line.removeprefix("Build settings:").split(", ") if "=" in item
    )  # fmt: skip
    return {
        "blas": settings.get("BLAS_INFO", "unknown"),
        "lapack": settings.get("LAPACK_INFO", "unknown"),
        "mkl": next((line for line in lines if "Math Kernel Library" in line), "none"),
        "onednn": next((line for line in lines if "MKL-DNN" in line or "oneDNN" in line), "none"),
        "torch_commit": settings.get("COMMIT_SHA", "unknown"),
    }


def machine_fingerprint(threads: int) -> dict:
    """What decides the last bits of a CPU training run here: CPU, kernels, libraries.

    Args:
        threads: the torch thread count the computation ran (or will run) with; recorded,
            not measured, because experiments set it for their run only.

    Returns a JSON-ready dict: CPU vendor, model and SIMD flags (from /proc/cpuinfo, else
    :func:`platform.processor`), torch's CPU capability (the SIMD level its kernels
    dispatch to), BLAS/LAPACK/MKL/oneDNN as torch was built with them, the thread count,
    kernel-changing environment variables that are set, torch/numpy/scikit-learn/python
    versions, the OS and its C library. Not the OS kernel's release: it does none of the
    run's arithmetic, and a VM's kernel build changes between boots of the same machine
    (:func:`meta_record` stores the full :func:`platform.platform` beside the fingerprint).
    """
    import numpy
    import sklearn
    import torch

    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"threads must be a positive int, got {threads!r}")
    cpu = _cpuinfo() or {
        "cpu_vendor": "",
        "cpu_model": platform.processor(),
        "cpu_family_model": "",
        "cpu_simd_flags": [],
    }
    return {
        **cpu,
        "machine": platform.machine(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        **_torch_build(),
        "torch_threads": threads,
        "kernel_env": {k: os.environ[k] for k in KERNEL_ENV_VARS if k in os.environ},
        "torch_version": torch.__version__,
        "numpy_version": numpy.__version__,
        "sklearn_version": sklearn.__version__,
        "python_version": platform.python_version(),
        "os": platform.system(),
        "libc": " ".join(platform.libc_ver()).strip(),
    }


def kernel_differences(stored: dict, current: dict) -> list[str]:
    """How two :func:`machine_fingerprint` s differ in what decides float32 kernels
    (:func:`kernel_fingerprint`), one ``key: stored -> current`` line each.

    The one rule for floats recorded on another machine (stored experiments, test
    fixtures; issue 42): empty means the same kernels, so the numbers must come back
    bitwise; otherwise only a comparison that no kernel can change is meaningful (a
    within-process reference, a seed range, or a tolerance that says why it is safe).
    """
    return fingerprint_differences(kernel_fingerprint(stored), kernel_fingerprint(current))


def fingerprint_differences(stored: dict, current: dict) -> list[str]:
    """One ``key: stored -> current`` line per field that differs (empty: the same machine)."""
    keys = sorted(set(stored) | set(current))
    return [
        f"{k}: {stored.get(k, '(absent)')!r} -> {current.get(k, '(absent)')!r}"
        for k in keys
        if stored.get(k) != current.get(k)
    ]


def kernel_fingerprint(fingerprint: dict) -> dict:
    """The part of a :func:`machine_fingerprint` that decides the float32 kernels a run
    takes: :data:`KERNEL_FIELDS` and the :data:`FP32_KERNEL_FLAGS` the CPU has."""
    flags = set(fingerprint.get("cpu_simd_flags", []))
    return {**{k: fingerprint.get(k) for k in KERNEL_FIELDS},
            "fp32_simd_flags": [f for f in FP32_KERNEL_FLAGS if f in flags]}  # fmt: skip


@contextlib.contextmanager
def torch_threads(count: int):
    """Run the block with ``count`` torch threads, restoring the previous count after."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def meta_record(
    *, command: str, seeds, threads: int, package_version: str, extra: dict | None = None
) -> dict:
    """The ``.meta.json`` beside a stored result: how, where and when it was made, and
    ``provenance``: the versions and git commit
    (:func:`pipemare_lite.training.provenance.environment`) and each loaded plugin's source
    hash (every run's history has these and its schedule's digest too; the stored rows leave
    them out, so that ``--check`` compares what training produced)."""
    from pipemare_lite.plugins import loaded_plugins
    from pipemare_lite.training import provenance

    return {
        "command": command,
        "package_version": package_version,
        "seeds": list(seeds),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "fingerprint": machine_fingerprint(threads),
        "platform": platform.platform(),
        "provenance": {"environment": provenance.environment(),
                       "plugins": provenance.plugin_sources(loaded_plugins())},
        **(extra or {}),
    }


def read_stored(directory, stem: str) -> tuple[dict | None, dict | None]:
    """A stored experiment's results and meta as plain JSON (``(None, None)`` when either
    file is missing): ``<directory>/<stem>.json`` and ``.meta.json``. Nothing in them is run."""
    from pathlib import Path

    results, meta = Path(directory) / f"{stem}.json", Path(directory) / f"{stem}.meta.json"
    if not (results.is_file() and meta.is_file()):
        return None, None
    return json.loads(results.read_text()), json.loads(meta.read_text())


def provenance(meta: dict, seeds: str | None = None) -> str:
    """Lines for a chapter: the command that regenerates a stored result, and when, by
    which version, with which seeds and how long it took on the machine that wrote it.

    ``seeds``: which rows ran which seeds, where they differ (e.g.
    :func:`pipemare_lite.experiments.paper_shape_table.seed_groups`), printed instead of
    the meta's one list (then only the default set).
    """
    seed_text = "" if seeds else f"seeds {meta.get('seeds')}, "
    return (f"regenerate with: {meta['command']}\nstored {str(meta.get('date', '?'))[:10]} by "
            f"version {meta.get('package_version')}, {seed_text}"
            f"{meta.get('wall_seconds')} s wall on the machine that wrote it"
            + (f"\n{seeds}" if seeds else ""))


# --------------------------------------------------------------------------- seed values


def seed_quality(final_accuracy: float | None, diverged: bool) -> float:
    """A seed's **quality**: its final test accuracy, 0 when the run diverged.

    The book's one convention for diverged seeds, defined here and used by every stored
    experiment (``paper-shape``, ``beyond-pipemare``) and every chapter that reads them: a
    diverged seed is a failed run, so it counts as the worst accuracy there is instead of
    being left out of the mean (which would make a method that diverges on some seeds look
    as good as its lucky ones). How a run counts as diverged is the experiment's rule
    (non-finite, or its loss rule); the seed's row says which.
    """
    return 0.0 if diverged or final_accuracy is None else float(final_accuracy)


def quality_range(row: dict, digits: int = 3) -> str:
    """``mean [min, max]`` of a stored row's quality, then how many seeds diverged.

    ``row`` is a stored experiment row with ``summary["quality"]`` (a :func:`seed_summary` of
    :func:`seed_quality`) and ``diverged_seeds``.
    """
    q = row["summary"]["quality"]
    text = f"{q['mean']:.{digits}f} [{q['min']:.{digits}f}, {q['max']:.{digits}f}]"
    if row.get("diverged_seeds"):
        text += f", {row['diverged_seeds']} of {q['n']} seeds diverged (counted as 0)"
    return text


def seed_summary(values) -> dict:
    """Mean, min and max of one metric over seeds; non-finite values (diverged) counted apart.

    Returns ``{"n", "mean", "min", "max", "non_finite"}``; mean/min/max are None when no
    value is finite.
    """
    values = [float(v) if v is not None else math.nan for v in values]
    if not values:
        raise ValueError("seed_summary needs at least one value")
    finite = [v for v in values if math.isfinite(v)]
    return {
        "n": len(values),
        "mean": math.fsum(finite) / len(finite) if finite else None,
        "min": min(finite) if finite else None,
        "max": max(finite) if finite else None,
        "non_finite": len(values) - len(finite),
    }


def verdict(holds_in_worst_case: bool, fails_in_best_case: bool) -> str:
    """A claim judged on seed ranges: only separated ranges decide it.

    ``holds_in_worst_case``: the claim holds even with every compared row at the unfavourable
    end of its seed range; ``fails_in_best_case``: it fails even at the favourable end.
    """
    if holds_in_worst_case and fails_in_best_case:
        raise ValueError("a claim cannot both hold in the worst case and fail in the best")
    if holds_in_worst_case:
        return "held"
    if fails_in_best_case:
        return "did not hold"
    return "not separable from noise"


def _student_t_two_sided(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with integer ``df`` (Abramowitz & Stegun 26.7.3-4)."""
    theta = math.atan(t / math.sqrt(df))
    c2, term, total = math.cos(theta) ** 2, 1.0, 1.0
    if df % 2 == 0:
        for k in range(2, df, 2):  # 1 + (1/2) c^2 + (1*3)/(2*4) c^4 + ...
            term *= c2 * (k - 1) / k
            total += term
        return math.sin(theta) * total
    if df == 1:
        return 2 * theta / math.pi
    total = math.cos(theta)
    term = math.cos(theta)
    for k in range(3, df, 2):  # cos + (2/3) cos^3 + (2*4)/(3*5) cos^5 + ...
        term *= c2 * (k - 1) / k
        total += term
    return 2 / math.pi * (theta + math.sin(theta) * total)


def student_t_quantile(probability: float, df: int) -> float:
    """The ``probability`` quantile (> 0.5) of Student's t with integer ``df`` >= 1."""
    if not 0.5 < probability < 1:
        raise ValueError(f"probability must be in (0.5, 1), got {probability!r}")
    if not isinstance(df, int) or df < 1:
        raise ValueError(f"df must be a positive int, got {df!r}")
    target, lo, hi = 2 * probability - 1, 0.0, 1.0
    while _student_t_two_sided(hi, df) < target:
        hi *= 2
    for _ in range(200):  # bisection to float precision
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _student_t_two_sided(mid, df) < target else (lo, mid)
    return (lo + hi) / 2


def range_margin(values, *, alpha: float = ALPHA, floor: float = 0.0) -> float:
    """Half-width of the ``1 - alpha`` prediction interval of one more seed (module doc):
    ``max(floor, t(n-1, 1-alpha/2) * s * sqrt(1 + 1/n))``.

    ``values``: the stored seeds' finite values (at least 2); ``floor``: the smallest
    half-width (e.g. one test sample for an accuracy; it decides where the seeds agree).
    """
    values = [float(v) for v in values]
    n = len(values)
    if n < 2:
        raise ValueError(f"a prediction interval needs at least 2 finite seed values, got {n}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    mean = math.fsum(values) / n
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    return max(floor, student_t_quantile(1 - alpha / 2, n - 1) * sd * math.sqrt(1 + 1 / n))


def prediction_interval(values, *, alpha: float = ALPHA, floor: float | None = None,
                        lowest: float = -math.inf, highest: float = math.inf) -> dict:
    """Where one more seed should land: the stored seeds' mean +- :func:`range_margin`, cut
    to ``[lowest, highest]`` (the quantity's range; module doc).

    ``floor``: the smallest half-width; None means :data:`RELATIVE_FLOOR` times the mean's
    size. Returns ``{"low", "high", "mean", "half_width", "cut", "n"}``; ``cut`` is True where
    the t-interval reached beyond the range and was cut to it.
    """
    values = [float(v) for v in values]
    if len(values) >= 1 and not all(math.isfinite(v) for v in values):
        raise ValueError(f"a prediction interval needs finite values, got {values!r}")
    mean = math.fsum(values) / len(values) if values else math.nan
    if floor is None:
        floor = RELATIVE_FLOOR * abs(mean)
    half = range_margin(values, alpha=alpha, floor=floor)
    low, high, cut = clipped(mean - half, mean + half, lowest, highest)
    return {"low": low, "high": high, "mean": mean, "half_width": half, "cut": cut,
            "n": len(values)}


def _mean_and_variance(values) -> tuple[float, float, int]:
    values = [float(v) for v in values]
    n = len(values)
    if n == 0 or not all(math.isfinite(v) for v in values):
        raise ValueError(f"an interval needs finite values, got {values!r}")
    mean = math.fsum(values) / n
    variance = math.fsum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return mean, variance, n


def mean_interval(values, confidence: float = 0.95) -> list[float]:
    """``[low, high]``: the two-sided Student-t interval of the mean over seeds (one value,
    or no spread: the point itself)."""
    mean, variance, n = _mean_and_variance(values)
    if n == 1 or variance == 0:
        return [mean, mean]
    half = student_t_quantile((1 + confidence) / 2, n - 1) * math.sqrt(variance / n)
    return [mean - half, mean + half]


def clipped(low: float, high: float, lowest: float = 0.0,
            highest: float = 1.0) -> tuple[float, float, bool]:
    """``(low, high, cut)``: an interval cut to the range its quantity can take, and whether
    it was cut.

    A Student-t interval assumes a bell-shaped mean; an accuracy lies in [0, 1] (a
    difference of two in [-1, 1]). With 3 seeds of which some diverged (quality 0) and some
    did not, the t-interval reaches far beyond the range: it then says only that the seeds
    disagree too widely to pin the mean down. The tables show it cut to the range and say
    so; the verdicts are unchanged by the cut, since every threshold lies inside the range.
    """
    if lowest > highest:
        raise ValueError(f"the range [{lowest}, {highest}] is empty")
    cut_low, cut_high = max(low, lowest), min(high, highest)
    return cut_low, cut_high, (cut_low, cut_high) != (low, high)


def interval_text(low: float, high: float, lowest: float = 0.0, highest: float = 1.0,
                  sign: str = "") -> str:
    """``low..high`` cut to ``[lowest, highest]`` (the range the quantity can take), with
    ``, cut to [lowest, highest]`` when the Student-t interval reached beyond it
    (:func:`clipped`). ``sign="+"`` prints signs."""
    low, high, cut = clipped(low, high, lowest, highest)
    return (f"{low:{sign}.3f}..{high:{sign}.3f}"
            + (f", cut to [{lowest:g}, {highest:g}]" if cut else ""))


def difference_interval(terms, confidence: float = 0.95) -> dict:
    """A linear combination of row means, ``sum(c * mean(values))``, with its two-sided
    Welch interval (Welch-Satterthwaite degrees of freedom, rounded down).

    ``terms``: ``[(c, values), ...]``, e.g. ``[(1, x), (-1, y)]`` for ``mean(x) - mean(y)``
    or ``[(1, x), (-0.5, a), (-0.5, s)]`` for x against the midpoint of a and s. Returns
    ``{"estimate", "low", "high", "df"}`` (``df`` None when every term has no spread: the
    interval is then the point).
    """
    parts = [(c, *_mean_and_variance(values)) for c, values in terms]
    estimate = math.fsum(c * mean for c, mean, _, _ in parts)
    pieces = [(c * c * variance / n, n) for c, _, variance, n in parts]
    total = math.fsum(v for v, _ in pieces)
    if total == 0:
        return {"estimate": estimate, "low": estimate, "high": estimate, "df": None}
    df = total**2 / math.fsum(v * v / (n - 1) for v, n in pieces if n > 1 and v > 0)
    df = max(1, math.floor(df))
    half = student_t_quantile((1 + confidence) / 2, df) * math.sqrt(total)
    return {"estimate": estimate, "low": estimate - half, "high": estimate + half, "df": df}


# ------------------------------------------------------------------------------ the check


@dataclass
class CheckReport:
    """What :func:`check_rerun` did: its mode, each comparison, and which keys failed."""

    what: str
    mode: str  # "bitwise" or "range"
    failed: list[str]
    lines: list[str] = field(default_factory=list)
    fingerprint_differences: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when no compared key failed."""
        return not self.failed

    def __str__(self) -> str:
        why = (
            "the fingerprint equals the stored one: exact comparison"
            if self.mode == "bitwise"
            else "the fingerprint differs from the stored one ("
            + "; ".join(self.fingerprint_differences)
            + "): each metric within the stored seeds' prediction interval"
        )
        failed = f"; failed: {', '.join(self.failed)}" if self.failed else ""
        head = f"{self.what}: {'PASS' if self.passed else 'FAIL'}, mode {self.mode} ({why}){failed}"
        return "\n".join([head, *("  " + line for line in self.lines)])


def _plain(value):
    """``value`` as stored JSON reads back (tuples -> lists, NaN -> None)."""
    from pipemare_lite.files import json_ready

    return json.loads(json.dumps(json_ready(value), allow_nan=False))


def check_rerun(
    stored_seeds: list[dict],
    rerun: dict,
    *,
    seed_key: str = "seed",
    stored_fingerprint: dict,
    fingerprint: dict,
    metrics: tuple[str, ...],
    exact_keys: tuple[str, ...] = (),
    floors: dict[str, float] | None = None,
    ranges: dict[str, tuple[float, float]] | None = None,
    what: str = "stored-results check",
) -> CheckReport:
    """Compare one re-run seed of a row with the stored seeds of that row (module doc).

    Args:
        stored_seeds: the row's per-seed results as stored (each has ``seed_key``).
        rerun: the re-run's result for one of those seeds (same keys).
        stored_fingerprint, fingerprint: the writer's and this machine's
            :func:`machine_fingerprint`; equal :func:`kernel_fingerprint` -> bitwise mode,
            else range mode.
        metrics: keys checked against the stored seeds' :func:`prediction_interval` in
            range mode.
        exact_keys: keys compared exactly in range mode too (what no kernel changes).
        floors: per-metric smallest half-width (default: :data:`RELATIVE_FLOOR` of the mean).
        ranges: per-metric ``(lowest, highest)`` the quantity can take, over
            :data:`METRIC_RANGES` (a metric in neither is not cut).

    Returns a :class:`CheckReport`; the caller asserts ``report.passed``.
    """
    rerun = _plain(rerun)
    seed = rerun.get(seed_key)
    stored = next((s for s in stored_seeds if s.get(seed_key) == seed), None)
    if stored is None:
        allowed = [s.get(seed_key) for s in stored_seeds]
        raise ValueError(f"re-run has {seed_key}={seed!r}; the stored seeds are {allowed}")
    missing = [k for k in (*metrics, *exact_keys) if k not in stored or k not in rerun]
    if missing:
        raise ValueError(f"keys {missing} missing from the stored or the re-run result")
    differences = kernel_differences(stored_fingerprint, fingerprint)
    lines: list[str] = []
    if not differences:
        keys = sorted(set(stored) | set(rerun))
        unequal = [k for k in keys if stored.get(k) != rerun.get(k)]
        for k in keys:
            if k in unequal:
                lines.append(f"{k}: differs ({_short(stored.get(k))} stored, "
                             f"{_short(rerun.get(k))} now)")  # fmt: skip
        lines.append(f"seed {seed}: {len(keys) - len(unequal)} of {len(keys)} keys bitwise equal")
        return CheckReport(what, "bitwise", unequal, lines, differences)
    failed = []
    for k in exact_keys:
        same = stored[k] == rerun[k]
        failed += [] if same else [k]
        lines.append(f"{k}: {'equal' if same else 'differs'} ({_short(rerun[k])} now, "
                     f"{_short(stored[k])} stored)")  # fmt: skip
    for k in metrics:
        ok, line = _in_prediction_interval(k, [s[k] for s in stored_seeds], rerun[k],
                                           (floors or {}).get(k),
                                           {**METRIC_RANGES, **(ranges or {})}.get(k))
        failed += [] if ok else [k]
        lines.append(line)
    return CheckReport(what, "range", failed, lines, differences)


def _in_prediction_interval(key: str, stored_values, value, floor,
                            bounds) -> tuple[bool, str]:
    """Whether ``value`` lies in the stored seeds' prediction interval, and the report line
    (which quantity, the interval, and by how much a value outside missed it)."""
    finite = [float(v) for v in stored_values if v is not None and math.isfinite(v)]
    if value is None or not math.isfinite(value):  # diverged: only if a stored seed did too
        ok = len(finite) < len(stored_values)
        return ok, f"{key}: non-finite now; {len(stored_values) - len(finite)} stored seeds were"
    if len(finite) < 2:
        return False, f"{key}: {value:.6g} now, fewer than 2 finite stored seeds to compare"
    lowest, highest = bounds if bounds is not None else (-math.inf, math.inf)
    pi = prediction_interval(finite, floor=floor, lowest=lowest, highest=highest)
    lo, hi = pi["low"], pi["high"]
    ok = lo <= value <= hi
    miss = "" if ok else (f" by {lo - value:.4g} below" if value < lo else
                          f" by {value - hi:.4g} above")
    cut = f", cut to [{lowest:g}, {highest:g}]" if pi["cut"] else ""
    return ok, (
        f"{key}: {value:.6g} now, {'inside' if ok else 'OUTSIDE'} the {100 * (1 - ALPHA):g} % "
        f"prediction interval [{lo:.6g}, {hi:.6g}]{miss} (stored {len(finite)} seeds mean "
        f"{pi['mean']:.6g}, {min(finite):.6g}..{max(finite):.6g}, half-width "
        f"{pi['half_width']:.4g}{cut})"
    )


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
