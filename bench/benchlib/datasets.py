"""Datasets: generated once per (workload, scale, seed) with `strata generate`, cached under the work
directory, and measured: raw bytes, `zstd -1` and `zstd -3` compressed bytes (the zstd CLI when
present, else the `zstandard` Python package, single-threaded either way)."""
import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .procs import log

SCALE_RE = re.compile(r"^(\d+(?:\.\d+)?)([kmb]?)$")
UNITS = {"": 1, "k": 1_000, "m": 1_000_000, "b": 1_000_000_000}


def parse_scale(scale):
    """'100k' -> 100000, '1m' -> 1000000, '2500' -> 2500."""
    m = SCALE_RE.match(scale.strip().lower())
    if not m:
        raise ValueError(f"bad scale {scale!r}: use a count such as 100k, 1m, 10m or 5000")
    return int(float(m.group(1)) * UNITS[m.group(2)])


@dataclass
class Dataset:
    workload: str
    scale: str
    docs: int  # documents the generator wrote (the dataset size)
    path: Path
    generator_command: str
    sizes: dict  # raw, zstd_1, zstd_3 (bytes)

    def as_json(self):
        return {"workload": self.workload, "scale": self.scale, "dataset_size": self.docs,
                "file": str(self.path), "generator": self.generator_command,
                "bytes_raw": self.sizes["raw"], "bytes_zstd_1": self.sizes["zstd_1"],
                "bytes_zstd_3": self.sizes["zstd_3"]}


def prepare(workload, scale, strata_bin, work, seed=1, override=None):
    """Return the Dataset for `workload` at `scale`, generating it if needed.

    `override` is an existing NDJSON file to use instead of generating one (its line count is the
    dataset size, and `scale` is then only a label)."""
    if override:
        path = Path(override)
        if not path.exists():
            raise FileNotFoundError(f"dataset file {path} does not exist")
        docs = count_lines(path)
        command = f"given file {path}"
    else:
        docs = parse_scale(scale)
        path = Path(work) / "data" / f"{workload.generator}_{scale}_seed{seed}.ndjson"
        command = f"strata generate {workload.generator} --docs {docs} --seed {seed}"
        if not path.exists():
            if not Path(strata_bin).exists():
                raise FileNotFoundError(f"cannot generate {path.name}: Strata binary {strata_bin} not found "
                                        "(build it with `cargo build --release --bin strata` or pass --strata-bin)")
            path.parent.mkdir(parents=True, exist_ok=True)
            log(f"generating {docs:,} {workload.generator} documents -> {path}")
            tmp = path.with_suffix(".tmp.ndjson")
            subprocess.run([str(strata_bin), "generate", workload.generator, "--docs", str(docs),
                            "--seed", str(seed), "-o", str(tmp)], check=True)
            tmp.rename(path)
    return Dataset(workload.name, scale, docs, path, command, measure_sizes(path))


def count_lines(path):
    n = 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            n += chunk.count(b"\n")
    return n


def measure_sizes(path):
    """Raw, zstd -1 and zstd -3 sizes of a file; cached next to it, keyed by size and mtime."""
    path = Path(path)
    st = path.stat()
    cache = path.with_name(path.name + ".sizes.json")
    key = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
    if cache.exists():
        cached = json.loads(cache.read_text())
        if cached.get("key") == key:
            return cached["sizes"]
    sizes = {"raw": st.st_size}
    for level in (1, 3):
        sizes[f"zstd_{level}"] = zstd_size(path, level)
    cache.write_text(json.dumps({"key": key, "sizes": sizes}))
    return sizes


def zstd_size(path, level):
    """Compressed size of `path` at zstd `level`, one thread, streamed (nothing written)."""
    if shutil.which("zstd"):
        proc = subprocess.Popen(["zstd", f"-{level}", "-T1", "-q", "-c", str(path)], stdout=subprocess.PIPE)
        total = 0
        for chunk in iter(lambda: proc.stdout.read(1 << 20), b""):
            total += len(chunk)
        if proc.wait() != 0:
            raise RuntimeError(f"zstd -{level} failed on {path}")
        return total
    import zstandard  # fallback when the CLI is missing

    cctx = zstandard.ZstdCompressor(level=level, threads=0)
    total = 0
    with open(path, "rb") as f:
        reader = cctx.stream_reader(f)
        for chunk in iter(lambda: reader.read(1 << 20), b""):
            total += len(chunk)
    return total
