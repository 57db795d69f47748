"""The benchmarks' one harness: a worker process per configuration, timing,
and one median convention (not library code).

Processes. A backend cannot change inside a process, so every benchmark
runs each configuration in a worker of its own: the parent starts
`python SCRIPT --worker CONFIG` (`CONFIG` a JSON object; its `"backend"`
sets `KERAS_BACKEND`), and the worker answers on
stdout in lines `KIND {json}` (`reply`). A one-shot worker prints one
`RESULT` and exits (`measure`); a resident one (`Worker`) prints `READY`
after its warm-up, a `TIMES` for every `run` line on its stdin, and `DONE`
on `quit`, so that `run_rounds` can interleave the timed rounds over
several processes. Workers import this checkout's `keras_capsules`.

Timing. Every timed call is followed by a wait for its result (`sync`:
JAX dispatches asynchronously, torch on a GPU too); calls are warmed up
first (compilation), and several functions timed in one process alternate
within each repeat (`time_interleaved`), as the workers of `run_rounds` do,
so that drifts of the machine's load hit all of them alike.

Convention: every figure is "median (best) of R": the median of R timed
repeats (`statistics.median`: the mean of the middle two for an even R)
and the best of them (the shortest time, the highest rate): `median_best`.

Also here, for every script: the memory a worker measures (`/proc` RSS
fields, the accelerator's name and bytes), the command line (`--backends`
and the hidden `--worker`), and the report: progress lines on stderr, the
machine, one Markdown table per result on stdout (`print_table`) and the
`--json` file (`write_results`).
"""

import argparse
import json
import os
import platform
import select
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BACKENDS = ("tensorflow", "torch", "jax")
MIB = 2**20


# ------------------------------------------------------------ convention


def median_best(values, higher_is_better=False):
    """`(median, best)` of repeated measurements: times (`best` the
    minimum) or, with `higher_is_better`, rates (`best` the maximum)."""
    values = list(values)
    return statistics.median(values), (max if higher_is_better else min)(values)


# ----------------------------------------------------------------- worker


def worker_setup(config, torch_first=True):
    """Prepares a worker process for `config`: `KERAS_BACKEND`, this
    checkout's library and the benchmarks on `sys.path`, and torch imported
    before TensorFlow (the other order can crash) when `torch_first`."""
    if config.get("backend"):
        os.environ["KERAS_BACKEND"] = config["backend"]
    sys.path[:0] = [ROOT, HERE]
    if torch_first:
        try:
            import torch  # noqa: F401
        except ImportError:
            pass


def reply(kind, **fields):
    """One answer of a worker to its parent."""
    print(kind + " " + json.dumps(fields), flush=True)


def sync(x):
    """Waits for asynchronous backends (JAX dispatch, CUDA) to finish `x`."""
    import keras

    return keras.ops.convert_to_numpy(x)


def time_call(fn, *args):
    """`(wall ms, process CPU ms)` of one synchronised `fn(*args)`; `fn`
    returns a tuple or list whose first item is waited for."""
    start, cpu_start = time.perf_counter(), time.process_time()
    sync(fn(*args)[0])
    return (time.perf_counter() - start) * 1e3, (time.process_time() - cpu_start) * 1e3


def time_interleaved(fns, *args, warmup=2, repeats=5):
    """`{name: {"median_ms", "min_ms", "median_cpu_ms"}}` of the functions
    `fns` (name -> fn) called on `args`, after `warmup` untimed calls of
    each; they alternate within each repeat, in reverse order every other
    one. CPU time (all threads of this process) is less sensitive than wall
    time to other processes on a shared machine."""
    for fn in fns.values():
        for _ in range(warmup):
            sync(fn(*args)[0])
    wall = {name: [] for name in fns}
    cpu = {name: [] for name in fns}
    names = list(fns)
    for rep in range(repeats):
        for name in names if rep % 2 == 0 else names[::-1]:
            w, c = time_call(fns[name], *args)
            wall[name].append(w)
            cpu[name].append(c)
    timings = {}
    for name in names:
        median, best = median_best(wall[name])
        timings[name] = {
            "median_ms": median,
            "min_ms": best,
            "median_cpu_ms": statistics.median(cpu[name]),
        }
    return timings


# ----------------------------------------------------------------- memory


def proc_status_mib(field, pid="self"):
    """A memory field (`VmRSS`, `VmHWM`) of `/proc/PID/status` in MiB: this
    process's by default; NaN where the field is absent. Raises `OSError`
    when the process is gone."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def device_bytes(backend):
    """`(in use, peak)` bytes of the accelerator of `backend` in this
    process (torch: `memory_allocated`, `max_memory_allocated`; JAX: the
    first device's `memory_stats()`, NaN for a figure it lacks;
    TensorFlow: `get_memory_info("GPU:0")`); None on a CPU."""
    if backend == "torch":
        import torch

        if torch.cuda.is_available():
            return torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated()
    elif backend == "jax":
        import jax

        device = jax.devices()[0]
        if device.platform != "cpu":
            stats = device.memory_stats() or {}
            nan = float("nan")
            return stats.get("bytes_in_use", nan), stats.get("peak_bytes_in_use", nan)
    else:
        import tensorflow as tf

        if tf.config.list_physical_devices("GPU"):
            info = tf.config.experimental.get_memory_info("GPU:0")
            return info["current"], info["peak"]
    return None


def device_name(backend):
    """The name of the accelerator of `backend` in this process, `"cpu"`
    where there is none."""
    if backend == "torch":
        import torch

        return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    if backend == "jax":
        import jax

        device = jax.devices()[0]
        return "cpu" if device.platform == "cpu" else device.device_kind
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    return (
        tf.config.experimental.get_device_details(gpus[0]).get("device_name", "gpu")
        if gpus
        else "cpu"
    )


# ----------------------------------------------------------------- parent


class Worker:
    """A worker process of `script` for `config` (see the module docstring).

    `env`: variables added to the environment (which already has
    `KERAS_BACKEND`, quiet TensorFlow logs, no JAX preallocation of a GPU);
    `stderr=None` passes the worker's stderr through, else it is kept and
    its last line becomes `error` when the worker fails; `timeout`: seconds
    each reply may take.
    """

    def __init__(self, script, config, env=None, stderr="keep", timeout=None):
        self.config, self.error, self.stderr_tail = config, None, ""
        self.timeout = timeout if timeout else float("inf")
        self.buffer = b""
        # Several workers may live at once: JAX must not take 75% of a GPU each.
        full_env = {
            **os.environ,
            "TF_CPP_MIN_LOG_LEVEL": "3",
            "PYTHONUNBUFFERED": "1",
            "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
            **(env or {}),
        }
        if config.get("backend"):
            full_env["KERAS_BACKEND"] = config["backend"]
        # A file, not a pipe: nobody reads stderr while the worker runs.
        self.stderr = tempfile.TemporaryFile("w+") if stderr == "keep" else None
        self.proc = subprocess.Popen(
            [sys.executable, script, "--worker", json.dumps(config)],
            cwd=ROOT,
            env=full_env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            bufsize=0,
        )

    def read(self, kind):
        """The worker's next `kind` reply; None (and `error` set) if it died
        or timed out first."""
        deadline = time.monotonic() + self.timeout
        fd = self.proc.stdout.fileno()
        while time.monotonic() < deadline:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                line = line.decode(errors="replace")
                if line.startswith(kind + " "):
                    return json.loads(line[len(kind) + 1 :])
            left = deadline - time.monotonic()
            wait = None if left == float("inf") else max(left, 0)  # None: no timeout
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:
                break
            chunk = os.read(fd, 1 << 16)
            if not chunk:  # end of its stdout: it exited (maybe not reaped yet)
                self._fail(timed_out=False)
                return None
            self.buffer += chunk
        self._fail(timed_out=True)
        return None

    def _fail(self, timed_out):
        self.proc.kill()
        code = self.proc.wait()
        if timed_out:
            self.error = f"timed out after {self.timeout:.0f} s"
        elif self.stderr is None:
            self.error = f"exit {code}"
        else:
            self.stderr.seek(0)
            self.stderr_tail = self.stderr.read()[-3000:]
            lines = self.stderr_tail.strip().splitlines() or [f"exit {code}"]
            self.error = lines[-1][-300:]

    def request(self, command, kind):
        """Sends `command` and returns the `kind` reply (None on failure)."""
        if self.error:
            return None
        try:
            self.proc.stdin.write(command.encode() + b"\n")
        except BrokenPipeError:
            pass  # it died: read() says why
        return self.read(kind)

    def close(self, quit=True):
        """Waits for the worker's end; with `quit`, first asks a resident
        one to quit and returns its `DONE` reply."""
        done = self.request("quit", "DONE") if quit else None
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        if self.stderr is not None:
            self.stderr.close()
        return done


class RssWatch:
    """Kills `proc` if its RSS passes `limit_mb` (checked every 0.1 s);
    `killed_at_mb` is then the RSS it had."""

    def __init__(self, proc, limit_mb):
        self.proc, self.limit_mb, self.killed_at_mb = proc, limit_mb, None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self):
        while not self.done.wait(0.1):
            try:
                rss = proc_status_mib("VmRSS", self.proc.pid)
            except OSError:
                return
            if rss > self.limit_mb:
                self.killed_at_mb = rss
                self.proc.kill()
                return

    def stop(self):
        self.done.set()
        self.thread.join()


def measure(
    script, config, env=None, stderr="keep", timeout=None, max_rss_mb=None, max_rss_name=None
):
    """Runs one one-shot worker; returns `(RESULT fields, None)` or
    `(None, error)`; with `stderr="keep"` a failure prints the end of the
    worker's stderr. `timeout`: seconds the worker may take; `max_rss_mb`:
    the worker is killed when its RSS passes it (an `RssWatch`), and the
    error says `killed: RSS ... GiB > ` and `max_rss_name` (default: the
    limit in GiB)."""
    worker = Worker(script, config, env=env, stderr=stderr, timeout=timeout)
    watch = RssWatch(worker.proc, max_rss_mb) if max_rss_mb is not None else None
    result = worker.read("RESULT")
    if watch is not None:
        watch.stop()
    worker.close(quit=False)
    if watch is not None and watch.killed_at_mb:
        limit = max_rss_name or f"{max_rss_mb / 1024:g} GiB"
        return None, f"killed: RSS {watch.killed_at_mb / 1024:.1f} GiB > {limit}"
    if result is None and worker.stderr_tail:
        print(worker.stderr_tail, file=sys.stderr)
    return result, worker.error


def run_rounds(workers, repeats, command="run", kind="TIMES", stop=None, log=None):
    """Interleaves `repeats` rounds over the live resident `workers` (one
    running at a time, the order rotated each round); returns the replies,
    a list per worker. `stop(round)` may end the rounds early; `log(text)`
    is told when each round is done."""
    replies = {id(w): [] for w in workers}
    for r in range(repeats):
        if stop is not None and stop(r):
            break
        live = [w for w in workers if not w.error]
        shift = r % max(len(live), 1)
        for w in live[shift:] + live[:shift]:
            answer = w.request(command, kind)
            if answer is not None:
                replies[id(w)].append(answer)
        if log is not None:
            log(f"round {r + 1}/{repeats} done")
    return [replies[id(w)] for w in workers]


def serve(run, timed_steps):
    """A resident worker's loop, after its `READY`: on each `run` line, times
    `timed_steps` calls of `run(i)` (which waits for its own result) and
    replies `TIMES` with `times` (s per call), `cpu_s` (all calls) and
    `last` (the last call's value); stops at any other line."""
    i = 0
    for line in sys.stdin:
        if line.strip() != "run":
            break
        times, cpu = [], time.process_time()
        for _ in range(timed_steps):
            start = time.perf_counter()
            last = run(i)
            times.append(time.perf_counter() - start)
            i += 1
        reply("TIMES", times=times, cpu_s=time.process_time() - cpu, last=last)


# ----------------------------------------------------------- command line


def argument_parser(doc, backends=True):
    """A benchmark script's parser: described by the first line of `doc`,
    with the hidden `--worker CONFIG` (a worker process's JSON
    configuration) and, with `backends`, `--backends` (all by default)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    if backends:
        parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    return parser


# ----------------------------------------------------------------- report


def log(text):
    """A progress line on stderr, with the time of day."""
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def machine():
    """`"N CPUs (processor)"`: the machine, for a report's header."""
    return f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()})"


def markdown_table(header, rows, align=None):
    """A Markdown table as text: `header` the column names, `rows` lists of
    cells (written with `str`; a short row, such as a failure's, is padded
    with empty cells); `align` one `"l"` (left) or `"r"` (right) per column
    (default: the first left, the others right)."""
    align = align or "l" + "r" * (len(header) - 1)
    lines = [
        "| " + " | ".join(header) + " |",
        "| " + " | ".join("---" if a == "l" else "---:" for a in align) + " |",
    ]
    for row in rows:
        cells = [str(cell) for cell in row] + [""] * (len(header) - len(row))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def print_table(header, rows, title=None, align=None, notes=()):
    """Prints a benchmark's result: `title` (what was measured, how, on
    what machine), the Markdown table of `header` and `rows`
    (`markdown_table`), and `notes` (lines after it, such as fits)."""
    parts = [title] if title else []
    parts.append(markdown_table(header, rows, align))
    if notes:
        parts.append("\n".join(notes))
    print("\n\n".join(parts), flush=True)


def timing_cell(timing, unit=" ms"):
    """`median (min)` of a `time_interleaved` entry."""
    return f"{timing['median_ms']:.1f}{unit} ({timing['min_ms']:.1f})"


def print_timings(script, config, backends, title=None):
    """Runs `script`'s one-shot worker once per backend in the comma-separated
    `backends` with `config` (and `backend`), and prints the timings they
    reply as one table (`print_table`): a row per backend and timed
    function, median (min) in ms, or why the backend failed."""
    rows = []
    for backend in backends.split(","):
        results, error = measure(os.path.abspath(script), dict(config, backend=backend))
        if results is None:
            rows.append([backend, f"failed: {error}"])
            continue
        rows += [[backend, name, timing_cell(r)] for name, r in results.items()]
    print_table(["backend", "function", "ms median (min)"], rows, title=title, align="llr")


def write_results(path, data):
    """Writes a run's `data` (arguments, machine, rows) to the `--json` file
    `path`, whole or not at all: to a temporary file beside it, renamed over
    it."""
    temporary = f"{path}.partial-{os.getpid()}"
    try:
        with open(temporary, "w") as f:
            json.dump(data, f, indent=1)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


# --------------------------------------------------------- pure baselines


def em_inverse_temperatures(config):
    """The inverse temperature of each iteration of an `EMRouting` with
    `get_config()` `config`, as the router computes it: `final_lambda * (1 -
    0.95 ** (t + 1))` unless `inverse_temperature` fixes it (one number, or
    one per iteration). Plain Python: every pure_routing_* baseline uses it."""
    iterations, temperature = config["iterations"], config["inverse_temperature"]
    if temperature is None:
        return [config["final_lambda"] * (1 - 0.95 ** (t + 1)) for t in range(iterations)]
    if isinstance(temperature, (int, float)):
        return [float(temperature)] * iterations
    return list(temperature)
