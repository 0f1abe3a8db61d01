"""torch 2.13's seven pipeline schedules: our registry, layouts and limits against torch's
classes, and :func:`torch_orders` against what torch executes.

What torch executes is recorded here independently of ``torch_orders``: each rank's schedule
is constructed from that rank's stand-in stages (placed by our ``chunk_devices``) and its own
``_step_microbatches`` is run; the stages record every ``forward_one_chunk``,
``backward_one_chunk(full_backward=...)`` and ``backward_weight_one_chunk`` call, and their
p2p-op getters return no ops, so nothing communicates.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest

from umpipe_bench.devsim import DevSimError, parse_action
from umpipe_bench.errors import UmpipeError, UnknownNameError
from umpipe_bench.layout import LayoutError, chunk_devices, device_chunks
from umpipe_bench.plan import Plan
from umpipe_bench.schedules import capped_order, gpipe, one_f_one_b
from umpipe_bench.torch_schedules import (
    TORCH_SCHEDULES,
    ScheduleNameError,
    ScheduleShapeError,
    check,
    schedule_info,
    torch_orders,
    torch_send_after,
)

pytestmark = pytest.mark.slow  # the fast tier (-m "not slow") leaves this module out

ts = pytest.importorskip("torch.distributed.pipelining.schedules")

NAMES = list(TORCH_SCHEDULES)
DS = range(1, 9)
MS = range(1, 17)
VS = range(1, 5)


def _names(ops) -> list[list[str]]:
    return [[str(o) for o in row] for row in ops]


def _parts(action: str) -> tuple[int, str, int]:
    a = parse_action(action)
    return a.chunk, a.kind, a.mb


# ------------------------------------------------------------------------ recording what runs
class _LoggingStage:
    """A stage that records what a schedule asks it to compute and never communicates."""

    def __init__(self, index: int, n: int, D: int, rank: int, log: list[str]) -> None:
        self.stage_index, self.num_stages = index, n
        self.group_size, self.group_rank = D, rank
        self.is_first, self.is_last = index == 0, index == n - 1
        self.submod = None
        self.log = log

    def forward_one_chunk(self, mb, args, kwargs, save_forward_output=True):
        self.log.append(f"{self.stage_index}F{mb}")

    def backward_one_chunk(self, mb, loss=None, full_backward=True, last_backward=False):
        self.log.append(f"{self.stage_index}{'B' if full_backward else 'I'}{mb}")

    def backward_weight_one_chunk(self, mb, last_backward=False):
        self.log.append(f"{self.stage_index}W{mb}")

    def get_fwd_recv_ops(self, mb):
        return []

    get_fwd_send_ops = get_bwd_recv_ops = get_bwd_send_ops = get_fwd_recv_ops

    def set_local_fwd_input(self, *a):
        pass

    set_local_bwd_input = perform_reduce_grad = set_local_fwd_input

    def get_local_bwd_output(self, mb):
        return None


def _construct(name: str, D: int, M: int, v: int, rank: int, log: list[str],
               stage: type = _LoggingStage):
    info = TORCH_SCHEDULES[name]
    cls = getattr(ts, info.torch_class)
    mine = [c for c, d in enumerate(chunk_devices(info.layout, D, v)) if d == rank]
    stages = [stage(c, D * v, D, rank, log) for c in mine]
    if info.single:
        return cls(stages[0], M, loss_fn=lambda out, target: out)
    return cls(stages, M, loss_fn=lambda out, target: out)


def _executed(name: str, D: int, M: int, v: int,
              stage: type = _LoggingStage) -> list[list[str]]:
    """Per rank, the calls torch's ``_step_microbatches`` makes on its stages that ``stage``
    records (compute calls by default)."""
    out = []
    for rank in range(D):
        log: list[str] = []
        sched = _construct(name, D, M, v, rank, log, stage)
        if not TORCH_SCHEDULES[name].single:  # torch's own stage -> rank map is our layout
            assert sched.stage_index_to_group_rank == dict(enumerate(
                chunk_devices(TORCH_SCHEDULES[name].layout, D, v)))
        for attr in ("_initialize_stage", "_initialize_stages", "_maybe_compute_loss",
                     "_maybe_get_loss", "_update_losses"):
            setattr(sched, attr, lambda *a, **k: None)
        sched._check_inputs = lambda args, kwargs, targets, losses: ([()] * M, [{}] * M)
        sched._step_microbatches([()] * M, [{}] * M, None, None)
        out.append(log)
    return out


# ------------------------------------------------------------------------- structural checks
def _check_structure(name: str, D: int, M: int, v: int, orders: list[list[str]]) -> None:
    info = TORCH_SCHEDULES[name]
    n = D * v
    where = chunk_devices(info.layout, D, v)
    assert len(orders) == D
    count: Counter[tuple[int, str, int]] = Counter()
    pos: dict[tuple[int, str, int], int] = {}
    for d, row in enumerate(orders):
        for i, a in enumerate(row):
            c, k, m = _parts(a)
            assert 0 <= c < n and 0 <= m < M, a
            assert where[c] == d, f"{a} on rank {d}, layout says rank {where[c]}"
            count[c, k, m] += 1
            pos[c, k, m] = i
    for c in range(n):
        for m in range(M):
            got = (count[c, "F", m], count[c, "B", m], count[c, "I", m], count[c, "W", m])
            assert got in ((1, 1, 0, 0), (1, 0, 1, 1)), (c, m, got)
    assert any(k == "I" for _, k, _ in count) == info.split_backward

    # within a rank, every op after its inputs computed on the same rank
    def before(x, y):
        return where[x[0]] != where[y[0]] or pos[x] < pos[y]

    for (c, k, m) in pos:
        if k == "F" and c > 0:
            assert before((c - 1, "F", m), (c, k, m))
        if k in "BI":
            assert before((c, "F", m), (c, k, m))
            if c < n - 1:
                up = (c + 1, "B" if (c + 1, "B", m) in pos else "I", m)
                assert before(up, (c, k, m))
        if k == "W":
            assert before((c, "I", m), (c, k, m))
    assert _runs_to_the_end(orders, n)


def _runs_to_the_end(orders: list[list[str]], n: int) -> bool:
    """Every rank runs its list in order, each op once its inputs exist anywhere: a global
    order without deadlock exists iff this completes."""
    done: set[tuple[int, str, int]] = set()
    at = [0] * len(orders)
    moved = True
    while moved:
        moved = False
        for d, row in enumerate(orders):
            while at[d] < len(row):
                c, k, m = _parts(row[at[d]])
                if k == "F":
                    ready = c == 0 or (c - 1, "F", m) in done
                elif k in "BI":
                    ready = (c, "F", m) in done and (
                        c == n - 1 or (c + 1, "B", m) in done or (c + 1, "I", m) in done)
                else:
                    ready = (c, "I", m) in done
                if not ready:
                    break
                done.add((c, k, m))
                at[d] += 1
                moved = True
    return all(a == len(row) for a, row in zip(at, orders))


def _valid_vs(name: str) -> range | tuple[int, ...]:
    layout = TORCH_SCHEDULES[name].layout
    return (1,) if layout == "one" else (2,) if layout == "v" else VS


# ------------------------------------------------------------------ torch_orders == what runs
@pytest.mark.parametrize("D", DS)
@pytest.mark.parametrize("name", NAMES)
def test_torch_orders_is_what_torch_runs_and_check_is_what_torch_refuses(name, D):
    """Every (v <= 4, M <= 16) (v = 3 only for D <= 5, to keep the grid under a minute):
    ``check`` refuses exactly what torch's constructor refuses, and for the rest
    ``torch_orders`` equals the recorded execution, which is well formed."""
    info = TORCH_SCHEDULES[name]
    for v in (VS if D <= 5 else (1, 2, 4)):
        for M in MS:
            try:
                check(name, D, M, v)
            except ScheduleShapeError:
                if (info.layout == "one" and v != 1) or (info.layout == "v" and v != 2):
                    continue  # a stage count torch is never given for this layout
                with pytest.raises(ValueError):
                    _construct(name, D, M, v, 0, [])
                continue
            ran = _executed(name, D, M, v)
            assert torch_orders(name, D, M, v) == ran, (name, D, M, v)
            _check_structure(name, D, M, v, ran)


def test_stage_counts_torch_refuses_for_v_schedules_match_check():
    for name in ("zbv", "dualpipev"):
        for v in (1, 3, 4):
            with pytest.raises(ScheduleShapeError, match="v: .*two stages per rank"):
                check(name, 4, 8, v)
            with pytest.raises(ValueError, match="2 stages per rank"):
                cls = getattr(ts, TORCH_SCHEDULES[name].torch_class)
                cls([_LoggingStage(c, 4 * v, 4, 0, []) for c in range(0, 4 * v, 4)], 8)


# ------------------------------------------------------------- where the outputs leave
class _SendLoggingStage(_LoggingStage):
    """Also records each call for the ops that send a microbatch's output (``send:0F1``) or
    input gradient (``send:0B1``); the calls still return no ops."""

    def get_fwd_send_ops(self, mb):
        self.log.append(f"send:{self.stage_index}F{mb}")
        return []

    def get_bwd_send_ops(self, mb):
        self.log.append(f"send:{self.stage_index}B{mb}")
        return []


def _executed_sends(name: str, D: int, M: int, v: int) -> list[list[int]]:
    """Per rank and compute call, the index of the last compute call made before the runtime
    asked for that call's cross-rank send ops (the call itself when it sends nothing)."""
    where = chunk_devices(TORCH_SCHEDULES[name].layout, D, v)
    n = D * v
    out = []
    for rank, log in enumerate(_executed(name, D, M, v, _SendLoggingStage)):
        at: list[int] = []
        index: dict[tuple[int, str, int], int] = {}
        for entry in log:
            if not entry.startswith("send:"):
                c, k, m = _parts(entry)
                index[c, "F" if k == "F" else "B", m] = len(at)
                at.append(len(at))
                continue
            c, k, m = _parts(entry[5:])
            other = c + 1 if k == "F" else c - 1
            if 0 <= other < n and where[other] != rank:
                at[index[c, k, m]] = len(at) - 1
        out.append(at)
    return out


@pytest.mark.parametrize("name", [n for n in NAMES if not TORCH_SCHEDULES[n].single])
def test_torch_send_after_is_where_the_runtime_sends(name):
    """For every multi-stage schedule, D <= 4, M <= 12, v <= 3 where torch accepts them: the
    positions ``torch_send_after`` gives are those at which torch's runtime, running the
    schedule with recording stages, asks for each output's send ops. Only DualPipeV holds any
    (the forward of each OVERLAP_F_B pair whose output crosses ranks waits for the pair's
    backward); the others send every output at the end of the action that made it."""
    held = 0
    for D in (2, 3, 4):
        for v in _valid_vs(name):
            if v > 3:
                continue
            for M in range(1, 13):
                try:
                    check(name, D, M, v)
                except ScheduleShapeError:
                    continue
                ran = _executed_sends(name, D, M, v)
                got = torch_send_after(name, D, M, v)
                if got is None:
                    got = [list(range(len(r))) for r in ran]
                assert got == ran, (name, D, M, v)
                held += sum(k != i for r in ran for i, k in enumerate(r))
    assert (held > 0) == (name == "dualpipev")


@pytest.mark.parametrize("name", [n for n in NAMES if TORCH_SCHEDULES[n].single])
def test_single_stage_schedules_hold_no_send(name):
    assert torch_send_after(name, 4, 8) is None


# ----------------------------------------------------------- torch's IR against what it runs
def _ir(sched, D: int) -> list[list[str]]:
    out = []
    for d in range(D):
        row = []
        for a in sched.pipeline_order[d]:
            if a is None:
                continue
            row.extend(str(s) for s in (a.sub_actions or (a,)) if s.is_compute_op)
        out.append(row)
    return out


@pytest.mark.parametrize("name", [n for n in NAMES if not TORCH_SCHEDULES[n].single])
def test_runtime_schedules_run_their_ir_in_order(name):
    """For the five runtime schedules, ``pipeline_order`` (bubbles dropped, OVERLAP_F_B
    expanded) is exactly what runs: lowering adds comms but reorders no compute."""
    for D in (1, 2, 3, 5, 8):
        for M in (1, 2, 7, 8, 16):
            for v in _valid_vs(name):
                try:
                    check(name, D, M, v)
                except ScheduleShapeError:
                    continue
                sched = _construct(name, D, M, v, 0, [])
                assert _ir(sched, D) == torch_orders(name, D, M, v), (D, M, v)


@pytest.mark.parametrize("D", DS)
def test_single_schedules_ir_gpipe_matches_1f1b_last_rank_does_not(D):
    """GPipe's IR is what runs; Schedule1F1B's IR differs on the last rank only (it lists
    forwards 1..M there), for every D and M >= D."""
    for M in range(D, 17):
        g = ts.ScheduleGPipe(_LoggingStage(0, D, D, 0, []), M)
        assert _ir(g, D) == torch_orders("gpipe", D, M)
        o = ts.Schedule1F1B(_LoggingStage(0, D, D, 0, []), M)
        ir, ran = _ir(o, D), torch_orders("1f1b", D, M)
        assert ir[:-1] == ran[:-1]
        assert ir[-1] != ran[-1] and ir[-1][0] == f"{D - 1}F1" and ran[-1][0] == f"{D - 1}F0"


# ----------------------------------------------------------------- our pure schedules = torch
@pytest.mark.parametrize("S", DS)
def test_pure_gpipe_and_1f1b_give_torchs_orders_for_edp_plans(S):
    from tests.test_family import _torch_1f1b_order

    for M in MS:
        for m in (1, 3):
            plan = Plan.edp(S, M * m, M)
            assert _names(gpipe(plan)) == torch_orders("gpipe", S, M), (S, M, m)
            if M >= S:
                assert _names(one_f_one_b(plan)) == torch_orders("1f1b", S, M), (S, M, m)
        if M >= S:  # the recorder tests/test_family.py compares the family rule against
            assert torch_orders("1f1b", S, M) == _torch_1f1b_order(S, M)


# ---------------------------------------------------------------- zb1p with one stage per rank
@pytest.mark.parametrize("D", DS)
def test_zb1p_runs_with_one_stage_per_rank_as_1f1b_with_deferred_weight_passes(D):
    """torch's ScheduleInterleavedZeroBubble accepts a list of one stage per rank (v = 1) and
    runs it (the execution test above covers it). What it runs on rank d: 1F1B's order with
    each B replaced by I, and W of microbatch k right after I of microbatch k + d (the rest at
    the end, in order). So at most D - d microbatches wait for their I (1F1B's count) and at
    most D for their W on every rank (1F1B's peak, rank 0's)."""
    for M in MS:
        try:
            check("zb1p", D, M, 1)
        except ScheduleShapeError:
            continue
        orders = torch_orders("zb1p", D, M, 1)
        ref = _names(one_f_one_b(Plan.edp(D, M, M)))
        for d, row in enumerate(orders):
            assert [a.replace("I", "B") for a in row if "W" not in a] == ref[d]
            wait_i = wait_w = peak_i = peak_w = 0
            for i, a in enumerate(row):
                _, k, m = _parts(a)
                wait_i += (k == "F") - (k == "I")
                wait_w += (k == "F") - (k == "W")
                peak_i, peak_w = max(peak_i, wait_i), max(peak_w, wait_w)
                if k == "W" and m + d < M:
                    assert row[i - 1] == f"{d}I{m + d}"
            assert peak_i == min(M, D - d) and peak_w == min(M, D)


def test_interleaved_1f1b_with_one_stage_per_rank_is_not_1f1b():
    """Interleaved1F1B accepts v = 1 too, but its warm-up is 2(D - 1 - d) + 1 forwards on
    rank d (its v >= 2 rule), not 1F1B's D - d."""
    orders = torch_orders("interleaved-1f1b", 4, 8, 1)
    assert [next(i for i, a in enumerate(r) if "B" in a) for r in orders] == [7, 5, 3, 1]


def test_looped_bfs_runs_backwards_in_reverse_microbatch_order():
    for row in torch_orders("looped-bfs", 3, 4, 2):
        for c in {parse_action(a).chunk for a in row}:
            assert [parse_action(a).mb for a in row if a.startswith(f"{c}B")] == [3, 2, 1, 0]


# ----------------------------------------------------------------- registry, layouts, parsing
def test_registry_names_and_classes_match_torch():
    assert NAMES == ["gpipe", "1f1b", "interleaved-1f1b", "looped-bfs", "zb1p", "zbv",
                     "dualpipev"]
    for name, info in TORCH_SCHEDULES.items():
        cls = getattr(ts, info.torch_class)
        assert issubclass(cls, ts.PipelineScheduleSingle) == info.single
        assert info.single or issubclass(cls, ts._PipelineScheduleRuntime)
        for alias in (name, name.upper(), info.torch_class, info.torch_class.lower(),
                      info.torch_class.removeprefix("Schedule")):
            assert schedule_info(alias) is info
        assert ts.get_schedule_class(info.torch_class.removeprefix("Schedule")) is cls


def test_unknown_name_lists_the_valid_ones():
    with pytest.raises(ScheduleNameError) as e:
        schedule_info("zb-h2")
    msg = str(e.value)
    assert "\n" not in msg and "zb-h2" in msg
    assert all(n in msg for n in NAMES) and "ScheduleDualPipeV" in msg
    assert isinstance(e.value, UnknownNameError) and isinstance(e.value, KeyError)


def test_chunk_devices_is_torchs_stage_to_rank_mapping():
    from torch.distributed.pipelining._utils import generate_stage_to_rank_mapping as mapping

    for D in DS:
        assert chunk_devices("one", D, 1) == tuple(range(D))
        assert chunk_devices("v", D, 2) == tuple(mapping(D, 2 * D, style="v")[c]
                                                 for c in range(2 * D))
        assert chunk_devices("v", D, 2) == tuple(min(c, 2 * D - 1 - c) for c in range(2 * D))
        for v in VS:
            assert chunk_devices("loop", D, v) == tuple(mapping(D, D * v)[c]
                                                        for c in range(D * v))
            assert device_chunks("loop", D, v)[0] == tuple(range(0, D * v, D))
        assert device_chunks("v", D, 2) == tuple((d, 2 * D - 1 - d) for d in range(D))
    for bad in (("one", 4, 2), ("v", 4, 3), ("w", 4, 2), ("loop", 0, 2)):
        with pytest.raises(LayoutError):
            chunk_devices(*bad)


@pytest.mark.parametrize(("name", "D", "M", "v", "field"), [
    ("1f1b", 4, 3, None, "M: Schedule1F1B needs M >= D = 4"),
    ("gpipe", 4, 8, 2, "v: ScheduleGPipe runs one stage per rank"),
    ("dualpipev", 4, 7, None, "M: ScheduleDualPipeV needs M >= 2D = 8"),
    ("zbv", 4, 8, 3, "v: ScheduleZBVZeroBubble needs exactly two stages per rank"),
    ("interleaved-1f1b", 4, 9, 2, r"M: .* multiple of its rounds .* = 2"),
    ("zb1p", 3, 10, 2, r"M: .* multiple of its rounds .* = 3"),
    ("looped-bfs", 0, 8, 2, "D must be an integer >= 1"),
    ("gpipe", 2, 0, None, "M must be an integer >= 1"),
    ("looped-bfs", 2, 4, 0, "v must be an integer >= 1"),
])
def test_check_names_the_field(name, D, M, v, field):
    with pytest.raises(ScheduleShapeError, match=field) as e:
        check(name, D, M, v)
    assert "\n" not in str(e.value) and isinstance(e.value, UmpipeError)


def test_check_returns_the_v_used():
    assert [check(n, 2, 8) for n in NAMES] == [1, 1, 2, 2, 2, 2, 2]
    assert check("zb1p", 2, 8, 1) == 1 and check("looped-bfs", 2, 8, 4) == 4


def test_parse_action_reads_torchs_action_strings():
    assert _parts("0F1") == (0, "F", 1)
    assert _parts("3I2") == (3, "I", 2)
    assert _parts("12W10") == (12, "W", 10)
    assert _parts(" 1B0 ") == (1, "B", 0)
    for bad in ("1X0", "F1", "1F", "1SEND_F0", "(0F1;1B0)OVERLAP_F_B", ""):
        with pytest.raises(DevSimError, match="expected"):
            parse_action(bad)


def test_torch_orders_refuses_like_check_and_is_not_mutated_through_its_cache():
    with pytest.raises(ScheduleShapeError, match="M >= D"):
        torch_orders("1f1b", 4, 2)
    a = torch_orders("zbv", 2, 4)
    a[0].clear()
    assert torch_orders("zbv", 2, 4)[0]


def test_the_package_imports_no_torch():
    code = (
        "import sys\n"
        "from umpipe_bench.devsim import parse_action\n"
        "from umpipe_bench.layout import chunk_devices\n"
        "from umpipe_bench.torch_schedules import check, schedule_info\n"
        "check('zb1p', 4, 8); chunk_devices('v', 4, 2); parse_action('0F1'); "
        "schedule_info('ScheduleDualPipeV')\n"
        "print(sum(m == 'torch' or m.startswith('torch.') for m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0"


@pytest.mark.parametrize("S", range(1, 9))
def test_capped_family_reproduces_interleaved_1f1b_with_one_chunk(S):
    """torch's ScheduleInterleaved1F1B at v = 1 warms up with 2(S-1-s)+1 forwards on stage s
    (not 1F1B's S-s): the capped family with caps of min(2(S-1-s)+1, M) microbatches, in
    samples, gives exactly its lists for EDP plans whose M divides B."""
    for M in range(1, 17):
        try:
            check("interleaved-1f1b", S, M, 1)
        except ScheduleShapeError:
            continue
        want = torch_orders("interleaved-1f1b", S, M, 1)
        for m in (1, 3):
            caps = [min(2 * (S - 1 - s) + 1, M) * m for s in range(S)]
            got = capped_order(Plan.edp(S, M * m, M), caps)
            assert [[str(o) for o in row] for row in got] == want, (S, M, m)
