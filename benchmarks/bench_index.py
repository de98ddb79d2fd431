"""Index backends side by side: in-memory exact search, FAISS IVF-PQ on disk, Milvus Lite (each index type it
offers) on the same vectors: build time, peak RSS while building and while searching, on-disk size,
queries/s and recall@10 against exact search; and what 10M and 100M vectors would need, by the scaling
measured between the sizes run (``y = a + b * n`` fitted per arm and quantity: a fixed part and a part per
vector; super-linear costs such as IVF training or HNSW's log n show only in sizes far enough apart).

Vectors: a stated synthetic distribution, not encoded text (encoding 1M passages on CPU alone takes hours):
384-d (MiniLM's size), 1,000 Gaussian cluster centres (standard normal), L2-normalised (cosine = inner product,
as for MiniLM); queries are further draws of the same distribution (seed 1; the corpus is seed 0). Exact top-10
by brute force (numpy) is the reference. ``--data gaussian`` (the cpu preset's): a centre plus N(0, 0.35^2) noise
in every dimension -- every cluster mate then lies at nearly the same distance (the relative contrast tends to 1
in 384 isotropic dimensions), so once clusters hold more vectors than the re-ranked candidates, the true top 10
among them is a coin toss for any compressed code (IVF-PQ with 40 candidates: recall@10 0.69 at 100,000
vectors). ``--data lowrank`` (the full preset's): the same total noise in one fixed random 32-d subspace plus
N(0, 0.02^2) per dimension, a low intrinsic dimension, as sentence embeddings have.

Every build and every search runs in a fresh process: its peak RSS is that process's ``VmHWM`` (resident
anonymous and file-backed pages, so memory-mapped index pages that searching brought in count; not
``ru_maxrss``, which Linux carries over from the parent at the fork, so a worker reported its parent's 1.9 GB).
The search also records its anonymous and file-backed RSS at the end and how much of the index the OS page
cache holds (``fincore``), the index's pages having been evicted before it (``posix_fadvise``).
Milvus Lite runs inside that process, so its engine's memory counts too. The build reads the vectors in
chunks of 50,000 from a file (never all in RAM, except the in-memory arm, which holds them by design).

    python benchmarks/bench_index.py --preset cpu --out /tmp/drmix-bench-index
    python benchmarks/bench_index.py --preset cpu --out /tmp/drmix-bench-index --report-only
    nice -n 5 python benchmarks/bench_index.py --preset full --out /tmp/drmix-bench-index-full

Presets: ``cpu`` (10,000 and 30,000 vectors, 200 queries, every arm; about 17 minutes on 2 cores) and ``full``
(100,000, 250,000 and 1,000,000 vectors, 1,000 queries, the in-memory and the faiss-disk arms -- Milvus Lite
holds its collection in the process, about 14 KB per vector in the cpu preset, so at this scale Milvus is a
server's job; on 2 shared cores 100,000 and 250,000 took about 15 minutes, 1,000,000 on the faiss-disk arm 20
minutes more (the in-memory arm's exact search at 1M wants about 3 GB of RAM), 5 GB of disk). The full preset also searches each faiss-disk index again at nprobe 64
and 128 and re-scoring 10 and 25 times k candidates. Index building here is CPU work (FAISS CPU, Milvus Lite): no GPU preset changes
it. ``--report-only`` prints the tables of the results in ``--out`` as docs/evaluation.md holds them.

Preset ``server`` (100,000 and 1,000,000 low-rank vectors, 1,000 queries): a Milvus server beside faiss-disk and
Milvus Lite -- ``milvus-server flat``, ``ivf-flat`` and ``hnsw`` each on a fresh Milvus 2.3 standalone server of
the ``milvus`` package (``pip install 'drmix[milvus-server]'``; default settings, free ports, its data under
``--out/server``, removed after the arm), whose build and search workers are its clients: their RSS is the
client's, and the server process's own RSS (at start, its peak, after the search) and CPU time are read from
/proc into a table of their own; "on disk" is the server's data folder. Milvus Lite is run at 100,000 only (it
holds the collection in the client process: about 14 KB a vector). A build that does not finish within
``--timeout`` is kept as such ("over 1.0 h (stopped)") and not run again.

    nice -n 10 python benchmarks/bench_index.py --preset server --timeout 3600 --out /tmp/drmix-bench-index-server
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

DIM, CENTRES, NOISE, CHUNK, K = 384, 1000, 0.35, 50_000, 10
RANK, JITTER = 32, 0.02  # the low-rank data: noise in a 32-d subspace, plus this isotropic jitter per dimension
FULL_ARMS = ["memory flat (exact)", "faiss-disk ivf-pq"]
SERVER_ARMS = ["faiss-disk ivf-pq", "milvus-lite flat", "milvus-lite hnsw", "milvus-server flat",
               "milvus-server ivf-flat", "milvus-server hnsw"]
PRESETS = {"cpu": {"sizes": [10_000, 30_000], "queries": 200, "data": "gaussian"},
           "full": {"sizes": [100_000, 250_000, 1_000_000], "queries": 1000, "data": "lowrank", "arms": FULL_ARMS,
                    "nprobes": [32, 64, 128], "reranks": [4, 10, 25]},
           # Milvus Lite holds its collection in the client process (about 14 KB a vector in the cpu preset): not at
           # 1M on a 23 GB machine shared with others
           "server": {"sizes": [100_000, 1_000_000], "queries": 1000, "data": "lowrank", "arms": SERVER_ARMS,
                      "skip": {1_000_000: ["milvus-lite flat", "milvus-lite hnsw"]}}}
#: arm -> (backend, kind, build options)
ARMS = {
    "memory flat (exact)": ("memory", "flat", {}),
    "faiss-disk ivf-pq": ("faiss-disk", "ivf-pq", {"nprobe": 32, "rerank": 4}),
    "milvus-lite flat": ("milvus", "flat", {}),
    "milvus-lite ivf-flat": ("milvus", "ivf-flat", {"nprobe": 32}),
    "milvus-lite ivf-sq8": ("milvus", "ivf-sq8", {"nprobe": 32}),
    "milvus-lite hnsw": ("milvus", "hnsw", {}),
    "milvus-lite hnsw-sq": ("milvus", "hnsw-sq", {}),
    # a Milvus 2.3 standalone server (the milvus package), a fresh one per arm and size on free ports: the build and
    # search workers are its clients
    "milvus-server flat": ("milvus", "flat", {}),
    "milvus-server ivf-flat": ("milvus", "ivf-flat", {"nprobe": 32}),
    "milvus-server hnsw": ("milvus", "hnsw", {}),
}
SERVER = "milvus-server"


def generate(path: Path, n: int, seed: int, data: str = "gaussian") -> None:
    """``n`` vectors of the stated distribution, written as raw float32 rows chunk by chunk. ``gaussian``: a
    centre plus N(0, NOISE^2) in every dimension; ``lowrank``: a centre plus noise of the same total variance in
    one fixed random 32-d subspace, plus N(0, 0.02^2) per dimension (a low intrinsic dimension, as sentence
    embeddings have)."""
    centres = np.random.default_rng(12345).standard_normal((CENTRES, DIM)).astype(np.float32)
    basis = np.linalg.qr(np.random.default_rng(54321).standard_normal((DIM, RANK)))[0].T.astype(np.float32)
    rng = np.random.default_rng(seed)
    with open(path, "wb") as f:
        for s in range(0, n, CHUNK):
            m = min(CHUNK, n - s)
            if data == "lowrank":
                z = NOISE * math.sqrt(DIM / RANK) * rng.standard_normal((m, RANK)).astype(np.float32)
                x = centres[rng.integers(0, CENTRES, m)] + z @ basis
                x += JITTER * rng.standard_normal((m, DIM)).astype(np.float32)
            else:
                x = centres[rng.integers(0, CENTRES, m)] + NOISE * rng.standard_normal((m, DIM)).astype(np.float32)
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            f.write(x.astype(np.float32).tobytes())


def read_chunks(path: Path, n: int):
    for s in range(0, n, CHUNK):
        m = min(CHUNK, n - s)
        x = np.fromfile(path, dtype=np.float32, count=m * DIM, offset=s * DIM * 4).reshape(m, DIM)
        yield [str(i) for i in range(s, s + m)], x


def exact_top(path: Path, n: int, q: np.ndarray) -> np.ndarray:
    best_s = np.full((len(q), K), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(q), K), dtype=np.int64)
    for ids, x in read_chunks(path, n):
        s = q @ x.T
        s_all = np.concatenate([best_s, s], axis=1)
        i_all = np.concatenate([best_i, np.broadcast_to(np.asarray(ids, dtype=np.int64), s.shape)], axis=1)
        part = np.argpartition(-s_all, K - 1, axis=1)[:, :K]  # the top K, then those K in order
        order = np.argsort(-np.take_along_axis(s_all, part, 1), axis=1, kind="stable")
        top = np.take_along_axis(part, order, 1)
        best_s, best_i = np.take_along_axis(s_all, top, 1), np.take_along_axis(i_all, top, 1)
    return best_i


def disk_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# ---------------------------------------------------------------------------------------------- memory

def index_files(target: Path) -> list[Path]:
    """The files of an index folder (a Milvus location: none, its engine's files are shared by collections)."""
    return sorted(p for p in target.rglob("*") if p.is_file()) if target.is_dir() else []


def evict(files: list[Path]) -> None:
    """Drop the files' clean pages from the OS page cache (``posix_fadvise(DONTNEED)``; no root needed)."""
    for p in files:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def cached_bytes(files: list[Path]) -> int:
    """Bytes of the files in the OS page cache now (``fincore``, util-linux)."""
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", *map(str, files)],
                         capture_output=True, text=True, check=True).stdout
    return sum(int(x) for x in out.split())


def peak_rss() -> int:
    """This process's peak RSS: ``VmHWM`` of /proc/self/status, the high-water mark of its own address space.
    (``ru_maxrss`` is not: Linux carries a forked child's pre-exec peak -- its parent's RSS at the fork --
    across ``exec``, so a worker started by a parent holding 1.9 GB reported 1.9 GB whatever it did.)"""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def rss_parts() -> dict[str, int]:
    """This process's resident memory now: anonymous (heap: ids, buffers) and file-backed (mapped files,
    libraries), from /proc/self/status."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile"):
            fields["rss_anon" if key == "RssAnon" else "rss_file"] = int(value.split()[0]) * 1024
    return fields


# ---------------------------------------------------------------------------------------------- workers

def worker(args: argparse.Namespace) -> None:
    """One build or one search, in its own process; prints one JSON line."""
    import logging

    logging.disable(logging.WARNING)
    from drmix.retrieval.backends import build_index, open_index

    backend, kind, opts = ARMS[args.arm]
    t0 = time.perf_counter()
    if args.worker == "build":
        if backend == "memory":
            from drmix.retrieval.index import DenseIndex

            parts = list(read_chunks(Path(args.vectors), args.n))
            ids = [i for p, _ in parts for i in p]
            DenseIndex.build(np.concatenate([x for _, x in parts]), ids, kind=kind).save(args.target)
        else:
            build_index(backend, args.target, read_chunks(Path(args.vectors), args.n), kind=kind, **opts)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        out = {"seconds": time.perf_counter() - t0, "cpu_seconds": usage.ru_utime + usage.ru_stime}
    else:
        q = np.load(args.query_file)
        files = index_files(Path(args.target))
        evict(files)  # the build left the files in the page cache: the search starts cold
        index = open_index(args.target)
        if args.nprobe:
            index.set_nprobe(args.nprobe)
        if args.rerank:
            index.rerank = args.rerank
        t1 = time.perf_counter()
        _, ids = index.search(q, K)
        secs = time.perf_counter() - t1
        truth = np.load(args.truth)
        recall = float(np.mean([len(set(map(int, got)) & set(want.tolist())) / K for got, want in zip(ids, truth)]))
        out = {"qps": len(q) / secs, "recall": recall, "open_seconds": t1 - t0, **rss_parts(),
               "page_cache": cached_bytes(files) if files else None}
    out["peak_rss"] = peak_rss()
    print(json.dumps(out))


def run_worker(kind: str, arm: str, n: int, target: Path, out: Path, timeout: float,
               nprobe: int | None = None, rerank: int | None = None) -> dict | None:
    cmd = [sys.executable, __file__, "--worker", kind, "--arm", arm, "--n", str(n), "--target", str(target),
           "--vectors", str(out / f"vectors-{n}.f32"), "--query-file", str(out / "queries.npy"),
           "--truth", str(out / f"truth-{n}.npy")] + (["--nprobe", str(nprobe)] if nprobe else []) + (
           ["--rerank", str(rerank)] if rerank else [])
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    if res.returncode != 0:
        print(f"{arm} {kind} n={n} failed:\n{res.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(res.stdout.strip().splitlines()[-1])


def measure(args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results_file = out / "results.json"
    results = json.loads(results_file.read_text()) if results_file.exists() else {}
    if not (out / "queries.npy").exists():
        generate(out / "queries.f32", args.queries, seed=1, data=args.data)
        np.save(out / "queries.npy", np.fromfile(out / "queries.f32", dtype=np.float32).reshape(-1, DIM))
    q = np.load(out / "queries.npy")
    for n in args.sizes:
        vec = out / f"vectors-{n}.f32"
        if not vec.exists() and any(f"{n}|{arm}" not in results for arm in args.arms):
            generate(vec, n, seed=0, data=args.data)
        if not (out / f"truth-{n}.npy").exists():
            np.save(out / f"truth-{n}.npy", exact_top(vec, n, q))
        for arm in args.arms:
            key = f"{n}|{arm}"
            backend = ARMS[arm][0]
            if arm in args.skip.get(n, []) or (arm.startswith(SERVER) and key in results):
                continue
            if arm.startswith(SERVER):
                results[key] = measure_server(arm, n, out, args)
                if results[key].get("timed_out"):  # kept: the build did not fit --timeout (not measured again)
                    results_file.write_text(json.dumps(results, indent=1))
                    print(key, "did not finish within", args.timeout, "s", flush=True)
                    continue
                if results[key]["build"] is None or results[key]["search"] is None:
                    print(key, "failed", flush=True)
                    del results[key]
                    continue
                results_file.write_text(json.dumps(results, indent=1))
                print(key, json.dumps(results[key]), flush=True)
                continue
            target = out / "idx" / (f"m{n}.db#{ARMS[arm][1].replace('-', '_')}" if backend == "milvus"
                                    else f"{arm.replace(' ', '_').replace('(', '').replace(')', '')}-{n}")
            if key in results:
                if backend == "faiss-disk":
                    sweep(results, key, target, out, args)
                    results_file.write_text(json.dumps(results, indent=1))
                continue
            if backend != "milvus":
                shutil.rmtree(target, ignore_errors=True)
            built = run_worker("build", arm, n, target, out, args.timeout)
            searched = run_worker("search", arm, n, target, out, args.timeout) if built else None
            where = out / "idx" / f"m{n}.db" if backend == "milvus" else target
            results[key] = {"n": n, "arm": arm, "data": args.data, "build": built, "search": searched,
                            "disk": disk_bytes(where) if backend != "milvus" else None}
            if backend == "milvus":  # one .db per size holds every type: the size of each collection's folder
                results[key]["disk"] = _milvus_collection_bytes(where, ARMS[arm][1].replace("-", "_"))
            if built is None or searched is None:  # not kept: a rerun measures it again
                print(key, "failed", flush=True)
                continue
            if backend == "faiss-disk":
                sweep(results, key, target, out, args)
            results_file.write_text(json.dumps(results, indent=1))
            print(key, json.dumps(results[key]), flush=True)
        vec.unlink(missing_ok=True) if args.drop_vectors else None


def proc_memory(pid: int) -> dict[str, float]:
    """A process's resident memory now (``VmRSS``), its high-water mark (``VmHWM``) and the CPU seconds it used
    (user + system, from /proc/PID/stat)."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out["rss" if key == "VmRSS" else "peak_rss"] = int(value.split()[0]) * 1024
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    out["cpu_seconds"] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def measure_server(arm: str, n: int, out: Path, args: argparse.Namespace) -> dict:
    """One arm on a Milvus server of its own (the ``milvus`` package's 2.3 standalone, default settings, free
    ports): the build worker and then the search worker are its clients; the server process's memory and CPU
    time are read when it has started, after the build and after the search; on disk: its data folder (the
    collection, the index, its write-ahead log and metadata)."""
    from drmix.retrieval.backends.milvus_local import LocalMilvus

    folder = out / "server" / f"{n}-{ARMS[arm][1]}"
    shutil.rmtree(folder, ignore_errors=True)
    server = LocalMilvus(folder, timeout=900).start()
    try:
        target = f"{server.uri}#{ARMS[arm][1].replace('-', '_')}"
        started = proc_memory(server.pid)
        t0 = time.perf_counter()
        built = run_worker("build", arm, n, target, out, args.timeout)
        timed_out = built is None and time.perf_counter() - t0 >= args.timeout
        after_build = proc_memory(server.pid)
        searched = run_worker("search", arm, n, target, out, args.timeout) if built else None
        after_search = proc_memory(server.pid)
        disk = disk_bytes(folder / "data")
    finally:
        server.remove()
    return {"n": n, "arm": arm, "data": args.data, "build": built, "search": searched, "disk": disk,
            "server": {"version": server.version, "started": started, "after_build": after_build,
                       "after_search": after_search}, **({"timed_out": args.timeout} if timed_out else {})}


def sweep(results: dict, key: str, target: Path, out: Path, args: argparse.Namespace) -> None:
    """Searches of the built faiss-disk index at each of ``--nprobes`` (the built rerank) and each of
    ``--reranks`` (the built nprobe), each a fresh process; kept by value."""
    r = results[key]
    if (target / "meta.json").is_file():
        r["nlist"] = json.loads((target / "meta.json").read_text())["params"]["nlist"]
    for field, values in (("sweep", args.nprobes), ("rerank_sweep", args.reranks)):
        done = r.setdefault(field, {})
        for v in values:
            if str(v) not in done and target.is_dir():
                kw = {"nprobe": v} if field == "sweep" else {"rerank": v}
                got = run_worker("search", r["arm"], r["n"], target, out, args.timeout, **kw)
                if got is not None:
                    done[str(v)] = got
                    print(key, kw, json.dumps(got), flush=True)


def _milvus_collection_bytes(db: Path, name: str) -> int:
    """Bytes of one collection in a Milvus Lite folder (its own sub-folder), else the whole folder."""
    for p in db.rglob(name):
        if p.is_dir():
            return disk_bytes(p)
    return disk_bytes(db)


# ---------------------------------------------------------------------------------------------- table

def _fit(points: list[tuple[int, float]]) -> tuple[float, float] | None:
    """``(c, e)`` of ``y = c n^e`` through the measured points (least squares in log-log)."""
    pts = [(n, y) for n, y in points if y and y > 0]
    if len(pts) < 2:
        return None
    ln = np.log([p[0] for p in pts])
    ly = np.log([p[1] for p in pts])
    e, logc = np.polyfit(ln, ly, 1)
    return float(math.exp(logc)), float(e)


def _affine(points: list[tuple[int, float]]) -> tuple[float, float] | None:
    """``(a, b)`` of ``y = a + b n`` through the measured points (least squares): a fixed part (the interpreter,
    the engine) and a part per vector."""
    pts = [(n, y) for n, y in points if y is not None]
    if len(pts) < 2:
        return None
    b, a = np.polyfit([p[0] for p in pts], [p[1] for p in pts], 1)
    return float(a), float(b)


def _mb(b: float | None) -> str:
    return "—" if b is None else (f"{b / 2**30:,.1f} GB" if b >= 2**30 else f"{b / 2**20:,.0f} MB")


def _secs(s: float | None) -> str:
    if s is None:
        return "—"
    return f"{s / 3600:,.1f} h" if s >= 3600 else (f"{s / 60:,.1f} min" if s >= 60 else f"{s:,.1f} s")


def table(results: dict) -> str:
    rows = sorted(results.values(), key=lambda r: (r["n"], list(ARMS).index(r["arm"]) if r["arm"] in ARMS else 99))
    lines = ["| vectors | index | build | build peak RSS | search peak RSS | on disk | queries/s | recall@10 |",
             "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        b, s = r["build"] or {}, r["search"] or {}
        if r.get("timed_out"):
            lines.append(f"| {r['n']:,} | {r['arm']} | over {_secs(r['timed_out'])} (stopped) | "
                         + " | ".join(["—"] * 5) + " |")
            continue
        lines.append(f"| {r['n']:,} | {r['arm']} | {_secs(b.get('seconds'))} | {_mb(b.get('peak_rss'))} | "
                     f"{_mb(s.get('peak_rss'))} | {_mb(r.get('disk'))} | "
                     + (f"{s['qps']:,.0f}" if s else "—") + " | " + (f"{s['recall']:.3f}" if s else "—") + " |")
    projected = []
    for arm in (a for a in ARMS if not a.startswith(SERVER)):  # a server's memory is not its client's
        mine = [r for r in rows if r["arm"] == arm and r["build"] and r["search"]]
        disk = _affine([(r["n"], r["disk"]) for r in mine])
        rss = _affine([(r["n"], r["search"]["peak_rss"]) for r in mine])
        timed = [r for r in mine if "cpu_seconds" in r["build"]]  # CPU time, where measured: the load does not move it
        build = (_affine([(r["n"], r["build"]["cpu_seconds"]) for r in timed]) if len(timed) >= 2
                 else _affine([(r["n"], r["build"]["seconds"]) for r in mine]))
        if disk is None or rss is None or build is None:
            continue
        cells = []
        for n in (10_000_000, 100_000_000):  # a slope <= 0 is noise between sizes too close: no projection
            cells += [f"{_mb(disk[0] + disk[1] * n)} [{disk[1]:,.0f}]" if disk[1] > 0 else "—",
                      f"{_mb(rss[0] + rss[1] * n)} [{rss[1]:,.0f}]" if rss[1] > 0 else "—",
                      f"{_secs(build[0] + build[1] * n)} [{1000 * build[1]:,.3f}]" if build[1] > 0 else "—"]
        projected.append(f"| {arm} | " + " | ".join(cells) + " |")
    if projected:
        lines += ["", "Projected from the sizes measured by y = a + b·n, a fixed part and a part per vector (in "
                  "brackets: bytes, or milliseconds, per vector; build: the build's CPU time where it was recorded -- "
                  "one thread, so the wall-clock time on an idle core, whatever the load -- else its wall-clock time):",
                  "", "| index | 10M: disk | 10M: search RSS | 10M: build | 100M: disk | 100M: search RSS | "
                  "100M: build |", "|---|---:|---:|---:|---:|---:|---:|", *projected]
    swept = [r for r in rows if r.get("sweep") or r.get("rerank_sweep")]
    if swept:
        lines += ["", "faiss-disk ivf-pq searched again (each a fresh process): nprobe of nlist lists probed, and the "
                  "top rerank·10 PQ candidates re-scored exactly from vectors.f32 (built: nprobe 32, rerank 4):", "",
                  "| vectors | nlist | nprobe | rerank | queries/s | recall@10 | search peak RSS |",
                  "|---:|---:|---:|---:|---:|---:|---:|"]
        for r in swept:
            runs = [(int(p), 4, s) for p, s in r.get("sweep", {}).items()]
            runs += [(32, int(p), s) for p, s in r.get("rerank_sweep", {}).items() if int(p) != 4]
            for p, rr, s in sorted(runs, key=lambda t: (t[1], t[0])):
                lines.append(f"| {r['n']:,} | {r.get('nlist', '—')} | {p} | {rr} | {s['qps']:,.0f} | "
                             f"{s['recall']:.3f} | {_mb(s['peak_rss'])} |")
    served = [r for r in rows if r.get("server")]
    if served:
        lines += ["", "The Milvus server process (a fresh one per arm and size; its RSS and CPU time from /proc; the "
                  "build and search figures above are its clients'):", "",
                  "| vectors | index | server RSS started | server peak RSS | server RSS after search | "
                  "server CPU in the build |", "|---:|---|---:|---:|---:|---:|"]
        for r in (r for r in served if not r.get("timed_out")):
            m = r["server"]
            cpu = m["after_build"]["cpu_seconds"] - m["started"]["cpu_seconds"]
            lines.append(f"| {r['n']:,} | {r['arm']} | {_mb(m['started']['rss'])} | "
                         f"{_mb(m['after_search']['peak_rss'])} | {_mb(m['after_search']['rss'])} | {_secs(cpu)} |")
    mem = [r for r in rows if r["search"] and r["search"].get("rss_anon") is not None]
    if mem:
        lines += ["", "What the search held at its end (its resident memory, from /proc/self/status, and the index's "
                  "pages the OS page cache kept, from fincore, after they were evicted before the search):", "",
                  "| vectors | index | RSS: anonymous | RSS: file-backed | index in the page cache | index on disk |",
                  "|---:|---|---:|---:|---:|---:|"]
        for r in mem:
            s = r["search"]
            lines.append(f"| {r['n']:,} | {r['arm']} | {_mb(s['rss_anon'])} | {_mb(s['rss_file'])} | "
                         f"{_mb(s.get('page_cache'))} | {_mb(r.get('disk'))} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    ap.add_argument("--sizes", type=int, nargs="+", help="numbers of vectors (default: the preset's)")
    ap.add_argument("--queries", type=int, help="queries (default: the preset's)")
    ap.add_argument("--arms", nargs="+", choices=list(ARMS), help="default: the preset's (cpu: all)")
    ap.add_argument("--data", choices=["gaussian", "lowrank"], help="the vectors' distribution (default: the "
                    "preset's: cpu gaussian, full lowrank)")
    ap.add_argument("--out", default="/tmp/drmix-bench-index")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per build or search process (a Milvus "
                    "server build that does not finish in time is kept as such)")
    ap.add_argument("--drop-vectors", action="store_true", help="delete each size's vector file when done")
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--worker", choices=["build", "search"], help=argparse.SUPPRESS)
    for hidden in ("--arm", "--target", "--vectors", "--truth", "--query-file"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--nprobe", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--rerank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--reranks", type=int, nargs="*", help="faiss-disk: search the built index again re-scoring "
                    "each of these multiples of k (default: the preset's: cpu none, full 4 10 25)")
    ap.add_argument("--nprobes", type=int, nargs="*", help="faiss-disk: search the built index again at each of "
                    "these nprobe values (default: the preset's: cpu none, full 32 64 128)")
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    preset = PRESETS[args.preset]
    args.sizes = args.sizes or preset["sizes"]
    args.queries = args.queries or preset["queries"]
    args.arms_given = bool(args.arms)
    args.arms = args.arms or preset.get("arms", [a for a in ARMS if not a.startswith(SERVER)])
    args.data = args.data or preset["data"]
    args.nprobes = preset.get("nprobes", []) if args.nprobes is None else args.nprobes
    args.reranks = preset.get("reranks", []) if args.reranks is None else args.reranks
    args.skip = {} if args.arms_given else preset.get("skip", {})
    if not args.report_only:
        measure(args)
    print(table(json.loads((Path(args.out) / "results.json").read_text())), end="")


if __name__ == "__main__":
    main()
