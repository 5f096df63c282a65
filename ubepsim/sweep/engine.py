"""The sweep engine: a grid's points, in batches through the parallel kernel, into Parquet.

A dataset is a directory of parts `part-FIRST-STOP.parquet`, each holding the rows of points
[FIRST, STOP) of the grid's expansion (one row per configuration: every parameter, `config_id`,
`cumsum_tuned`, every result) and carrying its provenance in the file metadata. A part is written to a hidden
temporary file and renamed into place, so it is either complete or absent, whatever kills the
run. Resuming reads the parts' metadata, checks they come from the same grid (its fingerprint:
the points in order and the resolved hardware profile) and simulates only the points no part
holds. Batches run in this process (`simulate_table` with `threads` Numba threads) or on a Dask
cluster, whose workers return frames that this process writes: workers need no shared disk.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import glob
import logging
import os
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from ..model import api, memory
from ..errors import RENAMED, InputError, renamed
from ..version import __version__
from ..files import META
from .grid import Grid
from ..model.params import ENUMS, NAMES, TUNED_COLUMN
from ..model.profile import Profile
from ..model.result_fields import RESULT_NAMES

COLUMNS = (*NAMES, "config_id", TUNED_COLUMN, *RESULT_NAMES)
PART = re.compile(r"part-(\d+)-(\d+)\.parquet")
# One row group per part: large enough for polars.scan_parquet to read fast and prune by
# statistics, small enough that a run killed mid-part loses little work.
PART_ROWS = 65536
BATCH_ROWS = 4096
CONNECT_TIMEOUT_S = 20   # how long a client waits for a scheduler address to answer


@dataclasses.dataclass
class Summary:
    points: int             # configurations in the grid
    done_before: int        # rows already present (resume)
    simulated: int = 0
    parts: int = 0
    seconds: float = 0.0    # wall time of the run
    write_s: float = 0.0    # writing parts


def scan(dataset: str | Path, need: Sequence[str] = (), why: str = "") -> pl.LazyFrame:
    """A results dataset as a LazyFrame: a sweep's directory, a Parquet file or a glob.

    A directory that holds parts is read as its parts alone: any other Parquet file beside them
    (a query's answer written there, say) would repeat or add rows; `shortfall` names the files
    left out. A directory without parts is read as all its Parquet files. Checked before
    anything is computed, file by file: each is Parquet, all have the first's columns, and they
    have the columns `need` (`why` says what needs them).
    """
    files = dataset_files(dataset)
    first: list[str] = []
    for f in files:
        try:
            names = pq.read_schema(f).names
        except (OSError, pa.ArrowException) as e:
            raise InputError("DATASET", f"{f} is not a Parquet file ({e})") from None
        missing = [c for c in need if c not in names]
        if missing:
            old = [o for o, new in RENAMED.items() if new in missing and o in names]
            if old:   # an earlier version's results: say so, not that they are none
                why = (f" but {old[0]}: an earlier version's results{renamed(old[0])}; rerun "
                       f"the sweep")
            raise InputError("DATASET", f"{f} has no column {missing[0]}{why}")
        first = first or names
        if set(names) != set(first):
            odd = sorted(set(names) ^ set(first))[0]
            raise InputError("DATASET", f"{f} and {files[0]} differ in their columns ({odd}); "
                             f"the files of a dataset are parts of one table")
    return pl.scan_parquet(files)


def dataset_files(dataset: str | Path) -> list[Path]:
    """The Parquet files of a results dataset, as `scan` reads them."""
    if not str(dataset).strip():
        raise InputError("DATASET", "is empty; give a sweep's output directory, a Parquet file "
                         "or a glob")
    path = Path(dataset)
    if path.is_dir():
        files = sorted(path.glob("*.parquet"))
        if not files:
            raise InputError("DATASET", f"{path} holds no Parquet files")
        files = [f for f in files if PART.fullmatch(f.name)] or files
    elif path.is_file():
        files = [path]
    elif any(c in str(dataset) for c in "*?["):
        files = sorted(Path(p) for p in glob.glob(str(dataset), recursive=True))
        if not files:
            raise InputError("DATASET", f"{dataset} matches no file")
    else:
        raise InputError("DATASET", f"{dataset} does not exist; give a sweep's output "
                         f"directory, a Parquet file or a glob")
    return files


def shortfall(dataset: str | Path) -> list[str]:
    """What `scan` leaves out of a sweep's directory, as warnings: the Parquet files beside its
    parts, and the rows of its grid that no part holds (an interrupted sweep)."""
    path = Path(dataset)
    files = sorted(path.glob("*.parquet")) if path.is_dir() else []
    parts = [f for f in files if PART.fullmatch(f.name)]
    if not parts:
        return []
    warnings = []
    others = [f.name for f in files if not PART.fullmatch(f.name)]
    if others:
        named = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        warnings.append(f"{path}: ignored {len(others):,} Parquet file(s) that are not sweep "
                        f"parts ({named}); give a file's own path to read it")
    points = provenance(parts[0]).get("points")
    rows = sum(pq.read_metadata(f).num_rows for f in parts)
    if points is not None and rows < int(points):
        warnings.append(f"{path} holds {rows:,} of the {int(points):,} rows of its grid (an "
                        f"interrupted sweep? finish it with `ubepsim sweep GRID.toml --out {path} "
                        f"--resume`)")
    return warnings


def provenance(part: str | Path) -> dict[str, str]:
    """The ubepsim.* metadata of one part file (version, grid text, profile, ...)."""
    meta = pq.read_schema(part).metadata or {}
    return {k.decode().removeprefix(META): v.decode() for k, v in meta.items()
            if k.startswith(META.encode())}


def part_name(first: int, stop: int) -> str:
    return f"part-{first:09d}-{stop:09d}.parquet"


def metadata(grid: Grid) -> dict[str, str]:
    """Provenance every part carries (Parquet key-value metadata)."""
    return {META + "version": __version__, META + "sweep": grid.name,
            META + "grid_file": str(grid.path.resolve()), META + "grid": grid.text,
            META + "profile": grid.profile.to_toml(), META + "fingerprint": grid.fingerprint,
            META + "points": str(grid.size)}


def existing_parts(out: Path, grid: Grid) -> list[tuple[int, int]]:
    """The point ranges the parts in `out` hold; refuses a directory of another grid's results.

    Read-only: called before anything is created.
    """
    if not out.exists():
        return []
    if not out.is_dir():
        raise InputError("--out", f"{out} exists and is not a directory")
    ranges = []
    for path in sorted(out.glob("*.parquet")):
        if not PART.fullmatch(path.name):
            raise InputError("--out", f"{out} holds Parquet files that are not parts of a sweep "
                             f"({path.name}); choose a new or empty directory")
        try:
            meta = provenance(path)
        except (OSError, pa.ArrowException) as e:  # damaged after it was written
            raise InputError("--out", f"{path} is not a readable part ({e}); delete that file "
                             f"and run again with --resume") from None
        # the version first: another version's points or paths may differ for that reason
        if meta.get("version") != __version__:
            raise InputError("--out", f"{out} was written by ubepsim {meta.get('version')}, "
                             f"this is {__version__}; its rows may differ: choose another "
                             f"directory or delete this one")
        if meta.get("fingerprint") != grid.fingerprint:
            raise InputError("--out", f"{out} holds the results of {_other(meta, grid)}; "
                             f"choose another directory or delete this one")
        ranges.append((int(meta["first"]), int(meta["stop"])))
    ranges.sort()
    for (_, stop), (first, _) in zip(ranges, ranges[1:]):
        if first < stop:
            raise InputError("--out", f"{out} holds overlapping parts (at point {first}); "
                             f"delete the directory and run again")
    return ranges


def _other(meta: dict[str, str], grid: Grid) -> str:
    """What differs between the grid a part came from and `grid` (they differ)."""
    name, source = meta.get("sweep", "unknown"), meta.get("grid_file", "an unknown file")
    if (name, source) != (grid.name, str(grid.path.resolve())):
        return f"another grid ({name!r}, from {source})"
    change = ("hardware profile differs" if meta.get("profile") != grid.profile.to_toml()
              else "points differ")
    return f"an earlier version of grid {name!r} (from {source}): its {change} from this run's"


def missing(done: list[tuple[int, int]], points: int, part_rows: int) -> list[tuple[int, int]]:
    """Parts still to write: the points no done range holds, cut at multiples of part_rows."""
    todo, at = [], 0
    for first, stop in [*done, (points, points)]:
        while at < first:
            cut = min(first, (at // part_rows + 1) * part_rows)
            todo.append((at, cut))
            at = cut
        at = max(at, stop)
    return todo


def batches(parts: list[tuple[int, int]], batch_rows: int) -> Iterator[tuple[int, int]]:
    """Each part cut into batches of at most batch_rows points."""
    for first, stop in parts:
        for a in range(first, stop, batch_rows):
            yield a, min(stop, a + batch_rows)


def simulate_batch(points: pl.DataFrame, profile: Profile, threads: int | None) -> pl.DataFrame:
    """One batch through the model (also the task Dask workers run)."""
    # the sweep checked its grid's memory before it began (Grid.check_memory)
    return api.simulate_table(points, profile, threads=threads, memory_checked=True)


def run_local(grid: Grid, work: Iterable[tuple[int, int]], threads: int | None
              ) -> Iterator[tuple[int, pl.DataFrame]]:
    for first, stop in work:
        yield first, simulate_batch(grid.frame(first, stop), grid.profile, threads)


def local_workers(scheduler: str) -> int | None:
    """N for `local:N` (a local cluster of N worker processes), None for a scheduler address.

    Checks the form, so a bad --scheduler is refused before the grid is read.
    """
    if not scheduler.startswith("local:"):
        from distributed.comm import get_address_host_port
        try:
            get_address_host_port(scheduler)
        except ValueError as e:
            raise InputError("--scheduler", f"{e}; give a Dask scheduler address such as "
                             f"tcp://host:8786, or local:N for N local worker processes") \
                from None
        return None
    n = scheduler.removeprefix("local:")
    if not n.isdigit() or int(n) < 1:
        raise InputError("--scheduler", f"local:N needs a number of workers >= 1, got {n!r}")
    return int(n)


@contextlib.contextmanager
def dask_client(scheduler: str, threads: int | None) -> Iterator:
    """A client of the cluster at `scheduler`, or of a new local cluster for `local:N`.

    `threads` (per batch) is checked against the Numba threads each worker may use, as
    --workers is without a cluster.
    """
    from distributed import Client, LocalCluster

    n = local_workers(scheduler)
    with contextlib.ExitStack() as stack:
        # the client logs each failed reconnect with a traceback; a lost cluster is reported
        # once, as SweepStopped, with what to do
        client_log = logging.getLogger("distributed.client")
        stack.callback(client_log.setLevel, client_log.level)
        client_log.setLevel(logging.CRITICAL)
        if n:
            cluster = stack.enter_context(LocalCluster(
                n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None,
                silence_logs=logging.ERROR))   # not a warning per batch cancelled by Ctrl-C
        try:
            client = Client(cluster if n else scheduler, timeout=f"{CONNECT_TIMEOUT_S}s")
        except OSError as e:
            raise InputError("--scheduler", f"cannot reach a Dask scheduler at {scheduler}: "
                             f"{e}") from None
        with client:
            top = min(client.run(_numba_threads).values(), default=None)
            if threads is not None and top is not None and threads > top:
                raise InputError("--workers", f"must lie in [1, {top}] (the threads Numba may "
                                 f"use on the cluster's workers), got {threads}")
            yield client


def _numba_threads() -> int:
    import numba

    return numba.config.NUMBA_NUM_THREADS


def local_threads(threads: int | None) -> int:
    """The Numba threads a batch runs on here: --workers, within what Numba may use."""
    import numba

    return min(threads, _numba_threads()) if threads else numba.get_num_threads()


def check_local_memory(grid: Grid, threads: int | None) -> None:
    """The grid's configurations, one per thread at once, against the memory this process may
    take."""
    grid.check_memory([(local_threads(threads), memory.available_memory(), "this process")])


def check_cluster_memory(client, grid: Grid, threads: int | None) -> None:
    """The grid's configurations, as many at once as the cluster runs them, against each
    worker's memory_limit and each host's available memory (its workers share it)."""
    workers = client.scheduler_info()["workers"]
    limits = []
    at_host: dict[str, int] = {}
    available: dict[str, int] = {}
    for address, (host, free, per_task) in client.run(_capacity, threads).items():
        at_once = workers[address]["nthreads"] * per_task   # each task thread runs a batch
        at_host[host] = at_host.get(host, 0) + at_once
        available[host] = free
        if workers[address].get("memory_limit"):
            limits.append((at_once, workers[address]["memory_limit"],
                           f"Dask worker {address} (its memory_limit)"))
    limits += [(at_once, available[host], f"the Dask workers on host {host}")
               for host, at_once in at_host.items()]
    grid.check_memory(limits)


def check_cluster(grid: Grid, scheduler: str, threads: int | None) -> None:
    """What a run on the cluster at `scheduler` checks before it starts, for a dry run: that
    the scheduler answers, that --workers fits its workers and the grid their memory."""
    with dask_client(scheduler, threads) as client:
        check_cluster_memory(client, grid, threads)


def _capacity(threads: int | None) -> tuple[str, int, int]:
    """On a worker: its host, the memory available there, and the Numba threads a batch runs
    on."""
    import socket

    return socket.gethostname(), memory.available_memory(), local_threads(threads)


class SweepStopped(RuntimeError):
    """The sweep cannot go on, for a reason neither the grid nor the model gives: its Dask
    cluster went away, or a part could not be written (a full disk, say). The parts written
    before stand, and --resume finishes the dataset once the cause is mended."""


def run_dask(client, scheduler: str, grid: Grid, work: Iterable[tuple[int, int]],
             threads: int | None) -> Iterator[tuple[int, pl.DataFrame]]:
    """Batches on the Dask cluster at `scheduler`, a bounded number in flight; results as they
    complete."""
    from concurrent.futures import CancelledError   # distributed's FutureCancelledError too

    from distributed import KilledWorker, as_completed
    from distributed.comm import CommClosedError

    window = 2 * max(1, sum(client.nthreads().values()))
    work = iter(work)
    pending = as_completed()
    batch_of = {}

    def submit() -> bool:
        batch = next(work, None)
        if batch is None:
            return False
        future = client.submit(simulate_batch, grid.frame(*batch), grid.profile, threads,
                               pure=False)
        batch_of[future.key] = batch
        pending.add(future)
        return True

    for _ in range(window):
        if not submit():
            break
    for future in pending:
        # A lost scheduler cancels every batch in flight, and a batch whose workers keep dying
        # is given up (KilledWorker). The model's own errors come back as they were raised.
        try:
            frame = future.result()
        except KilledWorker:
            first, stop = batch_of[future.key]
            raise SweepStopped(f"the batch of points {first}-{stop - 1} killed each Dask worker "
                               f"that ran it (out of memory, say)") from None
        except (CancelledError, CommClosedError) as e:
            reason = getattr(e, "reason", None) or " ".join(str(e).split()) or type(e).__name__
            raise SweepStopped(f"the Dask cluster at {scheduler} failed mid-sweep ({reason})") \
                from None
        yield batch_of.pop(future.key)[0], frame
        future.release()
        submit()


def write_part(out: Path, first: int, stop: int, frame: pl.DataFrame,
               meta: dict[str, str]) -> None:
    """Write points [first, stop) as one part: a temporary file, synced, then renamed. An enum
    is written as its name (a string column), which any Parquet reader reads back as it is."""
    table = frame.select(COLUMNS).with_columns(pl.col(n).cast(pl.String) for n in ENUMS).to_arrow()
    table = table.replace_schema_metadata({**meta, META + "first": str(first),
                                           META + "stop": str(stop)})
    tmp = out / f".{part_name(first, stop)}.tmp"
    try:
        with open(tmp, "wb") as f:
            pq.write_table(table, f, row_group_size=max(1, frame.height), compression="zstd")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out / part_name(first, stop))
    except OSError as e:
        with contextlib.suppress(OSError):   # give back the space a full disk needs
            tmp.unlink(missing_ok=True)
        raise SweepStopped(f"cannot write {part_name(first, stop)} into {out}: "
                           f"{e.strerror or e}") from None


def check_out(grid: Grid, out: Path, resume: bool) -> int:
    """The rows of the grid that `out` holds, refusing what a run into it must refuse (another
    grid's results, a running sweep, rows there without --resume). Read-only."""
    _lock.check_free(out)   # first: a running sweep explains whatever else `out` holds
    have = sum(b - a for a, b in existing_parts(out, grid))
    if have and not resume:
        if have == grid.size:
            raise InputError("--out", f"{out} already holds all {have:,} rows of this grid: the "
                             f"sweep is complete; to run it again, choose another directory or "
                             f"delete this one")
        raise InputError("--out", f"{out} already holds {have:,} of the {grid.size:,} rows of "
                         f"this grid; add --resume to finish it, or choose another directory")
    return have


def run_sweep(grid: Grid, out: Path, *, resume: bool = False, threads: int | None = None,
              batch_rows: int = BATCH_ROWS, part_rows: int = PART_ROWS,
              scheduler: str | None = None, progress: bool = False) -> Summary:
    """Simulate the grid's points that `out` lacks and write them as parts."""
    started = time.perf_counter()
    check_out(grid, out, resume)
    with contextlib.ExitStack() as stack:
        # the cluster before the directory: a scheduler that cannot be reached, or --workers
        # (or a grid) that its workers cannot run, must not leave an empty dataset behind
        client = stack.enter_context(dask_client(scheduler, threads)) if scheduler else None
        if client:
            check_cluster_memory(client, grid, threads)
        else:
            check_local_memory(grid, threads)
        try:
            out.mkdir(parents=True, exist_ok=True)
            stack.enter_context(_lock(out))
        except OSError as e:
            raise InputError("--out", f"cannot write into {out}: {e.strerror or e}") from None
        for tmp in out.glob(".part-*.parquet.tmp"):  # left by a run that was killed
            tmp.unlink()
        done = existing_parts(out, grid)
        summary = Summary(grid.size, sum(b - a for a, b in done))
        parts = missing(done, grid.size, part_rows)
        work = batches(parts, batch_rows)
        results = (run_dask(client, scheduler, grid, work, threads) if client
                   else run_local(grid, work, threads))
        meta = metadata(grid)
        part_of = {a: part for part in parts for a in range(*part, batch_rows)}
        pending: dict[int, pl.DataFrame] = {}
        bar = _progress(grid, summary.done_before, progress)
        try:
            for first, frame in results:
                pending[first] = frame
                bar.update(frame.height)
                part = part_of[first]
                starts = range(*part, batch_rows)
                if all(a in pending for a in starts):
                    t = time.perf_counter()
                    frame = pl.concat([pending.pop(a) for a in starts])
                    if frame.height != part[1] - part[0]:
                        raise RuntimeError(f"the model returned {frame.height} rows for "
                                           f"points [{part[0]}, {part[1]})")
                    write_part(out, *part, frame, meta)
                    summary.write_s += time.perf_counter() - t
                    summary.simulated += frame.height
                    summary.parts += 1
        finally:
            bar.close()
            results.close()
    summary.seconds = time.perf_counter() - started
    return summary


class _lock:
    """An exclusive lock on `out` for the run (released by the kernel if the process dies)."""

    def __init__(self, out: Path):
        self.path = out / ".lock"

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self._take(self.fd, self.path.parent)
        except InputError:
            os.close(self.fd)
            raise
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)

    @staticmethod
    def check_free(out: Path) -> None:
        """Refuse `out` if a sweep holds its lock now; creates nothing."""
        try:   # opened for writing: NFS emulates flock with write locks, which need it
            fd = os.open(out / ".lock", os.O_RDWR)
        except OSError:   # no lock file, no directory, or not ours to write: the lock decides
            return
        try:
            _lock._take(fd, out)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    @staticmethod
    def _take(fd: int, out: Path) -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError("--out", f"another sweep is writing into {out}") from None


def _progress(grid: Grid, done: int, show: bool):
    from tqdm import tqdm

    return tqdm(total=grid.size, initial=done, desc=grid.name, unit="cfg", unit_scale=True,
                smoothing=0.05, dynamic_ncols=True, disable=not show)
