"""Deterministic simulation: one seed fixes the workload, the faults and the scheduling.

:func:`simulate` runs a plugin against the embedded API server under virtual time, with
trio's run order fixed by the seed (see :mod:`engine.testing._determinism`), applies the
seed's workload and fault schedule, and checks the engine's guarantees at every step:

* runs: no two runs of one key at once, across replicas too (fencing; except, for
  ``renew_deadline``, after a history rewind brought back an older Lease); a run the engine
  cancelled as superseded, at shutdown or on a lost lease is never counted as an error and
  writes no failure status (unless it failed, and began writing that status, before it was
  cancelled); a graceful stop lets runs finish for the grace period (drains)
  before it cancels them;
* wake-ups: no key waits in a queue while a worker of its controller is idle; every
  accepted trigger is followed by a run of its key; a dependent starts a run within
  ``Simulation.prompt`` seconds of its dependency becoming Ready;
* the plugin's own invariants, at every step;
* least privilege (unless ``rbac=False``): each replica runs as the plugin's ServiceAccount
  bound to the Role ``python -m engine manifests`` derives for it, and any request the server
  refuses with 403 is a violation naming the verb and resource (no fault answers 403);
* at the end: no Warning event from a superseded, shutdown or fenced run, and, once the
  faults stopped, every object converges within ``bound`` seconds (counted from the end of
  the longest rate-limited backoff then pending).

* from outside the engine (the server's :class:`~engine.apiserver.RequestLog`, its storage's
  change feed, and events as emitted, through a tap ahead of the sinks): no write by a
  replica after it lost its lease beyond a write in flight landing within
  ``LATE_WRITE_BOUND``; a watched change every predicate passes (committed, or made by a
  history rewind) leads to a trigger of its key from each directly watching controller's
  handler within ``WATCH_BOUND`` of when the replica could read its kind again, and a key
  added again while its deletion is owed fails at once; the replica's memory sink keeps
  receiving within ``SINK_BOUND`` whatever another sink does, and a sink's failure never
  escapes into the event dispatcher (a sink violation, not a crash); a run cancelled inside a shield
  gets a write to the server or reports the cut; no status write arrives with no run of its
  key in progress (one in flight may land up to ``LATE_WRITE_BOUND`` after its run ended), and
  none lands after its run ended when the engine cancelled that run outside any shield (a
  final write left unshielded); a run does not end as a success after the server failed one
  of its writes (a 5xx, a 429, no answer) that it did not write again, unless the engine
  cancelled it (a failure not requeued: the replicas' clients note which run sent each
  write); a
  trigger not followed by a run while its key is idle and a started worker free is reported
  at the next quiet moment. Once converged, a seed waits for every change still owed a
  trigger to get it, or for its bound to pass.

A plugin's webhooks are registered once (unless ``webhooks=False``), served in process by the
live replicas behind one :class:`~engine.testing._webhook_service.WebhookService`; a workload
write an admission webhook refuses is traced as ``refused``. With the simulation's
:class:`~engine.testing.AdmissionOracle` objects, nothing the validating webhooks must refuse
may be stored while they are registered: each such write is judged against the webhook call
that allowed it and what the server had sent the answering replica
(:mod:`engine.testing._admission_check`); what no webhook could have refused is traced as
``admitted``.

In scale-out mode (``scale_out=True``) the replicas are members of a scale-out ring
(:class:`~engine.kube.HashRing`) instead of leader-election candidates, and the faults
``scale-up``, ``scale-down``, ``crash`` and ``partition`` act on them. The run check above
then covers ring replicas (two runs of one key on two replicas; an object deleted and
re-created under its name, known to two replicas by two uids, is traced as the known limit
it is), and two more hold: every write of a key's object (a key some replica ran) arrives
while the writing replica's gate owned that key's range (placed by the uid the server
reports) or was still handing it over, as its ring announced it; one that arrived before the
handover returned or a fence revoked the range may land up to ``LATE_WRITE_BOUND`` after
(in flight), as for a lost lease; and every range a crashed or cut-off replica owned is
owned again by a live, connected replica within :data:`~._checks.OWNED_AGAIN_BOUND` (the clock
restarting while the API server is faulty or a member joins or reconnects), before the run
ends even when everything converged sooner. Triggers of keys a replica
does not own are parked by its gate and owe no run there.

The first violation ends the run; :class:`~engine.testing.SimulationResult` then holds it, the one-line
replay command and the trace.

The simulator is built in three rooms, each importing only the ones before it (ranked in
``tests/test_exports.py``):

* the oracle, which drives nothing: what a plugin author gives (:mod:`._spec`, the
  :class:`~engine.testing.Simulation`, and :mod:`._finder`, where it is found); the verdict
  (:mod:`._verdict`), the replicas as the checks remember them (:mod:`._replica`), the watched
  changes owed a trigger (:mod:`._notifications`), the checks (:mod:`._checks`), the request
  audit (:mod:`._audit`) and the replica observers (:mod:`._observer`), wired together by
  :class:`~engine.testing._simulation._oracle.Oracle`;
* the fleet and the fault driver: the replicas' lives (:mod:`._fleet`), the workload and the
  faults played against them (:mod:`._faults`), and settling once the faults stopped
  (:mod:`._settling`);
* the seed runner: one seed (:mod:`._seed`), what it reports and its replay command
  (:mod:`._result`), and the sweep over seeds (:mod:`._sweep`).
"""
