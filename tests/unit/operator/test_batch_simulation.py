"""Whole batches run by repeated `decide_batch` calls against a simulated cluster.

`World` plays the API server, the kubelets, the watch and the operator's
memory, and applies each decision the way the handler layer must: the
status write first (conditional on the resourceVersion the decision was made
from: a stale decision gets a 409 and does nothing), then the actions in
order. Around that, at random:

* Pods start, and end in success or failure (per input: some inputs always
  fail, some are flaky, chunks report each input on its own);
* Pods are deleted by hand or evicted while they run (disruptions);
* the operator crashes between its status write and its actions: the
  actions are lost, and so is everything it kept in memory (Pods it was
  creating, tombstones); after the restart the watch lists every Pod again;
* the watch lags: changes, creations and deletions reach the operator late;
* a reconcile decides from a stale copy of the status;
* finished Pods are deleted (their TTL) once their inputs are recorded;
* users cancel single inputs (spec.cancelIndexes) or the whole batch.

After every step the invariants hold: no more live Pods than maxConcurrent,
never two live Pods for one input, every Pod created for an input reserved
in the status, an outcome once recorded never changes, and no input runs more
attempts than retries + its disruptions + 1. Every batch ends, and every
recorded outcome is what actually happened.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from kinetic.model.resources import Phase
from kinetic_operator.handlers.batches import observe_units
from kinetic_operator.logic.batch_logic import (
    decide_batch,
    unit_inputs,
)
from kinetic_testing.batch_world import (
    BATCH,
    T0,
    world,
)

# =========================================================================== the runs


@pytest.mark.parametrize("seed", range(60))
@pytest.mark.parametrize("limit", [1, 3, None], ids=["max1", "max3", "unlimited"])
def test_random_batches_end_with_every_input_run_within_its_attempts(seed, limit):
    rng = random.Random(seed)
    w = world(seed * 7 + (limit or 0), maxConcurrent=limit, retries=rng.randrange(3))
    w.run()
    assert w.status is not None and w.status.progress.endswith(f"/{w.total}")
    never_ran = set(range(w.total)) - {i for u in w.created for i in unit_inputs(u, 1, w.total)}
    assert never_ran <= set(w.last.cancelled)


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("chunk", [2, 3])
def test_random_chunked_batches(seed, chunk):
    rng = random.Random(seed)
    w = world(
        1000 + seed,
        n=rng.randrange(1, 30),
        chunkSize=chunk,
        maxConcurrent=rng.choice([1, 2, None]),
        retries=rng.randrange(2),
    )
    w.run()


@pytest.mark.parametrize("seed", range(25))
@pytest.mark.parametrize(
    ("fail_fast", "cancel_running"),
    [(False, False), (True, False), (True, True), (False, True)],
    ids=["row1-continue", "row2-stop-launching", "row3-cancel-running", "row4-no-effect"],
)
def test_random_fail_fast_table(seed, fail_fast, cancel_running):
    w = world(
        2000 + seed,
        n=25,
        maxConcurrent=4,
        failFast=fail_fast,
        cancelRunningOnFail=cancel_running,
        retries=seed % 2,
    )
    w.doomed |= {seed % 25}
    w.run()
    s = w.status
    assert s is not None and s.phase == Phase.FAILED
    if not fail_fast:  # rows 1 and 4: everything ran, nothing was cancelled
        assert not w.last.cancelled and set(w.created) == set(range(25))


@pytest.mark.parametrize("seed", range(40))
def test_random_single_input_cancels(seed):
    rng = random.Random(seed)
    w = world(3000 + seed, n=20, maxConcurrent=rng.choice([2, 5, None]), chunkSize=seed % 2 + 1)
    w.run(cancel_rate=0.01)


@pytest.mark.parametrize("seed", range(20))
def test_random_whole_batch_cancel(seed):
    w = world(4000 + seed, n=30, maxConcurrent=4)
    for _ in range(seed * 10):
        w.reconcile()
        w.advance()
        w.deliver()
        w.check()
    ended = w.status is not None and Phase(w.status.phase).terminal
    before = w.status
    w.ended_before_cancel = ended
    w.spec = w.spec.model_copy(update={"cancel": True})
    w.run()
    assert w.status is not None
    if ended:  # a cancel after the end changes nothing
        assert w.status.wire() == before.wire()  # type: ignore[union-attr]
    else:
        assert w.status.phase == Phase.CANCELLED


@pytest.mark.parametrize("seed", range(40))
def test_random_batches_whose_status_ranges_are_cut(seed):
    """The handler cuts long range strings (`truncated`); the complete outcomes are kept in
    memory and, across a restart, come from the manifest. Nothing may be forgotten."""
    rng = random.Random(seed)
    w = world(
        5000 + seed,
        n=rng.randrange(10, 30),
        maxConcurrent=rng.choice([2, 4, None]),
        retries=rng.randrange(2),
        failFast=rng.random() < 0.3,
    )
    w.cap = 8
    w.flaky |= set(range(1, w.total, 2))  # scattered outcomes: long range strings
    w.run(cancel_rate=0.005)
    assert w.status is not None


def test_the_chaos_really_happens():
    """The runs above are only worth something if crashes, conflicts and disruptions occur."""
    totals: Counter = Counter()
    for seed in range(30):
        w = world(seed, n=20, maxConcurrent=3, retries=1)
        w.run()
        totals.update(
            crashes=w.crashes,
            conflicts=w.conflicts,
            disruptions=sum(w.disrupted.values()),
            retried=sum(1 for n in w.created.values() if n > 1),
        )
    assert totals["crashes"] > 20 and totals["conflicts"] > 20
    assert totals["disruptions"] > 20 and totals["retried"] > 20


def test_a_stale_decision_cannot_rerun_an_input_whose_pod_expired():
    """Why the status write must be conditional even when a decision only (re)creates."""
    w = world(0, n=3, maxConcurrent=1)
    w.reconcile()
    w.deliver(everything=True)
    stale = (w.rv, w.status)
    w.pods["g-i0-1"].phase = "Succeeded"
    w.undelivered.add("g-i0-1")
    w.deliver(everything=True)
    w.reconcile()  # records 0, launches 1
    w._delete("g-i0-1")  # its TTL
    w.deliver(everything=True)
    w.mem.pods.gone.clear()  # and a restart forgot its tombstone
    d = decide_batch(
        w.spec, stale[1], observe_units(list(w.index.values()), w.mem), T0, batch=BATCH
    )
    assert (0, 1) in d.creates  # decided on the stale status, 0 looks reserved but never run
    w.snapshots = [stale]
    assert w.reconcile("stale") == "conflict"  # ...so it never gets to act
    assert w.created[0] == 1 and "g-i0-1" not in w.pods


def test_cancelling_an_input_whose_pod_the_watch_has_not_shown_yet():
    """Input 0's Pod was created, the watch has not delivered it, and the user cancels input 0.

    Its Pod runs on unseen; the slot it holds must not go to another input until it
    is stopped, and it must be stopped.
    """
    w = world(0, n=3, maxConcurrent=1)
    w.lag = 1.0  # nothing is delivered until asked
    w.reconcile()
    assert set(w.pods) == {"g-i0-1"} and w.mem.pods.creating == {0: 1}
    w.pods["g-i0-1"].phase = "Running"
    w.spec = w.spec.model_copy(update={"cancel_indexes": "0"})
    w.reconcile()
    w.check()
    w.reconcile()
    w.check()  # at most maxConcurrent live Pods
    assert "g-i0-1" not in w.pods or not w.pods["g-i0-1"].live
